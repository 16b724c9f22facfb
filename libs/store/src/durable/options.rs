//! How a store trades durability for speed, and when it checkpoints.

use std::sync::Arc;
use std::time::Duration;

use super::Watermark;
use crate::observe::CommitObserver;

/// When an acknowledgement is given relative to the log's `fdatasync`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Answer after the group's `fdatasync` (the default).
    Fsync,
    /// Answer after the write; `fdatasync` every interval. A crash loses up to an interval.
    Interval(Duration),
    /// Never `fdatasync` the log (tests, benchmarks). A power loss loses anything.
    None,
}

#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub durability: Durability,
    /// sled's page cache.
    pub cache_bytes: u64,
    pub wal_segment_bytes: u64,
    /// Checkpoint when the in-memory layer holds this much...
    pub checkpoint_bytes: usize,
    /// ...or this long after the last checkpoint, if anything changed.
    pub checkpoint_interval: Duration,
    /// Close sled and open it again once checkpoints have written this much into it since
    /// it was opened, counted as the in-memory bytes of their layers (`Kv::reopen_sled`);
    /// 0: never.
    pub reopen_bytes: usize,
    /// Operations waiting for the writer at most; beyond, callers get `Busy`.
    pub inbox_capacity: usize,
    /// How often the writer runs its maintenance (lease expiry, dedup ageing) when idle.
    pub tick: Duration,
    /// Told of every group commit (its size, its fsync's duration).
    pub commit_observer: Option<Arc<dyn CommitObserver>>,
    /// The cluster the store must belong to: recorded when the store is created, checked
    /// at every open after. `None` checks nothing (tools, tests).
    pub cluster: Option<ClusterIdentity>,
    /// Free space of the store's filesystem below which growth is refused (`DiskWatch`);
    /// `Bytes(0)`, the default here, never refuses (tools, tests).
    pub min_free: Watermark,
}

/// A cluster's name and shard count, and which of its stores this is. A queue's shard is a
/// hash of its name over the shard count, so a store opened under another count, or as
/// another shard, would hold queues no request reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterIdentity {
    pub name: String,
    pub shards: u32,
    /// The store's service and shard, as its directory is named (`dispatcher-0`,
    /// `timer-1`); `None` checks nothing of it.
    pub store: Option<String>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            durability: Durability::Fsync,
            cache_bytes: 64 << 20,
            wal_segment_bytes: 64 << 20,
            checkpoint_bytes: 256 << 20,
            checkpoint_interval: Duration::from_secs(30),
            reopen_bytes: 0,
            inbox_capacity: 16_384,
            tick: Duration::from_millis(10),
            commit_observer: None,
            cluster: None,
            min_free: Watermark::Bytes(0),
        }
    }
}
