//! Test helpers: an OTLP/gRPC trace receiver on a loopback port, and span lookups.

#![allow(dead_code)] // each test file uses a part

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::Notify;

/// What the receiver got: every span with the resource it came with.
#[derive(Clone, Default)]
pub struct Received {
    spans: Arc<Mutex<Vec<(Resource, Span)>>>,
    arrived: Arc<Notify>,
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().expect("receiver lock");
        for resource_spans in request.into_inner().resource_spans {
            let resource = resource_spans.resource.unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push((resource.clone(), span));
                }
            }
        }
        self.arrived.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Received {
    /// Waits until a span named `name` arrived, or panics after `within`.
    pub async fn wait_for_span(&self, name: &str, within: Duration) -> (Resource, Span) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.arrived.notified();
            if let Some(found) = self.find(name) {
                return found;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                let names: Vec<String> = self
                    .spans
                    .lock()
                    .expect("receiver lock")
                    .iter()
                    .map(|(_, s)| s.name.clone())
                    .collect();
                panic!("no span {name} within {within:?}; got {names:?}");
            }
        }
    }

    pub fn find(&self, name: &str) -> Option<(Resource, Span)> {
        self.spans
            .lock()
            .expect("receiver lock")
            .iter()
            .find(|(_, s)| s.name == name)
            .cloned()
    }
}

/// Starts a receiver on 127.0.0.1:0; returns its `http://` endpoint.
pub async fn start_receiver() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind receiver");
    let addr: SocketAddr = listener.local_addr().expect("receiver address");
    let received = Received::default();
    let service = TraceServiceServer::new(received.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .expect("receiver serves");
    });
    (format!("http://{addr}"), received)
}

pub fn string_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            other => Some(format!("{other:?}")),
        }
    })
}

pub fn any_string(value: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(value.to_owned())),
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `traceparent` for a made-up remote parent, sampled.
pub const REMOTE_TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub const REMOTE_SPAN_ID: &str = "00f067aa0ba902b7";
pub fn remote_traceparent() -> String {
    format!("00-{REMOTE_TRACE_ID}-{REMOTE_SPAN_ID}-01")
}

/// A free loopback port with nothing listening on it.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}
