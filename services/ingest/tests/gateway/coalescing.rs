//! Concurrent unary `Enqueue`s for one shard travel together: while a request to the shard is
//! out, the next ones gather and go as one bus request; each caller gets its own answer. A
//! batch larger than one bus message is split by bytes.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::{EnqueueBatchRequest, EnqueueRequest};
use tokio::sync::Semaphore;

use crate::harness::{Answer, Gateway, echo, enqueued_items, fake_shards, settings};

#[tokio::test]
async fn concurrent_enqueues_share_bus_requests() {
    // The shard holds its first answer until the test opens the gate.
    let gate = Arc::new(Semaphore::new(0));
    let answer: Answer = {
        let gate = Arc::clone(&gate);
        Arc::new(move |shard, request| {
            let gate = Arc::clone(&gate);
            Box::pin(async move {
                if let Ok(permit) = gate.acquire().await {
                    permit.forget();
                }
                echo(shard, request)
            })
        })
    };
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], answer).await;
    let gateway = Gateway::start(settings(1), &bus).await;
    let ingest = gateway.ingest().await;

    let send = |i: usize| {
        let mut client = ingest.clone();
        tokio::spawn(async move {
            let request = EnqueueRequest {
                queue: format!("q{}", i % 3),
                id: format!("e{i}"),
                ..EnqueueRequest::default()
            };
            (i, client.enqueue(request).await)
        })
    };
    let first = send(0);
    recorded.wait_for(1).await;
    let calls: Vec<_> = (1..40).map(send).collect();
    // Nothing outside the gateway shows that the 39 calls are waiting in its inbox: give
    // them time to arrive before the shard answers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    gate.add_permits(1000);

    for call in std::iter::once(first).chain(calls) {
        let (i, answer) = call.await.expect("call task");
        let response = answer.expect("enqueued").into_inner();
        assert_eq!(
            response.id,
            format!("e{i}"),
            "each caller gets its own answer"
        );
        assert_eq!(response.queue, format!("q{}", i % 3));
    }
    let requests = recorded.len();
    let items = enqueued_items(&recorded);
    assert_eq!(items.len(), 40);
    assert!(requests < 10, "40 enqueues took {requests} bus requests");
    let largest = recorded
        .all()
        .into_iter()
        .filter_map(|(_, r)| match r.op {
            Some(Op::Enqueue(batch)) => Some(batch.items.len()),
            _ => None,
        })
        .max();
    assert!(largest > Some(10), "largest bus request: {largest:?} items");
}

#[tokio::test]
async fn a_batch_larger_than_a_bus_message_is_split_by_bytes() {
    // 16 KiB bus messages less 4 KiB for the envelope: 12 KiB of items each.
    let bus = Bus::local_with_max_payload(16 * 1024);
    let recorded = fake_shards(&bus, [0], crate::harness::answer_with(echo)).await;
    let gateway = Gateway::start(settings(1), &bus).await;
    let mut ingest = gateway.ingest().await;
    let items: Vec<EnqueueRequest> = (0..40)
        .map(|i| EnqueueRequest {
            queue: "jobs".into(),
            id: format!("e{i}"),
            payload: vec![1; 1000],
            ..EnqueueRequest::default()
        })
        .collect();
    let results = ingest
        .enqueue_batch(EnqueueBatchRequest { items })
        .await
        .expect("batch")
        .into_inner()
        .results;
    let ids: Vec<String> = results
        .iter()
        .map(|r| r.ok.as_ref().map(|ok| ok.id.clone()).unwrap_or_default())
        .collect();
    let expected: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
    assert_eq!(ids, expected);
    let sizes: Vec<usize> = recorded
        .all()
        .into_iter()
        .map(|(_, request)| prost::Message::encoded_len(&request))
        .collect();
    assert!(sizes.len() >= 4, "40 KB in 12 KiB requests: {sizes:?}");
    assert!(
        sizes.iter().all(|&size| size <= 12 * 1024 + 16),
        "{sizes:?}"
    );
    let order: Vec<String> = enqueued_items(&recorded)
        .into_iter()
        .map(|(_, _, id)| id)
        .collect();
    assert_eq!(order, expected, "sent in request order");

    // One item that cannot fit in a bus message at all is refused, naming what would fit.
    let status = ingest
        .enqueue(EnqueueRequest {
            queue: "jobs".into(),
            payload: vec![1; 1000],
            headers: (0..3)
                .map(|i| (format!("h{i}"), "v".repeat(4000)))
                .collect(),
            ..EnqueueRequest::default()
        })
        .await
        .expect_err("too large for the bus");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(
        status
            .message()
            .starts_with("payload: 1000 bytes is over the limit of"),
        "{}",
        status.message()
    );
}
