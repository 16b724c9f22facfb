//! The stats the dispatcher shards publish, kept as the latest sample per stage queue. A
//! shard with more queues than one message carries splits a round over several messages,
//! so samples are kept per queue, not per shard; queues that are not managed stages are
//! not kept at all.
//!
//! Each sample is taken at the shard's `at`, so rates come from the shard's clock, not from
//! when the message happened to arrive. It is also stamped with when it arrived, by the
//! manager's clock: staleness is judged by that, since a shard's clock may be off from the
//! manager's by more than the few intervals staleness allows. Due buckets stay empty here:
//! the dispatcher has no index of delayed events by due time, so the service loop asks the
//! timer shards for them each round (`due.rs`) and adds them to the sample it records.
//!
//! Failure policy: a message that cannot be decoded or has no time is dropped and logged;
//! a queue entry that cannot be read is skipped and logged. Neither stops the loop.

use std::collections::BTreeMap;

use cascade_bus::Message;
use cascade_core::{QueueName, Timestamp};
use cascade_proto::bus::v1::ShardStats;
use cascade_proto::convert::{queue_stats_from_proto, timestamp_from_proto};

use crate::StageStats;

#[derive(Debug, Default)]
pub(crate) struct Inbox {
    latest: BTreeMap<QueueName, StageStats>,
}

impl Inbox {
    /// Reads one `ShardStats` message, received `now` by the manager's clock, keeping the
    /// queues for which `managed` says yes.
    pub(crate) fn receive(
        &mut self,
        message: &Message,
        now: Timestamp,
        managed: impl Fn(&QueueName) -> bool,
    ) {
        let stats: ShardStats = match message.decode() {
            Ok(stats) => stats,
            Err(e) => {
                tracing::warn!(subject = %message.subject, error = %e, "resource_manager.stats.undecodable");
                return;
            }
        };
        let at = match stats.at.as_ref().map(|at| timestamp_from_proto(at, "at")) {
            Some(Ok(at)) => at,
            Some(Err(e)) => {
                tracing::warn!(shard = stats.shard, error = %e, "resource_manager.stats.bad_time");
                return;
            }
            None => {
                tracing::warn!(shard = stats.shard, "resource_manager.stats.no_time");
                return;
            }
        };
        for (index, queue) in stats.queues.iter().enumerate() {
            let (name, counts) = match queue_stats_from_proto(queue, &format!("queues[{index}]")) {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(shard = stats.shard, error = %e, "resource_manager.stats.bad_queue");
                    continue;
                }
            };
            if !managed(&name) {
                continue;
            }
            // A late message must not replace a newer sample.
            if self.latest.get(&name).is_some_and(|kept| kept.at >= at) {
                continue;
            }
            let sample = StageStats {
                stage: name.clone(),
                at,
                received: now,
                ready: counts.ready,
                leased: counts.leased,
                due: Vec::new(),
                enqueued_total: counts.enqueued_total,
                completed_total: counts.completed_total,
                oldest_ready_age: counts.oldest_ready_age,
                expired_leases_total: counts.expired_leases_total,
            };
            self.latest.insert(name, sample);
        }
    }

    pub(crate) fn latest(&self, stage: &QueueName) -> Option<&StageStats> {
        self.latest.get(stage)
    }

    /// Forgets the queues for which `keep` says no (stages no longer managed).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&QueueName) -> bool) {
        self.latest.retain(|stage, _| keep(stage));
    }
}
