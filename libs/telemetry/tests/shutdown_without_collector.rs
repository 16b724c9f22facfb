//! With nothing listening at the collector's address, spans are dropped and neither flush
//! nor shutdown hangs or panics, even on a current-thread runtime.

mod common;

use std::time::{Duration, Instant};

use cascade_telemetry::{TelemetrySettings, init};

#[tokio::test]
async fn shutdown_returns_promptly_when_no_collector_listens() {
    let settings = TelemetrySettings {
        otlp_endpoint: Some(format!("http://127.0.0.1:{}", common::closed_port())),
        shutdown_timeout: Duration::from_secs(2),
        ..TelemetrySettings::default()
    };
    let telemetry = init(&settings, "cascade-test", "0.1.0").expect("init without a collector");
    for i in 0..100 {
        let span = tracing::info_span!("work", i);
        span.in_scope(|| tracing::info!("inside"));
    }

    let started = Instant::now();
    let flushed = telemetry.flush().await;
    let flush_took = started.elapsed();
    assert!(flushed.is_err(), "nothing received the spans");
    assert!(
        flush_took < Duration::from_secs(6),
        "flush took {flush_took:?}"
    );

    let started = Instant::now();
    telemetry.shutdown().await;
    let shutdown_took = started.elapsed();
    assert!(
        shutdown_took < Duration::from_millis(2500),
        "shutdown took {shutdown_took:?}"
    );
    eprintln!("flush {flush_took:?}, shutdown {shutdown_took:?}");
}
