//! The last minutes of each pipeline stage's counts, sampled every [`SAMPLE_EVERY`] into a
//! ring of [`HISTORY_POINTS`], so that a page loaded now draws its charts at once.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use cascade_core::Timestamp;
use serde::Serialize;

use super::aggregate::Counts;

pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Ten minutes of samples.
pub(crate) const HISTORY_POINTS: usize = 120;
/// Stages charted at most; later ones show their counts without a chart.
pub(crate) const MAX_CHARTED_STAGES: usize = 500;

/// `[unix ms, delayed, ready, leased, enqueued_total, completed_total, retries_total,
/// dead_lettered, lateness µs]`: compact in the JSON. The totals make rates: the difference
/// between two points over the time between them. The lateness is the largest of the
/// activations since the previous point (`null`: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Point(
    pub u64,
    pub u64,
    pub u64,
    pub u64,
    pub u64,
    pub u64,
    pub u64,
    pub u64,
    pub Option<u64>,
);

impl Point {
    pub fn at_ms(&self) -> u64 {
        self.0
    }

    pub fn lateness(&self) -> Option<u64> {
        self.8
    }
}

/// What is sampled of one stage.
pub(crate) struct Sample<'a> {
    pub queue: &'a str,
    pub counts: Counts,
    pub lateness: Option<Duration>,
}

#[derive(Debug, Default)]
pub(crate) struct History {
    rings: BTreeMap<String, VecDeque<Point>>,
}

impl History {
    /// Adds a point for each stage queue given; stages not given (their pipeline is gone)
    /// lose their history.
    pub fn record<'a>(&mut self, at: Timestamp, stages: impl IntoIterator<Item = Sample<'a>>) {
        let mut kept = BTreeMap::new();
        for sample in stages.into_iter().take(MAX_CHARTED_STAGES) {
            let Sample {
                queue,
                counts,
                lateness,
            } = sample;
            let mut ring = self.rings.remove(queue).unwrap_or_default();
            if ring.len() == HISTORY_POINTS {
                ring.pop_front();
            }
            ring.push_back(Point(
                at.as_millis(),
                counts.delayed,
                counts.ready,
                counts.leased,
                counts.enqueued_total,
                counts.completed_total,
                counts.retries_total,
                counts.dead_lettered,
                lateness.map(|late| u64::try_from(late.as_micros()).unwrap_or(u64::MAX)),
            ));
            kept.insert(queue.to_owned(), ring);
        }
        self.rings = kept;
    }

    /// The points of `queue`, oldest first.
    pub fn of(&self, queue: &str) -> Vec<Point> {
        self.rings
            .get(queue)
            .map(|ring| ring.iter().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_are_bounded_and_follow_the_stages() {
        let mut history = History::default();
        let counts = Counts {
            ready: 2,
            completed_total: 9,
            ..Counts::default()
        };
        let sample = |queue, lateness| Sample {
            queue,
            counts,
            lateness,
        };
        for i in 0..(HISTORY_POINTS as u64 + 3) {
            let late = Some(Duration::from_micros(i));
            history.record(
                Timestamp::from_millis(i),
                [sample("p.a", late), sample("p.b", None)],
            );
        }
        let points = history.of("p.a");
        assert_eq!(points.len(), HISTORY_POINTS);
        assert_eq!(points[0], Point(3, 0, 2, 0, 0, 9, 0, 0, Some(3)));
        assert_eq!(history.of("p.b")[0].lateness(), None);
        history.record(Timestamp::from_millis(1000), [sample("p.b", None)]);
        assert!(history.of("p.a").is_empty());
        assert_eq!(history.of("p.b").len(), HISTORY_POINTS);
    }
}
