use std::path::PathBuf;

use cascade_core::Code;

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

/// Why a shard of a sharded service could not start, or stopped. `service` (`dispatcher`,
/// `timer`) names the service in the message and in the shard's store directory.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("open the store of {service} shard {shard} in {dir}: {source}")]
    OpenStore {
        service: &'static str,
        shard: u32,
        dir: PathBuf,
        source: cascade_store::StoreError,
    },
    #[error("subscribe {service} shard {shard} to {subject}: {source}")]
    Subscribe {
        service: &'static str,
        shard: u32,
        subject: String,
        source: cascade_bus::BusError,
    },
    #[error("{service} shard {shard} stopped: {reason}")]
    Failed {
        service: &'static str,
        shard: u32,
        reason: String,
    },
    #[error("close the store of {service} shard {shard}: {source}")]
    CloseStore {
        service: &'static str,
        shard: u32,
        source: cascade_store::StoreError,
    },
}

impl ShardError {
    /// UNAVAILABLE for a shard that went down (a request may succeed after recovery),
    /// INTERNAL for one that could not start or stop.
    pub fn code(&self) -> Code {
        match self {
            ShardError::Failed { .. } => Code::Unavailable,
            ShardError::OpenStore { .. }
            | ShardError::Subscribe { .. }
            | ShardError::CloseStore { .. } => Code::Internal,
        }
    }
}

/// How a service binary ends: at once on success; after an error, with one line on standard
/// error, its causes said once, and never a backtrace whatever `RUST_BACKTRACE` says (it
/// would name the build's source paths; an operator needs the reason, not the frames).
/// `E` is a binary's error type (anyhow's).
pub fn exit_code<E>(served: Result<(), E>) -> std::process::ExitCode
where
    E: std::ops::Deref<Target = dyn std::error::Error + Send + Sync + 'static>,
{
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", cascade_core::error::describe(&*error));
            std::process::ExitCode::FAILURE
        }
    }
}
