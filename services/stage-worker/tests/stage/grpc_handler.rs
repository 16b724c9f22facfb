//! The gRPC handler: the stage worker calls the user's `cascade.v1.Handler` (served here by
//! tonic, over mutual TLS) with the event and attempt, retries after a gRPC error, and
//! completes with the outcome it answers; the call's metadata carries the event's
//! `traceparent` (no trace export here: the context is forwarded unchanged) and the
//! worker's `handler_token`; the worker trusts the handler's CA and presents its own
//! certificate (`handler_tls`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_core::QueueConfig;
use cascade_e2e::pki::TestCa;
use cascade_proto::v1;
use cascade_proto::v1::handler_server::{Handler, HandlerServer};
use cascade_service::settings::{ClientTlsFiles, Secret};
use cascade_stage_worker::Registry;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Response, Status};

use crate::harness::{Cascade, RunningStage, stage_config};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    id: String,
    queue: String,
    attempt: u32,
    payload: Vec<u8>,
    traceparent: Option<String>,
    authorization: Option<String>,
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
        let metadata = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (traceparent, authorization) = (metadata("traceparent"), metadata("authorization"));
        assert!(
            request.peer_certs().is_some_and(|chain| !chain.is_empty()),
            "the worker presented its certificate"
        );
        let request = request.into_inner();
        let event = request.event.unwrap_or_default();
        let call = {
            let mut calls = self.calls.lock().expect("calls");
            calls.push(Call {
                id: event.id,
                queue: event.queue,
                attempt: request.attempt,
                payload: event.payload.to_vec(),
                traceparent,
                authorization,
            });
            calls.len()
        };
        if call == 1 {
            return Err(Status::unavailable("warming up"));
        }
        Ok(Response::new(v1::HandleResponse {
            outcome: Some(v1::handle_response::Outcome::Advance(v1::Advance {
                to: "shipped".into(),
                payload: Some(b"label printed".to_vec().into()),
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
    let (ca, dir) = (
        TestCa::new("handlers' CA"),
        tempfile::tempdir().expect("tempdir"),
    );
    let served = ca.server();
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&served.cert_pem, &served.key_pem))
        .client_ca_root(Certificate::from_pem(ca.cert_pem()));
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .tls_config(tls)
            .expect("TLS")
            .add_service(HandlerServer::from_arc(Arc::clone(&shipper)))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write");
    let (cert_file, key_file) = ca.client(&["worker.test"]).write(dir.path(), "worker");
    let mut config = stage_config(&cascade, "packing", &format!("grpcs://{addr}"));
    config.handler_tls = ClientTlsFiles {
        ca_file: Some(ca_file),
        cert_file: Some(cert_file),
        key_file: Some(key_file),
    };
    config.handler_token = Some(Secret::new("handler-token-1"));
    let stage = RunningStage::start(config, &Registry::new());
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
            authorization: Some("Bearer handler-token-1".to_owned()),
        })
        .collect();
    assert_eq!(calls, expected);
    let moved = cascade.get("shipped", &id).await.expect("advanced");
    assert_eq!(moved.payload, &b"label printed"[..]);
    assert_eq!(
        moved.headers.get("carrier").map(String::as_str),
        Some("dhl")
    );
    stage.stop().await.expect("a clean stop");
    server.abort();
    cascade.stop().await;
}
