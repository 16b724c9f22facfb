//! The recent stats of each stage, newest last, trimmed to `throughput_window`. The service
//! loop records every sample with the handlers that ran while it accrued; the decision reads
//! rates from the differences between consecutive samples.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use cascade_core::QueueName;

use crate::model::StageStats;

/// One stats sample and the handlers that ran during the interval ending at it (the
/// executor's count when the stats arrive: a decision taken at the previous sample has been
/// applied by then).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub stats: StageStats,
    pub handlers: u32,
}

#[derive(Clone, Debug)]
pub struct History {
    window: Duration,
    stages: BTreeMap<QueueName, VecDeque<Sample>>,
}

impl History {
    /// Keeps, per stage, the samples of the last `window` (`resource_manager.throughput_window`).
    pub fn new(window: Duration) -> History {
        History {
            window,
            stages: BTreeMap::new(),
        }
    }

    /// Adds a sample. One not newer than the stage's latest is ignored (a late or repeated
    /// message): rates need increasing times. Returns whether it was kept.
    pub fn record(&mut self, mut stats: StageStats, handlers: u32) -> bool {
        let samples = self.stages.entry(stats.stage.clone()).or_default();
        if samples.back().is_some_and(|last| last.stats.at >= stats.at) {
            return false;
        }
        // Interpolation in `due_by` walks the buckets in order.
        stats.due.sort_by_key(|bucket| bucket.until);
        let oldest_kept = stats.at.saturating_sub(self.window);
        samples.push_back(Sample { stats, handlers });
        while samples
            .front()
            .is_some_and(|first| first.stats.at < oldest_kept)
        {
            samples.pop_front();
        }
        true
    }

    /// The stage's samples, oldest first; empty if it has reported nothing.
    pub fn samples(&self, stage: &QueueName) -> impl Iterator<Item = &Sample> {
        self.stages.get(stage).into_iter().flatten()
    }

    pub fn latest(&self, stage: &QueueName) -> Option<&Sample> {
        self.stages.get(stage).and_then(VecDeque::back)
    }

    /// Forgets stages for which `keep` says no (e.g. a deleted pipeline's).
    pub fn retain(&mut self, mut keep: impl FnMut(&QueueName) -> bool) {
        self.stages.retain(|stage, _| keep(stage));
    }
}

#[cfg(test)]
mod tests {
    use cascade_core::Timestamp;

    use super::*;
    use crate::model::DueBucket;

    fn at(secs: u64) -> Timestamp {
        Timestamp::from_millis(secs * 1_000)
    }

    fn stats(secs: u64) -> StageStats {
        let stage = QueueName::parse("p.s").expect("valid name");
        StageStats::empty(stage, at(secs))
    }

    #[test]
    fn keeps_the_window_and_refuses_old_samples() {
        let mut history = History::new(Duration::from_secs(10));
        for secs in [0, 5, 10, 15] {
            assert!(history.record(stats(secs), 1));
        }
        assert!(!history.record(stats(15), 1), "same time twice");
        assert!(!history.record(stats(12), 1), "out of order");
        let stage = QueueName::parse("p.s").expect("valid name");
        let times: Vec<_> = history.samples(&stage).map(|s| s.stats.at).collect();
        assert_eq!(times, vec![at(5), at(10), at(15)]);
        history.retain(|_| false);
        assert!(history.latest(&stage).is_none());
    }

    #[test]
    fn sorts_due_buckets() {
        let mut history = History::new(Duration::from_secs(60));
        let mut sample = stats(0);
        sample.due = vec![
            DueBucket {
                until: at(20),
                count: 2,
            },
            DueBucket {
                until: at(10),
                count: 1,
            },
        ];
        history.record(sample, 0);
        let stage = QueueName::parse("p.s").expect("valid name");
        let latest = history.latest(&stage).expect("recorded");
        assert_eq!(latest.stats.due[0].until, at(10));
        assert_eq!(latest.stats.due_by(at(15)), 2.0);
    }
}
