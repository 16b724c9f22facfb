//! The `telemetry` section of a service's settings.
//!
//! Precedence, lowest first: built-in defaults < the config file < `CASCADE__TELEMETRY__*`
//! (both read by `cascade-service`'s loader) < the standard variables read by `init`:
//! `RUST_LOG` overrides `log_level`; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, then
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, override `otlp_endpoint`; `OTEL_SERVICE_NAME` overrides
//! `service_name`; `OTEL_RESOURCE_ATTRIBUTES` is merged over `resource_attributes`;
//! `OTEL_TRACES_SAMPLER` (with `OTEL_TRACES_SAMPLER_ARG`) replaces `sample_ratio`;
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn export off. The file holds a
//! deployment's defaults; the standard variables are how platforms (Helm, the OpenTelemetry
//! operator) configure every SDK, so they win.

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::units::{one_of, serde_duration};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl TryFrom<String> for LogFormat {
    type Error = String;

    fn try_from(given: String) -> Result<LogFormat, String> {
        one_of(
            &given,
            &[("text", LogFormat::Text), ("json", LogFormat::Json)],
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySettings {
    /// A tracing filter (`info`, `cascade_store=debug,info`); `RUST_LOG` overrides it.
    pub log_level: String,
    pub log_format: LogFormat,
    /// OTLP/gRPC collector, e.g. `http://127.0.0.1:4317`. Unset (or empty): no trace export,
    /// unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute; unset: the binary's name (`cascade-ingest`).
    pub service_name: Option<String>,
    /// More resource attributes (`deployment.environment = "prod"`).
    pub resource_attributes: BTreeMap<String, String>,
    /// Share of new traces recorded, 0.0 to 1.0; a trace begun upstream follows its parent's
    /// decision.
    pub sample_ratio: f64,
    /// How long shutdown waits for buffered spans to reach the collector.
    #[serde(with = "serde_duration")]
    pub shutdown_timeout: Duration,
    /// Queue families with `/metrics` series of their own at most, per process; the rest
    /// are summed under `queue="(other)"`. 0: every queue summed there.
    pub max_queue_series: usize,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings {
            log_level: "info".into(),
            log_format: LogFormat::Text,
            otlp_endpoint: None,
            service_name: None,
            resource_attributes: BTreeMap::new(),
            sample_ratio: 1.0,
            shutdown_timeout: Duration::from_secs(2),
            max_queue_series: crate::metrics::DEFAULT_QUEUE_SERIES,
        }
    }
}
