//! Single enqueues of many tasks sent together as `EnqueueBatch` calls, each caller still
//! answered for its own event once it is durable: what a service with many concurrent
//! producers (request handlers, say) uses instead of one unary `Enqueue` per event, whose
//! HTTP/2 call costs more than the enqueue itself.
//!
//! No timer holds an event back: a batch goes as soon as a call may be in flight, with
//! whatever callers are waiting by then (after one yield to the runtime, so that callers
//! just answered can send their next event into it). While `max_in_flight` batches are out,
//! the callers that arrive meanwhile wait together and go in the next one; a lone
//! producer's events go one by one, as unary `Enqueue` calls.

use std::sync::Arc;

use cascade_proto::v1::ingest_client::IngestClient;
use cascade_proto::v1::{EnqueueBatchRequest, EnqueueRequest, EnqueueResponse, EnqueueResult};
use prost::Message;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tonic::{Code, Status};

use crate::Connection;

/// How a [`BatchingEnqueuer`] groups its callers' events.
#[derive(Clone, Copy, Debug)]
pub struct BatchingOptions {
    /// Events per batch at most; keep it at or below the gateway's `ingest.max_batch_items`.
    pub max_items: usize,
    /// Encoded bytes per batch at most (an event larger than this goes alone); keep it at or
    /// below the gateway's `ingest.max_batch_bytes`.
    pub max_bytes: usize,
    /// Batches sent and not yet answered, at most.
    pub max_in_flight: usize,
}

impl Default for BatchingOptions {
    /// Below the gateway's default limits (1,000 items, 16 MiB). Two batches in flight let
    /// the shard apply one while it makes the other durable; more only split the callers
    /// into smaller batches, each paying for its own call (docs/benchmarks.md measures 1,
    /// 2, 4 and 8).
    fn default() -> BatchingOptions {
        BatchingOptions {
            max_items: 256,
            max_bytes: 4 << 20,
            max_in_flight: 2,
        }
    }
}

/// One caller's event and where its answer goes.
struct Pending {
    request: EnqueueRequest,
    reply: oneshot::Sender<Result<EnqueueResponse, Status>>,
}

/// A handle to share among tasks (clone it); the batches stop once every clone is dropped
/// and the events already handed over are answered.
#[derive(Clone)]
pub struct BatchingEnqueuer {
    waiting: mpsc::Sender<Pending>,
}

impl BatchingEnqueuer {
    /// Starts the task that sends the batches. Call it inside a Tokio runtime.
    pub(crate) fn start(ingest: IngestClient<Connection>, options: BatchingOptions) -> Self {
        let options = BatchingOptions {
            max_items: options.max_items.max(1),
            max_in_flight: options.max_in_flight.max(1),
            ..options
        };
        let (waiting, incoming) = mpsc::channel(options.max_items * options.max_in_flight);
        tokio::spawn(send_batches(ingest, incoming, options));
        BatchingEnqueuer { waiting }
    }

    /// Enqueues one event, answered as a unary `Enqueue` would be: once it is durable, with
    /// its own result. A `traceparent` for this event goes in its headers (a batch's call
    /// carries no one caller's context). An event whose caller stops waiting before its
    /// batch is sent is not sent; once sent, it is enqueued whether or not anyone waits.
    pub async fn enqueue(&self, request: EnqueueRequest) -> Result<EnqueueResponse, Status> {
        let (reply, answer) = oneshot::channel();
        self.waiting
            .send(Pending { request, reply })
            .await
            .map_err(|_| Status::cancelled("the batching enqueuer has stopped"))?;
        answer.await.map_err(|_| {
            Status::unknown("the batch carrying this event ended without an answer for it")
        })?
    }
}

async fn send_batches(
    ingest: IngestClient<Connection>,
    mut incoming: mpsc::Receiver<Pending>,
    options: BatchingOptions,
) {
    let in_flight = Arc::new(Semaphore::new(options.max_in_flight));
    let mut next: Option<Pending> = None;
    loop {
        let first = match next.take() {
            Some(pending) => pending,
            None => match incoming.recv().await {
                Some(pending) => pending,
                None => return,
            },
        };
        let permit = Arc::clone(&in_flight)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        // Everyone who came while the permit was awaited goes in this batch, and those
        // about to come: callers just answered are on the runtime's queue, each about to
        // send its next event, and one yield lets them.
        tokio::task::yield_now().await;
        let mut bytes = first.request.encoded_len();
        let mut batch = vec![first];
        while batch.len() < options.max_items {
            let Ok(pending) = incoming.try_recv() else {
                break;
            };
            let size = pending.request.encoded_len();
            if bytes + size > options.max_bytes {
                next = Some(pending);
                break;
            }
            bytes += size;
            batch.push(pending);
        }
        batch.retain(|pending| !pending.reply.is_closed());
        let ingest = ingest.clone();
        tokio::spawn(async move {
            send(ingest, batch).await;
            drop(permit);
        });
    }
}

/// Sends one batch and answers each of its callers.
async fn send(mut ingest: IngestClient<Connection>, mut batch: Vec<Pending>) {
    if batch.len() <= 1 {
        if let Some(pending) = batch.pop() {
            let answer = ingest.enqueue(pending.request).await;
            let _ = pending.reply.send(answer.map(tonic::Response::into_inner));
        }
        return;
    }
    let items: Vec<EnqueueRequest> = batch.iter().map(|p| p.request.clone()).collect();
    match ingest.enqueue_batch(EnqueueBatchRequest { items }).await {
        Ok(answer) => {
            let mut results = answer.into_inner().results.into_iter();
            for (index, pending) in batch.into_iter().enumerate() {
                let answer = match results.next() {
                    Some(result) => item_answer(result, index),
                    None => Err(Status::internal(
                        "the gateway answered a batch with fewer results than items",
                    )),
                };
                let _ = pending.reply.send(answer);
            }
        }
        Err(status) if refused_for_one_item(&status) => one_by_one(ingest, batch).await,
        Err(status) => {
            for pending in batch {
                let _ = pending.reply.send(Err(status.clone()));
            }
        }
    }
}

/// Whether a batch's refusal may be about one item only and left everything unapplied: the
/// gateway refuses a whole batch for an item outside the caller's grants (so nothing of it
/// is applied), for a malformed request, or for a batch over its own item limit. Each
/// caller then gets its own verdict from a unary call. Everything else (the gateway's
/// backpressure and quotas, the connection's failures) is every caller's answer as it is.
fn refused_for_one_item(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::PermissionDenied | Code::InvalidArgument
    )
}

async fn one_by_one(ingest: IngestClient<Connection>, batch: Vec<Pending>) {
    let mut calls = JoinSet::new();
    for pending in batch {
        let mut ingest = ingest.clone();
        calls.spawn(async move {
            let answer = ingest.enqueue(pending.request).await;
            let _ = pending.reply.send(answer.map(tonic::Response::into_inner));
        });
    }
    while calls.join_next().await.is_some() {}
}

/// An item's result as its unary call would have answered it: its message names its own
/// fields (`queue`), not the batch's (`items[2].queue`).
fn item_answer(result: EnqueueResult, index: usize) -> Result<EnqueueResponse, Status> {
    if result.code == 0 {
        return Ok(result.ok.unwrap_or_default());
    }
    let prefix = format!("items[{index}].");
    let message = match result.message.strip_prefix(&prefix) {
        Some(own) => own.to_owned(),
        None => result.message,
    };
    Err(Status::new(Code::from_i32(result.code), message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_items_failure_names_its_own_fields() {
        let refused = EnqueueResult {
            ok: None,
            code: Code::InvalidArgument as i32,
            message: "items[3].queue: must not be empty".into(),
            field: "items[3].queue".into(),
        };
        let status = item_answer(refused, 3).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "queue: must not be empty");

        let about_none = EnqueueResult {
            ok: None,
            code: Code::Unavailable as i32,
            message: "shard 1 did not answer in time".into(),
            field: String::new(),
        };
        let status = item_answer(about_none, 0).unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "shard 1 did not answer in time");
    }

    #[test]
    fn an_accepted_item_is_its_response() {
        let accepted = EnqueueResult {
            ok: Some(EnqueueResponse {
                id: "a".into(),
                duplicate: true,
                queue: "q".into(),
                ..EnqueueResponse::default()
            }),
            ..EnqueueResult::default()
        };
        let response = item_answer(accepted, 7).unwrap();
        assert_eq!(response.id, "a");
        assert!(response.duplicate);
    }
}
