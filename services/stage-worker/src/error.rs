//! The stage worker's one error type.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StageWorkerError {
    /// A setting is missing, malformed or out of range; `key` is its dotted path.
    #[error("setting {key}: {reason}")]
    Setting { key: String, reason: String },
    #[error("config file {path}: {reason}")]
    ConfigFile { path: PathBuf, reason: String },
    /// The handler could not be set up from its spec (a bad URL or endpoint).
    #[error("handler: {0}")]
    Handler(String),
    /// An HTTP handler's response asks for something that is not understood; the event is
    /// retried, as after any failure of the handler.
    #[error("the handler's response: {header}: {reason}")]
    BadReply { header: String, reason: String },
    #[error(transparent)]
    Worker(#[from] cascade_worker::WorkerError),
    #[error(transparent)]
    Service(#[from] cascade_service::ServiceError),
}

impl StageWorkerError {
    pub(crate) fn setting(key: impl Into<String>, reason: impl Into<String>) -> StageWorkerError {
        StageWorkerError::Setting {
            key: key.into(),
            reason: reason.into(),
        }
    }
}
