//! Which queue families get series of their own. Every distinct `queue` label value is a
//! set of series Prometheus keeps, so their number is capped: the first `cap` families
//! held get their own, the rest share [`OTHER_QUEUES`]. A family's series are dropped when
//! its last holder (a dispatcher shard that holds its queues) lets it go, which frees its
//! place for a summed family (the holders move those over, `Metrics::queue_series_room`).

use std::collections::HashMap;

/// The `queue` label value the families beyond the cap are summed under. Parentheses are
/// never part of a queue name, so it cannot be taken for one.
pub const OTHER_QUEUES: &str = "(other)";

/// The default of `telemetry.max_queue_series`.
pub const DEFAULT_QUEUE_SERIES: usize = 1000;

#[derive(Debug)]
pub(super) struct QueueSeries {
    cap: usize,
    /// Families with series of their own, and how many holders each has.
    held: HashMap<String, u32>,
}

impl QueueSeries {
    pub fn new(cap: usize) -> QueueSeries {
        QueueSeries {
            cap,
            held: HashMap::new(),
        }
    }

    /// The label for `family`, held once more.
    pub fn hold(&mut self, family: &str) -> String {
        if let Some(holders) = self.held.get_mut(family) {
            *holders += 1;
            return family.to_owned();
        }
        if self.held.len() < self.cap {
            self.held.insert(family.to_owned(), 1);
            return family.to_owned();
        }
        OTHER_QUEUES.to_owned()
    }

    /// Whether another family can get series of its own.
    pub fn has_room(&self) -> bool {
        self.held.len() < self.cap
    }

    /// Lets `label` go once; true when that was its last holder, so its series go too.
    pub fn release(&mut self, label: &str) -> bool {
        let Some(holders) = self.held.get_mut(label) else {
            return false;
        };
        *holders -= 1;
        if *holders > 0 {
            return false;
        }
        self.held.remove(label);
        true
    }
}
