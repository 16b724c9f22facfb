//! `/metrics` served over HTTP by the router services merge into their admin port.

use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::{EnqueueResult, OPENMETRICS_CONTENT_TYPE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn metrics_are_scraped_over_http() {
    let metrics = Metrics::new();
    metrics
        .enqueue_total("inbox:*", EnqueueResult::Ok)
        .inc_by(3);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let app = axum::Router::new().merge(metrics.router());
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });

    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("response");

    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {OPENMETRICS_CONTENT_TYPE}")),
        "{head}"
    );
    assert!(
        body.contains(r#"cascade_enqueue_total{queue="inbox:*",result="ok"} 3"#),
        "{body}"
    );
    assert!(!body.contains("alice"), "no per-user name in a label");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
}
