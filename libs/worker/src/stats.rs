//! Counters of one worker, for tests, logs and (later) metrics. Updated with relaxed
//! atomics: each counter is exact, a snapshot of several is not one instant.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(crate) struct Stats {
    taken: AtomicU64,
    take_failures: AtomicU64,
    started: AtomicU64,
    completed: AtomicU64,
    released: AtomicU64,
    complete_failures: AtomicU64,
    complete_retries: AtomicU64,
    extended: AtomicU64,
    leases_lost: AtomicU64,
    running: AtomicU64,
    held: AtomicU64,
}

/// A snapshot of a worker's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Events received from `Take`.
    pub taken: u64,
    /// Takes that failed or were refused.
    pub take_failures: u64,
    /// Handler calls started.
    pub started: u64,
    /// Completions the gateway accepted, releases included.
    pub completed: u64,
    /// Events handed back unhandled (shutdown, pause, lost ownership of the handler), as the
    /// gateway accepted them.
    pub released: u64,
    /// Completions the gateway refused (a stale lease) or that could not be sent.
    pub complete_failures: u64,
    /// Completions sent again: after a failure that may pass (the gateway, or the event's
    /// shard, away for a moment), each try; and a retry sent in place of an advance or a
    /// reschedule the gateway refused for what it is.
    pub complete_retries: u64,
    /// Successful lease extensions.
    pub extended: u64,
    /// Leases found gone while the event was held (expired, or taken by another worker).
    pub leases_lost: u64,
    /// Handlers running now.
    pub running: u64,
    /// Events held now: waiting for a handler, or running.
    pub held: u64,
}

pub(crate) enum Counter {
    Taken,
    TakeFailures,
    Started,
    Completed,
    Released,
    CompleteFailures,
    CompleteRetries,
    Extended,
    LeasesLost,
}

impl Stats {
    pub(crate) fn add(&self, counter: Counter, count: u64) {
        let cell = match counter {
            Counter::Taken => &self.taken,
            Counter::TakeFailures => &self.take_failures,
            Counter::Started => &self.started,
            Counter::Completed => &self.completed,
            Counter::Released => &self.released,
            Counter::CompleteFailures => &self.complete_failures,
            Counter::CompleteRetries => &self.complete_retries,
            Counter::Extended => &self.extended,
            Counter::LeasesLost => &self.leases_lost,
        };
        cell.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn set_gauges(&self, running: usize, held: usize) {
        self.running.store(running as u64, Ordering::Relaxed);
        self.held.store(held as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WorkerStats {
        let read = |cell: &AtomicU64| cell.load(Ordering::Relaxed);
        WorkerStats {
            taken: read(&self.taken),
            take_failures: read(&self.take_failures),
            started: read(&self.started),
            completed: read(&self.completed),
            released: read(&self.released),
            complete_failures: read(&self.complete_failures),
            complete_retries: read(&self.complete_retries),
            extended: read(&self.extended),
            leases_lost: read(&self.leases_lost),
            running: read(&self.running),
            held: read(&self.held),
        }
    }
}
