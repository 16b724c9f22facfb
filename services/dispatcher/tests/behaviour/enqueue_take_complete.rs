//! An event enqueued is taken under a lease, acknowledged, and gone; stats follow.

use std::time::Duration;

use crate::cluster::{Cluster, ack, payload_of};

#[tokio::test]
async fn enqueue_take_complete() {
    let mut cluster = Cluster::start(1).await;
    cluster.create_queue("jobs", None).await;
    let id = cluster.enqueue_now("jobs", b"hello").await;

    let taken = cluster.take("jobs", 10, Duration::ZERO).await;
    assert_eq!(taken.len(), 1);
    let event = taken[0].event.as_ref().expect("event");
    assert_eq!(
        (event.id.as_str(), payload_of(&taken[0])),
        (id.as_str(), &b"hello"[..])
    );
    assert_eq!(event.attempts, 1);
    assert_eq!(taken[0].lease_token.len(), 16);
    assert!(
        cluster.take("jobs", 10, Duration::ZERO).await.is_empty(),
        "leased events are not taken twice"
    );

    let result = cluster.complete(&taken[0], ack()).await;
    assert_eq!((result.code, result.message.as_str()), (0, ""));
    let stats = cluster.stats("jobs").await;
    assert_eq!(
        (
            stats.ready,
            stats.leased,
            stats.enqueued_total,
            stats.completed_total
        ),
        (0, 0, 1, 1)
    );
    assert!(cluster.take("jobs", 10, Duration::ZERO).await.is_empty());
    cluster.stop().await;
}
