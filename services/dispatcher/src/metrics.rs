//! The dispatcher's metrics (docs/metrics.md), all labelled by queue family:
//! - the store's events, through `ShardObserver` on the writer thread:
//!   `cascade_enqueue_total`, `cascade_dead_letter_total`, `cascade_lease_expired_total`,
//!   `cascade_activation_lateness_seconds`. The counters of a family are looked up once and
//!   kept, so that an event costs one map lookup and an atomic increment;
//! - `cascade_queue_depth{queue, state, shard}`, set from each stats round: the queues'
//!   counts summed per family, and a family gone from the shard dropped.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use cascade_core::{Clock, SystemClock, Timestamp};
use cascade_proto::bus::v1::FamilyStats;
use cascade_proto::v1;
use cascade_store::{DeadLetterCause, MoveStep, ShardObserver};
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::{
    Counter, DeadLetterReason, EnqueueResult, FailedMove, Histogram, QueueState,
};

/// Reports one shard's store events to the process's metrics.
pub(crate) struct ShardMetrics {
    metrics: Metrics,
    lateness: Histogram,
    /// Families seen so far; bounded as the families are (templates and created queues).
    families: Mutex<HashMap<String, FamilyCounters>>,
}

struct FamilyCounters {
    enqueued: Counter,
    duplicates: Counter,
    max_attempts: Counter,
    requested: Counter,
    refused: Counter,
    lease_expired: Counter,
    dead_letter_failed: Counter,
    hand_off_failed: Counter,
}

impl ShardMetrics {
    pub fn new(metrics: &Metrics) -> ShardMetrics {
        ShardMetrics {
            lateness: metrics.activation_lateness_seconds(),
            metrics: metrics.clone(),
            families: Mutex::new(HashMap::new()),
        }
    }

    fn with_family(&self, family: &str, count: impl FnOnce(&FamilyCounters)) {
        // A panic elsewhere cannot leave the map half-updated: entries are inserted whole.
        let mut families = self
            .families
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(counters) = families.get(family) {
            count(counters);
            return;
        }
        let m = &self.metrics;
        let counters = FamilyCounters {
            enqueued: m.enqueue_total(family, EnqueueResult::Ok),
            duplicates: m.enqueue_total(family, EnqueueResult::Duplicate),
            max_attempts: m.dead_letter_total(family, DeadLetterReason::MaxAttempts),
            requested: m.dead_letter_total(family, DeadLetterReason::Requested),
            refused: m.dead_letter_total(family, DeadLetterReason::Refused),
            lease_expired: m.lease_expired_total(family),
            dead_letter_failed: m.move_failed_total(family, FailedMove::DeadLetter),
            hand_off_failed: m.move_failed_total(family, FailedMove::HandOff),
        };
        count(&counters);
        families.insert(family.to_owned(), counters);
    }
}

impl ShardObserver for ShardMetrics {
    fn enqueued(&self, family: &str, duplicate: bool) {
        self.with_family(family, |c| {
            if duplicate {
                c.duplicates.inc();
            } else {
                c.enqueued.inc();
            }
        });
    }

    fn dead_lettered(&self, family: &str, cause: DeadLetterCause) {
        self.with_family(family, |c| {
            let counter = match cause {
                DeadLetterCause::MaxAttempts => &c.max_attempts,
                DeadLetterCause::Requested => &c.requested,
                DeadLetterCause::Refused => &c.refused,
            };
            counter.inc();
        });
    }

    fn move_failed(&self, family: &str, step: MoveStep) {
        self.with_family(family, |c| {
            let counter = match step {
                MoveStep::DeadLetter => &c.dead_letter_failed,
                MoveStep::HandOff => &c.hand_off_failed,
            };
            counter.inc();
        });
    }

    fn lease_expired(&self, family: &str) {
        self.with_family(family, |c| {
            c.lease_expired.inc();
        });
    }

    fn activated(&self, activate_at: Timestamp) {
        let late = SystemClock.now().duration_since(activate_at);
        self.lateness.observe(late.as_secs_f64());
    }
}

/// `cascade_queue_depth` of one shard, from its stats rounds.
pub(crate) struct Depth {
    shard: u32,
    metrics: Metrics,
    /// The families set in the last round.
    families: HashSet<String>,
}

impl Depth {
    pub fn new(shard: u32, metrics: &Metrics) -> Depth {
        Depth {
            shard,
            metrics: metrics.clone(),
            families: HashSet::new(),
        }
    }

    /// Sets every family's depth from one round: a queue no template covers is a family of
    /// its own, the rest come summed per template. Drops the series of the families gone.
    pub fn update(&mut self, queues: &[v1::QueueStats], families: &[FamilyStats]) {
        let all = queues
            .iter()
            .chain(families.iter().filter_map(|f| f.stats.as_ref()));
        let mut seen = HashSet::new();
        for stats in all {
            let set = |state, depth| {
                self.metrics
                    .set_queue_depth(&stats.name, self.shard, state, depth)
            };
            set(QueueState::Delayed, stats.delayed);
            set(QueueState::Ready, stats.ready);
            set(QueueState::Leased, stats.leased);
            seen.insert(stats.name.clone());
        }
        for gone in self.families.iter().filter(|f| !seen.contains(*f)) {
            self.metrics.forget_queue_depth(gone, self.shard);
        }
        self.families = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(name: &str, delayed: u64, ready: u64, leased: u64) -> v1::QueueStats {
        v1::QueueStats {
            name: name.into(),
            delayed,
            ready,
            leased,
            ..Default::default()
        }
    }

    #[test]
    fn depth_per_queue_and_family_and_gone_families_forgotten() {
        let metrics = Metrics::new();
        let mut depth = Depth::new(1, &metrics);
        let inbox = FamilyStats {
            stats: Some(stats("inbox:*", 11, 22, 33)),
            queues: 2,
        };
        depth.update(&[stats("orders.validate", 0, 5, 0)], &[inbox]);
        let text = metrics.render();
        for sample in [
            r#"cascade_queue_depth{queue="inbox:*",state="delayed",shard="1"} 11"#,
            r#"cascade_queue_depth{queue="inbox:*",state="ready",shard="1"} 22"#,
            r#"cascade_queue_depth{queue="inbox:*",state="leased",shard="1"} 33"#,
            r#"cascade_queue_depth{queue="orders.validate",state="ready",shard="1"} 5"#,
        ] {
            assert!(
                text.contains(sample),
                "{sample}
{text}"
            );
        }
        depth.update(&[stats("orders.validate", 0, 1, 0)], &[]);
        let text = metrics.render();
        assert!(!text.contains(r#"queue="inbox:*""#), "forgotten\n{text}");
    }

    #[test]
    fn store_events_count_per_family() {
        let metrics = Metrics::new();
        let observer = ShardMetrics::new(&metrics);
        observer.enqueued("inbox:*", false);
        observer.enqueued("inbox:*", false);
        observer.enqueued("inbox:*", true);
        observer.dead_lettered("inbox:*", DeadLetterCause::Requested);
        observer.lease_expired("inbox:*");
        observer.activated(SystemClock.now());
        let text = metrics.render();
        for sample in [
            r#"cascade_enqueue_total{queue="inbox:*",result="ok"} 2"#,
            r#"cascade_enqueue_total{queue="inbox:*",result="duplicate"} 1"#,
            r#"cascade_dead_letter_total{queue="inbox:*",reason="requested"} 1"#,
            r#"cascade_dead_letter_total{queue="inbox:*",reason="max_attempts"} 0"#,
            r#"cascade_lease_expired_total{queue="inbox:*"} 1"#,
            "cascade_activation_lateness_seconds_count 1",
        ] {
            assert!(text.contains(sample), "{sample}\n{text}");
        }
    }
}
