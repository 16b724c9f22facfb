//! Completions waiting for their next try, apart from the requests: each waits out its
//! pause, then joins the next batch, so that no request's place is held meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use super::Pending;
use crate::stats::{Counter, Stats};

/// Completions waiting to be tried again, by when their pause ends.
pub(super) struct Retries {
    waiting: BTreeMap<(Instant, u64), Pending>,
    /// Tells apart completions due at the same instant.
    next_key: u64,
    /// Once the worker has stopped: nothing is tried after it.
    stop_at: Option<Instant>,
    stats: Arc<Stats>,
}

impl Retries {
    pub(super) fn new(stats: Arc<Stats>) -> Retries {
        Retries {
            waiting: BTreeMap::new(),
            next_key: 0,
            stop_at: None,
            stats,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    pub(super) fn next_due(&self) -> Option<Instant> {
        self.waiting.keys().next().map(|(due, _)| *due)
    }

    /// The first completion whose pause is over, counted as tried again; one whose lease
    /// (or the worker's flush) has ended meanwhile, while it waited for a request's place,
    /// is given up instead.
    pub(super) fn take_due(&mut self) -> Option<Pending> {
        let now = Instant::now();
        loop {
            let entry = self.waiting.first_entry()?;
            if entry.key().0 > now {
                return None;
            }
            let pending = entry.remove();
            if now >= self.limit(&pending) {
                self.give_up(&pending);
                continue;
            }
            self.stats.add(Counter::CompleteRetries, 1);
            return Some(pending);
        }
    }

    /// Until when `pending` may be tried: its lease's end, or the worker's flush's.
    fn limit(&self, pending: &Pending) -> Instant {
        self.stop_at
            .map_or(pending.until, |stop| stop.min(pending.until))
    }

    /// Waits out `pending`'s pause before its next try, unless its lease (or the worker's
    /// flush) ends first: then it is counted as failed, since the gateway would refuse it
    /// as stale by then.
    pub(super) fn schedule(&mut self, pending: Pending) {
        let due = Instant::now() + pending.pause();
        if due >= self.limit(&pending) {
            self.give_up(&pending);
            return;
        }
        self.next_key += 1;
        self.waiting.insert((due, self.next_key), pending);
    }

    /// The worker has stopped: what cannot be tried before `at` is given up now.
    pub(super) fn stop_at(&mut self, at: Instant) {
        self.stop_at = Some(at);
        let late = self.waiting.split_off(&(at, 0));
        late.values().for_each(|pending| self.give_up(pending));
    }

    fn give_up(&self, pending: &Pending) {
        tracing::error!(
            id = %pending.completion.id,
            tries = pending.tries,
            "worker.complete.failed; not sent before its lease ended or the worker stopped, the event comes back"
        );
        self.stats.add(Counter::CompleteFailures, 1);
    }
}
