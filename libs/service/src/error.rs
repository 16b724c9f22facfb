use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A setting is missing, malformed or out of range; `key` is its dotted path.
    #[error("setting {key}: {reason}")]
    Setting { key: String, reason: String },
    #[error("settings file {path}: {reason}")]
    SettingsFile { path: PathBuf, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] cascade_store::StoreError),
    #[error(transparent)]
    Bus(#[from] cascade_bus::BusError),
    #[error(transparent)]
    Telemetry(#[from] cascade_telemetry::TelemetryError),
}

impl ServiceError {
    pub fn setting(key: impl Into<String>, reason: impl Into<String>) -> ServiceError {
        ServiceError::Setting {
            key: key.into(),
            reason: reason.into(),
        }
    }
}
