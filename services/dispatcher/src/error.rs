//! The dispatcher's one error type: why a shard could not start or stopped, and why one
//! request failed. Each variant maps to one status code (`DispatcherError::code`).

use std::path::PathBuf;

use cascade_bus::BusError;
use cascade_core::Code;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert::{self, ConvertError};
use cascade_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DispatcherError {
    #[error("open the store of dispatcher shard {shard} in {dir}: {source}")]
    OpenStore {
        shard: u32,
        dir: PathBuf,
        source: StoreError,
    },
    #[error("subscribe dispatcher shard {shard} to {subject}: {source}")]
    Subscribe {
        shard: u32,
        subject: String,
        source: BusError,
    },
    #[error("dispatcher shard {shard} stopped: {reason}")]
    ShardFailed { shard: u32, reason: String },
    #[error("close the store of dispatcher shard {shard}: {source}")]
    CloseStore { shard: u32, source: StoreError },

    // ---- one request ----
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error("request: {reason}")]
    BadRequest { reason: String },
    #[error(
        "queue '{queue}' belongs to shard {owner}, not to dispatcher shard {shard}: every service must use the same cluster.shards"
    )]
    WrongShard {
        queue: String,
        owner: u32,
        shard: u32,
    },
    #[error(
        "{what} is {size} bytes, more than the bus carries ({max} bytes): raise the bus's max_payload or make it smaller"
    )]
    TooLarge {
        what: String,
        size: usize,
        max: usize,
    },
}

impl DispatcherError {
    pub fn code(&self) -> Code {
        match self {
            DispatcherError::Store(e) => e.code(),
            DispatcherError::Convert(e) => e.code(),
            DispatcherError::BadRequest { .. } => Code::InvalidArgument,
            DispatcherError::WrongShard { .. } => Code::FailedPrecondition,
            DispatcherError::TooLarge { .. } => Code::ResourceExhausted,
            DispatcherError::ShardFailed { .. } => Code::Unavailable,
            DispatcherError::OpenStore { .. }
            | DispatcherError::Subscribe { .. }
            | DispatcherError::CloseStore { .. } => Code::Internal,
        }
    }

    /// The status a requester receives.
    pub fn to_status(&self) -> bus::Status {
        match self {
            DispatcherError::Store(e) => convert::error_status(e),
            other => convert::status(other.code(), other.to_string()),
        }
    }
}
