//! W3C trace context (`traceparent`, `tracestate`) between an OpenTelemetry `Context` and the
//! three carriers Cascade has: an event's headers, gRPC metadata and HTTP headers.
//!
//! The helpers use the W3C propagator directly rather than the global one: the event's
//! headers are specified to carry W3C `traceparent` whatever the process configured, and
//! they work before (or without) `init`, in tests and tools.
//!
//! Injecting a context without a valid span changes nothing, so headers copied from an
//! earlier event keep the trace they had. Injecting a valid one replaces both keys (an
//! empty `tracestate` removes the old one).

use std::collections::{BTreeMap, HashMap};

use axum::http::HeaderMap;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};

pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

fn propagator() -> TraceContextPropagator {
    TraceContextPropagator::new()
}

/// The context carried by an event's headers; empty (no span) when they carry none or a
/// malformed one.
pub fn context_from_headers(headers: &BTreeMap<String, String>) -> Context {
    propagator().extract(&EventHeaders(headers))
}

/// Writes `cx`'s span into an event's headers.
pub fn inject_into_headers(cx: &Context, headers: &mut BTreeMap<String, String>) {
    if has_valid_span(cx) {
        propagator().inject_context(cx, &mut EventHeadersMut(headers));
    }
}

/// `context_from_headers` for a protobuf message's headers (`map<string, string>`).
pub fn context_from_map(headers: &HashMap<String, String>) -> Context {
    propagator().extract(&MapHeaders(headers))
}

/// `inject_into_headers` for a protobuf message's headers (`map<string, string>`).
pub fn inject_into_map(cx: &Context, headers: &mut HashMap<String, String>) {
    if has_valid_span(cx) {
        propagator().inject_context(cx, &mut MapHeadersMut(headers));
    }
}

pub fn context_from_metadata(metadata: &MetadataMap) -> Context {
    propagator().extract(&GrpcMetadata(metadata))
}

pub fn inject_into_metadata(cx: &Context, metadata: &mut MetadataMap) {
    if has_valid_span(cx) {
        propagator().inject_context(cx, &mut GrpcMetadataMut(metadata));
    }
}

pub fn context_from_http(headers: &HeaderMap) -> Context {
    propagator().extract(&HttpHeaders(headers))
}

pub fn inject_into_http(cx: &Context, headers: &mut HeaderMap) {
    if has_valid_span(cx) {
        propagator().inject_context(cx, &mut HttpHeadersMut(headers));
    }
}

/// Whether `cx` carries a span to continue (a parsed `traceparent`, a live span).
pub fn has_valid_span(cx: &Context) -> bool {
    cx.span().span_context().is_valid()
}

struct EventHeaders<'a>(&'a BTreeMap<String, String>);

impl Extractor for EventHeaders<'_> {
    /// Exact key first; producers that wrote `Traceparent` are still understood, since HTTP
    /// and gRPC treat the name case-insensitively.
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .or_else(|| {
                self.0
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v)
            })
            .map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct EventHeadersMut<'a>(&'a mut BTreeMap<String, String>);

impl Injector for EventHeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        // Drop differently-cased copies so that one reader cannot see a stale trace.
        self.0.retain(|k, _| !k.eq_ignore_ascii_case(key));
        if !value.is_empty() {
            self.0.insert(key.to_owned(), value);
        }
    }
}

struct MapHeaders<'a>(&'a HashMap<String, String>);

impl Extractor for MapHeaders<'_> {
    /// Exact key first, then any case (as `EventHeaders`).
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .or_else(|| {
                self.0
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v)
            })
            .map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct MapHeadersMut<'a>(&'a mut HashMap<String, String>);

impl Injector for MapHeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.retain(|k, _| !k.eq_ignore_ascii_case(key));
        if !value.is_empty() {
            self.0.insert(key.to_owned(), value);
        }
    }
}

struct GrpcMetadata<'a>(&'a MetadataMap);

impl Extractor for GrpcMetadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(key) => Some(key.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

struct GrpcMetadataMut<'a>(&'a mut MetadataMap);

impl Injector for GrpcMetadataMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        let Ok(name) = MetadataKey::from_bytes(key.as_bytes()) else {
            return;
        };
        self.0.remove(&name);
        // The propagator writes only visible ASCII, so a refused value cannot happen; skip it
        // rather than fail a request over telemetry.
        if let Ok(value) = MetadataValue::try_from(value.as_str())
            && !value.is_empty()
        {
            self.0.insert(name, value);
        }
    }
}

struct HttpHeaders<'a>(&'a HeaderMap);

impl Extractor for HttpHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct HttpHeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HttpHeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        let Ok(name) = axum::http::HeaderName::from_bytes(key.as_bytes()) else {
            return;
        };
        self.0.remove(&name);
        if let Ok(value) = axum::http::HeaderValue::from_str(&value)
            && !value.is_empty()
        {
            self.0.insert(name, value);
        }
    }
}
