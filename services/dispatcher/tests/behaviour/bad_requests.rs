//! Bad requests change nothing and get the right status: INVALID_ARGUMENT naming the
//! field (per item in a batch), NOT_FOUND saying how to create the queue, and
//! FAILED_PRECONDITION for a queue routed to the wrong shard.

use std::time::Duration;

use cascade_proto::bus::v1::dispatcher_reply::Result as Answer;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1;

use crate::cluster::{Cluster, PATIENCE, enqueue_request};

#[tokio::test]
async fn bad_requests() {
    let mut cluster = Cluster::start(2).await;
    let jobs = cluster.queue_on(0, "jobs-");
    cluster.create_queue(&jobs, None).await;

    let batch = Op::Enqueue(v1::EnqueueBatchRequest {
        items: vec![
            enqueue_request(&jobs, b"fine"),
            enqueue_request("bad name", b"x"),
            v1::EnqueueRequest {
                id: "a/b".into(),
                ..enqueue_request(&jobs, b"x")
            },
        ],
    });
    let Answer::Enqueue(response) = cluster.call(&jobs, batch).await else {
        panic!("an enqueue answer");
    };
    let codes: Vec<i32> = response.results.iter().map(|r| r.code).collect();
    assert_eq!(codes, [0, 3, 3]);
    // Each failure names its field from the item; the gateway places it in its client's
    // request.
    assert!(
        response.results[1].message.starts_with("queue: "),
        "{}",
        response.results[1].message
    );
    assert!(
        response.results[2].message.starts_with("id: "),
        "{}",
        response.results[2].message
    );
    let fields: Vec<&str> = response.results.iter().map(|r| r.field.as_str()).collect();
    assert_eq!(fields, ["", "queue", "id"]);
    assert_eq!(
        cluster.stats(&jobs).await.ready,
        1,
        "only the valid item was enqueued"
    );

    let missing = cluster.queue_on(0, "missing-");
    let result = cluster.enqueue(enqueue_request(&missing, b"x")).await;
    assert_eq!(result.code, 5, "{}", result.message);
    assert!(result.message.contains("CreateQueue"), "{}", result.message);

    // The queue lives on shard 0; shard 1 refuses it.
    let take = Op::Take(v1::TakeRequest {
        queue: jobs.clone(),
        max_events: 1,
        ..v1::TakeRequest::default()
    });
    let Answer::Error(status) = cluster.call_shard(1, take, PATIENCE).await else {
        panic!("the wrong shard refuses");
    };
    assert_eq!(status.code, 9, "{}", status.message);
    assert!(
        status.message.contains("belongs to shard 0"),
        "{}",
        status.message
    );

    let negative_wait = Op::Take(v1::TakeRequest {
        queue: jobs.clone(),
        wait: Some(prost_types::Duration {
            seconds: -1,
            nanos: 0,
        }),
        ..v1::TakeRequest::default()
    });
    let Answer::Error(status) = cluster.call(&jobs, negative_wait).await else {
        panic!("a negative wait is refused");
    };
    assert_eq!(status.code, 3);
    assert!(
        status.message.starts_with("wait: must not be negative"),
        "{}",
        status.message
    );

    let subject = cascade_bus::subject::dispatcher(&cluster.settings.cluster.name, 0);
    let garbage = cluster
        .bus
        .request(
            &subject,
            bytes::Bytes::from_static(b"\xff\xff\xff"),
            Duration::from_secs(5),
        )
        .await
        .expect("an answer");
    let reply = <cascade_proto::bus::v1::DispatcherReply as prost::Message>::decode(garbage)
        .expect("a reply");
    let Some(Answer::Error(status)) = reply.result else {
        panic!("garbage is refused");
    };
    assert_eq!(status.code, 3, "{}", status.message);
    assert_eq!(cluster.stats(&jobs).await.ready, 1, "nothing changed");
    cluster.stop().await;
}
