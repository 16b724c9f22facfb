//! Concurrent unary `Enqueue`s for one shard travel together: while a shard's requests are
//! out (`ingest.requests_in_flight` at once), the next ones gather and go as one bus request;
//! each caller gets its own answer. A batch larger than one bus message is split by bytes,
//! and its parts go one after the other, in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    // them time to arrive before the shard answers (ample: a loaded CI machine is slow).
    tokio::time::sleep(Duration::from_secs(1)).await;
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
    let items = forty_kib_of_items();
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
            payload: vec![1; 1000].into(),
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

/// A shard answer that waits for a permit of `gate` first.
fn gated(gate: &Arc<Semaphore>) -> Answer {
    let gate = Arc::clone(gate);
    Arc::new(move |shard, request| {
        let gate = Arc::clone(&gate);
        Box::pin(async move {
            if let Ok(permit) = gate.acquire().await {
                permit.forget();
            }
            echo(shard, request)
        })
    })
}

#[tokio::test]
async fn requests_in_flight_bounds_the_requests_out_per_shard() {
    let gate = Arc::new(Semaphore::new(0));
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], gated(&gate)).await;
    let mut two = settings(1);
    two.ingest.requests_in_flight = 2;
    let gateway = Gateway::start(two, &bus).await;
    let ingest = gateway.ingest().await;
    let send = |i: usize| {
        let mut client = ingest.clone();
        tokio::spawn(async move {
            let request = EnqueueRequest {
                queue: "jobs".into(),
                id: format!("e{i}"),
                ..EnqueueRequest::default()
            };
            (i, client.enqueue(request).await)
        })
    };
    let mut calls = vec![send(0)];
    recorded.wait_for(1).await;
    // The first is unanswered, yet the second leaves at once.
    calls.push(send(1));
    recorded.wait_for(2).await;
    calls.extend((2..10).map(send));
    // As above: time for the 8 calls to reach the gateway's inbox.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(recorded.len(), 2, "a third request waits for a free slot");
    gate.add_permits(1000);
    for call in calls {
        let (i, answer) = call.await.expect("call task");
        let response = answer.expect("enqueued").into_inner();
        assert_eq!(
            response.id,
            format!("e{i}"),
            "each caller gets its own answer"
        );
    }
    assert_eq!(enqueued_items(&recorded).len(), 10);
    assert_eq!(recorded.len(), 3, "the 8 that waited went together");
}

#[tokio::test]
async fn the_parts_of_one_batch_are_not_in_flight_together() {
    // The shard answers slowly and notes how many requests it holds at once.
    let (holding, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let answer: Answer = {
        let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
        Arc::new(move |shard, request| {
            let (holding, most) = (Arc::clone(&holding), Arc::clone(&most));
            Box::pin(async move {
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                echo(shard, request)
            })
        })
    };
    let bus = Bus::local_with_max_payload(16 * 1024);
    let recorded = fake_shards(&bus, [0], answer).await;
    let mut many = settings(1);
    many.ingest.requests_in_flight = 4;
    let gateway = Gateway::start(many, &bus).await;
    let mut ingest = gateway.ingest().await;
    let items = forty_kib_of_items();
    let results = ingest
        .enqueue_batch(EnqueueBatchRequest { items })
        .await
        .expect("batch")
        .into_inner()
        .results;
    assert!(results.iter().all(|r| r.code == 0));
    assert!(recorded.len() >= 4, "{} parts", recorded.len());
    assert_eq!(most.load(Ordering::SeqCst), 1, "one part at a time");
    let order: Vec<String> = enqueued_items(&recorded)
        .into_iter()
        .map(|(_, _, id)| id)
        .collect();
    let expected: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
    assert_eq!(order, expected);
}

/// 40 items of 1,000 bytes for queue `jobs` (`e0`…`e39`): more than one 16 KiB bus message.
fn forty_kib_of_items() -> Vec<EnqueueRequest> {
    (0..40)
        .map(|i| EnqueueRequest {
            queue: "jobs".into(),
            id: format!("e{i}"),
            payload: vec![1; 1000].into(),
            ..EnqueueRequest::default()
        })
        .collect()
}
