//! Bounded cost for every input, against `cascade standalone` with small limits: a pipeline
//! with too many stages, one pipeline too many and one queue too many are refused with
//! INVALID_ARGUMENT naming the limit (per-user queues of a template are not counted);
//! `/metrics` labels at most `telemetry.max_queue_series` queues apart and sums the rest
//! under `(other)`, and a deleted queue's series go, its place taken by a summed one. Over a
//! NATS server of small messages, a batch whose failures outweigh its items still gets every
//! item's own outcome.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cascade_client::{Client, api};
use cascade_core::{QueueName, shard_of};
use cascade_e2e::cluster::SHARDS;
use cascade_e2e::process::http_get;
use cascade_e2e::scenarios::{
    attempts, complete, config, create, enqueue, item, seconds, stats, take_n,
};
use cascade_e2e::{Cluster, Mode};
use tonic::Code;

const WITHIN: Duration = Duration::from_secs(30);

fn stage(name: &str) -> api::Stage {
    api::Stage {
        name: name.into(),
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
            concurrency: 1,
            timeout: Some(seconds(10.0)),
        }),
        ..Default::default()
    }
}

async fn apply(c: &Client, name: &str, stages: &[&str]) -> Result<(), tonic::Status> {
    let pipeline = api::Pipeline {
        name: name.into(),
        stages: stages.iter().map(|s| stage(s)).collect(),
    };
    c.admin().apply_pipeline(pipeline).await.map(drop)
}

fn assert_limit(status: &tonic::Status, starts: &str) {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with(starts), "{}", status.message());
}

/// `(queue, state) -> depth` of every `cascade_queue_depth` sample.
fn depths(cluster: &Cluster) -> Vec<(String, String, u64)> {
    let (_, text) = http_get(cluster.http(), "/metrics").expect("/metrics answers");
    text.lines()
        .filter_map(|line| line.strip_prefix("cascade_queue_depth{queue=\""))
        .map(|rest| {
            let (queue, rest) = rest.split_once('"').expect("queue label");
            let state = rest
                .split_once("state=\"")
                .and_then(|(_, s)| s.split_once('"'))
                .expect("state label")
                .0;
            let value = rest.rsplit_once(' ').expect("value").1;
            (queue.into(), state.into(), value.parse().expect("a count"))
        })
        .collect()
}

fn labels(cluster: &Cluster) -> BTreeSet<String> {
    depths(cluster)
        .into_iter()
        .map(|(queue, _, _)| queue)
        .collect()
}

/// Waits until `/metrics` tells `what`.
async fn wait_until(cluster: &Cluster, what: &str, told: impl Fn(&Cluster) -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !told(cluster) {
        assert!(
            Instant::now() < deadline,
            "/metrics never told {what}: {:?}",
            depths(cluster)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_name_themselves_and_metrics_stay_bounded() {
    let env = [
        // One shard holds every queue: the queue limit is per shard.
        ("CASCADE__CLUSTER__SHARDS", "1"),
        ("CASCADE__LIMITS__MAX_QUEUES", "5"),
        ("CASCADE__LIMITS__MAX_PIPELINES", "1"),
        ("CASCADE__LIMITS__MAX_STAGES", "2"),
        ("CASCADE__TELEMETRY__MAX_QUEUE_SERIES", "3"),
        ("CASCADE__DISPATCHER__STATS_INTERVAL", "100ms"),
    ];
    let cluster =
        tokio::task::spawn_blocking(move || Cluster::start_with(Mode::Standalone, None, &env))
            .await
            .expect("start");
    let c = cluster.client().await;

    // The first queues get series of their own.
    for name in ["del-a", "del-b"] {
        create(&c, name, config(30.0, 0)).await;
        enqueue(&c, item(name, "x")).await;
    }
    wait_until(&cluster, "del-a and del-b", |cl| {
        let seen = labels(cl);
        seen.contains("del-a") && seen.contains("del-b")
    })
    .await;

    let wide = apply(&c, "wide", &["a", "b", "c"])
        .await
        .expect_err("3 stages");
    assert_limit(
        &wide,
        "stages: 3 stages is more than limits.max_stages (2) allows",
    );
    apply(&c, "flow", &["a", "b"]).await.expect("2 stages");
    let more = apply(&c, "more", &["a"])
        .await
        .expect_err("a second pipeline");
    assert_limit(
        &more,
        "name: 1 pipelines exist, the most limits.max_pipelines (1) allows",
    );
    create(&c, "keep-inbox:*", config(30.0, 0)).await;
    // del-a, del-b, flow.a, flow.b and the template: the shard is full...
    let full = c
        .admin()
        .create_queue(api::CreateQueueRequest {
            name: "one-too-many".into(),
            config: Some(config(30.0, 0)),
        })
        .await
        .expect_err("a sixth queue");
    assert_limit(
        &full,
        "name: this shard holds 5 queues and templates, the most limits.max_queues (5) allows",
    );
    assert!(full.message().contains("template"), "{}", full.message());
    // ...but not for per-user queues, which are not counted.
    for user in ["keep-inbox:u1", "keep-inbox:u2", "keep-inbox:u3"] {
        enqueue(&c, item(user, "y")).await;
    }

    // Three queues are labelled apart; the others are summed under `(other)`, and every
    // ready event is counted somewhere (2 in del-*, 3 in the template's queues).
    wait_until(&cluster, "(other) holding the rest", |cl| {
        let all = depths(cl);
        let ready: u64 = all
            .iter()
            .filter(|(_, s, _)| s == "ready")
            .map(|(.., n)| n)
            .sum();
        let seen = labels(cl);
        seen.contains("(other)") && ready == 5
    })
    .await;
    let apart: Vec<String> = labels(&cluster)
        .into_iter()
        .filter(|l| l != "(other)")
        .collect();
    assert_eq!(apart.len(), 3, "{apart:?}");

    // Deleted queues leave no series, and their places go to queues summed so far.
    for name in ["del-a", "del-b"] {
        c.admin()
            .delete_queue(api::DeleteQueueRequest {
                name: name.into(),
                force: true,
            })
            .await
            .expect("delete");
    }
    wait_until(&cluster, "del-* gone, three others apart", |cl| {
        let (_, text) = http_get(cl.http(), "/metrics").expect("/metrics answers");
        let apart = labels(cl).into_iter().filter(|l| l != "(other)").count();
        !text.contains("del-") && apart == 3
    })
    .await;
    cluster.stop();
}

/// An event as large as the gateway takes (here the bus's limit, the payload limit raised
/// above it) can be taken, retried with a long reason (which the store keeps with it as a
/// header), and taken again: the room kept beside an event covers what the store adds,
/// where the largest event used to come back too large for any take and stop its queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_event_can_be_retried_and_taken_again() {
    let env = [
        ("CASCADE__INGEST__MAX_PAYLOAD", "16MiB"),
        (
            "CASCADE__GRPC__MAX_UNREAD_RESPONSE_BYTES_PER_CONNECTION",
            "64MiB",
        ),
        ("CASCADE__STANDALONE__STAGE_WORKERS", "false"),
    ];
    let cluster =
        tokio::task::spawn_blocking(move || Cluster::start_with(Mode::Standalone, None, &env))
            .await
            .expect("start");
    let c = cluster.client().await;
    let roomy = api::QueueConfig {
        max_payload_bytes: 16 << 20,
        ..config(30.0, 5)
    };
    create(&c, "big", roomy).await;
    // The gateway names the largest payload that would have fitted beside the rest.
    let over = api::EnqueueRequest {
        queue: "big".into(),
        payload: vec![7; 9 << 20].into(),
        ..api::EnqueueRequest::default()
    };
    let refused = c.ingest().enqueue(over).await.expect_err("over the bus");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let largest: usize = refused
        .message()
        .split("over the limit of ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no limit named: {}", refused.message()));
    let event = api::EnqueueRequest {
        queue: "big".into(),
        payload: vec![7; largest].into(),
        ..api::EnqueueRequest::default()
    };
    enqueue(&c, event).await;

    let first = take_n(&c, "big", 1, WITHIN).await;
    let retry = api::completion::Outcome::Retry(api::Retry {
        delay: Some(seconds(0.0)),
        reason: "x".repeat(1000),
    });
    let result = complete(&c, &first[0], retry).await;
    assert_eq!(result.code, 0, "{result:?}");
    let again = take_n(&c, "big", 1, WITHIN).await;
    assert_eq!(attempts(&again[0]), 2);
    let event = again[0].event.as_ref().expect("event");
    assert_eq!(event.payload.len(), largest);
    assert_eq!(event.headers["cascade-last-failure"], "x".repeat(1000));
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// A shard's failure of an item can say more than the item did (a missing queue's message
/// names it twice), so a bus request's reply can outgrow the request. The gateway sizes
/// its requests for the largest results, and the shard cuts a failure's message to the size
/// kept for it: over a NATS server of 64 KiB messages, each of 1,000 items gets its own
/// outcome, and those enqueued are there. Before, the reply was over `max_payload` and every
/// item was answered RESOURCE_EXHAUSTED, the enqueued ones too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_failures_outweigh_it_gets_each_outcome_over_small_bus_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nats_config = dir.path().join("nats.conf");
    std::fs::write(&nats_config, "max_payload: 65536\n").expect("write");
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with_nats_config(None, &[], &nats_config)
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    let shard = |name: &str| shard_of(&QueueName::parse(name).expect("name"), SHARDS);
    let present = format!("present-{}", "x".repeat(188));
    let missing = (0..100)
        .map(|i| format!("missing-{i:03}-{}", "y".repeat(188)))
        .find(|name| shard(name) == shard(&present))
        .expect("a name on the same shard");
    create(&c, &present, config(30.0, 3)).await;

    let items = (0..1000)
        .map(|i| api::EnqueueRequest {
            id: format!("e{i}"),
            ..item(if i % 2 == 0 { &present } else { &missing }, "p")
        })
        .collect();
    let results = c
        .ingest()
        .enqueue_batch(api::EnqueueBatchRequest { items })
        .await
        .expect("a batch of the default size")
        .into_inner()
        .results;
    assert_eq!(results.len(), 1000);
    for (i, result) in results.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(result.code, 0, "items[{i}]: {}", result.message);
            assert_eq!(
                result.ok.as_ref().map(|ok| ok.id.as_str()),
                Some(format!("e{i}").as_str())
            );
        } else {
            assert_eq!(
                result.code,
                Code::NotFound as i32,
                "items[{i}]: {}",
                result.message
            );
            assert!(result.message.contains(&missing), "{}", result.message);
        }
    }
    assert_eq!(stats(&c, &present).await.ready, 500);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
