//! Each queue goes to `shard_of(queue, shards)`; a batch is split by shard, one request per
//! shard, and its results come back in request order (a shard's failures placed under the
//! client's item).

use cascade_core::{QueueName, shard_of};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest};
use cascade_proto::v1::completion::Outcome;
use cascade_proto::v1::{
    Ack, CompleteRequest, Completion, EnqueueBatchRequest, EnqueueBatchResponse, EnqueueRequest,
    EnqueueResult, ExtendLeaseRequest, GetRequest, TakeRequest,
};

use crate::harness::{answer_with, cluster, echo, enqueued, enqueued_items};

fn owner(queue: &str) -> u32 {
    shard_of(&QueueName::parse(queue).expect("a queue name"), 2)
}

fn enqueue(queue: &str, id: &str) -> EnqueueRequest {
    EnqueueRequest {
        queue: queue.to_owned(),
        id: id.to_owned(),
        ..EnqueueRequest::default()
    }
}

#[tokio::test]
async fn every_request_goes_to_the_queues_owner() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut ingest = gateway.ingest().await;
    let queues: Vec<String> = (0..16).map(|i| format!("inbox:user{i}")).collect();
    for (i, queue) in queues.iter().enumerate() {
        let response = ingest
            .enqueue(enqueue(queue, &format!("e{i}")))
            .await
            .expect("enqueued")
            .into_inner();
        assert_eq!(
            (response.queue.as_str(), response.id),
            (queue.as_str(), format!("e{i}"))
        );
    }
    let arrived = enqueued_items(&recorded);
    assert_eq!(arrived.len(), queues.len());
    for (shard, queue, _) in &arrived {
        assert_eq!(*shard, owner(queue), "{queue}");
    }
    let shards_used: std::collections::BTreeSet<u32> = arrived.iter().map(|a| a.0).collect();
    assert_eq!(shards_used.len(), 2, "16 queues spread over both shards");

    // Lookups and worker calls follow the same rule.
    let queue = "inbox:user3";
    let mut worker = gateway.worker().await;
    let before = recorded.len();
    ingest
        .get(GetRequest {
            queue: queue.into(),
            id: "e3".into(),
        })
        .await
        .expect("get");
    worker
        .take(TakeRequest {
            queue: queue.into(),
            ..TakeRequest::default()
        })
        .await
        .expect("take");
    worker
        .extend_lease(ExtendLeaseRequest {
            queue: queue.into(),
            id: "e3".into(),
            lease_token: "0000000000000001".into(),
            extend_by: None,
        })
        .await
        .expect("extend");
    worker
        .complete(CompleteRequest {
            completions: vec![Completion {
                queue: queue.into(),
                id: "e3".into(),
                lease_token: "0000000000000001".into(),
                outcome: Some(Outcome::Ack(Ack {})),
            }],
        })
        .await
        .expect("complete");
    let later = &recorded.all()[before..];
    assert_eq!(later.len(), 4);
    assert!(later.iter().all(|(shard, _)| *shard == owner(queue)));

    // Enqueues, takes and completions reach their shard as the values the gateway validated
    // (converted once, here); the rest as their messages.
    let arrived = recorded.arrived_as_values();
    assert!(arrived[..before].iter().all(|a| *a == ("enqueue", true)));
    assert_eq!(
        arrived[before..],
        [
            ("get", false),
            ("take", true),
            ("extend", false),
            ("complete", true)
        ]
    );
}

/// Echoes, except that queue "missing" is NOT_FOUND, as a shard answers it (about no field).
fn echo_with_missing(shard: u32, request: DispatcherRequest) -> DispatcherReply {
    let Some(Op::Enqueue(batch)) = &request.op else {
        return echo(shard, request);
    };
    let results = batch
        .items
        .iter()
        .map(|item| match item.queue.as_str() {
            "missing" => EnqueueResult {
                ok: None,
                code: 5,
                message: "queue 'missing' does not exist; create it with CreateQueue".into(),
                field: String::new(),
            },
            queue => enqueued(queue, &item.id),
        })
        .collect();
    DispatcherReply {
        result: Some(Reply::Enqueue(EnqueueBatchResponse { results })),
    }
}

#[tokio::test]
async fn a_batch_is_split_by_shard_and_answered_in_request_order() {
    let (gateway, recorded) = cluster(2, answer_with(echo_with_missing)).await;
    let mut ingest = gateway.ingest().await;
    let mut items: Vec<EnqueueRequest> = (0..12)
        .map(|i| enqueue(&format!("q{i}"), &format!("id{i}")))
        .collect();
    items[5].queue = "bad name".into();
    items[9].queue = "missing".into();
    let results = ingest
        .enqueue_batch(EnqueueBatchRequest {
            items: items.clone(),
        })
        .await
        .expect("batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 12);
    for (i, result) in results.iter().enumerate() {
        match i {
            5 => {
                assert_eq!(result.code, 3);
                assert!(
                    result.message.starts_with("items[5].queue: "),
                    "{}",
                    result.message
                );
                assert_eq!(result.field, "items[5].queue");
            }
            9 => {
                assert_eq!(result.code, 5);
                assert!(
                    result.message.starts_with("queue 'missing' does not exist"),
                    "{}",
                    result.message
                );
                assert_eq!(result.field, "");
            }
            _ => {
                let ok = result.ok.as_ref().expect("enqueued");
                assert_eq!(
                    (ok.queue.clone(), ok.id.clone()),
                    (format!("q{i}"), format!("id{i}"))
                );
            }
        }
    }
    // One request per shard, each with exactly its items, in request order.
    let requests = recorded.all();
    assert_eq!(requests.len(), 2, "one bus request per shard");
    for (shard, request) in requests {
        let Some(Op::Enqueue(batch)) = request.op else {
            panic!("an enqueue")
        };
        let expected: Vec<String> = items
            .iter()
            .enumerate()
            .filter(|(i, item)| *i != 5 && owner(&item.queue) == shard)
            .map(|(_, item)| item.id.clone())
            .collect();
        let got: Vec<String> = batch.items.into_iter().map(|item| item.id).collect();
        assert_eq!(got, expected, "shard {shard}");
    }
}

#[tokio::test]
async fn completions_are_split_by_shard_and_answered_in_order() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut worker = gateway.worker().await;
    let completions: Vec<Completion> = (0..10)
        .map(|i| Completion {
            queue: format!("q{i}"),
            id: format!("e{i}"),
            lease_token: "00000000000000aa".into(),
            outcome: Some(Outcome::Ack(Ack {})),
        })
        .collect();
    let results = worker
        .complete(CompleteRequest {
            completions: completions.clone(),
        })
        .await
        .expect("complete")
        .into_inner()
        .results;
    assert_eq!(results.len(), 10);
    assert!(results.iter().all(|r| r.code == 0), "{results:?}");
    for (shard, request) in recorded.all() {
        let Some(Op::Complete(complete)) = request.op else {
            panic!("a complete")
        };
        assert!(
            complete
                .completions
                .iter()
                .all(|c| owner(&c.queue) == shard)
        );
    }
    let sent: usize = recorded
        .all()
        .into_iter()
        .map(|(_, r)| match r.op {
            Some(Op::Complete(c)) => c.completions.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(sent, 10);
}
