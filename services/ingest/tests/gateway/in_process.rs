//! The process's own workers call the gateway's `Worker` service directly: answered as they
//! would be over gRPC, and without credentials where every gRPC client needs them (they are
//! the process); UNAVAILABLE before the gateway serves and once it has stopped; and a
//! connector still held does not keep a stopped gateway from ending.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_proto::bus::v1::DispatcherReply;
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::completion::Outcome;
use cascade_proto::v1::{Ack, CompleteRequest, Completion, LeasedEvent, TakeRequest, TakeResponse};
use cascade_security::{Authenticator, Identities};
use cascade_service::{Deps, Readiness};
use tonic::{Code, Request};

use crate::harness::{Gateway, answer_with, echo, event, fake_shards, settings};

fn take() -> TakeRequest {
    TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        ..TakeRequest::default()
    }
}

#[tokio::test]
async fn the_processs_own_workers_call_the_gateway_directly_while_it_serves() {
    let bus = Bus::local();
    // The shard leases one event to every take.
    let recorded = fake_shards(
        &bus,
        [0],
        answer_with(|shard, request| match &request.op {
            Some(Op::Take(take)) => DispatcherReply {
                result: Some(Reply::Take(TakeResponse {
                    events: vec![LeasedEvent {
                        event: Some(event(&take.queue, "e-1")),
                        lease_token: "00000000000000ff".into(),
                        lease_expires_at: None,
                    }],
                    completions: Vec::new(),
                })),
            },
            _ => echo(shard, request),
        }),
    )
    .await;
    let (connector, listener) = cascade_ingest::in_process();
    let worker = connector.worker();

    let early = worker.take(Request::new(take())).await;
    assert_eq!(early.expect_err("no gateway yet").code(), Code::Unavailable);

    // Authentication on, and no identity at all: no gRPC client may call.
    let readiness = Readiness::default();
    let deps = Deps {
        readiness: readiness.clone(),
        auth: Arc::new(Authenticator::enabled(Identities::default())),
        ..Deps::new(bus.clone())
    };
    let gateway = Gateway::start_with(settings(1), deps, Some(listener)).await;
    while !readiness.is_ready() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = gateway.worker().await.take(take()).await;
    assert_eq!(refused.expect_err("no token").code(), Code::Unauthenticated);

    let taken = worker.take(Request::new(take())).await.expect("take");
    let ids: Vec<&str> = taken
        .get_ref()
        .events
        .iter()
        .map(|e| e.event.as_ref().unwrap().id.as_str())
        .collect();
    assert_eq!(ids, ["e-1"]);
    let ack = Completion {
        queue: "jobs".into(),
        id: "e-1".into(),
        lease_token: taken.get_ref().events[0].lease_token.clone(),
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
    let reached: Vec<&str> = recorded
        .all()
        .iter()
        .map(|(_, r)| r.op.as_ref().unwrap().name())
        .collect();
    assert_eq!(reached, ["take", "complete"]);

    // Stopped while the connector (and its worker) are still held.
    gateway.stop().await.expect("the gateway stops");
    let late = worker.take(Request::new(take())).await;
    assert_eq!(
        late.expect_err("the gateway stopped").code(),
        Code::Unavailable
    );
    assert_eq!(recorded.len(), 2);
}
