//! Settings and the standard environment variables, merged into what `init` installs.
//! Pure: the environment arrives as a map, so the precedence rules (see `settings`) are
//! tested without touching the process's variables.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::Uri;

use crate::TelemetryError;
use crate::settings::{LogFormat, TelemetrySettings};

/// The resource attribute keys Cascade sets itself.
pub const SERVICE_NAME: &str = "service.name";
pub const SERVICE_VERSION: &str = "service.version";

/// The variables `init` reads; nothing else in the crate reads the environment.
pub(crate) fn is_relevant_var(name: &str) -> bool {
    name == "RUST_LOG" || name.starts_with("OTEL_")
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Sampling {
    /// Parent-based, new traces kept with this probability.
    Ratio(f64),
    /// `OTEL_TRACES_SAMPLER` is set: the SDK reads it (and its argument) itself.
    FromEnv,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Resolved {
    /// The filter directives and where they came from (`RUST_LOG` or the settings key).
    pub filter: (String, &'static str),
    pub log_format: LogFormat,
    /// The collector and where it came from; `None`: no export.
    pub endpoint: Option<(String, &'static str)>,
    pub service_name: String,
    /// Every resource attribute, `service.name` and `service.version` included.
    pub resource: BTreeMap<String, String>,
    pub sampling: Sampling,
    pub shutdown_timeout: Duration,
}

pub(crate) fn resolve(
    settings: &TelemetrySettings,
    default_service_name: &str,
    service_version: &str,
    env: &BTreeMap<String, String>,
) -> Result<Resolved, TelemetryError> {
    let var = |name: &str| env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());

    let filter = match var("RUST_LOG") {
        Some(directives) => (directives.to_owned(), "RUST_LOG"),
        None => (settings.log_level.clone(), "telemetry.log_level"),
    };

    let endpoint = resolve_endpoint(settings, &var)?;

    let sampling = if var("OTEL_TRACES_SAMPLER").is_some() {
        Sampling::FromEnv
    } else if (0.0..=1.0).contains(&settings.sample_ratio) {
        Sampling::Ratio(settings.sample_ratio)
    } else {
        return Err(TelemetryError::setting(
            "telemetry.sample_ratio",
            format!("must be 0.0 to 1.0, is {}", settings.sample_ratio),
        ));
    };

    // Lowest first: the binary, the file's attributes, the file's service_name, the
    // variable's attributes, OTEL_SERVICE_NAME (the specification puts it above them).
    let mut resource = BTreeMap::from([
        (SERVICE_NAME.to_owned(), default_service_name.to_owned()),
        (SERVICE_VERSION.to_owned(), service_version.to_owned()),
    ]);
    for (key, value) in &settings.resource_attributes {
        if key.trim().is_empty() {
            return Err(TelemetryError::setting(
                "telemetry.resource_attributes",
                "an attribute has an empty key",
            ));
        }
        resource.insert(key.trim().to_owned(), value.clone());
    }
    if let Some(name) = settings
        .service_name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        resource.insert(SERVICE_NAME.to_owned(), name.to_owned());
    }
    if let Some(list) = var("OTEL_RESOURCE_ATTRIBUTES") {
        resource.extend(parse_resource_attributes(list)?);
    }
    if let Some(name) = var("OTEL_SERVICE_NAME") {
        resource.insert(SERVICE_NAME.to_owned(), name.to_owned());
    }
    let service_name = resource
        .get(SERVICE_NAME)
        .cloned()
        .unwrap_or_else(|| default_service_name.to_owned());

    if settings.shutdown_timeout.is_zero() {
        return Err(TelemetryError::setting(
            "telemetry.shutdown_timeout",
            "must be more than 0",
        ));
    }

    Ok(Resolved {
        filter,
        log_format: settings.log_format,
        endpoint,
        service_name,
        resource,
        sampling,
        shutdown_timeout: settings.shutdown_timeout,
    })
}

fn resolve_endpoint<'a>(
    settings: &'a TelemetrySettings,
    var: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<(String, &'static str)>, TelemetryError> {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match var("OTEL_TRACES_EXPORTER") {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(TelemetryError::setting(
                "OTEL_TRACES_EXPORTER",
                format!("only otlp and none are supported, is '{other}'"),
            ));
        }
    }
    // Only gRPC is built in (no HTTP client in the graph); say so rather than export nowhere.
    for key in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = var(key) {
            if protocol != "grpc" {
                return Err(TelemetryError::setting(
                    key,
                    format!("only grpc is supported, is '{protocol}'"),
                ));
            }
            break;
        }
    }
    let file = settings
        .otlp_endpoint
        .as_deref()
        .map(str::trim)
        .filter(|e| !e.is_empty());
    let chosen = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .find_map(|key| var(key).map(|value| (value, key)))
    .or(file.map(|value| (value, "telemetry.otlp_endpoint")));
    let Some((endpoint, key)) = chosen else {
        return Ok(None);
    };
    check_endpoint(endpoint, key)?;
    Ok(Some((endpoint.to_owned(), key)))
}

/// The exporter would read a scheme-less address as https, and TLS is not built in.
fn check_endpoint(endpoint: &str, key: &str) -> Result<(), TelemetryError> {
    let uri: Uri = endpoint.parse().map_err(|_| {
        TelemetryError::setting(
            key,
            format!("'{endpoint}' is not a URL like http://127.0.0.1:4317"),
        )
    })?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http"), Some(_)) => Ok(()),
        (Some("https"), _) => Err(TelemetryError::setting(
            key,
            format!(
                "'{endpoint}': TLS to the collector is not built in; use http:// (a collector on the node or in the pod network)"
            ),
        )),
        _ => Err(TelemetryError::setting(
            key,
            format!("'{endpoint}' is not a URL like http://127.0.0.1:4317"),
        )),
    }
}

/// `key1=value1,key2=value2`, values percent-encoded (W3C Baggage octets), as the
/// OpenTelemetry specification defines `OTEL_RESOURCE_ATTRIBUTES`.
pub(crate) fn parse_resource_attributes(
    list: &str,
) -> Result<BTreeMap<String, String>, TelemetryError> {
    const KEY: &str = "OTEL_RESOURCE_ATTRIBUTES";
    let mut attributes = BTreeMap::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((key, value)) = entry.split_once('=') else {
            return Err(TelemetryError::setting(
                KEY,
                format!("'{entry}' is not key=value"),
            ));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(TelemetryError::setting(
                KEY,
                format!("'{entry}' has an empty key"),
            ));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| {
            TelemetryError::setting(
                KEY,
                format!("the value of {key} is not valid percent-encoded UTF-8"),
            )
        })?;
        attributes.insert(key.to_owned(), value);
    }
    Ok(attributes)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
