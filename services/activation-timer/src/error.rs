//! The activation timer's one error type.

use cascade_core::Code;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert::{self, ConvertError};
use cascade_service::ShardError;
use cascade_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    /// A shard could not start, or stopped; boxed, as it is large and rare.
    #[error(transparent)]
    Shard(Box<ShardError>),

    // ---- one request ----
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error("request: {reason}")]
    BadRequest { reason: String },
}

impl From<ShardError> for TimerError {
    fn from(err: ShardError) -> TimerError {
        TimerError::Shard(Box::new(err))
    }
}

impl TimerError {
    pub fn code(&self) -> Code {
        match self {
            TimerError::Store(e) => e.code(),
            TimerError::Convert(e) => e.code(),
            TimerError::BadRequest { .. } => Code::InvalidArgument,
            TimerError::Shard(e) => e.code(),
        }
    }

    /// The status a requester receives.
    pub fn to_status(&self) -> bus::Status {
        match self {
            // A store error's message carries every cause, down to the OS's word for it.
            TimerError::Store(e) => convert::status(e.code(), cascade_core::error::describe(e)),
            other => convert::status(other.code(), other.to_string()),
        }
    }
}
