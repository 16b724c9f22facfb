use std::collections::BTreeMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn run(settings: &TelemetrySettings, pairs: &[(&str, &str)]) -> Result<Resolved, TelemetryError> {
    resolve(settings, "cascade-ingest", "1.2.3", &env(pairs))
}

fn setting_key(err: TelemetryError) -> String {
    match err {
        TelemetryError::Setting { key, .. } => key,
        other => panic!("expected a setting error, got {other}"),
    }
}

#[test]
fn defaults_log_at_info_export_nothing_and_name_the_binary() {
    let resolved = run(&TelemetrySettings::default(), &[]).expect("defaults");
    assert_eq!(resolved.filter, ("info".to_owned(), "telemetry.log_level"));
    assert_eq!(resolved.endpoint, None);
    assert_eq!(resolved.service_name, "cascade-ingest");
    assert_eq!(resolved.resource[SERVICE_VERSION], "1.2.3");
    assert_eq!(resolved.sampling, Sampling::Ratio(1.0));
}

#[test]
fn rust_log_overrides_the_level() {
    let resolved = run(&TelemetrySettings::default(), &[("RUST_LOG", "debug")]).expect("resolve");
    assert_eq!(resolved.filter, ("debug".to_owned(), "RUST_LOG"));
}

#[test]
fn endpoint_precedence_is_file_then_generic_then_traces_variable() {
    let settings = TelemetrySettings {
        otlp_endpoint: Some("http://file:4317".into()),
        ..TelemetrySettings::default()
    };
    let pick = |pairs: &[(&str, &str)]| run(&settings, pairs).expect("resolve").endpoint;
    assert_eq!(
        pick(&[]),
        Some(("http://file:4317".to_owned(), "telemetry.otlp_endpoint"))
    );
    assert_eq!(
        pick(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317")]),
        Some((
            "http://generic:4317".to_owned(),
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        ))
    );
    assert_eq!(
        pick(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ]),
        Some((
            "http://traces:4317".to_owned(),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        ))
    );
    // An empty variable is unset, as the specification says.
    assert_eq!(
        pick(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]),
        Some(("http://file:4317".to_owned(), "telemetry.otlp_endpoint"))
    );
}

#[test]
fn export_is_switched_off_by_the_standard_variables() {
    let settings = TelemetrySettings {
        otlp_endpoint: Some("http://file:4317".into()),
        ..TelemetrySettings::default()
    };
    for pairs in [
        &[("OTEL_SDK_DISABLED", "true")][..],
        &[("OTEL_SDK_DISABLED", "TRUE")][..],
        &[("OTEL_TRACES_EXPORTER", "none")][..],
    ] {
        assert_eq!(
            run(&settings, pairs).expect("resolve").endpoint,
            None,
            "{pairs:?}"
        );
    }
    assert!(
        run(&settings, &[("OTEL_SDK_DISABLED", "false")])
            .expect("resolve")
            .endpoint
            .is_some()
    );
}

#[test]
fn unsupported_exporters_protocols_and_endpoints_are_refused_by_name() {
    let settings = |endpoint: &str| TelemetrySettings {
        otlp_endpoint: Some(endpoint.into()),
        ..TelemetrySettings::default()
    };
    let ok = settings("http://127.0.0.1:4317");
    for (pairs, key) in [
        (
            &[("OTEL_TRACES_EXPORTER", "zipkin")][..],
            "OTEL_TRACES_EXPORTER",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")][..],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")][..],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
    ] {
        let err = run(&ok, pairs).expect_err("refused");
        assert_eq!(setting_key(err), key);
    }
    for bad in [
        "https://collector:4317",
        "collector:4317",
        "not a url",
        "http://",
    ] {
        let err = run(&settings(bad), &[]).expect_err(bad);
        assert_eq!(setting_key(err), "telemetry.otlp_endpoint", "{bad}");
    }
    // The signal-specific protocol wins over the generic one.
    run(
        &ok,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ],
    )
    .expect("traces protocol is grpc");
}

#[test]
fn service_name_precedence() {
    let mut settings = TelemetrySettings::default();
    settings
        .resource_attributes
        .insert(SERVICE_NAME.into(), "from-file-attributes".into());
    assert_eq!(
        run(&settings, &[]).expect("r").service_name,
        "from-file-attributes"
    );

    settings.service_name = Some("from-file".into());
    assert_eq!(run(&settings, &[]).expect("r").service_name, "from-file");

    let attrs = [(
        "OTEL_RESOURCE_ATTRIBUTES",
        "service.name=from-env-attributes",
    )];
    assert_eq!(
        run(&settings, &attrs).expect("r").service_name,
        "from-env-attributes"
    );

    let both = [attrs[0], ("OTEL_SERVICE_NAME", "from-env")];
    let resolved = run(&settings, &both).expect("r");
    assert_eq!(resolved.service_name, "from-env");
    assert_eq!(resolved.resource[SERVICE_NAME], "from-env");
}

#[test]
fn resource_attributes_merge_with_the_variable_winning() {
    let mut settings = TelemetrySettings::default();
    settings
        .resource_attributes
        .insert("deployment.environment".into(), "staging".into());
    settings
        .resource_attributes
        .insert("team".into(), "queues".into());
    let resolved = run(
        &settings,
        &[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod, k8s.pod.name=ingest-0,note=a%2Cb%3Dc%20d",
        )],
    )
    .expect("resolve");
    assert_eq!(resolved.resource["deployment.environment"], "prod");
    assert_eq!(resolved.resource["team"], "queues");
    assert_eq!(resolved.resource["k8s.pod.name"], "ingest-0");
    assert_eq!(resolved.resource["note"], "a,b=c d");
    assert_eq!(resolved.resource[SERVICE_VERSION], "1.2.3");
}

#[test]
fn malformed_resource_attributes_are_refused() {
    for bad in ["novalue", "=x", "k=%zz", "k=%4", "k=%+1", "k=%ff"] {
        let err = parse_resource_attributes(bad).expect_err(bad);
        assert_eq!(setting_key(err), "OTEL_RESOURCE_ATTRIBUTES", "{bad}");
    }
    assert_eq!(
        parse_resource_attributes(" a=1 ,, b = 2 ").expect("lenient spacing"),
        BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])
    );
}

#[test]
fn sampling_ratio_is_checked_unless_the_sampler_variable_decides() {
    let settings = TelemetrySettings {
        sample_ratio: 1.5,
        ..TelemetrySettings::default()
    };
    let err = run(&settings, &[]).expect_err("out of range");
    assert_eq!(setting_key(err), "telemetry.sample_ratio");
    let resolved = run(&settings, &[("OTEL_TRACES_SAMPLER", "always_off")]).expect("env decides");
    assert_eq!(resolved.sampling, Sampling::FromEnv);
}

#[test]
fn settings_parse_strictly_with_human_durations() {
    let parsed: TelemetrySettings = serde_json::from_value(serde_json::json!({
        "log_format": "json",
        "otlp_endpoint": "http://otel:4317",
        "resource_attributes": { "deployment.environment": "prod" },
        "sample_ratio": 0.25,
        "shutdown_timeout": "500ms",
    }))
    .expect("parse");
    assert_eq!(parsed.log_format, LogFormat::Json);
    assert_eq!(parsed.log_level, "info");
    assert_eq!(parsed.shutdown_timeout, Duration::from_millis(500));
    let unknown = serde_json::from_value::<TelemetrySettings>(serde_json::json!({ "sample": 1 }));
    assert!(unknown.is_err());
}
