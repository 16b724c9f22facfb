//! The delayed events coming due within `target_drain`, per stage: the decision staffs a
//! stage ahead of a known wave. The dispatcher keeps no index of delayed events by time;
//! the activation timer does (its schedule is ordered by time), so each round asks every
//! timer shard at once (`due_counts` on `cascade.<cluster>.timer.<shard>`) for the counts of
//! the managed stages in eight buckets up to `now + target_drain`; the timer reads a bounded
//! number of entries.
//!
//! Failure policy: a shard that does not answer (or answers badly) within the deadline
//! counts nothing due for its queues this round; that is logged at debug, since a stopped
//! timer shard is already reported by its own process.

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_bus::{Bus, subject};
use cascade_core::{QueueName, Timestamp};
use cascade_proto::bus::v1::{
    DueCounts, DueCountsRequest, TimerReply, TimerRequest, timer_reply, timer_request,
};
use cascade_proto::convert::{timestamp_from_proto, timestamp_to_proto};
use tokio::task::JoinSet;

use crate::DueBucket;

/// Buckets up to `target_drain`: the wave's shape within it, not only its size.
const BUCKETS: u32 = 8;
/// The longest wait for one timer shard's answer.
const DEADLINE: Duration = Duration::from_secs(1);

/// Asks the `shards` timer shards of `cluster`, all at once, about `stages`; returns the
/// buckets of every stage with delayed events due by `now + horizon`.
pub(crate) async fn ask(
    bus: &Bus,
    cluster: &str,
    shards: u32,
    stages: &[&QueueName],
    now: Timestamp,
    horizon: Duration,
) -> BTreeMap<QueueName, Vec<DueBucket>> {
    let mut due = BTreeMap::new();
    if stages.is_empty() {
        return due;
    }
    let bounds: Vec<_> = (1..=BUCKETS)
        .map(|k| timestamp_to_proto(now.saturating_add(horizon * k / BUCKETS)))
        .collect();
    let request = TimerRequest {
        op: Some(timer_request::Op::DueCounts(DueCountsRequest {
            bounds,
            queues: stages.iter().map(|stage| stage.to_string()).collect(),
        })),
    };
    let mut asking = JoinSet::new();
    for shard in 0..shards {
        let (bus, request) = (bus.clone(), request.clone());
        let subject = subject::timer(cluster, shard);
        asking.spawn(async move {
            let reply = bus
                .call_as::<_, TimerReply>("due_counts", &subject, request, DEADLINE)
                .await;
            (shard, reply)
        });
    }
    while let Some(answered) = asking.join_next().await {
        let Ok((shard, reply)) = answered else {
            continue;
        };
        match reply.map(|reply| reply.result) {
            Ok(Some(timer_reply::Result::DueCounts(counts))) => read(shard, counts, &mut due),
            Ok(other) => {
                tracing::debug!(shard, reply = ?other, "resource_manager.due_counts.reply")
            }
            Err(e) => tracing::debug!(shard, error = %e, "resource_manager.due_counts"),
        }
    }
    due
}

fn read(shard: u32, counts: DueCounts, due: &mut BTreeMap<QueueName, Vec<DueBucket>>) {
    for queue in counts.queues {
        let Ok(name) = QueueName::parse(&queue.queue) else {
            tracing::warn!(shard, queue = %queue.queue, "resource_manager.due_counts.bad_queue");
            continue;
        };
        let buckets = queue
            .buckets
            .iter()
            .filter_map(|bucket| {
                let until = timestamp_from_proto(bucket.until.as_ref()?, "until").ok()?;
                Some(DueBucket {
                    until,
                    count: bucket.count,
                })
            })
            .collect();
        due.insert(name, buckets);
    }
}
