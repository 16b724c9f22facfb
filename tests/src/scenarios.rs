//! What users see, checked against a running Cascade in either mode. Every scenario uses its
//! own queue names, and two shards are always running (`cluster::SHARDS`).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cascade_client::{Client, api};
use cascade_core::{QueueName, shard_of};
use tonic::Code;

use crate::Cluster;
use crate::cluster::SHARDS;

mod carried;
mod pipelines;

pub use carried::*;
pub use pipelines::*;

pub fn seconds(s: f64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: s.trunc() as i64,
        nanos: (s.fract() * 1e9) as i32,
    }
}

pub fn now_plus(d: Duration) -> prost_types::Timestamp {
    let t = SystemTime::now() + d;
    let since = t.duration_since(UNIX_EPOCH).expect("after the epoch");
    prost_types::Timestamp {
        seconds: since.as_secs() as i64,
        nanos: since.subsec_nanos() as i32,
    }
}

pub fn config(lease_s: f64, max_attempts: u32) -> api::QueueConfig {
    api::QueueConfig {
        lease: Some(seconds(lease_s)),
        max_attempts,
        backoff_initial: Some(seconds(0.1)),
        backoff_max: Some(seconds(0.2)),
        ..Default::default()
    }
}

pub async fn create(c: &Client, name: &str, config: api::QueueConfig) {
    c.admin()
        .create_queue(api::CreateQueueRequest {
            name: name.into(),
            config: Some(config),
        })
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

pub fn item(queue: &str, payload: &str) -> api::EnqueueRequest {
    api::EnqueueRequest {
        queue: queue.into(),
        payload: payload.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

/// Pipeline `name` of one stage, `stage`, whose handler does nothing (the built-in `noop`).
pub fn noop_pipeline(name: &str, stage: &str) -> api::Pipeline {
    api::Pipeline {
        name: name.into(),
        stages: vec![api::Stage {
            name: stage.into(),
            handler: Some(api::HandlerSpec {
                kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

pub async fn enqueue(c: &Client, req: api::EnqueueRequest) -> api::EnqueueResponse {
    c.ingest()
        .enqueue(req)
        .await
        .unwrap_or_else(|e| panic!("enqueue: {e}"))
        .into_inner()
}

pub async fn take(c: &Client, queue: &str, max: u32, wait_s: f64) -> Vec<api::LeasedEvent> {
    c.worker()
        .take(api::TakeRequest {
            queue: queue.into(),
            max_events: max,
            wait: (wait_s > 0.0).then(|| seconds(wait_s)),
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("take {queue}: {e}"))
        .into_inner()
        .events
}

/// Takes until `n` events came or `within` passed.
pub async fn take_n(c: &Client, queue: &str, n: usize, within: Duration) -> Vec<api::LeasedEvent> {
    let deadline = Instant::now() + within;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < deadline {
        out.extend(take(c, queue, (n - out.len()) as u32, 0.5).await);
    }
    out
}

pub fn payload(e: &api::LeasedEvent) -> String {
    String::from_utf8_lossy(&e.event.as_ref().expect("event").payload).into_owned()
}

pub fn id(e: &api::LeasedEvent) -> String {
    e.event.as_ref().expect("event").id.clone()
}

pub fn attempts(e: &api::LeasedEvent) -> u32 {
    e.event.as_ref().expect("event").attempts
}

pub async fn complete(
    c: &Client,
    e: &api::LeasedEvent,
    outcome: api::completion::Outcome,
) -> api::CompletionResult {
    let ev = e.event.as_ref().expect("event");
    let mut results = c
        .worker()
        .complete(api::CompleteRequest {
            completions: vec![api::Completion {
                queue: ev.queue.clone(),
                id: ev.id.clone(),
                lease_token: e.lease_token.clone(),
                outcome: Some(outcome),
            }],
        })
        .await
        .unwrap_or_else(|e| panic!("complete: {e}"))
        .into_inner()
        .results;
    assert_eq!(results.len(), 1);
    results.remove(0)
}

pub fn ack() -> api::completion::Outcome {
    api::completion::Outcome::Ack(api::Ack {})
}

/// One `EnqueueBatch`: the result of each item.
pub async fn enqueue_batch(c: &Client, items: Vec<api::EnqueueRequest>) -> Vec<api::EnqueueResult> {
    c.ingest()
        .enqueue_batch(api::EnqueueBatchRequest { items })
        .await
        .expect("batch")
        .into_inner()
        .results
}

/// `DeleteQueue` with `force`, its events with it.
pub async fn force_delete(c: &Client, queue: &str) -> Result<(), tonic::Status> {
    let request = api::DeleteQueueRequest {
        name: queue.into(),
        force: true,
    };
    c.admin().delete_queue(request).await.map(drop)
}

pub async fn stats(c: &Client, queue: &str) -> api::QueueStats {
    c.admin()
        .queue_stats(api::QueueStatsRequest { name: queue.into() })
        .await
        .unwrap_or_else(|e| panic!("stats {queue}: {e}"))
        .into_inner()
}

/// Two queue names, `<base>-…`, owned by different shards.
pub fn names_on_two_shards(base: &str) -> (String, String) {
    let first = format!("{base}-a");
    let owner = shard_of(&QueueName::parse(&first).expect("name"), SHARDS);
    let other = (0..100)
        .map(|i| format!("{base}-b{i}"))
        .find(|n| shard_of(&QueueName::parse(n).expect("name"), SHARDS) != owner)
        .expect("a name on the other shard");
    (first, other)
}

pub async fn delayed_event_is_takeable_only_after_its_time(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "delayed", config(30.0, 5)).await;
    let mut req = item("delayed", "later");
    // Long enough for the take and the stats below to run before it is due.
    req.when = Some(api::enqueue_request::When::Delay(seconds(2.0)));
    let sent = Instant::now();
    let r = enqueue(&c, req).await;
    assert!(!r.duplicate);
    assert!(
        take(&c, "delayed", 10, 0.0).await.is_empty(),
        "taken before its time"
    );
    let s = stats(&c, "delayed").await;
    assert_eq!((s.delayed, s.ready), (1, 0), "{s:?}");
    let got = take_n(&c, "delayed", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "never became takeable");
    assert!(
        sent.elapsed() >= Duration::from_millis(1950),
        "taken early: {:?}",
        sent.elapsed()
    );
    assert_eq!(payload(&got[0]), "later");
    assert_eq!(id(&got[0]), r.id);
}

pub async fn ready_events_come_in_activation_then_insertion_order(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "ordered", config(30.0, 5)).await;
    // Activation times in the past, out of insertion order; equal times keep insertion order.
    // One base for all, so that equal offsets are equal times however slow the enqueues are.
    let base = SystemTime::now() - Duration::from_secs(60);
    let past = |ms: u64| {
        let t = base + Duration::from_millis(ms);
        let since = t.duration_since(UNIX_EPOCH).expect("after the epoch");
        prost_types::Timestamp {
            seconds: since.as_secs() as i64,
            nanos: since.subsec_nanos() as i32,
        }
    };
    for (name, ms) in [("c", 300), ("a", 100), ("b1", 200), ("b2", 200), ("d", 400)] {
        let mut req = item("ordered", name);
        req.when = Some(api::enqueue_request::When::ActivateAt(past(ms)));
        enqueue(&c, req).await;
    }
    let got: Vec<String> = take(&c, "ordered", 10, 0.0)
        .await
        .iter()
        .map(payload)
        .collect();
    assert_eq!(got, ["a", "b1", "b2", "c", "d"]);
}

pub async fn expired_lease_redelivers_with_one_more_attempt(cluster: &mut Cluster) {
    let c = cluster.client().await;
    // A lease long enough for the two completes below to land before the second one ends.
    create(&c, "expiring", config(2.0, 5)).await;
    enqueue(&c, item("expiring", "x")).await;
    let first = take(&c, "expiring", 1, 0.0).await;
    assert_eq!(attempts(&first[0]), 1);
    let again = take_n(&c, "expiring", 1, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1, "not redelivered after the lease expired");
    assert_eq!(attempts(&again[0]), 2);
    // The first lease is stale now.
    let stale = complete(&c, &first[0], ack()).await;
    assert_eq!(stale.code, Code::FailedPrecondition as i32, "{stale:?}");
    let ok = complete(&c, &again[0], ack()).await;
    assert_eq!(ok.code, 0, "{ok:?}");
    let s = stats(&c, "expiring").await;
    assert_eq!(
        (s.ready, s.leased, s.expired_leases_total),
        (0, 0, 1),
        "{s:?}"
    );
}

pub async fn client_id_and_idempotency_key_dedup(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "dedup", config(30.0, 5)).await;
    let mut with_id = item("dedup", "one");
    with_id.id = "order-42".into();
    let a = enqueue(&c, with_id.clone()).await;
    let b = enqueue(&c, with_id).await;
    assert_eq!((a.id.as_str(), a.duplicate), ("order-42", false));
    assert_eq!((b.id.as_str(), b.duplicate), ("order-42", true));
    let mut keyed = item("dedup", "two");
    keyed.idempotency_key = "k-1".into();
    let first = enqueue(&c, keyed.clone()).await;
    let again = enqueue(&c, keyed).await;
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    assert_eq!(
        take(&c, "dedup", 10, 0.0).await.len(),
        2,
        "duplicates were stored"
    );
}

pub async fn update_payload_and_activation_time_then_delete(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "editable", config(30.0, 5)).await;
    let mut req = item("editable", "v1");
    req.when = Some(api::enqueue_request::When::Delay(seconds(3600.0)));
    let e = enqueue(&c, req).await;
    let updated = c
        .ingest()
        .update(api::UpdateRequest {
            queue: "editable".into(),
            id: e.id.clone(),
            payload: Some(b"v2".to_vec().into()),
            when: Some(api::update_request::When::Delay(seconds(0.0))),
            ..Default::default()
        })
        .await
        .expect("update")
        .into_inner();
    assert_eq!(updated.payload, &b"v2"[..]);
    let got = take_n(&c, "editable", 1, Duration::from_secs(5)).await;
    assert_eq!(got.len(), 1, "the new activation time did not apply");
    assert_eq!(payload(&got[0]), "v2");

    let doomed = enqueue(&c, item("editable", "gone")).await;
    c.ingest()
        .delete(api::DeleteRequest {
            queue: "editable".into(),
            id: doomed.id.clone(),
        })
        .await
        .expect("delete");
    let err = c
        .ingest()
        .get(api::GetRequest {
            queue: "editable".into(),
            id: doomed.id,
        })
        .await
        .expect_err("deleted");
    assert_eq!(err.code(), Code::NotFound, "{err}");
}

pub async fn leased_event_refuses_update_and_delete(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "held", config(30.0, 5)).await;
    let e = enqueue(&c, item("held", "x")).await;
    let leased = take(&c, "held", 1, 0.0).await;
    assert_eq!(leased.len(), 1);
    let err = c
        .ingest()
        .update(api::UpdateRequest {
            queue: "held".into(),
            id: e.id.clone(),
            payload: Some(b"y".to_vec().into()),
            ..Default::default()
        })
        .await
        .expect_err("leased");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    let err = c
        .ingest()
        .delete(api::DeleteRequest {
            queue: "held".into(),
            id: e.id.clone(),
        })
        .await
        .expect_err("leased");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err}");
    assert!(err.message().contains("lease"), "{err}");
}

pub async fn template_queues_need_no_creation(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "inbox:*", config(30.0, 5)).await;
    // Users spread over both shards.
    for user in 0..6 {
        let q = format!("inbox:user{user}");
        enqueue(&c, item(&q, &format!("hello {user}"))).await;
        let got = take(&c, &q, 10, 0.0).await;
        assert_eq!(got.len(), 1, "{q}");
        assert_eq!(payload(&got[0]), format!("hello {user}"));
        assert_eq!(complete(&c, &got[0], ack()).await.code, 0);
    }
    let err = c
        .ingest()
        .enqueue(item("nobox:user1", "x"))
        .await
        .expect_err("no template matches");
    assert_eq!(err.code(), Code::NotFound, "{err}");
}

pub async fn dead_letter_after_max_attempts_then_redrive(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "fragile", config(30.0, 2)).await;
    let e = enqueue(&c, item("fragile", "boom")).await;
    for attempt in 1..=2 {
        let got = take_n(&c, "fragile", 1, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 1, "attempt {attempt}");
        let retry = api::completion::Outcome::Retry(api::Retry {
            delay: Some(seconds(0.05)),
            reason: format!("boom {attempt}"),
        });
        assert_eq!(complete(&c, &got[0], retry).await.code, 0);
    }
    // The dead-letter queue may live on the other shard: give the hand-off a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    let letters = loop {
        let page = c
            .admin()
            .list_dead_letters(api::ListDeadLettersRequest {
                queue: "fragile.dlq".into(),
                page_size: 10,
                page_token: String::new(),
            })
            .await
            .map(|r| r.into_inner().events)
            .unwrap_or_default();
        if !page.is_empty() || Instant::now() > deadline {
            break page;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(letters.len(), 1, "not dead-lettered");
    assert_eq!(letters[0].id, e.id);
    // The cause survives beside the count: the last retry's reason.
    assert_eq!(
        letters[0].headers["cascade-dead-letter-reason"],
        "retry after 2 of 2 attempts; last failure: boom 2"
    );
    assert_eq!(stats(&c, "fragile").await.dead_lettered, 1);
    let moved = c
        .admin()
        .redrive(api::RedriveRequest {
            queue: "fragile.dlq".into(),
            all: true,
            ..Default::default()
        })
        .await
        .expect("redrive")
        .into_inner()
        .moved;
    assert_eq!(moved, 1);
    let back = take_n(&c, "fragile", 1, Duration::from_secs(10)).await;
    assert_eq!(back.len(), 1, "redriven event never came back");
    assert_eq!(
        (payload(&back[0]).as_str(), attempts(&back[0])),
        ("boom", 1)
    );
    let headers = &back[0].event.as_ref().expect("an event").headers;
    assert!(headers.is_empty(), "{headers:?}");
    // Emptied by the redrive, the dead-letter queue still answers its stats: nothing in it.
    let dlq = stats(&c, "fragile.dlq").await;
    assert_eq!((dlq.ready, dlq.delayed, dlq.leased), (0, 0, 0), "{dlq:?}");
}

pub async fn reschedule_moves_the_event_to_a_new_time(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "periodic", config(30.0, 5)).await;
    enqueue(&c, item("periodic", "tick")).await;
    let got = take(&c, "periodic", 1, 0.0).await;
    // Long enough for the checks below to run before it is due.
    let at = now_plus(Duration::from_secs(2));
    let r = complete(
        &c,
        &got[0],
        api::completion::Outcome::Reschedule(api::Reschedule {
            activate_at: Some(at),
        }),
    )
    .await;
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        take(&c, "periodic", 1, 0.0).await.is_empty(),
        "rescheduled event is ready at once"
    );
    assert_eq!(stats(&c, "periodic").await.delayed, 1);
    let again = take_n(&c, "periodic", 1, Duration::from_secs(10)).await;
    assert_eq!(again.len(), 1, "never came back");
    assert_eq!(attempts(&again[0]), 1, "attempts reset by reschedule");
}

pub async fn long_poll_take_wakes_when_an_event_arrives(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "polled", config(30.0, 5)).await;
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = take(&c, "polled", 1, 20.0).await;
            (got, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    enqueue(&c, item("polled", "wake")).await;
    let (got, waited) = waiter.await.expect("waiter");
    assert_eq!(got.len(), 1, "the long poll returned empty");
    assert_eq!(payload(&got[0]), "wake");
    assert!(
        waited < Duration::from_secs(10),
        "woke only after {waited:?}"
    );
    assert!(
        waited >= Duration::from_millis(400),
        "returned before the event: {waited:?}"
    );
}

pub async fn enqueue_batch_answers_each_item(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let (a, b) = names_on_two_shards("batch");
    create(&c, &a, config(30.0, 5)).await;
    create(&c, &b, config(30.0, 5)).await;
    let items = vec![
        item(&a, "1"),
        item(&b, "2"),
        item("batch-missing", "3"),
        item(&a, "4"),
    ];
    let results = enqueue_batch(&c, items).await;
    let codes: Vec<i32> = results.iter().map(|r| r.code).collect();
    assert_eq!(codes, [0, 0, Code::NotFound as i32, 0], "{results:?}");
    assert_eq!(results[1].ok.as_ref().expect("ok").queue, b);
    let got: Vec<String> = take(&c, &a, 10, 0.0).await.iter().map(payload).collect();
    assert_eq!(got, ["1", "4"]);
    assert_eq!(take(&c, &b, 10, 0.0).await.len(), 1);
}

/// A purge, and a forced delete, of more events than one step of the shard removes (a large
/// queue goes in several, so that other queues are served between them): every event goes,
/// delayed and leased ones too, and the purge counts them all.
pub async fn purge_and_forced_delete_remove_a_large_queue_in_steps(cluster: &mut Cluster) {
    const EVENTS: usize = 25_000;
    let c = cluster.client().await;
    for name in ["purged", "deleted"] {
        create(&c, name, config(30.0, 5)).await;
        for first in (0..EVENTS).step_by(1_000) {
            let items = (first..first + 1_000).map(|i| item(name, &i.to_string()));
            let results = enqueue_batch(&c, items.collect()).await;
            assert!(results.iter().all(|r| r.code == 0), "{results:?}");
        }
        let mut later = item(name, "later");
        later.when = Some(api::enqueue_request::When::Delay(seconds(3600.0)));
        enqueue(&c, later).await;
        assert_eq!(take(&c, name, 2, 0.0).await.len(), 2);
    }
    let purged = c
        .admin()
        .purge_queue(api::PurgeQueueRequest {
            name: "purged".into(),
        })
        .await
        .expect("purge")
        .into_inner()
        .purged;
    assert_eq!(purged, EVENTS as u64 + 1);
    let s = stats(&c, "purged").await;
    assert_eq!((s.ready, s.delayed, s.leased), (0, 0, 0), "{s:?}");
    assert!(take(&c, "purged", 10, 0.0).await.is_empty());

    force_delete(&c, "deleted").await.expect("forced delete");
    let gone = c
        .admin()
        .queue_stats(api::QueueStatsRequest {
            name: "deleted".into(),
        })
        .await
        .expect_err("deleted");
    assert_eq!(gone.code(), Code::NotFound, "{gone}");
    // A queue made again under that name starts empty.
    create(&c, "deleted", config(30.0, 5)).await;
    assert_eq!(stats(&c, "deleted").await.ready, 0);

    let never = force_delete(&c, "never-made")
        .await
        .expect_err("a queue that never existed");
    assert_eq!(never.code(), Code::NotFound, "{never}");

    // A per-user queue goes with its last event: a forced delete that purged it succeeds.
    create(&c, "purgeable:*", config(30.0, 5)).await;
    for i in 0..3 {
        enqueue(&c, item("purgeable:u1", &i.to_string())).await;
    }
    force_delete(&c, "purgeable:u1")
        .await
        .expect("forced delete of a per-user queue");
    assert!(take(&c, "purgeable:u1", 10, 0.0).await.is_empty());
}

pub async fn stats_count_every_state(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "counted", config(30.0, 5)).await;
    for i in 0..3 {
        enqueue(&c, item("counted", &i.to_string())).await;
    }
    let mut later = item("counted", "later");
    later.when = Some(api::enqueue_request::When::Delay(seconds(3600.0)));
    enqueue(&c, later).await;
    let got = take(&c, "counted", 1, 0.0).await;
    assert_eq!(complete(&c, &got[0], ack()).await.code, 0);
    take(&c, "counted", 1, 0.0).await;
    let s = stats(&c, "counted").await;
    assert_eq!(
        (
            s.ready,
            s.delayed,
            s.leased,
            s.enqueued_total,
            s.completed_total
        ),
        (1, 1, 1, 4, 1),
        "{s:?}"
    );
}

pub async fn bad_requests_get_clear_errors(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let err = c
        .ingest()
        .enqueue(item("no-such-queue", "x"))
        .await
        .expect_err("unknown queue");
    assert_eq!(err.code(), Code::NotFound, "{err}");
    let err = c
        .ingest()
        .enqueue(item("bad name!", "x"))
        .await
        .expect_err("bad name");
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    assert!(err.message().contains("queue"), "names the field: {err}");
    let err = c
        .admin()
        .create_queue(api::CreateQueueRequest {
            name: "x".repeat(201),
            config: None,
        })
        .await
        .expect_err("too long");
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    create(
        &c,
        "small",
        api::QueueConfig {
            max_payload_bytes: 1024,
            ..Default::default()
        },
    )
    .await;
    let big = "x".repeat(1025);
    let err = c
        .ingest()
        .enqueue(item("small", &big))
        .await
        .expect_err("too large");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    let huge = "x".repeat(5 << 20);
    let err = c
        .ingest()
        .enqueue(item("small", &huge))
        .await
        .expect_err("over the limit");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    let s = stats(&c, "small").await;
    assert_eq!(
        s.enqueued_total, 0,
        "a refused request changed something: {s:?}"
    );
}

/// Every acknowledged enqueue survives a SIGKILL of the dispatcher that owns its queue.
pub async fn killed_dispatcher_loses_no_acknowledged_event(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "durable", config(30.0, 5)).await;
    let mut acked = Vec::new();
    for i in 0..200 {
        acked.push(enqueue(&c, item("durable", &format!("e{i}"))).await.id);
    }
    let shard = shard_of(&QueueName::parse("durable").expect("name"), SHARDS);
    cluster.crash_and_restart_dispatcher(shard);
    let c = cluster.client().await;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < acked.len() && Instant::now() < deadline {
        match c
            .worker()
            .take(api::TakeRequest {
                queue: "durable".into(),
                max_events: 100,
                ..Default::default()
            })
            .await
        {
            Ok(r) => got.extend(r.into_inner().events.iter().map(id)),
            // The gateway may still be reconnecting to the restarted shard.
            Err(e) if e.code() == Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("take after restart: {e}"),
        }
    }
    got.sort();
    acked.sort();
    assert_eq!(got, acked, "acknowledged events lost or duplicated");
}

/// An advance to a queue owned by the other shard arrives there exactly once.
pub async fn advance_to_the_other_shard_arrives_exactly_once(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let (from, to) = names_on_two_shards("hop");
    create(&c, &from, config(30.0, 5)).await;
    create(&c, &to, config(30.0, 5)).await;
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(enqueue(&c, item(&from, &format!("p{i}"))).await.id);
    }
    let taken = take_n(&c, &from, 50, Duration::from_secs(10)).await;
    assert_eq!(taken.len(), 50);
    for e in &taken {
        let advance = api::completion::Outcome::Advance(api::Advance {
            to: to.clone(),
            ..Default::default()
        });
        assert_eq!(complete(&c, e, advance).await.code, 0);
    }
    let arrived = take_n(&c, &to, 50, Duration::from_secs(20)).await;
    let mut got: Vec<String> = arrived.iter().map(id).collect();
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "every event once at the next queue");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        take(&c, &to, 10, 0.0).await.is_empty(),
        "an advance arrived twice"
    );
    let s = stats(&c, &from).await;
    assert_eq!((s.ready, s.leased), (0, 0), "{s:?}");
}

/// Headers travel with the event (the trace context rides in them).
pub async fn headers_travel_with_the_event(cluster: &mut Cluster) {
    let c = cluster.client().await;
    create(&c, "headed", config(30.0, 5)).await;
    let mut req = item("headed", "x");
    req.headers = HashMap::from([(
        "traceparent".to_string(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_string(),
    )]);
    enqueue(&c, req).await;
    let got = take(&c, "headed", 1, 0.0).await;
    let headers = &got[0].event.as_ref().expect("event").headers;
    assert_eq!(
        headers.get("traceparent").map(String::as_str),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
}
