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

pub use cascade_core::event::{DEAD_LETTER_FROM, DEAD_LETTER_REASON, LAST_FAILURE};

/// What one step of a purge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Events it removed.
    pub removed: u64,
    /// Events the queue still holds.
    pub left: u64,
}

/// What one step of a redrive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redriven {
    /// Dead letters it moved back.
    pub moved: u64,
    /// The dead letter after which the next step starts; `None`: no more.
    pub next: Option<String>,
}
