//! The shard's inputs and answers, in domain types: the service layer converts to and from
//! protobuf once, at the edge. They are defined in `cascade_core::commands`, so the edge
//! needs no store; re-exported here under their old paths.

pub use cascade_core::commands::{
    EnqueueCmd, Enqueued, EventUpdate, FamilyStats, LeaseToken, LeasedEvent, Queue, QueueStats,
    RedriveSelection,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Empty when there is nothing more.
    pub next_page_token: String,
}

/// Headers the shard sets on a dead letter.
pub const DEAD_LETTER_FROM: &str = "cascade-dead-letter-from";
pub const DEAD_LETTER_REASON: &str = "cascade-dead-letter-reason";
/// Set on an event by a retry that said why it failed; its dead-letter reason repeats it.
pub const LAST_FAILURE: &str = "cascade-last-failure";
