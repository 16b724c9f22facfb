//! The dispatcher's metrics (docs/metrics.md), all labelled by queue family:
//! - the store's events, through `ShardObserver` on the writer thread:
//!   `cascade_enqueue_total`, `cascade_dead_letter_total`, `cascade_lease_expired_total`,
//!   `cascade_move_failed_total`, `cascade_activation_lateness_seconds`. The counters of a
//!   family are looked up once and kept, so that an event costs one map lookup and an
//!   atomic increment. Each family's largest lateness since the last stats round is kept
//!   too, for the round to publish (`take_lateness`);
//! - `cascade_queue_depth{queue, state, shard}`, set from each stats round: the queues'
//!   counts summed per label.
//!
//! A family's label comes from `Metrics::hold_queue` (its own name, or `(other)` beyond the
//! process's cap, until a labelled family goes and frees a place). A family missing from two
//! stats rounds in a row (its queues deleted, or emptied template instances) is let go: its
//! depth and counter series are dropped, so deleted queues leave no series behind. Two rounds, so that a queue created while a
//! round was being collected is not let go before the next round has seen it.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cascade_core::{Clock, SystemClock, Timestamp};
use cascade_proto::bus::v1::{FamilyLateness, FamilyStats};
use cascade_proto::v1;
use cascade_store::{DeadLetterCause, MoveStep, ShardObserver};
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::{
    Counter, DeadLetterReason, EnqueueResult, FailedMove, Histogram, OTHER_QUEUES, QueueState,
};

/// One shard's per-family series.
pub(crate) struct ShardMetrics {
    shard: u32,
    metrics: Metrics,
    lateness: Histogram,
    series: Mutex<Series>,
}

#[derive(Default)]
struct Series {
    /// Families held, by name.
    families: HashMap<String, Family>,
    /// Stats rounds so far.
    round: u64,
    /// The labels whose depth the last round set.
    depth_labels: HashSet<String>,
}

struct Family {
    label: String,
    /// The last round that saw the family (or the round under way when an event made it).
    seen: u64,
    counters: FamilyCounters,
    /// The largest activation lateness since the last `take_lateness`.
    late: Option<Duration>,
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

impl FamilyCounters {
    fn new(m: &Metrics, label: &str) -> FamilyCounters {
        FamilyCounters {
            enqueued: m.enqueue_total(label, EnqueueResult::Ok),
            duplicates: m.enqueue_total(label, EnqueueResult::Duplicate),
            max_attempts: m.dead_letter_total(label, DeadLetterReason::MaxAttempts),
            requested: m.dead_letter_total(label, DeadLetterReason::Requested),
            refused: m.dead_letter_total(label, DeadLetterReason::Refused),
            lease_expired: m.lease_expired_total(label),
            dead_letter_failed: m.move_failed_total(label, FailedMove::DeadLetter),
            hand_off_failed: m.move_failed_total(label, FailedMove::HandOff),
        }
    }
}

impl Series {
    /// The family `name`, held (and its counters made) on first sight.
    fn family(&mut self, metrics: &Metrics, name: &str) -> &mut Family {
        let round = self.round;
        self.families.entry(name.to_owned()).or_insert_with(|| {
            let label = metrics.hold_queue(name);
            Family {
                counters: FamilyCounters::new(metrics, &label),
                label,
                seen: round,
                late: None,
            }
        })
    }

    /// Gives families summed under `(other)` series of their own while there is room (a
    /// labelled family went), in name order so that which ones is predictable. Their
    /// counters start again from 0 under their own label; the depth follows next round.
    fn label_summed_apart(&mut self, metrics: &Metrics) {
        if !metrics.queue_series_room() {
            return;
        }
        let mut summed: Vec<&String> = self
            .families
            .iter()
            .filter(|(_, family)| family.label == OTHER_QUEUES)
            .map(|(name, _)| name)
            .collect();
        summed.sort();
        let mut apart = Vec::new();
        for name in summed {
            let label = metrics.hold_queue(name);
            if label == OTHER_QUEUES {
                break;
            }
            apart.push(label);
        }
        for label in apart {
            if let Some(family) = self.families.get_mut(&label) {
                family.counters = FamilyCounters::new(metrics, &label);
                family.label = label;
            }
        }
    }
}

impl ShardMetrics {
    pub fn new(shard: u32, metrics: &Metrics) -> ShardMetrics {
        ShardMetrics {
            shard,
            lateness: metrics.activation_lateness_seconds(),
            metrics: metrics.clone(),
            series: Mutex::new(Series::default()),
        }
    }

    fn series(&self) -> MutexGuard<'_, Series> {
        // Every change below is whole before the lock is let go: a panic elsewhere cannot
        // leave the map half-updated.
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every store event comes here, on the writer thread: a known family is looked up
    /// without copying its name.
    fn with_family(&self, family: &str, update: impl FnOnce(&mut Family)) {
        let mut series = self.series();
        if let Some(known) = series.families.get_mut(family) {
            update(known);
            return;
        }
        update(series.family(&self.metrics, family));
    }

    fn count(&self, family: &str, counter: impl FnOnce(&FamilyCounters) -> &Counter) {
        self.with_family(family, |f| {
            counter(&f.counters).inc();
        });
    }

    /// Each family's largest activation lateness since the last call, for families with
    /// activations.
    pub fn take_lateness(&self) -> Vec<FamilyLateness> {
        let mut series = self.series();
        series
            .families
            .iter_mut()
            .filter_map(|(name, family)| {
                let late = family.late.take()?;
                Some(FamilyLateness {
                    family: name.clone(),
                    max_micros: u64::try_from(late.as_micros()).unwrap_or(u64::MAX),
                })
            })
            .collect()
    }

    /// Sets every family's depth from one stats round (a queue no template covers is a
    /// family of its own, the rest come summed per template), and lets go of the families
    /// gone.
    pub fn update_depth(&self, queues: &[v1::QueueStats], families: &[FamilyStats]) {
        let mut series = self.series();
        series.round += 1;
        let round = series.round;
        let mut depths: HashMap<String, [u64; 3]> = HashMap::new();
        let all = queues
            .iter()
            .chain(families.iter().filter_map(|f| f.stats.as_ref()));
        for stats in all {
            let family = series.family(&self.metrics, &stats.name);
            family.seen = round;
            let sum = depths.entry(family.label.clone()).or_default();
            for (total, count) in sum
                .iter_mut()
                .zip([stats.delayed, stats.ready, stats.leased])
            {
                *total = total.saturating_add(count);
            }
        }
        for (label, sum) in &depths {
            let states = [QueueState::Delayed, QueueState::Ready, QueueState::Leased];
            for (state, depth) in states.into_iter().zip(*sum) {
                self.metrics
                    .set_queue_depth(label, self.shard, state, depth);
            }
        }
        for gone in series
            .depth_labels
            .iter()
            .filter(|l| !depths.contains_key(*l))
        {
            self.metrics.forget_queue_depth(gone, self.shard);
        }
        series.depth_labels = depths.into_keys().collect();
        let metrics = &self.metrics;
        series.families.retain(|_, family| {
            let kept = family.seen + 1 >= round;
            if !kept {
                metrics.release_queue(&family.label);
            }
            kept
        });
        series.label_summed_apart(metrics);
    }
}

impl ShardObserver for ShardMetrics {
    fn enqueued(&self, family: &str, duplicate: bool) {
        self.count(family, |c| {
            if duplicate {
                &c.duplicates
            } else {
                &c.enqueued
            }
        });
    }

    fn dead_lettered(&self, family: &str, cause: DeadLetterCause) {
        self.count(family, |c| match cause {
            DeadLetterCause::MaxAttempts => &c.max_attempts,
            DeadLetterCause::Requested => &c.requested,
            DeadLetterCause::Refused => &c.refused,
        });
    }

    fn move_failed(&self, family: &str, step: MoveStep) {
        self.count(family, |c| match step {
            MoveStep::DeadLetter => &c.dead_letter_failed,
            MoveStep::HandOff => &c.hand_off_failed,
        });
    }

    fn lease_expired(&self, family: &str) {
        self.count(family, |c| &c.lease_expired);
    }

    fn activated(&self, family: &str, activate_at: Timestamp) {
        let late = SystemClock.now().duration_since(activate_at);
        self.lateness.observe(late.as_secs_f64());
        self.with_family(family, |f| f.late = f.late.max(Some(late)));
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

    fn family(name: &str, delayed: u64, ready: u64, leased: u64) -> FamilyStats {
        FamilyStats {
            stats: Some(stats(name, delayed, ready, leased)),
            queues: 2,
        }
    }

    fn assert_has(text: &str, samples: &[&str]) {
        for sample in samples {
            assert!(text.contains(sample), "{sample}\n{text}");
        }
    }

    #[test]
    fn depth_per_queue_and_family() {
        let metrics = Metrics::new();
        let shard = ShardMetrics::new(1, &metrics);
        shard.update_depth(
            &[stats("orders.validate", 0, 5, 0)],
            &[family("inbox:*", 11, 22, 33)],
        );
        assert_has(
            &metrics.render(),
            &[
                r#"cascade_queue_depth{queue="inbox:*",state="delayed",shard="1"} 11"#,
                r#"cascade_queue_depth{queue="inbox:*",state="ready",shard="1"} 22"#,
                r#"cascade_queue_depth{queue="inbox:*",state="leased",shard="1"} 33"#,
                r#"cascade_queue_depth{queue="orders.validate",state="ready",shard="1"} 5"#,
            ],
        );
    }

    #[test]
    fn a_family_gone_for_two_rounds_leaves_no_series() {
        let metrics = Metrics::new();
        let shard = ShardMetrics::new(0, &metrics);
        let both = [stats("a", 0, 1, 0), stats("b", 0, 2, 0)];
        shard.update_depth(&both, &[]);
        shard.enqueued("b", false);
        shard.lease_expired("b");
        // One round without `b`: its depth goes, its counters wait a round more.
        shard.update_depth(&both[..1], &[]);
        let text = metrics.render();
        assert!(!text.contains(r#"cascade_queue_depth{queue="b""#), "{text}");
        assert!(text.contains(r#"cascade_enqueue_total{queue="b",result="ok"} 1"#));
        shard.update_depth(&both[..1], &[]);
        let text = metrics.render();
        assert!(!text.contains(r#"queue="b""#), "{text}");
        assert!(text.contains(r#"queue="a""#), "{text}");
        // Seen again, it starts over.
        shard.enqueued("b", false);
        shard.update_depth(&both, &[]);
        assert_has(
            &metrics.render(),
            &[r#"cascade_enqueue_total{queue="b",result="ok"} 1"#],
        );
    }

    #[test]
    fn each_round_takes_every_family_s_largest_lateness_once() {
        let metrics = Metrics::new();
        let shard = ShardMetrics::new(0, &metrics);
        let before = SystemClock.now();
        shard.activated("a", Timestamp::from_millis(5_000));
        shard.activated("a", Timestamp::from_millis(0));
        shard.activated("b", before);
        shard.enqueued("c", false);
        let mut taken = shard.take_lateness();
        taken.sort_by(|x, y| x.family.cmp(&y.family));
        let families: Vec<&str> = taken.iter().map(|l| l.family.as_str()).collect();
        assert_eq!(families, ["a", "b"], "c had no activation");
        assert!(taken[0].max_micros >= before.as_micros(), "{taken:?}");
        assert!(
            taken[1].max_micros < taken[0].max_micros - 4_000_000,
            "{taken:?}"
        );
        assert!(shard.take_lateness().is_empty(), "taken once");
        assert!(
            metrics
                .render()
                .contains("cascade_activation_lateness_seconds_count 3")
        );
    }

    #[test]
    fn an_event_of_a_family_made_during_a_round_is_kept_a_round() {
        let metrics = Metrics::new();
        let shard = ShardMetrics::new(0, &metrics);
        shard.update_depth(&[], &[]);
        // Created after the round was collected: the next round may not list it yet.
        shard.enqueued("fresh", false);
        shard.update_depth(&[], &[]);
        assert!(metrics.render().contains(r#"queue="fresh""#));
        shard.update_depth(&[], &[]);
        assert!(!metrics.render().contains(r#"queue="fresh""#));
    }

    #[test]
    fn families_beyond_the_cap_are_summed_under_other() {
        let metrics = Metrics::with_queue_series(2);
        let shard = ShardMetrics::new(3, &metrics);
        let queues = [
            stats("a", 0, 1, 0),
            stats("b", 0, 2, 0),
            stats("c", 1, 4, 0),
            stats("d", 0, 8, 1),
        ];
        shard.update_depth(&queues, &[]);
        shard.enqueued("c", false);
        shard.enqueued("d", false);
        let text = metrics.render();
        assert_has(
            &text,
            &[
                r#"cascade_queue_depth{queue="a",state="ready",shard="3"} 1"#,
                r#"cascade_queue_depth{queue="b",state="ready",shard="3"} 2"#,
                r#"cascade_queue_depth{queue="(other)",state="ready",shard="3"} 12"#,
                r#"cascade_queue_depth{queue="(other)",state="delayed",shard="3"} 1"#,
                r#"cascade_enqueue_total{queue="(other)",result="ok"} 2"#,
            ],
        );
        assert!(!text.contains(r#"queue="c""#), "{text}");
        // `a` deleted: after two rounds its place goes to the first summed family, `c`,
        // whose depth and counters are its own from the next round on.
        shard.update_depth(&queues[1..], &[]);
        shard.update_depth(&queues[1..], &[]);
        shard.enqueued("c", false);
        shard.update_depth(&queues[1..], &[]);
        let text = metrics.render();
        assert!(!text.contains(r#"queue="a""#), "{text}");
        assert_has(
            &text,
            &[
                r#"cascade_queue_depth{queue="c",state="ready",shard="3"} 4"#,
                r#"cascade_queue_depth{queue="(other)",state="ready",shard="3"} 8"#,
                r#"cascade_enqueue_total{queue="c",result="ok"} 1"#,
            ],
        );
        // No room left: a family met now is summed.
        let other = ShardMetrics::new(4, &metrics);
        other.update_depth(&[stats("e", 0, 16, 0)], &[]);
        assert_has(
            &metrics.render(),
            &[r#"cascade_queue_depth{queue="(other)",state="ready",shard="4"} 16"#],
        );
    }

    #[test]
    fn a_family_on_two_shards_keeps_its_counters_until_both_let_go() {
        let metrics = Metrics::new();
        let (zero, one) = (
            ShardMetrics::new(0, &metrics),
            ShardMetrics::new(1, &metrics),
        );
        let inbox = [family("inbox:*", 0, 1, 0)];
        zero.update_depth(&[], &inbox);
        one.update_depth(&[], &inbox);
        zero.enqueued("inbox:*", false);
        one.enqueued("inbox:*", false);
        for _ in 0..2 {
            zero.update_depth(&[], &[]);
        }
        assert_has(
            &metrics.render(),
            &[r#"cascade_enqueue_total{queue="inbox:*",result="ok"} 2"#],
        );
        for _ in 0..2 {
            one.update_depth(&[], &[]);
        }
        assert!(!metrics.render().contains("inbox"));
    }

    #[test]
    fn store_events_count_per_family() {
        let metrics = Metrics::new();
        let observer = ShardMetrics::new(0, &metrics);
        observer.enqueued("inbox:*", false);
        observer.enqueued("inbox:*", false);
        observer.enqueued("inbox:*", true);
        observer.dead_lettered("inbox:*", DeadLetterCause::Requested);
        observer.lease_expired("inbox:*");
        observer.move_failed("inbox:*", MoveStep::HandOff);
        observer.activated("inbox:*", SystemClock.now());
        assert_has(
            &metrics.render(),
            &[
                r#"cascade_enqueue_total{queue="inbox:*",result="ok"} 2"#,
                r#"cascade_enqueue_total{queue="inbox:*",result="duplicate"} 1"#,
                r#"cascade_dead_letter_total{queue="inbox:*",reason="requested"} 1"#,
                r#"cascade_dead_letter_total{queue="inbox:*",reason="max_attempts"} 0"#,
                r#"cascade_lease_expired_total{queue="inbox:*"} 1"#,
                r#"cascade_move_failed_total{queue="inbox:*",step="hand_off"} 1"#,
                "cascade_activation_lateness_seconds_count 1",
            ],
        );
    }
}
