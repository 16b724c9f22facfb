//! A shard's inputs and answers, in domain types: the commands a dispatcher or timer shard
//! takes, what it answers, and what it hands to other shards. The store acts on them and the
//! proto crate converts them to and from messages, so both share one definition without the
//! edge depending on the store.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::{Error, Event, EventId, IdempotencyKey, QueueConfig, QueueName, Timestamp};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueCmd {
    pub queue: QueueName,
    /// A client-given ID; `None`: the shard assigns a time-sortable one.
    pub id: Option<EventId>,
    pub idempotency_key: Option<IdempotencyKey>,
    pub payload: Bytes,
    pub headers: BTreeMap<String, String>,
    /// `None`: now.
    pub activate_at: Option<Timestamp>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enqueued {
    pub id: EventId,
    /// A repeated ID or idempotency key within the dedup window: nothing was written.
    pub duplicate: bool,
    pub queue: QueueName,
    pub activate_at: Timestamp,
}

/// Proof of a lease: the shard-wide epoch of that lease, rendered as 16 hex digits.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub u64);

impl LeaseToken {
    pub fn parse(s: &str) -> Result<LeaseToken, Error> {
        let valid = s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        match u64::from_str_radix(s, 16) {
            Ok(epoch) if valid => Ok(LeaseToken(epoch)),
            _ => Err(Error::invalid(
                "lease_token",
                "must be the 16 hex digits returned by Take",
            )),
        }
    }
}

impl std::fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeasedEvent {
    pub event: Event,
    pub token: LeaseToken,
    pub expires_at: Timestamp,
}

/// A queue or a template and its config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queue {
    pub name: QueueName,
    pub config: QueueConfig,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub ready: u64,
    pub delayed: u64,
    pub leased: u64,
    /// Events moved from this queue to its dead-letter queue, in total.
    pub dead_lettered: u64,
    pub oldest_ready_age: Duration,
    pub enqueued_total: u64,
    pub completed_total: u64,
    pub expired_leases_total: u64,
    pub retries_total: u64,
}

impl QueueStats {
    /// Adds `other`'s counts and totals (two shares of one template's queues); the oldest
    /// ready age is the older of the two.
    pub fn add(&mut self, other: &QueueStats) {
        let sum = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        sum(&mut self.ready, other.ready);
        sum(&mut self.delayed, other.delayed);
        sum(&mut self.leased, other.leased);
        sum(&mut self.dead_lettered, other.dead_lettered);
        self.oldest_ready_age = self.oldest_ready_age.max(other.oldest_ready_age);
        sum(&mut self.enqueued_total, other.enqueued_total);
        sum(&mut self.completed_total, other.completed_total);
        sum(&mut self.expired_leases_total, other.expired_leases_total);
        sum(&mut self.retries_total, other.retries_total);
    }
}

/// The sums of the queues one template covers (`inbox:*`), or of their dead-letter queues
/// (`inbox:*.dlq`), on one shard. `oldest_ready_age` is not tracked for a family (zero).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FamilyStats {
    pub name: String,
    pub stats: QueueStats,
    /// Member queues with counts (a per-user queue has them while it holds events).
    pub queues: u64,
}

/// What an update changes; headers are merged into the event's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventUpdate {
    pub payload: Option<Bytes>,
    pub headers: BTreeMap<String, String>,
    pub activate_at: Option<Timestamp>,
}

/// Which dead letters to move back to the queues they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedriveSelection {
    Ids(Vec<EventId>),
    All,
}

/// A new event for another queue, carried by a hand-off or applied locally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub queue: QueueName,
    pub id: EventId,
    pub payload: Bytes,
    pub headers: BTreeMap<String, String>,
    pub activate_at: Timestamp,
    pub created_at: Timestamp,
}

/// An activation the timer holds: make version `version` of event `id` in `queue` ready at `at`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScheduleEntry {
    pub at: Timestamp,
    pub queue: QueueName,
    pub id: EventId,
    pub version: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_tokens_are_16_hex_digits() {
        let token = LeaseToken(0xab);
        assert_eq!(token.to_string(), "00000000000000ab");
        assert_eq!(LeaseToken::parse("00000000000000ab"), Ok(token));
        for bad in [
            "ab",
            "+000000000000000",
            "00000000000000ag",
            "000000000000000ab",
        ] {
            let err = LeaseToken::parse(bad).expect_err(bad);
            assert_eq!(err.field(), "lease_token");
        }
    }
}
