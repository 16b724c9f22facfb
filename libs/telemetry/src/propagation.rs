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
use cascade_core::event::{MAX_HEADERS, is_reserved_header};
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

/// The context carried by an event's headers (the domain's `BTreeMap` or a protobuf
/// message's `map<string, string>`); empty (no span) when they carry none or a malformed one.
pub fn context_from_headers(headers: &impl HeaderMapLike) -> Context {
    propagator().extract(&EventHeaders(headers))
}

/// Writes `cx`'s span into an event's headers, unless that would take them past the most
/// an event may hold ([`MAX_HEADERS`]): an event whose own headers fill it is kept as it
/// came and goes on untraced from here, where adding a `traceparent` would have had it
/// refused for a header its producer never sent.
pub fn inject_into_headers(cx: &Context, headers: &mut impl HeaderMapLike) {
    if !has_valid_span(cx) {
        return;
    }
    let mut trace = BTreeMap::new();
    propagator().inject_context(cx, &mut EventHeadersMut(&mut trace));
    let is_trace_key = |key: &String| {
        key.eq_ignore_ascii_case(TRACEPARENT) || key.eq_ignore_ascii_case(TRACESTATE)
    };
    // As the event's limit counts them: Cascade's own (`cascade-*`) come on top.
    let kept = headers
        .entries()
        .filter(|(key, _)| !is_trace_key(key) && !is_reserved_header(key))
        .count();
    if kept + trace.len() > MAX_HEADERS {
        return;
    }
    // Both keys are replaced: a context without a `tracestate` removes the old one.
    headers.retain_keys(|key| !is_trace_key(key));
    for (key, value) in trace {
        headers.put(key, value);
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

/// The two string maps an event's headers live in: the domain's and prost's.
pub trait HeaderMapLike {
    fn get_exact(&self, key: &str) -> Option<&String>;
    fn entries(&self) -> impl Iterator<Item = (&String, &String)>;
    fn retain_keys(&mut self, keep: impl FnMut(&String) -> bool);
    fn put(&mut self, key: String, value: String);
}

/// The same four calls on both maps (their methods share names, not a trait).
macro_rules! header_map_like {
    ($($map:ty),*) => {$(
        impl HeaderMapLike for $map {
            fn get_exact(&self, key: &str) -> Option<&String> {
                self.get(key)
            }
            fn entries(&self) -> impl Iterator<Item = (&String, &String)> {
                self.iter()
            }
            fn retain_keys(&mut self, mut keep: impl FnMut(&String) -> bool) {
                self.retain(|k, _| keep(k));
            }
            fn put(&mut self, key: String, value: String) {
                self.insert(key, value);
            }
        }
    )*};
}

header_map_like!(BTreeMap<String, String>, HashMap<String, String>);

struct EventHeaders<'a, M>(&'a M);

impl<M: HeaderMapLike> Extractor for EventHeaders<'_, M> {
    /// Exact key first; producers that wrote `Traceparent` are still understood, since HTTP
    /// and gRPC treat the name case-insensitively.
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get_exact(key)
            .or_else(|| {
                self.0
                    .entries()
                    .find(|(k, _)| k.eq_ignore_ascii_case(key))
                    .map(|(_, v)| v)
            })
            .map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.entries().map(|(k, _)| k.as_str()).collect()
    }
}

struct EventHeadersMut<'a, M>(&'a mut M);

impl<M: HeaderMapLike> Injector for EventHeadersMut<'_, M> {
    fn set(&mut self, key: &str, value: String) {
        // Drop differently-cased copies so that one reader cannot see a stale trace.
        self.0.retain_keys(|k| !k.eq_ignore_ascii_case(key));
        if !value.is_empty() {
            self.0.put(key.to_owned(), value);
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
