//! Failures map to gRPC statuses: a shard's error reply keeps its code and message; a shard
//! that nobody serves is UNAVAILABLE, naming the shard and saying a retry is safe; a long-poll
//! `Take` gets its wait on top of the request timeout.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_core::{QueueName, shard_of};
use cascade_proto::bus::v1::DispatcherRequest;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::{EnqueueBatchRequest, EnqueueRequest, ExtendLeaseRequest, TakeRequest};
use tonic::Code;

use crate::harness::{Answer, Gateway, answer_with, cluster, echo, error, fake_shards, settings};

fn extend(queue: &str) -> ExtendLeaseRequest {
    ExtendLeaseRequest {
        queue: queue.into(),
        id: "e1".into(),
        lease_token: "0000000000000002".into(),
        extend_by: None,
    }
}

#[tokio::test]
async fn a_shards_error_keeps_its_code_and_message() {
    let stale = |_: u32, _: DispatcherRequest| error(9, "lease of jobs/e1 is not current");
    let (gateway, _) = cluster(2, answer_with(stale)).await;
    let status = gateway
        .worker()
        .await
        .extend_lease(extend("jobs"))
        .await
        .expect_err("stale");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "lease of jobs/e1 is not current");

    let status = gateway
        .ingest()
        .await
        .enqueue(EnqueueRequest {
            queue: "jobs".into(),
            ..EnqueueRequest::default()
        })
        .await
        .expect_err("the whole batch failed");
    assert_eq!(status.code(), Code::FailedPrecondition);
}

#[tokio::test]
async fn a_shard_nobody_serves_is_unavailable_and_safe_to_retry() {
    let owned_by = |shard: u32| {
        (0..)
            .map(|i| format!("q{i}"))
            .find(|name| shard_of(&QueueName::parse(name).expect("name"), 2) == shard)
            .expect("some name")
    };
    let (on_0, on_1) = (owned_by(0), owned_by(1));
    // Only shard 0 is served.
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], answer_with(echo)).await;
    let gateway = Gateway::start(settings(2), &bus).await;
    let mut worker = gateway.worker().await;
    let status = worker
        .extend_lease(extend(&on_1))
        .await
        .expect_err("no shard 1");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status.message().starts_with("shard 1: no responders"),
        "{}",
        status.message()
    );
    assert!(
        status.message().contains("safe to retry"),
        "{}",
        status.message()
    );
    worker
        .extend_lease(extend(&on_0))
        .await
        .expect("shard 0 answers");

    // In a batch only the items of the missing shard fail.
    let items = vec![
        EnqueueRequest {
            queue: on_0.clone(),
            id: "a".into(),
            ..EnqueueRequest::default()
        },
        EnqueueRequest {
            queue: on_1.clone(),
            id: "b".into(),
            ..EnqueueRequest::default()
        },
    ];
    let results = gateway
        .ingest()
        .await
        .enqueue_batch(EnqueueBatchRequest { items })
        .await
        .expect("batch")
        .into_inner()
        .results;
    assert_eq!(results[0].code, 0);
    assert_eq!(results[1].code, Code::Unavailable as i32);
    assert!(
        results[1]
            .message
            .contains("safe to retry with the same id or idempotency key")
    );
    assert_eq!(recorded.len(), 2);
}

#[tokio::test]
async fn a_long_poll_take_waits_longer_than_the_request_timeout() {
    // The shard answers a take after 600 ms, the request timeout is 300 ms.
    let slow: Answer = Arc::new(|shard, request| {
        Box::pin(async move {
            if matches!(request.op, Some(Op::Take(_))) {
                tokio::time::sleep(Duration::from_millis(600)).await;
            }
            echo(shard, request)
        })
    });
    let bus = Bus::local();
    fake_shards(&bus, [0], slow).await;
    let mut settings = settings(1);
    settings.bus.request_timeout = Duration::from_millis(300);
    let gateway = Gateway::start(settings, &bus).await;
    let mut worker = gateway.worker().await;
    let take = |wait: Option<prost_types::Duration>| TakeRequest {
        queue: "jobs".into(),
        max_events: 10,
        wait,
        ..TakeRequest::default()
    };
    let waited = worker
        .take(take(Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        })))
        .await;
    assert!(waited.is_ok(), "{waited:?}");
    let status = worker.take(take(None)).await.expect_err("timed out");
    assert_eq!(status.code(), Code::Unavailable);
    assert!(
        status.message().contains("timed out"),
        "{}",
        status.message()
    );
}
