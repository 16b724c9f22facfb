//! The shard's inputs and answers, in domain types: the service layer converts to and from
//! protobuf once, at the edge.

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::{Event, EventId, IdempotencyKey, QueueConfig, QueueName, Timestamp};

use crate::error::StoreError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueCmd {
    pub queue: QueueName,
    /// A client-given ID; `None`: the shard assigns a time-sortable one.
    pub id: Option<EventId>,
    pub idempotency_key: Option<IdempotencyKey>,
    pub payload: Vec<u8>,
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
    pub fn parse(s: &str) -> Result<LeaseToken, StoreError> {
        let valid = s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        match u64::from_str_radix(s, 16) {
            Ok(epoch) if valid => Ok(LeaseToken(epoch)),
            _ => Err(cascade_core::Error::InvalidArgument {
                field: "lease_token".into(),
                reason: "must be the 16 hex digits returned by Take".into(),
            }
            .into()),
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

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Empty when there is nothing more.
    pub next_page_token: String,
}

/// What an update changes; headers are merged into the event's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventUpdate {
    pub payload: Option<Vec<u8>>,
    pub headers: BTreeMap<String, String>,
    pub activate_at: Option<Timestamp>,
}

/// Which dead letters to move back to the queues they came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedriveSelection {
    Ids(Vec<EventId>),
    All,
}

/// Headers the shard sets on a dead letter.
pub const DEAD_LETTER_FROM: &str = "cascade-dead-letter-from";
pub const DEAD_LETTER_REASON: &str = "cascade-dead-letter-reason";
