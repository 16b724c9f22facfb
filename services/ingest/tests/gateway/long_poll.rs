//! A long-poll `Take` reaches its shard as polls of at most 2 s, each held by the shard until
//! its wait ends (here: no events come); a gateway told to stop answers after the poll in
//! flight instead of holding its shutdown for the whole wait; what a poll brings after its
//! client went away is released, in requests the bus can answer, and holds its request's place
//! in flight until it ends; a long poll answers before its client's deadline; a shard answering early and empty is not asked again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cascade_bus::Bus;
use cascade_proto::bus::v1::DispatcherReply;
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::completion::Outcome;
use cascade_proto::v1::{
    CompleteRequest, Completion, EnqueueRequest, LeasedEvent, Release, TakeRequest, TakeResponse,
};
use tokio::sync::Semaphore;

use crate::harness::{
    Answer, Gateway, Recorded, answer_with, echo, event, fake_shards, settings, took,
};

fn seconds(d: &prost_types::Duration) -> f64 {
    d.seconds as f64 + f64::from(d.nanos) / 1e9
}

/// A gateway (takes wait up to 30 s) over a shard that holds each take for its wait, then
/// answers that nothing came.
async fn holding_gateway() -> (Gateway, Recorded) {
    let holds: Answer = Arc::new(|shard, request| {
        Box::pin(async move {
            if let Some(Op::Take(take)) = &request.op {
                let wait = take.wait.as_ref().map_or(0.0, seconds);
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
            echo(shard, request)
        })
    });
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], holds).await;
    let mut settings = settings(1);
    settings.dispatcher.max_take_wait = Duration::from_secs(30);
    (Gateway::start(settings, &bus).await, recorded)
}

#[tokio::test]
async fn a_long_poll_is_cut_into_polls_and_a_stopping_gateway_ends_it() {
    let (gateway, recorded) = holding_gateway().await;
    let mut worker = gateway.worker().await;

    // 5 s: polls of 2, 2 and 1 s.
    let take = |wait_secs| TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        wait: Some(prost_types::Duration {
            seconds: wait_secs,
            nanos: 0,
        }),
        ..TakeRequest::default()
    };
    let started = Instant::now();
    let taken = worker.take(take(5)).await.expect("take").into_inner();
    let waited = started.elapsed();
    assert!(taken.events.is_empty());
    assert!(waited >= Duration::from_secs(5), "waited only {waited:?}");
    let polls = |recorded: &crate::harness::Recorded| -> Vec<f64> {
        let all = recorded.all().into_iter();
        all.filter_map(|(_, request)| match request.op {
            Some(Op::Take(take)) => take.wait.as_ref().map(seconds),
            _ => None,
        })
        .collect()
    };
    // Two full slices, then what is left of the wait: a little under 1 s (the time the first
    // two polls took beyond their 2 s each), more on a slow machine.
    let asked = polls(&recorded);
    assert!(
        matches!(asked.as_slice(), [a, b, c] if *a == 2.0 && *b == 2.0 && (0.5..=1.0).contains(c)),
        "polls of {asked:?} s"
    );

    // 30 s, and the gateway is told to stop during the second poll: the answer comes when
    // that poll ends, and so does the gateway.
    let started = Instant::now();
    let polling = tokio::spawn(async move { worker.take(take(30)).await });
    recorded.wait_for(5).await; // the second poll reached the shard
    gateway.trigger_shutdown();
    let taken = polling.await.expect("join").expect("take").into_inner();
    let waited = started.elapsed();
    assert!(taken.events.is_empty());
    assert!(
        (Duration::from_secs(4)..Duration::from_millis(5_900)).contains(&waited),
        "answered after {waited:?}, not when the poll in flight ended (4 s)"
    );
    assert_eq!(polls(&recorded)[3..], [2.0, 2.0]);
    gateway.stop().await.expect("the gateway stops");
}

/// A client that goes away while the shard holds its poll does not leave the events that
/// poll brings leased to nobody: the gateway releases them at once. A client that stays gets
/// them, and nothing is released.
#[tokio::test]
async fn the_events_of_a_poll_whose_client_went_away_are_released() {
    // The shard answers each take after a second, with one event.
    let late: Answer = Arc::new(|shard, request| {
        Box::pin(async move {
            let Some(Op::Take(_)) = &request.op else {
                return echo(shard, request);
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            took(event("jobs", "e1"), "t1")
        })
    });
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], late).await;
    let gateway = Gateway::start(settings(1), &bus).await;
    let take = TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        wait: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
        ..TakeRequest::default()
    };

    let mut worker = gateway.worker().await;
    let giving_up = {
        let take = take.clone();
        tokio::spawn(async move { worker.take(take).await })
    };
    recorded.wait_for(1).await; // the poll reached the shard
    giving_up.abort(); // the client goes away
    recorded.wait_for(2).await;
    let release = CompleteRequest {
        completions: vec![Completion {
            queue: "jobs".into(),
            id: "e1".into(),
            lease_token: "t1".into(),
            outcome: Some(Outcome::Release(Release {})),
        }],
    };
    assert_eq!(recorded.all()[1].1.op, Some(Op::Complete(release)));

    let mut worker = gateway.worker().await;
    let taken = worker.take(take).await.expect("take").into_inner();
    assert_eq!(taken.events.len(), 1, "{taken:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recorded.len(), 3, "only the polls and the one release");
    gateway.stop().await.expect("the gateway stops");
}

/// A poll that brought more events than one bus request has room to release (here
/// `ingest.max_batch_items`, 50) releases them in several requests, each within it, so that
/// each reply fits one bus message even when every release fails.
#[tokio::test]
async fn a_large_abandoned_poll_is_released_in_requests_the_bus_can_answer() {
    let leased = |i: usize| LeasedEvent {
        event: Some(event("jobs", &format!("e{i}"))),
        lease_token: format!("t{i}"),
        lease_expires_at: None,
    };
    let late: Answer = Arc::new(move |shard, request| {
        Box::pin(async move {
            let Some(Op::Take(_)) = &request.op else {
                return echo(shard, request);
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
            DispatcherReply {
                result: Some(Reply::Take(TakeResponse {
                    events: (0..120).map(leased).collect(),
                    completions: Vec::new(),
                })),
            }
        })
    });
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], late).await;
    let gateway = Gateway::start(settings(1), &bus).await;
    let mut worker = gateway.worker().await;
    let giving_up = tokio::spawn(async move {
        worker
            .take(TakeRequest {
                queue: "jobs".into(),
                max_events: 120,
                ..TakeRequest::default()
            })
            .await
    });
    recorded.wait_for(1).await; // the poll reached the shard
    giving_up.abort(); // the client goes away
    recorded.wait_for(4).await;

    let mut released = Vec::new();
    let mut sizes = Vec::new();
    for (_, request) in &recorded.all()[1..] {
        let Some(Op::Complete(complete)) = &request.op else {
            panic!("a release, got {request:?}");
        };
        sizes.push(complete.completions.len());
        for completion in &complete.completions {
            assert_eq!(completion.outcome, Some(Outcome::Release(Release {})));
            released.push((completion.id.clone(), completion.lease_token.clone()));
        }
    }
    assert_eq!(sizes, [50, 50, 20]);
    let expected: Vec<_> = (0..120)
        .map(|i| (format!("e{i}"), format!("t{i}")))
        .collect();
    assert_eq!(released, expected);
    gateway.stop().await.expect("the gateway stops");
}

/// A client whose deadline comes before the end of its wait gets an answer (empty, nothing
/// came) before its deadline, not DEADLINE_EXCEEDED with the poll left running.
#[tokio::test]
async fn a_long_poll_answers_before_its_clients_deadline() {
    let (gateway, recorded) = holding_gateway().await;
    let mut worker = gateway.worker().await;

    let mut take = tonic::Request::new(TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        wait: Some(prost_types::Duration {
            seconds: 20,
            nanos: 0,
        }),
        ..TakeRequest::default()
    });
    // A fifth of it, a second at most, is left for the answer's way back: 4 s of polls.
    take.set_timeout(Duration::from_secs(5));
    let taken = worker
        .take(take)
        .await
        .expect("an answer, not a deadline")
        .into_inner();
    assert!(taken.events.is_empty());
    let asked: f64 = recorded
        .all()
        .iter()
        .filter_map(|(_, request)| match &request.op {
            Some(Op::Take(take)) => Some(take.wait.as_ref().map_or(0.0, seconds)),
            _ => None,
        })
        .sum();
    assert!(asked <= 4.0, "the polls waited {asked} s in all");
    gateway.stop().await.expect("the gateway stops");
}

/// A poll left running by a client that went away keeps its request's place among those in
/// flight until it ends: clients that cancel their takes cannot pile polls up on a shard.
#[tokio::test]
async fn a_poll_whose_client_went_away_holds_its_place_in_flight() {
    // The shard holds every take until the test opens the gate.
    let gate = Arc::new(Semaphore::new(0));
    let held: Answer = {
        let gate = Arc::clone(&gate);
        Arc::new(move |shard, request| {
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                if let Some(Op::Take(_)) = &request.op {
                    let _open = gate.acquire().await.expect("the gate stays");
                }
                echo(shard, request)
            })
        })
    };
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], held).await;
    let mut settings = settings(1);
    settings.grpc.max_requests_in_flight = 2;
    let gateway = Gateway::start(settings, &bus).await;
    let take = TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        ..TakeRequest::default()
    };
    // Each client gives up after half a second: tonic ends the call on the gateway then, and
    // with it the call's own hold on its place, before the client hears of it.
    let mut worker = gateway.worker().await;
    for polls in 1..=2 {
        let mut request = tonic::Request::new(take.clone());
        request.set_timeout(Duration::from_millis(500));
        let given_up = worker
            .take(request)
            .await
            .expect_err("the shard holds the poll");
        assert!(
            matches!(
                given_up.code(),
                tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            ),
            "{given_up}"
        );
        recorded.wait_for(polls).await; // its poll is held by the shard
    }

    let mut ingest = gateway.ingest().await;
    let enqueue = EnqueueRequest {
        queue: "jobs".into(),
        ..EnqueueRequest::default()
    };
    let shed = ingest
        .enqueue(enqueue.clone())
        .await
        .expect_err("both places are held by the polls");
    assert_eq!(shed.code(), tonic::Code::ResourceExhausted, "{shed}");
    assert!(
        shed.message().contains("grpc.max_requests_in_flight"),
        "{shed}"
    );

    gate.add_permits(2);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match ingest.enqueue(enqueue.clone()).await {
            Ok(_) => break,
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "places still held: {status}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => panic!("{status}"),
        }
    }
    gateway.stop().await.expect("the gateway stops");
}

/// A shard that answers a poll at once and empty (a stopping dispatcher does) is not asked
/// again and again until the client's wait ends: the client gets the empty answer.
#[tokio::test]
async fn a_shard_answering_early_and_empty_is_not_polled_again() {
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], answer_with(echo)).await;
    let gateway = Gateway::start(settings(1), &bus).await;
    let mut worker = gateway.worker().await;
    let started = Instant::now();
    let taken = worker
        .take(TakeRequest {
            queue: "jobs".into(),
            max_events: 10,
            wait: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            ..TakeRequest::default()
        })
        .await
        .expect("take")
        .into_inner();
    assert!(taken.events.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered after {:?}, not when the shard did",
        started.elapsed()
    );
    assert_eq!(recorded.len(), 1, "one poll");
    gateway.stop().await.expect("the gateway stops");
}
