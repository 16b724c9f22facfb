//! The gRPC handler: the stage worker calls the user's `cascade.v1.Handler` (served here by
//! tonic) with the event and attempt, retries after a gRPC error, and completes with the
//! outcome it answers; the call's metadata carries the event's `traceparent` (no trace
//! export here: the context is forwarded unchanged).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_core::QueueConfig;
use cascade_proto::v1;
use cascade_proto::v1::handler_server::{Handler, HandlerServer};
use cascade_stage_worker::Registry;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use crate::harness::{Cascade, RunningStage, stage_config};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    id: String,
    queue: String,
    attempt: u32,
    payload: Vec<u8>,
    traceparent: Option<String>,
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[derive(Default)]
struct Shipper {
    calls: Mutex<Vec<Call>>,
}

#[tonic::async_trait]
impl Handler for Shipper {
    async fn handle(
        &self,
        request: Request<v1::HandleRequest>,
    ) -> Result<Response<v1::HandleResponse>, Status> {
        let traceparent = request
            .metadata()
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let request = request.into_inner();
        let event = request.event.unwrap_or_default();
        let call = {
            let mut calls = self.calls.lock().expect("calls");
            calls.push(Call {
                id: event.id,
                queue: event.queue,
                attempt: request.attempt,
                payload: event.payload,
                traceparent,
            });
            calls.len()
        };
        if call == 1 {
            return Err(Status::unavailable("warming up"));
        }
        Ok(Response::new(v1::HandleResponse {
            outcome: Some(v1::handle_response::Outcome::Advance(v1::Advance {
                to: "shipped".into(),
                payload: Some(b"label printed".to_vec()),
                headers: HashMap::from([("carrier".to_owned(), "dhl".to_owned())]),
                delay: None,
            })),
        }))
    }
}

#[tokio::test]
async fn a_grpc_handler_is_retried_after_an_error_and_its_outcome_applied() {
    let cascade = Cascade::start().await;
    let quick_retries = QueueConfig {
        lease: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(100),
        ..QueueConfig::default()
    };
    cascade.create_queue("packing", quick_retries.clone()).await;
    cascade.create_queue("shipped", quick_retries).await;
    let shipper = Arc::new(Shipper::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(HandlerServer::from_arc(Arc::clone(&shipper)))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let stage = RunningStage::start(
        stage_config(&cascade, "packing", &format!("grpc://{addr}")),
        &Registry::new(),
    );
    let id = cascade
        .enqueue("packing", b"parcel", &[("traceparent", TRACEPARENT)])
        .await;

    cascade.wait_for_completed("packing", 1).await;
    let calls = shipper.calls.lock().expect("calls").clone();
    let expected: Vec<Call> = (1..=2)
        .map(|attempt| Call {
            id: id.clone(),
            queue: "packing".to_owned(),
            attempt,
            payload: b"parcel".to_vec(),
            traceparent: Some(TRACEPARENT.to_owned()),
        })
        .collect();
    assert_eq!(calls, expected);
    let moved = cascade.get("shipped", &id).await.expect("advanced");
    assert_eq!(moved.payload, b"label printed");
    assert_eq!(
        moved.headers.get("carrier").map(String::as_str),
        Some("dhl")
    );
    stage.stop().await.expect("a clean stop");
    server.abort();
    cascade.stop().await;
}
