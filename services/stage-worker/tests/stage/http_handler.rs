//! The HTTP handler end to end: what the handler receives, and what each kind of response
//! does to the event.

use std::time::Duration;

use cascade_stage_worker::Registry;

use crate::harness::{Cascade, RunningStage, queue_config, stage_config};
use crate::http_server::{HandlerServer, gap, reply};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn the_handler_gets_the_documented_headers_and_a_2xx_completes() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("orders.ship", queue_config(Duration::from_secs(5)))
        .await;
    let server = HandlerServer::start(|_, _| reply(200, &[], "shipped")).await;
    let mut config = stage_config(&cascade, "orders.ship", &server.url);
    // A pipeline's last stage: its queue is orders.ship, and a 2xx is an ack.
    config.queue = None;
    config.pipeline = Some("orders".into());
    config.stage = Some("ship".into());
    config.last_stage = true;
    config.handler_token = Some(cascade_service::settings::Secret::new("handler-token-2"));
    let stage = RunningStage::start(config, &Registry::new());
    let id = cascade
        .enqueue(
            "orders.ship",
            b"{\"sku\":42}",
            &[("traceparent", TRACEPARENT), ("tenant", "acme")],
        )
        .await;

    cascade.wait_for_completed("orders.ship", 1).await;
    let received = server.received();
    assert_eq!(received.len(), 1, "one call");
    let call = &received[0];
    assert_eq!(call.body, b"{\"sku\":42}");
    assert_eq!(call.header("cascade-event-id"), Some(id.as_str()));
    assert_eq!(call.header("cascade-queue"), Some("orders.ship"));
    assert_eq!(call.header("cascade-pipeline"), Some("orders"));
    assert_eq!(call.header("cascade-stage"), Some("ship"));
    assert_eq!(call.header("cascade-attempt"), Some("1"));
    assert_eq!(call.header("traceparent"), Some(TRACEPARENT));
    assert_eq!(call.header("cascade-h-traceparent"), Some(TRACEPARENT));
    assert_eq!(call.header("cascade-h-tenant"), Some("acme"));
    assert_eq!(call.header("authorization"), Some("Bearer handler-token-2"));
    let gone = cascade.get("orders.ship", &id).await.expect_err("acked");
    assert_eq!(gone.code(), tonic::Code::NotFound);
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn a_retry_asked_with_a_delay_comes_back_after_that_delay() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("jobs", queue_config(Duration::from_secs(5)))
        .await;
    let server = HandlerServer::start(|call, _| match call {
        0 => reply(
            200,
            &[("cascade-outcome", "retry"), ("cascade-delay", "0.5")],
            "",
        ),
        _ => reply(200, &[], ""),
    })
    .await;
    let stage = RunningStage::start(
        stage_config(&cascade, "jobs", &server.url),
        &Registry::new(),
    );
    cascade.enqueue("jobs", b"x", &[]).await;

    cascade.wait_for_completed("jobs", 1).await;
    let received = server.received();
    assert_eq!(received.len(), 2);
    let waited = gap(&received[0], &received[1]);
    // The queue's backoff is 10 s: coming back sooner is the asked delay's doing.
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(5),
        "came back after {waited:?}"
    );
    assert_eq!(received[1].header("cascade-attempt"), Some("2"));
    assert_eq!(cascade.stats("jobs").await.retries_total, 1);
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn a_client_error_dead_letters_with_the_status_and_body() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("jobs", queue_config(Duration::from_secs(5)))
        .await;
    let server = HandlerServer::start(|_, _| reply(400, &[], "missing field sku\n")).await;
    let stage = RunningStage::start(
        stage_config(&cascade, "jobs", &server.url),
        &Registry::new(),
    );
    let id = cascade.enqueue("jobs", b"{}", &[]).await;

    crate::harness::wait_until("the event is dead-lettered", 10, || async {
        !cascade.dead_letters("jobs.dlq").await.is_empty()
    })
    .await;
    let dead = cascade.dead_letters("jobs.dlq").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id);
    assert_eq!(
        dead[0]
            .headers
            .get("cascade-dead-letter-reason")
            .map(String::as_str),
        Some("HTTP 400: missing field sku")
    );
    assert_eq!(server.received().len(), 1, "no retry");
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn unavailable_with_retry_after_is_retried_after_it() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("jobs", queue_config(Duration::from_secs(5)))
        .await;
    let server = HandlerServer::start(|call, _| match call {
        0 => reply(503, &[("retry-after", "1")], "busy"),
        _ => reply(204, &[], ""),
    })
    .await;
    let stage = RunningStage::start(
        stage_config(&cascade, "jobs", &server.url),
        &Registry::new(),
    );
    cascade.enqueue("jobs", b"x", &[]).await;

    cascade.wait_for_completed("jobs", 1).await;
    let received = server.received();
    assert_eq!(received.len(), 2);
    let waited = gap(&received[0], &received[1]);
    assert!(
        waited >= Duration::from_millis(950) && waited < Duration::from_secs(5),
        "came back after {waited:?}"
    );
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn advance_to_a_named_queue_carries_the_new_payload_and_headers() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("orders", queue_config(Duration::from_secs(5)))
        .await;
    cascade
        .create_queue("invoices", queue_config(Duration::from_secs(5)))
        .await;
    let server = HandlerServer::start(|_, _| {
        reply(
            200,
            &[
                ("cascade-outcome", "advance:invoices"),
                ("cascade-payload", "replace"),
                ("cascade-h-total", "99"),
            ],
            "invoice for order",
        )
    })
    .await;
    let stage = RunningStage::start(
        stage_config(&cascade, "orders", &server.url),
        &Registry::new(),
    );
    let id = cascade
        .enqueue("orders", b"order", &[("tenant", "acme")])
        .await;

    cascade.wait_for_completed("orders", 1).await;
    let moved = cascade
        .get("invoices", &id)
        .await
        .expect("advanced, same id");
    assert_eq!(moved.payload, &b"invoice for order"[..]);
    assert_eq!(moved.headers.get("total").map(String::as_str), Some("99"));
    assert_eq!(
        moved.headers.get("tenant").map(String::as_str),
        Some("acme")
    );
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}
