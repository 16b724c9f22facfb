//! Telemetry for every Cascade binary, set up by one call.
//!
//! - `init(settings, name, version)` installs the global tracing subscriber (text or JSON
//!   logs on stderr, filtered by `RUST_LOG` or `log_level`), the W3C trace-context
//!   propagator and, when a collector is configured, OpenTelemetry trace export over
//!   OTLP/gRPC with `service.name`/`service.version` resource attributes. The returned
//!   `Telemetry` flushes on `shutdown().await`.
//! - `propagation`: `traceparent`/`tracestate` between a `Context` and event headers, gRPC
//!   metadata and HTTP headers. `span`: joining a `tracing` span to a remote trace, linking
//!   spans to events, and the `cascade.*` attribute names.
//! - `audit`: the audit log's one line per administrative change.
//! - `metrics`: every Prometheus metric of the system in one `Metrics` registry per process,
//!   its `/metrics` router. The bounded `queue` label is a family by
//!   `cascade_core::queue_family`.
//!
//! Failure policy: bad settings fail `init` with an error naming the key or variable;
//! a collector that is down never fails or blocks the service (spans are dropped, the SDK
//! logs the export error, shutdown gives up after its timeout).

pub mod audit;
mod error;
mod init;
pub mod metrics;
pub mod propagation;
mod resolve;
mod settings;
pub mod span;

pub use error::TelemetryError;
pub use init::{AUDIT_TARGET, LOG_ONLY_TARGET, Telemetry, check, init};
pub use metrics::Metrics;
pub use propagation::{
    HeaderMapLike, context_from_headers, context_from_http, context_from_metadata, has_valid_span,
    inject_into_headers, inject_into_http, inject_into_metadata,
};
pub use resolve::{SERVICE_NAME, SERVICE_VERSION};
pub use settings::{LogFormat, TelemetrySettings};
pub use span::{
    add_link_from_headers, attr, current_context, is_recording, link_to, set_parent,
    set_parent_from_headers, span_context,
};

/// The OpenTelemetry API types callers need (`Context`), without a direct dependency.
pub use opentelemetry::Context;
