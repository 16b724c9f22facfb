//! The activation timer's one error type.

use std::path::PathBuf;

use cascade_bus::BusError;
use cascade_core::Code;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert::{self, ConvertError};
use cascade_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    #[error("open the store of timer shard {shard} in {dir}: {source}")]
    OpenStore {
        shard: u32,
        dir: PathBuf,
        source: StoreError,
    },
    #[error("subscribe timer shard {shard} to {subject}: {source}")]
    Subscribe {
        shard: u32,
        subject: String,
        source: BusError,
    },
    #[error("timer shard {shard} stopped: {reason}")]
    ShardFailed { shard: u32, reason: String },
    #[error("close the store of timer shard {shard}: {source}")]
    CloseStore { shard: u32, source: StoreError },

    // ---- one request ----
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error("request: {reason}")]
    BadRequest { reason: String },
}

impl TimerError {
    pub fn code(&self) -> Code {
        match self {
            TimerError::Store(e) => e.code(),
            TimerError::Convert(e) => e.code(),
            TimerError::BadRequest { .. } => Code::InvalidArgument,
            TimerError::ShardFailed { .. } => Code::Unavailable,
            TimerError::OpenStore { .. }
            | TimerError::Subscribe { .. }
            | TimerError::CloseStore { .. } => Code::Internal,
        }
    }

    /// The status a requester receives.
    pub fn to_status(&self) -> bus::Status {
        match self {
            TimerError::Store(e) => convert::error_status(e),
            other => convert::status(other.code(), other.to_string()),
        }
    }
}
