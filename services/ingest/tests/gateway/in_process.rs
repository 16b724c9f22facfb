//! The process's own workers call the gateway's `Worker` service directly: `Take`,
//! `Complete` and `ExtendLease` reach the shards, without credentials where every gRPC client
//! needs them (they are the process), and a direct answer is not held as unread bytes. Calls
//! are UNAVAILABLE before the gateway serves and from the moment it is told to stop, while
//! the calls in flight finish; a connector still held does not keep a stopped gateway from
//! ending.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::completion::Outcome;
use cascade_proto::v1::{Ack, CompleteRequest, Completion, Event, ExtendLeaseRequest, TakeRequest};
use cascade_security::{Authenticator, Identities};
use cascade_service::{Deps, Readiness};
use tonic::{Code, Request};

use crate::harness::{Answer, Gateway, echo, event, fake_shards, settings, took, wait_until};

const TOKEN: &str = "00000000000000ff";
const PAYLOAD: usize = 1024;

fn take(wait_secs: i64) -> Request<TakeRequest> {
    Request::new(TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        wait: Some(prost_types::Duration {
            seconds: wait_secs,
            nanos: 0,
        }),
        ..TakeRequest::default()
    })
}

/// Waits (at most 10 s) until `readiness` says `ready`.
async fn until(readiness: &Readiness, ready: bool) {
    wait_until(
        Duration::from_secs(10),
        || readiness.is_ready() == ready,
        || format!("readiness never {ready}"),
    )
    .await;
}

#[tokio::test]
async fn own_workers_call_the_gateway_directly_while_it_serves() {
    // A take that may wait is held for the whole seconds of its wait and brings nothing;
    // one that may not wait leases an event of the largest payload.
    let shard: Answer = Arc::new(|shard, request| {
        Box::pin(async move {
            let Some(Op::Take(take)) = &request.op else {
                return echo(shard, request);
            };
            if let Some(wait) = &take.wait {
                tokio::time::sleep(Duration::from_secs(wait.seconds as u64)).await;
                return echo(shard, request);
            }
            let largest = Event {
                payload: vec![7; PAYLOAD].into(),
                ..event(&take.queue, "e-1")
            };
            took(largest, TOKEN)
        })
    });
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], shard).await;
    let (connector, listener) = cascade_ingest::in_process();
    let worker = connector.worker();

    let early = worker.take(take(0)).await;
    assert_eq!(early.expect_err("no gateway yet").code(), Code::Unavailable);

    // Authentication on and no identity at all: no gRPC client may call. And a gateway that
    // holds at most one payload's bytes of unread answers: an answer kept for its reader
    // would refuse the next take.
    let mut settings = settings(1);
    settings.ingest.max_payload = PAYLOAD as u64;
    settings.grpc.max_unread_response_bytes = PAYLOAD as u64;
    settings.grpc.max_unread_response_bytes_per_connection = PAYLOAD as u64;
    settings.validate().expect("valid settings");
    let readiness = Readiness::default();
    let deps = Deps {
        readiness: readiness.clone(),
        auth: Arc::new(Authenticator::enabled(Identities::default())),
        ..Deps::new(bus.clone())
    };
    let gateway = Gateway::start_with(settings, deps, Some(listener)).await;
    until(&readiness, true).await;
    let refused = gateway.worker().await.take(take(0).into_inner()).await;
    assert_eq!(refused.expect_err("no token").code(), Code::Unauthenticated);

    let first = worker.take(take(0)).await.expect("take");
    let second = worker
        .take(take(0))
        .await
        .expect("a take while the first answer is held");
    for taken in [&first, &second] {
        let ids: Vec<&str> = taken
            .get_ref()
            .events
            .iter()
            .filter_map(|e| e.event.as_ref())
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(ids, ["e-1"]);
    }
    let ack = Completion {
        queue: "jobs".into(),
        id: "e-1".into(),
        lease_token: TOKEN.into(),
        outcome: Some(Outcome::Ack(Ack {})),
    };
    let completed = worker
        .complete(Request::new(CompleteRequest {
            completions: vec![ack],
        }))
        .await
        .expect("complete")
        .into_inner();
    assert_eq!(completed.results.len(), 1);
    assert_eq!(completed.results[0].code, 0, "{:?}", completed.results[0]);
    let extend = ExtendLeaseRequest {
        queue: "jobs".into(),
        id: "e-1".into(),
        lease_token: TOKEN.into(),
        extend_by: None,
    };
    let extended = worker.extend_lease(Request::new(extend)).await;
    assert!(
        extended
            .expect("extend")
            .get_ref()
            .lease_expires_at
            .is_some()
    );
    let ops = |recorded: &crate::harness::Recorded| -> Vec<&'static str> {
        let all = recorded.all();
        all.iter()
            .map(|(_, r)| r.op.as_ref().expect("an op").name())
            .collect()
    };
    assert_eq!(ops(&recorded), ["take", "take", "complete", "extend"]);

    // Told to stop while a long poll is in flight: no new call is taken, the one in flight
    // is answered after its poll.
    let polling = tokio::spawn({
        let worker = Arc::clone(&worker);
        async move { worker.take(take(2)).await }
    });
    recorded.wait_for(5).await;
    gateway.trigger_shutdown();
    until(&readiness, false).await;
    let late = worker.take(take(0)).await;
    assert_eq!(late.expect_err("stopping").code(), Code::Unavailable);
    let polled = polling.await.expect("join").expect("the long poll");
    assert!(polled.get_ref().events.is_empty());

    // Stopped while the connector (and its worker) are still held.
    gateway.stop().await.expect("the gateway stops");
    let after = worker.take(take(0)).await;
    assert_eq!(after.expect_err("stopped").code(), Code::Unavailable);
    assert_eq!(recorded.len(), 5);
}
