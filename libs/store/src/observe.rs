//! Hooks through which a store reports what it does, so that a service can turn it into
//! metrics without this crate depending on a metrics library. Both are called on the
//! store's own threads, in the middle of its work: an implementation must be cheap (a few
//! atomic increments) and must never block or call back into the store.

use std::fmt;
use std::time::Duration;

use cascade_core::Timestamp;

/// Why an event went to a dead-letter queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadLetterCause {
    /// A retry or an expired lease found `attempts` at `max_attempts`.
    MaxAttempts,
    /// The handler's `DeadLetter` outcome.
    Requested,
    /// A hand-off (an advance to a queue of another shard) that its queue refused: no such
    /// queue, or its ID taken there.
    Refused,
}

/// Which move of an event failed (`ShardObserver::move_failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveStep {
    /// To its dead-letter queue: the event stays where it was, to be delivered again.
    DeadLetter,
    /// To the next queue: a refused hand-off goes to a dead-letter queue instead.
    HandOff,
}

/// What a dispatcher shard's state machine did, reported on the writer thread as each
/// operation applies it (an operation that fails later in the same transaction is rare and
/// may still have been reported).
///
/// `family` names a queue without naming a user: the template's name (`inbox:*`) for a
/// queue a template covers, `<template>.dlq` for the dead-letter queue of such a queue,
/// and the queue's own name otherwise (plain queues and stages are created explicitly).
pub trait ShardObserver: Send + Sync {
    /// An event entered a queue: by `Enqueue` (`duplicate` when the dedup window matched
    /// and nothing was stored) or by an advance from another stage.
    fn enqueued(&self, family: &str, duplicate: bool) {
        let _ = (family, duplicate);
    }

    /// An event left a queue (`family`) for its dead-letter queue.
    fn dead_lettered(&self, family: &str, cause: DeadLetterCause) {
        let _ = (family, cause);
    }

    /// Moving an event of `family` on failed (`step`); the event was kept or dead-lettered
    /// instead, so it cannot get stuck.
    fn move_failed(&self, family: &str, step: MoveStep) {
        let _ = (family, step);
    }

    /// A lease reached its deadline without an outcome.
    fn lease_expired(&self, family: &str) {
        let _ = family;
    }

    /// The timer's activation made a delayed event of `family` whose activation time is
    /// `activate_at` ready (the observer reads its own clock for the lateness).
    fn activated(&self, family: &str, activate_at: Timestamp) {
        let _ = (family, activate_at);
    }
}

/// Reports nothing: the default.
pub struct NoObserver;

impl ShardObserver for NoObserver {}

/// What the store's log and its writer did.
pub trait CommitObserver: Send + Sync {
    /// One group was written to the log: `records` state changes (log records; 0 for a
    /// barrier alone), made durable by one `fdatasync` that took `fsync` (`None` when the
    /// durability mode did not sync this group). On the syncer thread, once per group commit.
    fn committed(&self, records: usize, fsync: Option<Duration>);

    /// The writer held new work for `took` at once, until the running checkpoint had written
    /// enough into sled (the in-memory layers were at their bound). On the writer thread,
    /// once per hold.
    fn held_for_checkpoint(&self, took: Duration);
}

impl fmt::Debug for dyn CommitObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CommitObserver")
    }
}
