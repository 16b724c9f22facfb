//! Every shard publishes the stats of its queues on `cascade.<cluster>.stats.<shard>`: each
//! queue no template covers by name, the per-user queues of a template summed into its
//! family.

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
    let alice = cluster.queue_on(1, "inbox:alice-");
    let bob = cluster.queue_on(1, "inbox:bob-");
    for (user, n) in [(&alice, 3), (&bob, 4)] {
        for _ in 0..n {
            cluster.enqueue_now(user, b"u").await;
        }
    }
    let mut stats = cluster
        .bus
        .subscribe(&subject::all_stats(&cluster.settings.cluster.name))
        .await
        .expect("subscribe");
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let message = stats.next().await.expect("a message");
            let published: ShardStats = message.decode().expect("ShardStats");
            // A round collected before the last enqueue may still arrive: wait for the one
            // that has them all (a wrong sum never gets there and times out).
            let complete = published
                .families
                .iter()
                .any(|f| f.stats.as_ref().is_some_and(|s| s.enqueued_total == 7));
            if let Some(q) = published.queues.iter().find(|q| q.name == queue)
                && complete
            {
                assert_eq!(published.shard, 1);
                assert!(published.at.is_some());
                assert!(
                    published
                        .queues
                        .iter()
                        .all(|q| !q.name.starts_with("inbox:")),
                    "per-user queues are not listed: {:?}",
                    published.queues
                );
                let names: Vec<&str> = published
                    .families
                    .iter()
                    .filter_map(|f| f.stats.as_ref().map(|s| s.name.as_str()))
                    .collect();
                assert_eq!(names, ["inbox:*"]);
                return (q.clone(), published.families[0].clone());
            }
        }
    })
    .await
    .expect("the stats are published");
    let (found, inbox) = found;
    assert_eq!((found.ready, found.enqueued_total), (2, 2));
    assert!(found.oldest_ready_age.is_some());
    let sums = inbox.stats.expect("the family's stats");
    assert_eq!((inbox.queues, sums.ready, sums.enqueued_total), (2, 7, 7));
    cluster.stop().await;
}
