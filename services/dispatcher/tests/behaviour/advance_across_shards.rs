//! `advance` to a queue of another shard goes through the outbox and arrives exactly once,
//! also across a restart; an advance with a delay is scheduled by the receiving shard.

use std::time::{Duration, Instant};

use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1;

use crate::cluster::{Cluster, ack, payload_of};

fn advance(to: &str, payload: &[u8], delay: Option<Duration>) -> v1::completion::Outcome {
    v1::completion::Outcome::Advance(v1::Advance {
        to: to.into(),
        payload: Some(payload.to_vec().into()),
        headers: [("stage".to_owned(), "2".to_owned())].into(),
        delay: delay.map(duration_to_proto),
    })
}

#[tokio::test]
async fn advance_across_shards() {
    let mut cluster = Cluster::start(2).await;
    let first = cluster.queue_on(0, "validate-");
    let second = cluster.queue_on(1, "ship-");
    cluster.create_queue(&first, None).await;
    cluster.create_queue(&second, None).await;

    let id = cluster.enqueue_now(&first, b"order").await;
    let taken = cluster.take(&first, 1, Duration::ZERO).await;
    let result = cluster
        .complete(&taken[0], advance(&second, b"validated", None))
        .await;
    assert_eq!(result.code, 0, "{}", result.message);

    let arrived = cluster.take(&second, 10, Duration::from_secs(5)).await;
    assert_eq!(arrived.len(), 1);
    let event = arrived[0].event.as_ref().expect("event");
    assert_eq!(event.id, id, "an advance keeps the event's id");
    assert_eq!(payload_of(&arrived[0]), b"validated");
    assert_eq!(event.headers.get("stage").map(String::as_str), Some("2"));
    assert_eq!(event.attempts, 1, "attempts start again at the next stage");
    assert_eq!(cluster.complete(&arrived[0], ack()).await.code, 0);

    // Restarted, the sender's outbox is empty: nothing arrives twice.
    cluster.restart().await;
    assert!(
        cluster
            .take(&second, 10, Duration::from_millis(400))
            .await
            .is_empty()
    );
    let stats = cluster.stats(&second).await;
    assert_eq!((stats.enqueued_total, stats.completed_total), (1, 1));
    assert_eq!(cluster.stats(&first).await.completed_total, 1);

    // With a delay, the receiving shard holds it until its time.
    let delay = Duration::from_millis(300);
    cluster.enqueue_now(&first, b"later").await;
    let taken = cluster.take(&first, 1, Duration::ZERO).await;
    let advanced_at = Instant::now();
    assert_eq!(
        cluster
            .complete(&taken[0], advance(&second, b"late", Some(delay)))
            .await
            .code,
        0
    );
    let arrived = cluster.take(&second, 1, Duration::from_secs(5)).await;
    let waited = advanced_at.elapsed();
    assert_eq!(arrived.len(), 1);
    assert_eq!(payload_of(&arrived[0]), b"late");
    assert!(
        waited >= delay,
        "arrived after {waited:?}, before its delay"
    );
    cluster.stop().await;
}
