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

/// What one step of a long operation did (a purge, a redrive): the dispatcher runs its steps
/// in separate turns of the writer, so that the shard's other queues wait for one step at a
/// time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Events it removed or moved.
    pub done: u64,
    /// Events the queue still holds (for a redrive, the leased dead letters and those that
    /// name no queue to go back to among them): what bounds the steps after the first.
    pub left: u64,
    /// The event after which the next step starts; `None`: there is no more.
    pub next: Option<String>,
}

/// What a read of the outbox found.
#[derive(Debug)]
pub struct OutboxRead {
    /// Hand-offs with their sequences, oldest first.
    pub entries: Vec<(u64, crate::codec::records::HandOff)>,
    /// Where the next read goes on from: past what this one found, or past every sequence
    /// taken so far when it found all there was.
    pub next: u64,
    /// The read stopped at its count or its bytes: there may be more.
    pub more: bool,
}
