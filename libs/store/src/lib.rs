//! Cascade's shard engine.
//!
//! A shard's state lives in sled behind the shard's own write-ahead log: every state
//! transition is one batch of key writes, appended to the log and made durable by a
//! group-committed `fdatasync` before it is acknowledged; the batch is applied to in-memory
//! layers above sled at once, and sled receives those layers only at background checkpoints.
//! See `docs/storage.md` for the design and its failure policy.
//!
//! - `shard::Shard`: the dispatcher's state machine (queues, events, leases, dedup, outbox).
//! - `timer::Timer`: the activation timer's schedule.
//! - `durable::Store`: runs either behind the log with group commit.
//! - `observe`: hooks that report commits, fsyncs and the state machine's events (metrics).
//! - `probe::raw_fsync_rate`: the disk's own rate, printed beside benchmark figures.

pub mod codec;
pub mod durable;
pub mod error;
pub mod kv;
pub mod observe;
pub mod probe;
pub mod shard;
pub mod timer;
pub mod wal;

pub use durable::{ClusterIdentity, Durability, Store, StoreOptions};
pub use error::StoreError;
pub use observe::{CommitObserver, DeadLetterCause, MoveStep, ShardObserver};
pub use shard::{Shard, ShardLimits, ShardSettings};
pub use timer::{DueCounts, ScheduleEntry, Timer};
