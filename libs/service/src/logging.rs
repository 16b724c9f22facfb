//! The tracing subscriber of every binary: level from the settings, overridden by `RUST_LOG`.

use tracing_subscriber::EnvFilter;

use crate::settings::{LogFormat, LogSettings};

/// Installs the global subscriber. A second call (tests) keeps the first.
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(settings.level.as_str()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match settings.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
