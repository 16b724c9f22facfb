//! What generic tools see: gRPC health SERVING for the gateway and each service, reflection
//! listing `cascade.v1.Ingest`, `Worker` and `Admin`; and a graceful stop that answers the
//! RPCs in flight, turns health NOT_SERVING and ends health watches.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_proto::v1::EnqueueRequest;
use futures::StreamExt;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::harness::{Answer, Gateway, answer_with, cluster, echo, fake_shards, settings};

const SERVICES: [&str; 3] = ["cascade.v1.Ingest", "cascade.v1.Worker", "cascade.v1.Admin"];

#[tokio::test]
async fn health_is_serving_for_the_gateway_and_each_service() {
    let (gateway, _) = cluster(1, answer_with(echo)).await;
    let mut health = HealthClient::new(gateway.channel().await);
    for service in std::iter::once("").chain(SERVICES) {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
}

#[tokio::test]
async fn reflection_lists_the_public_services() {
    let (gateway, _) = cluster(1, answer_with(echo)).await;
    let mut reflection = ServerReflectionClient::new(gateway.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let answer = answers.next().await.expect("an answer").expect("no error");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("a service list, got {answer:?}");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cascade.v1.Admin",
            "cascade.v1.Ingest",
            "cascade.v1.Worker",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
        ]
    );
}

/// A reflection session, which its client may keep open for good, holds none of the places
/// in flight that every client's requests share.
#[tokio::test]
async fn an_open_reflection_session_holds_no_place_in_flight() {
    let bus = Bus::local();
    fake_shards(&bus, 0..1, answer_with(echo)).await;
    let mut one_place = settings(1);
    one_place.grpc.max_requests_in_flight = 1;
    let gateway = Gateway::start(one_place, &bus).await;
    let mut reflection = ServerReflectionClient::new(gateway.channel().await);
    let (asks, asked) = futures::channel::mpsc::unbounded();
    let list = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    asks.unbounded_send(list).expect("ask");
    let mut answers = reflection
        .server_reflection_info(asked)
        .await
        .expect("reflection")
        .into_inner();
    answers.next().await.expect("an answer").expect("no error");

    // The session is still open (`asks` is not dropped): an enqueue still has its place.
    let item = EnqueueRequest {
        queue: "jobs".into(),
        payload: b"p".to_vec().into(),
        ..EnqueueRequest::default()
    };
    gateway
        .ingest()
        .await
        .enqueue(item)
        .await
        .expect("served beside the reflection session");
    drop(asks);
}

#[tokio::test]
async fn a_stop_answers_what_is_in_flight_and_ends_health_watches() {
    // The shard answers after 300 ms, so the enqueue is in flight when the stop begins.
    let slow: Answer = Arc::new(|shard, request| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            echo(shard, request)
        })
    });
    let bus = Bus::local();
    let recorded = fake_shards(&bus, [0], slow).await;
    let gateway = Gateway::start(settings(1), &bus).await;
    let mut health = HealthClient::new(gateway.channel().await);
    let mut watch = health
        .watch(HealthCheckRequest {
            service: "cascade.v1.Ingest".into(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = watch.next().await.expect("a status").expect("no error");
    assert_eq!(first.status, ServingStatus::Serving as i32);

    let mut ingest = gateway.ingest().await;
    let in_flight = tokio::spawn(async move {
        ingest
            .enqueue(EnqueueRequest {
                queue: "jobs".into(),
                id: "e1".into(),
                ..EnqueueRequest::default()
            })
            .await
    });
    recorded.wait_for(1).await;
    gateway.trigger_shutdown();

    let last = watch.next().await.expect("a status").expect("no error");
    assert_eq!(last.status, ServingStatus::NotServing as i32);
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert!(
        matches!(ended, Ok(None) | Ok(Some(Err(_)))),
        "the watch ends: {ended:?}"
    );

    let answered = in_flight
        .await
        .expect("task")
        .expect("answered during the drain");
    assert_eq!(answered.into_inner().id, "e1");
    gateway.stop().await.expect("a clean stop");
}
