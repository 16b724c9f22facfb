//! The gRPC handler: calls the user's `cascade.v1.Handler/Handle` with the event and its
//! attempt number, and completes with the outcome it answers. A gRPC error, or an answer
//! without a valid outcome, is a failure: a retry with the queue's backoff. The call's
//! metadata carries `traceparent`: the handler call's span, or the event's own context.

use cascade_client::{Client, ClientOptions, Connection};
use cascade_core::{Event, Outcome, QueueConfig};
use cascade_proto::convert::{event_to_proto, handle_outcome_from_proto};
use cascade_proto::v1;
use cascade_proto::v1::handler_client::HandlerClient;
use cascade_worker::{Handler, HandlerError};

use crate::StageWorkerError;

/// Messages both ways carry payloads, up to the largest a queue may allow (plus room).
const MAX_MESSAGE_BYTES: usize = QueueConfig::MAX_PAYLOAD_LIMIT as usize + (1 << 20);

pub struct GrpcHandler {
    client: HandlerClient<Connection>,
    endpoint: String,
}

impl GrpcHandler {
    /// `endpoint` is `http://host:port`, `https://host:port`, `grpc://host:port`,
    /// `grpcs://host:port` or `host:port`: plaintext HTTP/2, or TLS when `credentials` carry
    /// TLS files or the scheme is `https` or `grpcs`. The connection is made on the first
    /// call and remade after failures, so the handler's service may start after the worker.
    pub fn new(
        endpoint: &str,
        credentials: &ClientOptions,
    ) -> Result<GrpcHandler, StageWorkerError> {
        // No pings: a handler's server may close a connection that pings often (grpc-go's
        // and grpc-java's do by default), failing the call in flight.
        let options = ClientOptions {
            keepalive: None,
            ..credentials.clone()
        };
        let connection = Client::connect_lazy(&dialled(endpoint), &options)
            .map_err(|e| StageWorkerError::Handler(format!("grpc endpoint {endpoint:?}: {e}")))?
            .connection();
        let client = HandlerClient::new(connection)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(GrpcHandler {
            client,
            endpoint: endpoint.to_owned(),
        })
    }
}

impl Handler for GrpcHandler {
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        let mut request = tonic::Request::new(v1::HandleRequest {
            event: Some(event_to_proto(event)),
            attempt,
        });
        cascade_telemetry::inject_into_metadata(&handler_context(event), request.metadata_mut());
        let response = self
            .client
            .clone()
            .handle(request)
            .await
            .map_err(|status| {
                format!(
                    "Handle at {}: {:?}: {}",
                    self.endpoint,
                    status.code(),
                    status.message()
                )
            })?;
        Ok(handle_outcome_from_proto(
            response.into_inner().outcome,
            "",
        )?)
    }
}

/// The address the client dials for `endpoint`: `grpcs` is HTTP/2 over TLS, which the
/// client knows as `https` (it would dial any other scheme in plaintext); `grpc` leaves
/// the choice to the credentials, as an address without a scheme does.
fn dialled(endpoint: &str) -> String {
    match endpoint.split_once("://") {
        Some(("grpc", address)) => address.to_owned(),
        Some(("grpcs", address)) => format!("https://{address}"),
        _ => endpoint.to_owned(),
    }
}

/// The handler's parent: the handler call's span when traces are exported, else the
/// event's own context (forwarded unchanged).
fn handler_context(event: &Event) -> cascade_telemetry::Context {
    if cascade_telemetry::is_recording() {
        let call = cascade_telemetry::current_context();
        if cascade_telemetry::has_valid_span(&call) {
            return call;
        }
    }
    cascade_telemetry::context_from_headers(&event.headers)
}

#[cfg(test)]
mod tests {
    use super::dialled;

    #[test]
    fn grpcs_is_dialled_over_tls() {
        assert_eq!(dialled("grpc://h:1"), "h:1");
        assert_eq!(dialled("grpcs://h:443"), "https://h:443");
        for kept in ["http://h:1", "https://h:443", "h:1"] {
            assert_eq!(dialled(kept), kept);
        }
    }
}
