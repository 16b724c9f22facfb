//! The one error type of `cascade-telemetry`.

/// Why telemetry could not start or an operation on it failed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting or a standard variable (`RUST_LOG`, `OTEL_*`) is malformed or out of range;
    /// `key` is the dotted settings key or the variable's name.
    #[error("setting {key}: {reason}")]
    Setting { key: String, reason: String },
    /// The OTLP/gRPC exporter needs a tokio runtime to own its connection.
    #[error("start trace export to {endpoint}: no tokio runtime; call init inside one")]
    NoRuntime { endpoint: String },
    #[error("build the OTLP span exporter for {endpoint}: {source}")]
    Exporter {
        endpoint: String,
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// Another global tracing subscriber (or `log` logger) was installed by someone else.
    #[error("install the global tracing subscriber: {reason}")]
    Subscriber { reason: String },
    /// The span was already entered (its trace is fixed), or is disabled by the filter.
    #[error("set the parent of a span: {source}")]
    SetParent {
        source: tracing_opentelemetry::SetParentError,
    },
    /// Spans could not be handed to the collector in time (none listening, or too slow).
    #[error("flush spans: {reason}")]
    Flush { reason: String },
}

impl TelemetryError {
    pub(crate) fn setting(key: impl Into<String>, reason: impl Into<String>) -> TelemetryError {
        TelemetryError::Setting {
            key: key.into(),
            reason: reason.into(),
        }
    }
}
