//! The stage worker's one error type.

use std::path::PathBuf;

use cascade_service::ServiceError;

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
    Service(#[from] ServiceError),
}

impl StageWorkerError {
    /// The errors of `cascade_service::load_layers` in the stage worker's words.
    pub(crate) fn from_layers(err: ServiceError) -> StageWorkerError {
        match err {
            ServiceError::SettingsFile { path, reason } => {
                StageWorkerError::ConfigFile { path, reason }
            }
            ServiceError::Setting { key, reason } => StageWorkerError::Setting { key, reason },
            other => StageWorkerError::Service(other),
        }
    }

    pub(crate) fn setting(key: impl Into<String>, reason: impl Into<String>) -> StageWorkerError {
        StageWorkerError::Setting {
            key: key.into(),
            reason: reason.into(),
        }
    }
}
