//! Requests tonic cannot read are the client's errors, not the server's: tonic answers a
//! message that does not decode (garbage, a truncated message, a string that is not UTF-8)
//! with INTERNAL and one over the size limit with OUT_OF_RANGE, before any handler runs, in
//! a trailers-only response (the status in the headers). This layer rewrites those two
//! statuses: INVALID_ARGUMENT naming the message and field prost could not read, and
//! RESOURCE_EXHAUSTED naming the limit.

use cascade_proto::RefusedWhole;
use tonic::body::Body;
use tonic::codegen::http::Response;
use tonic::{Code, Status};
use tower::util::MapResponseLayer;

/// What tonic's decoder says of a message that does not decode.
const UNDECODABLE: &str = "failed to decode Protobuf message: ";
/// What tonic says of a message over the limit, before its sizes.
const TOO_LARGE: &str = "decoded message length too large";

/// The layer for a server whose request limit is `limit` bytes.
pub(crate) fn layer(
    limit: usize,
) -> MapResponseLayer<impl Fn(Response<Body>) -> Response<Body> + Clone> {
    MapResponseLayer::new(move |response| rewrite_status(response, limit))
}

fn rewrite_status(mut response: Response<Body>, limit: usize) -> Response<Body> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let message = status.message();
    let rewritten = match status.code() {
        Code::Internal if message.starts_with(UNDECODABLE) => Status::invalid_argument(format!(
            "request: not a valid protobuf message of this call's request type: {}",
            &message[UNDECODABLE.len()..]
        )),
        Code::OutOfRange if message.contains(TOO_LARGE) => {
            let mut status = Status::resource_exhausted(format!(
                "request: {}, over the gateway's limit of {limit} bytes (the larger of ingest.max_payload with room for an item's headers, and ingest.max_batch_bytes); send smaller payloads, or fewer items per request",
                found_size(message).unwrap_or_else(|| "too large".into())
            ));
            cascade_proto::mark_refused_whole(&mut status, RefusedWhole::TooLarge, &[]);
            status
        }
        _ => return response,
    };
    if rewritten.add_header(response.headers_mut()).is_err() {
        tracing::warn!(code = ?status.code(), "ingest.client_error.rewrite_failed");
    }
    response
}

/// `found N bytes` from tonic's message, as `N bytes`.
fn found_size(message: &str) -> Option<String> {
    let rest = message.split("found ").nth(1)?;
    let bytes: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!bytes.is_empty()).then(|| format!("{bytes} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: Status) -> Status {
        let response = status.into_http::<Body>();
        Status::from_header_map(rewrite_status(response, 1000).headers()).expect("a status")
    }

    #[test]
    fn unreadable_requests_become_the_clients_errors() {
        let undecodable = Status::internal(
            "failed to decode Protobuf message: EnqueueRequest.queue: invalid string value: data is not UTF-8 encoded",
        );
        let status = answered(undecodable);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "request: not a valid protobuf message of this call's request type: EnqueueRequest.queue: invalid string value: data is not UTF-8 encoded"
        );
        let too_large = Status::out_of_range(
            "Error, decoded message length too large: found 2000 bytes, the limit is: 1000 bytes",
        );
        let status = answered(too_large);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(
            status
                .message()
                .starts_with("request: 2000 bytes, over the gateway's limit of 1000 bytes"),
            "{}",
            status.message()
        );
        assert_eq!(
            status.metadata().get(cascade_proto::REFUSED_WHOLE_KEY),
            Some(&tonic::metadata::MetadataValue::from_static("too-large"))
        );
        // A server's own INTERNAL stays what it is.
        let own = answered(Status::internal("shard 2 stopped"));
        assert_eq!(
            (own.code(), own.message()),
            (Code::Internal, "shard 2 stopped")
        );
    }
}
