//! A collector that accepts connections but never answers cannot hold the exit: shutdown
//! gives up after `shutdown_timeout`.

mod common;

use std::time::{Duration, Instant};

use cascade_telemetry::{TelemetrySettings, init};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_up_after_its_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    // Accept and hold every connection, never speaking HTTP/2.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let settings = TelemetrySettings {
        otlp_endpoint: Some(format!("http://{addr}")),
        shutdown_timeout: Duration::from_millis(500),
        ..TelemetrySettings::default()
    };
    let telemetry = init(&settings, "cascade-test", "0.1.0").expect("init");
    tracing::info_span!("work").in_scope(|| tracing::info!("inside"));

    let started = Instant::now();
    telemetry.shutdown().await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "shutdown took {took:?}");
    eprintln!("shutdown {took:?}");
}
