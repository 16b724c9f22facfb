//! The store's one error type. Each variant says what happened to which queue or event, and
//! maps to one status code (`StoreError::code`); the gRPC layer converts that code once.

use std::path::{Path, PathBuf};

use cascade_core::units::about_size;
use cascade_core::{Code, Timestamp};

use crate::wal::WalError;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Invalid(#[from] cascade_core::Error),
    /// `or_template`: how the message goes on, naming a template that would match the queue
    /// (empty for a template's own name).
    #[error("queue '{queue}' does not exist; create it with CreateQueue{or_template}")]
    QueueNotFound { queue: String, or_template: String },
    #[error("pipeline '{name}' does not exist; apply it with ApplyPipeline")]
    PipelineNotFound { name: String },
    #[error("queue '{queue}' already exists with another config")]
    QueueExists { queue: String },
    #[error("event '{id}' not found in queue '{queue}'")]
    EventNotFound { queue: String, id: String },
    #[error(
        "event '{id}' in queue '{queue}' is leased until {until}; complete it with its lease token or wait for the lease to expire"
    )]
    LeaseHeld {
        queue: String,
        id: String,
        until: Timestamp,
    },
    #[error(
        "queue '{queue}' is not empty ({ready} ready, {delayed} delayed, {leased} leased events); delete it with force set (`cascade queue delete --force`) to drop them, or let it drain or purge it first"
    )]
    QueueNotEmpty {
        queue: String,
        ready: u64,
        delayed: u64,
        leased: u64,
    },
    #[error("queue '{queue}' already holds an event with id '{id}'")]
    IdTaken { queue: String, id: String },
    #[error(
        "lease token for event '{id}' in queue '{queue}' is not current: the lease expired or was completed"
    )]
    StaleLease { queue: String, id: String },
    #[error("payload of {size} bytes exceeds the limit of queue '{queue}' ({max} bytes)")]
    PayloadTooLarge { queue: String, size: u64, max: u64 },
    #[error(
        "{field}: event '{id}' would carry {size} bytes of payload and headers, over the {max} one message can carry whole; send a smaller payload or fewer headers"
    )]
    EventTooLarge {
        field: &'static str,
        id: String,
        size: usize,
        max: usize,
    },
    #[error("{what}: stage '{stage}' is not a stage of pipeline '{pipeline}'")]
    UnknownStage {
        what: &'static str,
        pipeline: String,
        stage: String,
    },
    #[error("shard is busy: {what}; retry with backoff")]
    Busy { what: String },
    #[error(
        "the shard's disk has {} free, below its watermark of {} (store.min_free_bytes){}: enqueues, updates and hand-offs are refused until space is freed; takes, acks, deletes and purges still work, so consumers can drain it",
        about_size(*free), about_size(*watermark), checkpoint_room(*reserve)
    )]
    DiskFull {
        free: u64,
        watermark: u64,
        /// Kept free on top of the watermark for the next checkpoint.
        reserve: u64,
    },
    #[error("shard stopped: {reason}")]
    Stopped { reason: String },
    #[error("corrupt data in {path}: {reason}; run `cascade data verify` to see what is wrong")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "store {path} belongs to cluster '{found_name}' with {found_shards} shards, but this process runs cluster '{expected_name}' with {expected_shards} shards (cluster.name, cluster.shards): a cluster's shard count is fixed for its life, since each queue's shard is a hash over it; run with the store's settings, or give the new cluster a new data directory"
    )]
    WrongCluster {
        path: PathBuf,
        found_name: String,
        found_shards: u32,
        expected_name: String,
        expected_shards: u32,
    },
    #[error(
        "store {path} is the store of {found}, but this process opened it as {expected}: each store holds what belongs to its own shard (a dispatcher's the queues that hash to it, a timer's its timers); put it back where {found} is read, or give {expected} its own"
    )]
    WrongStore {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("fsync of {path} failed: {source}; the shard stops, recovery replays the log")]
    Fsync {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{op} in {path}: {source}")]
    Sled {
        op: &'static str,
        path: PathBuf,
        source: sled::Error,
    },
    #[error(transparent)]
    Wal(#[from] WalError),
    /// An offline tool (export, import, repair) cannot do what it was asked.
    #[error("{path}: {reason}")]
    Tool { path: PathBuf, reason: String },
}

impl StoreError {
    pub fn code(&self) -> Code {
        match self {
            StoreError::Invalid(e) => e.code(),
            StoreError::QueueNotFound { .. }
            | StoreError::EventNotFound { .. }
            | StoreError::PipelineNotFound { .. } => Code::NotFound,
            StoreError::QueueExists { .. } | StoreError::IdTaken { .. } => Code::AlreadyExists,
            StoreError::LeaseHeld { .. }
            | StoreError::StaleLease { .. }
            | StoreError::QueueNotEmpty { .. } => Code::FailedPrecondition,
            StoreError::UnknownStage { .. } => Code::InvalidArgument,
            StoreError::PayloadTooLarge { .. }
            | StoreError::EventTooLarge { .. }
            | StoreError::Busy { .. }
            | StoreError::DiskFull { .. } => Code::ResourceExhausted,
            StoreError::Stopped { .. } => Code::Unavailable,
            StoreError::Corrupt { .. } => Code::DataLoss,
            StoreError::WrongCluster { .. }
            | StoreError::WrongStore { .. }
            | StoreError::Tool { .. } => Code::FailedPrecondition,
            StoreError::Fsync { .. }
            | StoreError::Io { .. }
            | StoreError::Sled { .. }
            | StoreError::Wal(_) => Code::Internal,
        }
    }

    /// Whether the store itself failed (its disk, its data, its threads), rather than
    /// refusing one operation: after a fault nothing more can be trusted to apply.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            StoreError::Stopped { .. }
                | StoreError::Corrupt { .. }
                | StoreError::WrongCluster { .. }
                | StoreError::WrongStore { .. }
                | StoreError::Fsync { .. }
                | StoreError::Io { .. }
                | StoreError::Sled { .. }
                | StoreError::Wal(_)
        )
    }

    pub fn io(op: &'static str, path: &Path, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn sled(op: &'static str, path: &Path, source: sled::Error) -> Self {
        match source {
            sled::Error::Corruption { at, bt: _ } => StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("sled reports corruption at {at:?}"),
            },
            source => StoreError::Sled {
                op,
                path: path.to_path_buf(),
                source,
            },
        }
    }

    pub fn tool(path: &Path, reason: impl Into<String>) -> Self {
        StoreError::Tool {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    pub fn corrupt(path: &Path, reason: String) -> Self {
        StoreError::Corrupt {
            path: path.to_path_buf(),
            reason,
        }
    }
}

fn checkpoint_room(reserve: u64) -> String {
    match reserve {
        0 => String::new(),
        bytes => format!(" plus {} kept for its next checkpoint", about_size(bytes)),
    }
}
