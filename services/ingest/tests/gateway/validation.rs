//! Bad input never reaches a shard: every RPC refuses it with the right code and a message
//! that names the field, and the fake shards record nothing.

use std::collections::HashMap;

use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::completion::Outcome;
use cascade_proto::v1::enqueue_request::When;
use cascade_proto::v1::{
    Ack, Advance, CompleteRequest, Completion, CreateQueueRequest, DeleteRequest,
    EnqueueBatchRequest, EnqueueRequest, ExtendLeaseRequest, GetRequest, ListQueuesRequest,
    PurgeQueueRequest, QueueConfig, QueueStatsRequest, RedriveRequest, TakeRequest, UpdateRequest,
};
use tonic::Code;

use crate::harness::{answer_with, cluster, echo};

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(
    result: Result<tonic::Response<T>, tonic::Status>,
    code: Code,
    starts_with: &str,
) {
    let status = result.expect_err(starts_with);
    assert_eq!(status.code(), code, "{}", status.message());
    assert!(
        status.message().starts_with(starts_with),
        "expected a message starting with {starts_with:?}, got {:?}",
        status.message()
    );
}

fn enqueue(queue: &str) -> EnqueueRequest {
    EnqueueRequest {
        queue: queue.to_owned(),
        payload: b"p".to_vec().into(),
        ..EnqueueRequest::default()
    }
}

#[tokio::test]
async fn bad_enqueues_name_the_field_and_reach_no_shard() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut ingest = gateway.ingest().await;
    let invalid = Code::InvalidArgument;

    assert_refused(ingest.enqueue(enqueue("")).await, invalid, "queue: ");
    assert_refused(
        ingest.enqueue(enqueue("a b")).await,
        invalid,
        "queue: must be 1-200 bytes",
    );
    assert_refused(ingest.enqueue(enqueue("a>b")).await, invalid, "queue: ");
    assert_refused(
        ingest.enqueue(enqueue("inbox:*")).await,
        invalid,
        "queue: 'inbox:*' is a template",
    );
    let bad_id = EnqueueRequest {
        id: "a/b".into(),
        ..enqueue("jobs")
    };
    assert_refused(
        ingest.enqueue(bad_id).await,
        invalid,
        "id: must be 1-128 bytes",
    );
    let bad_key = EnqueueRequest {
        idempotency_key: "a\tb".into(),
        ..enqueue("jobs")
    };
    assert_refused(ingest.enqueue(bad_key).await, invalid, "idempotency_key: ");
    let bad_header = EnqueueRequest {
        headers: HashMap::from([("bad name".to_owned(), "v".to_owned())]),
        ..enqueue("jobs")
    };
    assert_refused(ingest.enqueue(bad_header).await, invalid, "headers: ");
    let negative = EnqueueRequest {
        when: Some(When::Delay(prost_types::Duration {
            seconds: -1,
            nanos: 0,
        })),
        ..enqueue("jobs")
    };
    assert_refused(ingest.enqueue(negative).await, invalid, "delay: ");
    let both = EnqueueRequest {
        pipeline: "orders".into(),
        ..enqueue("jobs")
    };
    assert_refused(
        ingest.enqueue(both).await,
        invalid,
        "pipeline: set either queue or pipeline",
    );
    let pipeline = EnqueueRequest {
        pipeline: "orders.validate".into(),
        ..enqueue("")
    };
    assert_refused(
        ingest.enqueue(pipeline).await,
        invalid,
        "pipeline: must be 1-100 bytes of [A-Za-z0-9_-]",
    );

    let big = EnqueueRequest {
        payload: vec![7; 2000].into(),
        ..enqueue("jobs")
    };
    let status = ingest.enqueue(big).await.expect_err("too large");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(
        status.message(),
        "payload: 2000 bytes is over the limit of 1024 bytes (ingest.max_payload)"
    );
    assert_eq!(recorded.len(), 0, "nothing reaches a shard");
}

#[tokio::test]
async fn bad_batch_items_fail_alone_and_oversize_batches_fail_whole() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut ingest = gateway.ingest().await;

    let too_many = EnqueueBatchRequest {
        items: (0..51).map(|_| enqueue("jobs")).collect(),
    };
    assert_refused(
        ingest.enqueue_batch(too_many).await,
        Code::InvalidArgument,
        "items: at most 50 per request (ingest.max_batch_items), got 51",
    );

    let items = vec![
        enqueue("a b"),
        EnqueueRequest {
            id: "a/b".into(),
            ..enqueue("jobs")
        },
        enqueue(""),
        EnqueueRequest {
            payload: vec![0; 1025].into(),
            ..enqueue("jobs")
        },
    ];
    let results = ingest
        .enqueue_batch(EnqueueBatchRequest { items })
        .await
        .expect("a batch answers per item")
        .into_inner()
        .results;
    let seen: Vec<(i32, &str)> = results
        .iter()
        .map(|r| (r.code, r.message.split(':').next().unwrap_or_default()))
        .collect();
    assert_eq!(
        seen,
        [
            (3, "items[0].queue"),
            (3, "items[1].id"),
            (3, "items[2].queue"),
            (8, "items[3].payload")
        ]
    );
    assert!(results.iter().all(|r| r.ok.is_none()));
    assert_eq!(recorded.len(), 0, "nothing reaches a shard");
}

#[tokio::test]
async fn bad_worker_requests_name_the_field_and_reach_no_shard() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut worker = gateway.worker().await;
    let invalid = Code::InvalidArgument;

    let take = |queue: &str| TakeRequest {
        queue: queue.into(),
        ..TakeRequest::default()
    };
    assert_refused(worker.take(take("")).await, invalid, "queue: ");
    assert_refused(
        worker
            .take(TakeRequest {
                max_events: 20_000,
                ..take("jobs")
            })
            .await,
        invalid,
        "max_events: must be at most 10000",
    );
    let short_lease = TakeRequest {
        lease: Some(prost_types::Duration {
            seconds: 0,
            nanos: 1_000_000,
        }),
        ..take("jobs")
    };
    assert_refused(worker.take(short_lease).await, invalid, "lease: ");

    let completion = |token: &str, outcome| Completion {
        queue: "jobs".into(),
        id: "e1".into(),
        lease_token: token.into(),
        outcome,
    };
    let good_token = "00000000000000ff";
    let completions = vec![
        completion("zz", Some(Outcome::Ack(Ack {}))),
        completion(good_token, None),
        completion(
            good_token,
            Some(Outcome::Advance(Advance {
                payload: Some(vec![0; 2000].into()),
                ..Advance::default()
            })),
        ),
        Completion {
            queue: "inbox:*".into(),
            ..completion(good_token, Some(Outcome::Ack(Ack {})))
        },
    ];
    let results = worker
        .complete(CompleteRequest { completions })
        .await
        .expect("a complete answers per item")
        .into_inner()
        .results;
    let seen: Vec<(i32, &str)> = results
        .iter()
        .map(|r| (r.code, r.message.split(':').next().unwrap_or_default()))
        .collect();
    assert_eq!(
        seen,
        [
            (3, "completions[0].lease_token"),
            (3, "completions[1].outcome"),
            (8, "completions[2].advance.payload"),
            (3, "completions[3].queue"),
        ]
    );
    let too_many = CompleteRequest {
        completions: (0..51).map(|_| completion(good_token, None)).collect(),
    };
    assert_refused(
        worker.complete(too_many).await,
        invalid,
        "completions: at most 50",
    );

    let extend = ExtendLeaseRequest {
        queue: "jobs".into(),
        id: "e1".into(),
        lease_token: "not-a-token".into(),
        extend_by: None,
    };
    assert_refused(worker.extend_lease(extend).await, invalid, "lease_token: ");
    assert_eq!(recorded.len(), 0, "nothing reaches a shard");
}

#[tokio::test]
async fn bad_lookups_and_admin_requests_reach_no_shard() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut ingest = gateway.ingest().await;
    let mut admin = gateway.admin().await;
    let invalid = Code::InvalidArgument;

    let get = GetRequest {
        queue: "jobs".into(),
        id: String::new(),
    };
    assert_refused(ingest.get(get).await, invalid, "id: ");
    let delete = DeleteRequest {
        queue: "a b".into(),
        id: "e1".into(),
    };
    assert_refused(ingest.delete(delete).await, invalid, "queue: ");
    let update = UpdateRequest {
        queue: "jobs".into(),
        id: "e1".into(),
        payload: Some(vec![0; 5000].into()),
        ..UpdateRequest::default()
    };
    assert_refused(
        ingest.update(update).await,
        Code::ResourceExhausted,
        "payload: 5000 bytes",
    );

    let create = CreateQueueRequest {
        name: "jobs".into(),
        config: Some(QueueConfig {
            lease: Some(prost_types::Duration {
                seconds: 0,
                nanos: 50_000_000,
            }),
            ..QueueConfig::default()
        }),
    };
    assert_refused(
        admin.create_queue(create).await,
        invalid,
        "config.lease: must be between 100ms and 24h",
    );
    let nameless = CreateQueueRequest {
        name: String::new(),
        config: None,
    };
    assert_refused(admin.create_queue(nameless).await, invalid, "name: ");
    let list = ListQueuesRequest {
        prefix: "a b".into(),
        ..ListQueuesRequest::default()
    };
    assert_refused(admin.list_queues(list).await, invalid, "prefix: ");
    let purge = PurgeQueueRequest {
        name: "inbox:*".into(),
    };
    assert_refused(
        admin.purge_queue(purge).await,
        invalid,
        "name: 'inbox:*' is a template",
    );
    let stats = QueueStatsRequest {
        name: String::new(),
    };
    assert_refused(admin.queue_stats(stats).await, invalid, "name: ");
    let redrive = RedriveRequest {
        queue: "jobs.dlq".into(),
        ids: vec![],
        all: false,
    };
    assert_refused(admin.redrive(redrive).await, invalid, "ids: ");
    let redrive = RedriveRequest {
        queue: "jobs.dlq".into(),
        ids: vec!["a/b".into()],
        all: false,
    };
    assert_refused(admin.redrive(redrive).await, invalid, "ids[0]: ");
    assert_eq!(recorded.len(), 0, "nothing reaches a shard");
}

/// A producer's `traceparent` (the call's metadata) is copied into an item's headers where
/// they have room. An item with as many headers as an event may hold is taken as it came,
/// not refused for a 65th header its producer never sent.
#[tokio::test]
async fn a_producers_trace_goes_into_headers_only_where_they_have_room() {
    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (gateway, recorded) = cluster(1, answer_with(echo)).await;
    let mut ingest = gateway.ingest().await;
    let item = |id: &str, headers: usize| EnqueueRequest {
        id: id.into(),
        headers: (0..headers)
            .map(|i| (format!("h{i}"), "v".into()))
            .collect(),
        ..enqueue("jobs")
    };
    fn traced<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        let value = TRACEPARENT.parse().expect("ascii");
        request.metadata_mut().insert("traceparent", value);
        request
    }

    ingest
        .enqueue(traced(item("full", 64)))
        .await
        .expect("an item whose headers are full is taken as it came");
    ingest
        .enqueue(traced(item("room", 63)))
        .await
        .expect("an item with room for the trace is taken");
    let batch = EnqueueBatchRequest {
        items: vec![item("full-in-batch", 64)],
    };
    let results = ingest
        .enqueue_batch(traced(batch))
        .await
        .expect("a batch is taken")
        .into_inner()
        .results;
    assert_eq!(results[0].code, 0, "{:?}", results[0]);

    let headers: HashMap<String, HashMap<String, String>> = recorded
        .all()
        .into_iter()
        .filter_map(|(_, request)| match request.op {
            Some(Op::Enqueue(batch)) => Some(batch.items),
            _ => None,
        })
        .flatten()
        .map(|item| (item.id, item.headers))
        .collect();
    for full in ["full", "full-in-batch"] {
        assert_eq!(headers[full].len(), 64, "{full}");
        assert!(!headers[full].contains_key("traceparent"), "{full}");
    }
    assert_eq!(headers["room"].len(), 64);
    assert_eq!(headers["room"]["traceparent"], TRACEPARENT);
}
