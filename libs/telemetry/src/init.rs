//! `init`: the global tracing subscriber, the W3C propagator and, when a collector is
//! configured, the OpenTelemetry tracer provider with its batch exporter over OTLP/gRPC.
//!
//! A process has one global subscriber and one tracer provider. The first `init` installs
//! them and returns the owning handle; a later call (tests, several services composed in
//! one process) installs nothing, logs that its settings are ignored, and returns a handle
//! that shares the first one's provider: it can flush, but only the owner shuts down.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::TelemetryResourceDetector;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Level;
use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::TelemetryError;
use crate::resolve::{Resolved, Sampling, is_relevant_var, resolve};
use crate::settings::{LogFormat, TelemetrySettings};

/// What the first `init` installed, for later calls to share.
#[derive(Clone)]
struct Installed {
    provider: Option<SdkTracerProvider>,
    service_name: String,
    shutdown_timeout: Duration,
}

static INSTALLED: Mutex<Option<Installed>> = Mutex::new(None);

/// The handle `init` returns. Call `shutdown().await` last, after the services stopped:
/// spans still buffered are lost otherwise.
#[must_use = "call shutdown() at exit, or buffered spans are lost"]
pub struct Telemetry {
    installed: Installed,
    owner: bool,
}

/// Installs logging and tracing for this process. `default_service_name` is the binary's
/// name (`cascade-ingest`) and `service_version` its version: pass
/// `env!("CARGO_PKG_NAME")` and `env!("CARGO_PKG_VERSION")` from the binary.
///
/// Reads `RUST_LOG` and the `OTEL_*` variables (see `TelemetrySettings` for precedence);
/// nothing else in Cascade should. With export on it must run inside a tokio runtime,
/// which carries the exporter's connection. Errors name the setting or variable at fault.
pub fn init(
    settings: &TelemetrySettings,
    default_service_name: &str,
    service_version: &str,
) -> Result<Telemetry, TelemetryError> {
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(first) = installed.as_ref() {
        tracing::info!(
            service = default_service_name,
            first = %first.service_name,
            "telemetry.already_initialised: keeping the first settings"
        );
        return Ok(Telemetry {
            installed: first.clone(),
            owner: false,
        });
    }
    let resolved = resolve(
        settings,
        default_service_name,
        service_version,
        &relevant_env(),
    )?;
    let provider = match &resolved.endpoint {
        Some((endpoint, _)) => Some(build_provider(&resolved, endpoint)?),
        None => None,
    };
    if let Err(e) = install_subscriber(&resolved, provider.as_ref(), service_version) {
        if let Some(provider) = &provider {
            // Nothing was recorded yet; stop the exporter's thread.
            let _ = provider.shutdown_with_timeout(Duration::from_millis(100));
        }
        return Err(e);
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    if let Some(provider) = &provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
        crate::span::set_recording(true);
    }
    tracing::info!(
        service = %resolved.service_name,
        version = service_version,
        export = resolved.endpoint.as_ref().map(|(e, _)| e.as_str()).unwrap_or("off"),
        endpoint_from = resolved.endpoint.as_ref().map(|(_, k)| *k).unwrap_or("-"),
        log_filter = %resolved.filter.0,
        "telemetry.started"
    );
    let first = Installed {
        provider,
        service_name: resolved.service_name,
        shutdown_timeout: resolved.shutdown_timeout,
    };
    *installed = Some(first.clone());
    Ok(Telemetry {
        installed: first,
        owner: true,
    })
}

fn build_provider(
    resolved: &Resolved,
    endpoint: &str,
) -> Result<SdkTracerProvider, TelemetryError> {
    // The tonic channel spawns its connection task on the current runtime (G6).
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(TelemetryError::NoRuntime {
            endpoint: endpoint.to_owned(),
        });
    }
    let exporter = SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|source| TelemetryError::Exporter {
            endpoint: endpoint.to_owned(),
            source,
        })?;
    // Telemetry SDK attributes (telemetry.sdk.*), then ours; no environment detectors:
    // `resolve` already applied OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    let resource = Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attributes(
            resolved
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .build();
    let builder = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource);
    let builder = match resolved.sampling {
        Sampling::Ratio(ratio) => builder.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(ratio),
        ))),
        // The builder's default configuration read OTEL_TRACES_SAMPLER already.
        Sampling::FromEnv => builder,
    };
    Ok(builder.build())
}

/// Targets whose spans must not become exported spans: the exporter's own gRPC client
/// would trace its exports, which would be exported, and so on.
const NOT_EXPORTED: [&str; 6] = ["h2", "hyper", "tonic", "tower", "opentelemetry", "axum"];

/// The target of spans that only give log lines their context (a worker's queue, say):
/// long-lived, they are never exported, and the exported spans made inside them keep
/// their own parents.
pub const LOG_ONLY_TARGET: &str = "cascade::log_context";

/// The target of the audit log's lines (one per administrative change). They are written
/// whatever the log level: an audit trail that a quieter log level silences is no trail.
pub const AUDIT_TARGET: &str = "cascade::audit";

/// Colour codes only for a person at a terminal: never in a file, a pipe or a log
/// collector, nor when `NO_COLOR` is set (no-color.org).
fn colours_wanted() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Checks `settings`, with `RUST_LOG` and the `OTEL_*` variables, as [`init`] does, and
/// installs nothing: what `cascade config check` runs, so that it fails where a service
/// would stop at start.
pub fn check(settings: &TelemetrySettings) -> Result<(), TelemetryError> {
    let resolved = resolve(settings, "cascade", "", &relevant_env())?;
    log_filter(&resolved).map(drop)
}

/// The process's variables that `init` reads.
fn relevant_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| is_relevant_var(k))
        .collect()
}

/// The log filter the settings or `RUST_LOG` give, the audit log always on.
fn log_filter(resolved: &Resolved) -> Result<EnvFilter, TelemetryError> {
    let (directives, key) = &resolved.filter;
    let audit = format!("{AUDIT_TARGET}=info")
        .parse()
        .expect("a valid directive");
    let filter = EnvFilter::builder().parse(directives).map_err(|e| {
        TelemetryError::setting(*key, format!("'{directives}' is not a tracing filter: {e}"))
    })?;
    Ok(filter.add_directive(audit))
}

fn install_subscriber(
    resolved: &Resolved,
    provider: Option<&SdkTracerProvider>,
    service_version: &str,
) -> Result<(), TelemetryError> {
    let filter = log_filter(resolved)?;
    let logs = match resolved.log_format {
        LogFormat::Text => fmt::layer()
            .with_ansi(colours_wanted())
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => fmt::layer().json().with_writer(std::io::stderr).boxed(),
    }
    .with_filter(filter);
    let traces = provider.map(|provider| {
        let scope = InstrumentationScope::builder("cascade")
            .with_version(service_version.to_owned())
            .build();
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer_with_scope(scope))
            // Its own filter, not the log level's: `log_level = "warn"` must not stop the
            // per-event spans (all INFO) from being exported.
            .with_filter(filter_fn(|meta| {
                *meta.level() <= Level::INFO
                    && meta.target() != LOG_ONLY_TARGET
                    && !NOT_EXPORTED.iter().any(|t| meta.target().starts_with(t))
            }))
    });
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| TelemetryError::Subscriber {
            reason: e.to_string(),
        })
}

impl Telemetry {
    /// Whether spans are exported to a collector.
    pub fn is_exporting(&self) -> bool {
        self.installed.provider.is_some()
    }

    /// The `service.name` in effect (the first `init`'s, for a shared handle).
    pub fn service_name(&self) -> &str {
        &self.installed.service_name
    }

    /// Hands every finished span to the collector now. Waits up to 5 s (the SDK's limit),
    /// on a blocking thread so that the runtime keeps driving the exporter's connection.
    pub async fn flush(&self) -> Result<(), TelemetryError> {
        let Some(provider) = self.installed.provider.clone() else {
            return Ok(());
        };
        run_blocking(move || provider.force_flush())
            .await
            .map_err(|reason| TelemetryError::Flush { reason })
    }

    /// Flushes buffered spans and, for the owning handle, shuts the provider down; waits
    /// `shutdown_timeout` at most. A collector that is down or slow only costs a warning:
    /// exiting matters more than the last spans. Call it inside the runtime, after the
    /// services stopped (their last spans are then in the buffer).
    pub async fn shutdown(self) {
        let Some(provider) = self.installed.provider.clone() else {
            return;
        };
        let timeout = self.installed.shutdown_timeout;
        let result = if self.owner {
            // The SDK's shutdown exports what is buffered, then stops the exporter.
            run_blocking(move || provider.shutdown_with_timeout(timeout)).await
        } else {
            run_blocking(move || provider.force_flush()).await
        };
        if let Err(reason) = result {
            tracing::warn!(%reason, "telemetry.shutdown: spans may be lost");
        }
    }
}

/// Runs an SDK call that blocks on the exporter thread. Off the runtime's workers, since the
/// export itself needs them (a current-thread runtime would otherwise deadlock until the
/// timeout).
async fn run_blocking(
    call: impl FnOnce() -> opentelemetry_sdk::error::OTelSdkResult + Send + 'static,
) -> Result<(), String> {
    let result = match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::task::spawn_blocking(call)
            .await
            .map_err(|e| format!("the flushing task failed: {e}"))?,
        Err(_) => call(),
    };
    result.map_err(|e| e.to_string())
}
