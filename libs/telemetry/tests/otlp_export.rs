//! Spans exported after `init` reach an OTLP/gRPC collector with the service's resource
//! attributes, continue a producer's trace from its `traceparent`, propagate onwards with
//! their own ids, and link a batch span to each event's context. `OTEL_RESOURCE_ATTRIBUTES`
//! adds to the resource. A `log_level` of `warn` quiets the logs, not the export.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_telemetry::{
    TelemetryError, TelemetrySettings, add_link_from_headers, attr, context_from_headers,
    current_context, init, inject_into_headers, set_parent, set_parent_from_headers,
};
use common::{REMOTE_SPAN_ID, REMOTE_TRACE_ID, hex, remote_traceparent, string_attribute};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn spans_reach_the_collector_as_one_trace_per_event() {
    // SAFETY: set before any other thread of this test process exists (the one test of
    // this file builds its runtime below), so nothing reads the environment concurrently.
    unsafe { std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=ingest-0") };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(export_and_check());
}

async fn export_and_check() {
    let (endpoint, received) = common::start_receiver().await;
    let mut settings = TelemetrySettings {
        otlp_endpoint: Some(endpoint),
        shutdown_timeout: Duration::from_secs(5),
        // Quiet logs must not silence the (INFO) spans: export has its own filter.
        log_level: "warn".into(),
        ..TelemetrySettings::default()
    };
    settings
        .resource_attributes
        .insert("deployment.environment".into(), "test".into());
    let telemetry = init(&settings, "cascade-test", "9.8.7").expect("init");
    assert!(telemetry.is_exporting());
    assert_eq!(telemetry.service_name(), "cascade-test");

    // Ingest: the producer's context arrives in the headers; persistence is a child span.
    let producer = BTreeMap::from([("traceparent".to_owned(), remote_traceparent())]);
    let ingest = tracing::info_span!(
        "ingest.enqueue",
        cascade.queue = "inbox:alice",
        { attr::EVENT_ID } = "01J0000000000000000000000A",
    );
    set_parent_from_headers(&ingest, &producer).expect("parent of a fresh span");
    let mut stored = BTreeMap::new();
    {
        let _ingest = ingest.enter();
        let persist = tracing::info_span!("dispatcher.persist");
        let _persist = persist.enter();
        inject_into_headers(&current_context(), &mut stored);
    }
    drop(ingest);

    // Take: one span for the batch, linked to each event's context.
    let take = tracing::info_span!("dispatcher.take", { attr::QUEUE } = "inbox:alice");
    assert!(add_link_from_headers(&take, &stored));
    assert!(
        !add_link_from_headers(&take, &BTreeMap::new()),
        "no context, no link"
    );
    drop(take);

    // The parent of an entered span is fixed.
    let late = tracing::info_span!("late");
    let entered = late.enter();
    let err = set_parent(&late, context_from_headers(&producer)).expect_err("already started");
    assert!(matches!(err, TelemetryError::SetParent { .. }), "{err}");
    drop(entered);

    // A second init shares the first provider and does not shut it down.
    let second =
        init(&TelemetrySettings::default(), "cascade-other", "0.0.1").expect("second init");
    assert!(second.is_exporting());
    assert_eq!(second.service_name(), "cascade-test");
    second.shutdown().await;
    telemetry
        .flush()
        .await
        .expect("flush to a listening collector");

    let (resource, ingest) = received.wait_for_span("ingest.enqueue", WAIT).await;
    let resource_attr = |key| string_attribute(&resource.attributes, key);
    assert_eq!(
        resource_attr("service.name").as_deref(),
        Some("cascade-test")
    );
    assert_eq!(resource_attr("service.version").as_deref(), Some("9.8.7"));
    assert_eq!(
        resource_attr("deployment.environment").as_deref(),
        Some("test")
    );
    assert_eq!(
        resource_attr("k8s.pod.name").as_deref(),
        Some("ingest-0"),
        "from OTEL_RESOURCE_ATTRIBUTES"
    );
    assert!(resource_attr("telemetry.sdk.name").is_some());
    assert_eq!(hex(&ingest.trace_id), REMOTE_TRACE_ID);
    assert_eq!(hex(&ingest.parent_span_id), REMOTE_SPAN_ID);
    assert_eq!(
        string_attribute(&ingest.attributes, "cascade.queue").as_deref(),
        Some("inbox:alice")
    );
    assert_eq!(
        string_attribute(&ingest.attributes, "cascade.event_id").as_deref(),
        Some("01J0000000000000000000000A")
    );

    let (_, persist) = received.wait_for_span("dispatcher.persist", WAIT).await;
    assert_eq!(hex(&persist.trace_id), REMOTE_TRACE_ID);
    assert_eq!(persist.parent_span_id, ingest.span_id);
    assert_eq!(
        stored.get("traceparent"),
        Some(&format!(
            "00-{REMOTE_TRACE_ID}-{}-01",
            hex(&persist.span_id)
        )),
        "the stored context is the persist span's"
    );
    assert!(
        !stored.contains_key("tracestate"),
        "an empty tracestate is not stored"
    );

    let (_, take) = received.wait_for_span("dispatcher.take", WAIT).await;
    assert_ne!(
        hex(&take.trace_id),
        REMOTE_TRACE_ID,
        "a batch starts its own trace"
    );
    assert_eq!(take.links.len(), 1);
    assert_eq!(hex(&take.links[0].trace_id), REMOTE_TRACE_ID);
    assert_eq!(take.links[0].span_id, persist.span_id);

    telemetry.shutdown().await;
}
