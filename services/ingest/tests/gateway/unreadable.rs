//! Requests the gateway cannot read are the client's errors: over a real gRPC connection, a
//! message that does not decode or carries a queue name that is not UTF-8 gets
//! INVALID_ARGUMENT naming what prost could not read, and one over the request limit gets
//! RESOURCE_EXHAUSTED naming the limit; no shard hears of any of them.

use cascade_proto::v1::EnqueueRequest;
use tonic::Code;
use tonic::codegen::http::uri::PathAndQuery;
use tonic_prost::ProstCodec;

use crate::harness::{Gateway, answer_with, cluster, echo, fake_shards, settings};

/// `EnqueueRequest` as raw bytes on the wire: field 1 (`queue`) as bytes, so that it need
/// not be UTF-8, or field 5 (`payload`) sent as a varint, which no `bytes` field can be.
#[derive(Clone, PartialEq, prost::Message)]
struct Raw {
    #[prost(bytes = "vec", tag = "1")]
    queue: Vec<u8>,
    #[prost(uint64, optional, tag = "5")]
    payload_as_number: Option<u64>,
}

async fn send(gateway: &Gateway, raw: Raw) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(gateway.channel().await);
    grpc.ready().await.expect("ready");
    let path = PathAndQuery::from_static("/cascade.v1.Ingest/Enqueue");
    let answer: Result<tonic::Response<Raw>, tonic::Status> = grpc
        .unary(tonic::Request::new(raw), path, ProstCodec::default())
        .await;
    answer.expect_err("refused")
}

#[tokio::test]
async fn undecodable_and_oversized_requests_are_the_clients_errors() {
    let (gateway, heard) = cluster(1, answer_with(echo)).await;
    let not_utf8 = send(
        &gateway,
        Raw {
            queue: vec![b'q', 0xff, 0xfe],
            payload_as_number: None,
        },
    )
    .await;
    assert_eq!(not_utf8.code(), Code::InvalidArgument, "{not_utf8:?}");
    assert!(
        not_utf8.message().contains("EnqueueRequest.queue") && not_utf8.message().contains("UTF-8"),
        "{}",
        not_utf8.message()
    );
    let garbage = send(
        &gateway,
        Raw {
            queue: b"jobs".to_vec(),
            payload_as_number: Some(7),
        },
    )
    .await;
    assert_eq!(garbage.code(), Code::InvalidArgument, "{garbage:?}");
    assert!(
        garbage
            .message()
            .starts_with("request: not a valid protobuf message"),
        "{}",
        garbage.message()
    );
    let huge = gateway
        .ingest()
        .await
        .enqueue(EnqueueRequest {
            queue: "jobs".into(),
            payload: vec![0; 17 << 20].into(),
            ..EnqueueRequest::default()
        })
        .await
        .expect_err("over the limit");
    assert_eq!(huge.code(), Code::ResourceExhausted, "{huge:?}");
    assert!(
        huge.message().contains("over the gateway's limit of")
            && huge.message().contains("ingest.max_payload"),
        "{}",
        huge.message()
    );
    assert!(heard.all().is_empty(), "a shard heard of it");
}

fn header_at_its_limits(i: usize) -> (String, String) {
    let name = format!(
        "{i:03}{}",
        "h".repeat(cascade_core::MAX_HEADER_NAME_BYTES - 3)
    );
    (name, "v".repeat(cascade_core::MAX_HEADER_VALUE_BYTES))
}

#[tokio::test]
async fn the_largest_valid_requests_pass_the_transport() {
    let bus = cascade_bus::Bus::local();
    let heard = fake_shards(&bus, 0..1, answer_with(echo)).await;
    let mut defaults = settings(1);
    let max_payload = 4 << 20;
    defaults.ingest.max_payload = max_payload as u64;
    defaults.ingest.max_batch_bytes = 16 << 20;
    let gateway = Gateway::start(defaults, &bus).await;
    // The largest payload with every header at its limits.
    let full = EnqueueRequest {
        queue: "jobs".into(),
        payload: vec![0; max_payload].into(),
        headers: (0..cascade_core::MAX_HEADERS)
            .map(header_at_its_limits)
            .collect(),
        ..EnqueueRequest::default()
    };
    gateway
        .ingest()
        .await
        .enqueue(full)
        .await
        .expect("the largest single enqueue");
    // A batch just under ingest.max_batch_bytes (16MiB), far over one payload.
    let item = |i: usize| EnqueueRequest {
        queue: "jobs".into(),
        id: format!("big-{i}"),
        payload: vec![0; (15 << 20) / 4].into(),
        ..EnqueueRequest::default()
    };
    let batch = cascade_proto::v1::EnqueueBatchRequest {
        items: (0..4).map(item).collect(),
    };
    let answer = gateway
        .ingest()
        .await
        .enqueue_batch(batch)
        .await
        .expect("a batch under the limit");
    assert_eq!(answer.into_inner().results.len(), 4);
    assert!(!heard.all().is_empty(), "the shard got them");
}
