//! With trace export off no OpenTelemetry layer runs, yet a service still forwards the
//! producer's trace context unchanged from incoming headers to outgoing ones. Also: settings
//! that cannot work fail `init` with the key named, and install nothing.

mod common;

use std::collections::BTreeMap;

use cascade_telemetry::{
    LogFormat, TelemetryError, TelemetrySettings, context_from_headers, current_context, init,
    inject_into_headers, set_parent, set_parent_from_headers, span_context,
};
use common::remote_traceparent;

#[test]
fn bad_settings_fail_then_passthrough_works() {
    // Export needs a runtime for its connection; there is none in a plain #[test].
    let exporting = TelemetrySettings {
        otlp_endpoint: Some("http://127.0.0.1:4317".into()),
        ..TelemetrySettings::default()
    };
    let err = init(&exporting, "cascade-test", "0.1.0")
        .err()
        .expect("no runtime");
    assert!(matches!(err, TelemetryError::NoRuntime { .. }), "{err}");

    let bad_level = TelemetrySettings {
        log_level: "info,[unclosed".into(),
        ..TelemetrySettings::default()
    };
    match init(&bad_level, "cascade-test", "0.1.0")
        .err()
        .expect("bad filter")
    {
        TelemetryError::Setting { key, .. } => assert_eq!(key, "telemetry.log_level"),
        other => panic!("expected a setting error, got {other}"),
    }

    let settings = TelemetrySettings {
        log_format: LogFormat::Json,
        ..TelemetrySettings::default()
    };
    let telemetry = init(&settings, "cascade-test", "0.1.0").expect("init without export");
    assert!(!telemetry.is_exporting());

    let incoming = BTreeMap::from([
        ("traceparent".to_owned(), remote_traceparent()),
        ("tracestate".to_owned(), "vendor=opaque".to_owned()),
    ]);
    let handler = tracing::info_span!("worker.handle", cascade.event_id = "e1");
    set_parent_from_headers(&handler, &incoming).expect("remembered");
    let mut outgoing = BTreeMap::from([("traceparent".to_owned(), "stale".to_owned())]);
    handler.in_scope(|| {
        let advance = tracing::info_span!("worker.advance");
        advance.in_scope(|| inject_into_headers(&current_context(), &mut outgoing));
    });
    assert_eq!(outgoing, incoming, "the incoming context goes on unchanged");

    // A span without a remote parent has nothing to forward: the headers stay as they are.
    let unrelated = tracing::info_span!("unrelated");
    let mut untouched = BTreeMap::from([("k".to_owned(), "v".to_owned())]);
    inject_into_headers(&span_context(&unrelated), &mut untouched);
    assert_eq!(
        untouched,
        BTreeMap::from([("k".to_owned(), "v".to_owned())])
    );

    // Setting a parent again replaces the remembered one rather than failing.
    set_parent(&handler, context_from_headers(&incoming)).expect("replace");
}
