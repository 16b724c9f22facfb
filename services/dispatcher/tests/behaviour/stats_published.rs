//! Every shard publishes the stats of its queues on `cascade.<cluster>.stats.<shard>`,
//! with the names of its templates (which hold no events, so have no stats of their own).

use cascade_bus::subject;
use cascade_proto::bus::v1::ShardStats;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1;

use crate::cluster::{Cluster, PATIENCE};

#[tokio::test]
async fn stats_published() {
    let mut cluster = Cluster::start(2).await;
    let queue = cluster.queue_on(1, "counted-");
    cluster.create_queue(&queue, None).await;
    // A template is on every shard (the gateway sends it to each); here, to shard 1.
    let template = Op::CreateQueue(v1::CreateQueueRequest {
        name: "inbox:*".into(),
        config: None,
    });
    cluster.call_shard(1, template, PATIENCE).await;
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
                assert_eq!(published.templates, ["inbox:*"]);
                assert!(published.queues.iter().all(|q| !q.name.ends_with('*')));
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
