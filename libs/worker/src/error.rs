//! The SDK's one error type: what stops a worker from starting or from going on.

/// Why a worker could not start, or stopped before its shutdown was asked for.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A setting is out of range; `field` names it.
    #[error("worker config {field}: {reason}")]
    Config { field: String, reason: String },
    #[error(transparent)]
    Connect(#[from] cascade_client::ClientError),
    /// The gateway refused a `Take` in a way retrying cannot fix (the queue does not exist,
    /// the request is invalid, access is denied); the worker drained and stopped.
    #[error("take from queue {queue}: {code:?}: {message}")]
    Take {
        queue: String,
        code: tonic::Code,
        message: String,
    },
}

impl WorkerError {
    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> WorkerError {
        WorkerError::Config {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
