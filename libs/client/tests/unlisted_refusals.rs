//! The batching enqueuer against a gateway that refuses a batch whole for a forbidden event
//! without listing which (a gateway from before `cascade-forbidden-items`): the batch goes
//! again in halves, down to single events, and each caller gets its own verdict. The current
//! gateway always lists them, so this runs against a stand-in of the `Ingest` service on
//! loopback that answers as such a gateway did and records every call.

use std::sync::{Arc, Mutex};

use cascade_client::{BatchingOptions, Client, RefusedWhole, api};
use cascade_proto::v1::ingest_server::{Ingest, IngestServer};
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};

/// The queue no caller may produce to.
const FORBIDDEN: &str = "payments";

#[derive(Default)]
struct OlderGateway {
    /// The queues of each `EnqueueBatch`, and of each `Enqueue`, in the order they came.
    batches: Mutex<Vec<Vec<String>>>,
    unary: Mutex<Vec<String>>,
}

fn forbidden(queue: &str) -> Status {
    Status::permission_denied(format!("queue: may not produce to queue '{queue}'"))
}

fn accepted(request: &api::EnqueueRequest) -> api::EnqueueResponse {
    api::EnqueueResponse {
        id: request.id.clone(),
        queue: request.queue.clone(),
        ..api::EnqueueResponse::default()
    }
}

#[tonic::async_trait]
impl Ingest for OlderGateway {
    async fn enqueue(
        &self,
        request: Request<api::EnqueueRequest>,
    ) -> Result<Response<api::EnqueueResponse>, Status> {
        let request = request.into_inner();
        self.unary.lock().expect("lock").push(request.queue.clone());
        match request.queue.as_str() {
            FORBIDDEN => Err(forbidden(&request.queue)),
            _ => Ok(Response::new(accepted(&request))),
        }
    }

    async fn enqueue_batch(
        &self,
        request: Request<api::EnqueueBatchRequest>,
    ) -> Result<Response<api::EnqueueBatchResponse>, Status> {
        let items = request.into_inner().items;
        let queues = items.iter().map(|item| item.queue.clone()).collect();
        self.batches.lock().expect("lock").push(queues);
        if let Some(at) = items.iter().position(|item| item.queue == FORBIDDEN) {
            let mut status = Status::permission_denied(format!(
                "items[{at}].queue: may not produce to queue '{FORBIDDEN}'"
            ));
            // Refused whole, and no list of the forbidden items.
            cascade_proto::mark_refused_whole(&mut status, RefusedWhole::ForbiddenItem, &[]);
            return Err(status);
        }
        let results = items
            .iter()
            .map(|item| api::EnqueueResult {
                ok: Some(accepted(item)),
                ..api::EnqueueResult::default()
            })
            .collect();
        Ok(Response::new(api::EnqueueBatchResponse { results }))
    }

    async fn get(&self, _: Request<api::GetRequest>) -> Result<Response<api::Event>, Status> {
        Err(Status::unimplemented("not used here"))
    }

    async fn update(&self, _: Request<api::UpdateRequest>) -> Result<Response<api::Event>, Status> {
        Err(Status::unimplemented("not used here"))
    }

    async fn delete(
        &self,
        _: Request<api::DeleteRequest>,
    ) -> Result<Response<api::DeleteResponse>, Status> {
        Err(Status::unimplemented("not used here"))
    }
}

fn event(queue: &str, id: &str) -> api::EnqueueRequest {
    api::EnqueueRequest {
        queue: queue.into(),
        id: id.into(),
        ..api::EnqueueRequest::default()
    }
}

/// On Tokio's current-thread runtime the enqueuer's task cannot run until the test's task
/// yields, so the four calls joined below reach it together and leave as one batch.
#[tokio::test]
async fn a_batch_refused_for_an_unlisted_forbidden_event_goes_again_in_halves() {
    let gateway = Arc::new(OlderGateway::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IngestServer::from_arc(Arc::clone(&gateway)))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let client = Client::connect(&format!("http://{addr}"))
        .await
        .expect("connect to the stand-in");
    let enqueuer = client.batching_enqueuer(BatchingOptions::default());

    let (a, f1, b, f2) = tokio::join!(
        enqueuer.enqueue(event("orders", "a")),
        enqueuer.enqueue(event(FORBIDDEN, "f1")),
        enqueuer.enqueue(event("orders", "b")),
        enqueuer.enqueue(event(FORBIDDEN, "f2")),
    );
    assert_eq!(a.expect("its own queue").id, "a");
    assert_eq!(b.expect("its own queue").id, "b");
    for refused in [f1, f2] {
        let status = refused.expect_err("a forbidden queue");
        assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
        assert_eq!(
            status.message(),
            "queue: may not produce to queue 'payments'",
            "its own verdict"
        );
    }
    // The batch of four, then its halves, each refused; then each event alone (sent one by
    // one from the first refusal, it would have been one batch and four unary calls).
    let batches = gateway.batches.lock().expect("lock").clone();
    assert_eq!(
        batches,
        [
            vec!["orders", FORBIDDEN, "orders", FORBIDDEN],
            vec!["orders", FORBIDDEN],
            vec!["orders", FORBIDDEN],
        ]
    );
    let mut unary = gateway.unary.lock().expect("lock").clone();
    unary.sort();
    assert_eq!(unary, ["orders", "orders", FORBIDDEN, FORBIDDEN]);
}
