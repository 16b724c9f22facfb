//! W3C trace context survives every carrier: event headers, gRPC metadata and HTTP headers,
//! in both directions, without `init`.

mod common;

use std::collections::{BTreeMap, HashMap};

use axum::http::HeaderMap;
use cascade_telemetry::{
    Context, context_from_headers, context_from_http, context_from_metadata, has_valid_span,
    inject_into_headers, inject_into_http, inject_into_metadata,
};
use common::{REMOTE_SPAN_ID, REMOTE_TRACE_ID, remote_traceparent};
use opentelemetry::trace::TraceContextExt;
use tonic::metadata::MetadataMap;

const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn ids(cx: &Context) -> (String, String, bool) {
    let span = cx.span();
    let sc = span.span_context();
    (
        sc.trace_id().to_string(),
        sc.span_id().to_string(),
        sc.is_sampled(),
    )
}

#[test]
fn event_headers_round_trip() {
    let incoming = headers(&[
        ("traceparent", &remote_traceparent()),
        ("tracestate", STATE),
        ("user", "kept"),
    ]);
    let cx = context_from_headers(&incoming);
    assert_eq!(
        ids(&cx),
        (REMOTE_TRACE_ID.into(), REMOTE_SPAN_ID.into(), true)
    );
    assert!(cx.span().span_context().is_remote());

    let mut outgoing = headers(&[("user", "kept")]);
    inject_into_headers(&cx, &mut outgoing);
    assert_eq!(outgoing, incoming);
}

#[test]
fn protobuf_header_maps_round_trip_and_replace_other_cases() {
    let incoming: HashMap<String, String> = headers(&[
        ("TraceParent", &remote_traceparent()),
        ("tracestate", STATE),
    ])
    .into_iter()
    .collect();
    let cx = context_from_headers(&incoming);
    assert!(has_valid_span(&cx));
    assert_eq!(ids(&cx).0, REMOTE_TRACE_ID);

    let mut outgoing: HashMap<String, String> = HashMap::from([
        ("Traceparent".to_owned(), "00-old".to_owned()),
        ("user".to_owned(), "kept".to_owned()),
    ]);
    inject_into_headers(&cx, &mut outgoing);
    assert_eq!(outgoing.get("traceparent"), Some(&remote_traceparent()));
    assert_eq!(outgoing.get("tracestate").map(String::as_str), Some(STATE));
    assert_eq!(outgoing.len(), 3, "{outgoing:?}");

    let mut untouched = HashMap::from([("traceparent".to_owned(), "x".to_owned())]);
    inject_into_headers(&Context::new(), &mut untouched);
    assert_eq!(untouched["traceparent"], "x");
    assert!(!has_valid_span(&context_from_headers(&untouched)));
}

#[test]
fn extraction_ignores_the_case_of_header_names() {
    let cx = context_from_headers(&headers(&[("Traceparent", &remote_traceparent())]));
    assert_eq!(ids(&cx).0, REMOTE_TRACE_ID);
}

#[test]
fn malformed_or_missing_context_is_empty_and_injects_nothing() {
    for bad in [
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // forbidden version
    ] {
        let cx = context_from_headers(&headers(&[("traceparent", bad)]));
        assert!(!cx.span().span_context().is_valid(), "{bad:?}");
        let mut out = headers(&[("traceparent", "earlier")]);
        inject_into_headers(&cx, &mut out);
        assert_eq!(out, headers(&[("traceparent", "earlier")]), "{bad:?}");
    }
    assert!(
        !context_from_headers(&BTreeMap::new())
            .span()
            .span_context()
            .is_valid()
    );
}

#[test]
fn injecting_replaces_an_older_context_whatever_its_case() {
    let cx = context_from_headers(&headers(&[("traceparent", &remote_traceparent())]));
    let mut out = headers(&[
        (
            "Traceparent",
            "00-11111111111111111111111111111111-2222222222222222-01",
        ),
        ("TRACESTATE", "old=1"),
    ]);
    inject_into_headers(&cx, &mut out);
    assert_eq!(out, headers(&[("traceparent", &remote_traceparent())]));
}

#[test]
fn grpc_metadata_round_trip() {
    let mut incoming = MetadataMap::new();
    incoming.insert("traceparent", remote_traceparent().parse().expect("ascii"));
    incoming.insert("tracestate", STATE.parse().expect("ascii"));
    incoming.insert("x-other", "1".parse().expect("ascii"));
    let cx = context_from_metadata(&incoming);
    assert_eq!(
        ids(&cx),
        (REMOTE_TRACE_ID.into(), REMOTE_SPAN_ID.into(), true)
    );

    let mut outgoing = MetadataMap::new();
    outgoing.insert("tracestate", "stale=1".parse().expect("ascii"));
    inject_into_metadata(&cx, &mut outgoing);
    assert_eq!(
        outgoing.get("traceparent").and_then(|v| v.to_str().ok()),
        Some(remote_traceparent().as_str())
    );
    assert_eq!(
        outgoing.get("tracestate").and_then(|v| v.to_str().ok()),
        Some(STATE)
    );
    assert_eq!(outgoing.get_all("tracestate").iter().count(), 1);
}

#[test]
fn http_headers_round_trip() {
    let mut incoming = HeaderMap::new();
    incoming.insert("traceparent", remote_traceparent().parse().expect("ascii"));
    let cx = context_from_http(&incoming);
    assert_eq!(ids(&cx).0, REMOTE_TRACE_ID);

    let mut outgoing = HeaderMap::new();
    inject_into_http(&cx, &mut outgoing);
    assert_eq!(
        outgoing.get("traceparent").and_then(|v| v.to_str().ok()),
        Some(remote_traceparent().as_str())
    );
    assert!(
        outgoing.get("tracestate").is_none(),
        "empty tracestate is not sent"
    );
}

#[test]
fn a_context_crosses_every_carrier_unchanged() {
    // Producer (gRPC) -> event headers -> HTTP handler call -> gRPC again.
    let mut metadata = MetadataMap::new();
    metadata.insert("traceparent", remote_traceparent().parse().expect("ascii"));
    metadata.insert("tracestate", STATE.parse().expect("ascii"));
    let mut event = BTreeMap::new();
    inject_into_headers(&context_from_metadata(&metadata), &mut event);
    let mut http = HeaderMap::new();
    inject_into_http(&context_from_headers(&event), &mut http);
    let mut back = MetadataMap::new();
    inject_into_metadata(&context_from_http(&http), &mut back);
    assert_eq!(
        back.get("traceparent").and_then(|v| v.to_str().ok()),
        Some(remote_traceparent().as_str())
    );
    assert_eq!(
        back.get("tracestate").and_then(|v| v.to_str().ok()),
        Some(STATE)
    );
}

/// An event may hold 64 headers: a context goes in only where it fits, replacing the one
/// the headers carry, and headers that are full of the producer's own stay as they came.
#[test]
fn a_context_goes_into_event_headers_only_where_it_fits() {
    let cx = context_from_headers(&headers(&[("traceparent", &remote_traceparent())]));
    let own = |count: usize| -> BTreeMap<String, String> {
        (0..count)
            .map(|i| (format!("h{i}"), "v".to_owned()))
            .collect()
    };

    let mut full = own(64);
    inject_into_headers(&cx, &mut full);
    assert_eq!(full, own(64));

    let mut room_for_one = own(63);
    inject_into_headers(&cx, &mut room_for_one);
    assert_eq!(room_for_one.len(), 64);
    assert_eq!(room_for_one["traceparent"], remote_traceparent());

    let mut full_with_an_old_trace = own(63);
    full_with_an_old_trace.insert("TraceParent".into(), "00-old".into());
    inject_into_headers(&cx, &mut full_with_an_old_trace);
    assert_eq!(full_with_an_old_trace.len(), 64);
    assert_eq!(full_with_an_old_trace["traceparent"], remote_traceparent());

    // A `tracestate` needs a second header: with room for one, neither goes in.
    let with_state = context_from_headers(&headers(&[
        ("traceparent", &remote_traceparent()),
        ("tracestate", STATE),
    ]));
    let mut room_for_one = own(63);
    inject_into_headers(&with_state, &mut room_for_one);
    assert_eq!(room_for_one, own(63));
}
