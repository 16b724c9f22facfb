//! Every shard publishes the stats of its queues on `cascade.<cluster>.stats.<shard>`.

use cascade_bus::subject;
use cascade_proto::bus::v1::ShardStats;

use crate::cluster::{Cluster, PATIENCE};

#[tokio::test]
async fn stats_published() {
    let mut cluster = Cluster::start(2).await;
    let queue = cluster.queue_on(1, "counted-");
    cluster.create_queue(&queue, None).await;
    cluster.enqueue_now(&queue, b"a").await;
    cluster.enqueue_now(&queue, b"b").await;
    let mut stats = cluster
        .bus
        .subscribe(&subject::all_stats(&cluster.settings.cluster.name))
        .await
        .expect("subscribe");
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let message = stats.next().await.expect("a message");
            let published: ShardStats = message.decode().expect("ShardStats");
            if let Some(q) = published.queues.iter().find(|q| q.name == queue) {
                assert_eq!(published.shard, 1);
                assert!(published.at.is_some());
                return q.clone();
            }
        }
    })
    .await
    .expect("the stats are published");
    assert_eq!((found.ready, found.enqueued_total), (2, 2));
    assert!(found.oldest_ready_age.is_some());
    cluster.stop().await;
}
