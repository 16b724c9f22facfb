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
use std::time::Duration;

use cascade_proto::v1::ingest_client::IngestClient;
use cascade_proto::v1::{EnqueueBatchRequest, EnqueueRequest, EnqueueResponse, EnqueueResult};
use prost::Message;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tonic::{Code, Status};

use crate::{Connection, forbidden_apart, is_refused_whole};

/// How a [`BatchingEnqueuer`] groups its callers' events.
#[derive(Clone, Copy, Debug)]
pub struct BatchingOptions {
    /// Events per batch at most; keep it at or below the gateway's `ingest.max_batch_items`.
    pub max_items: usize,
    /// Encoded bytes per batch at most (an event larger than this goes alone); keep it at or
    /// below the gateway's `ingest.max_batch_bytes`.
    pub max_bytes: usize,
    /// Batches sent and not yet answered, at most (a batch refused whole counts as one until
    /// every smaller call it goes again as is answered). 0 counts as 1, and more than Tokio's
    /// semaphore can count as its maximum.
    pub max_in_flight: usize,
    /// How long a call may go unanswered before its callers get DEADLINE_EXCEEDED (their
    /// events may or may not be enqueued: retry with the same `id` or `idempotency_key`).
    /// It frees the call's place for the next batch, so a connection that hangs does not
    /// hold every later caller. Each call has its own: a batch refused whole and sent again
    /// in halves makes a few calls in a row.
    pub timeout: Duration,
}

impl Default for BatchingOptions {
    /// Below the gateway's default limits (1,000 items, 16 MiB). Two calls in flight did as
    /// well as one on the benchmark machine, and a slow call does not hold every caller;
    /// more only split the callers into smaller batches, each paying for its own call
    /// (docs/benchmarks.md). The timeout is three times the gateway's default wait for a
    /// shard (`bus.request_timeout`).
    fn default() -> BatchingOptions {
        BatchingOptions {
            max_items: 256,
            max_bytes: 4 << 20,
            max_in_flight: 2,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Events waiting for a batch at most, whatever the options say.
const MAX_WAITING: usize = 1 << 16;

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
            max_in_flight: options.max_in_flight.clamp(1, Semaphore::MAX_PERMITS),
            ..options
        };
        let waiting_at_most = options.max_items.saturating_mul(options.max_in_flight);
        let (waiting, incoming) = mpsc::channel(waiting_at_most.min(MAX_WAITING));
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
    let calls = Calls {
        ingest,
        timeout: options.timeout,
    };
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
        let mut bytes = size_in_batch(&first.request);
        let mut batch = vec![first];
        while batch.len() < options.max_items {
            let Ok(pending) = incoming.try_recv() else {
                break;
            };
            let size = size_in_batch(&pending.request);
            if bytes + size > options.max_bytes {
                next = Some(pending);
                break;
            }
            bytes += size;
            batch.push(pending);
        }
        batch.retain(|pending| !pending.reply.is_closed());
        let calls = calls.clone();
        tokio::spawn(async move {
            calls.send(batch).await;
            drop(permit);
        });
    }
}

/// An item's bytes in the batch's message: its own, its length and its field's tag, as the
/// gateway counts them against `ingest.max_batch_bytes`.
fn size_in_batch(request: &EnqueueRequest) -> usize {
    let len = request.encoded_len();
    1 + prost::encoding::encoded_len_varint(len as u64) + len
}

/// The calls of one batch.
#[derive(Clone)]
struct Calls {
    ingest: IngestClient<Connection>,
    timeout: Duration,
}

impl Calls {
    /// Sends one batch and answers each of its callers.
    async fn send(mut self, mut batch: Vec<Pending>) {
        if batch.len() <= 1 {
            if let Some(pending) = batch.pop() {
                self.unary(pending).await;
            }
            return;
        }
        let items: Vec<EnqueueRequest> = batch.iter().map(|p| p.request.clone()).collect();
        let call = self.ingest.enqueue_batch(EnqueueBatchRequest { items });
        match within(self.timeout, call).await {
            Ok(answer) => answer_each(batch, answer.results),
            // Refused for what its events are: those outside the caller's grants, when the
            // gateway lists them, get their own verdict from a unary call and the others go
            // again together; otherwise (more items or bytes than the gateway takes, or
            // forbidden events it does not list) the batch goes again in halves, down to
            // single events. Anything else (the caller's rate quota, backpressure, the
            // connection) is every caller's answer; smaller calls would only meet it again,
            // each at a call's cost.
            Err(status) if is_refused_whole(&status) => match forbidden_apart(batch, &status) {
                // Boxed: what goes again may be refused again, and split in turn.
                Ok((alone, rest)) => {
                    tokio::join!(Box::pin(self.clone().send(rest)), self.one_by_one(alone));
                }
                Err(mut first) => {
                    let second = first.split_off(first.len() / 2);
                    tokio::join!(
                        Box::pin(self.clone().send(first)),
                        Box::pin(self.send(second))
                    );
                }
            },
            Err(status) => {
                for pending in batch {
                    let _ = pending.reply.send(Err(status.clone()));
                }
            }
        }
    }

    async fn unary(mut self, pending: Pending) {
        let answer = within(self.timeout, self.ingest.enqueue(pending.request)).await;
        let _ = pending.reply.send(answer);
    }

    async fn one_by_one(self, batch: Vec<Pending>) {
        let mut calls = JoinSet::new();
        for pending in batch {
            calls.spawn(self.clone().unary(pending));
        }
        while calls.join_next().await.is_some() {}
    }
}

/// A call's answer, or DEADLINE_EXCEEDED once `timeout` has passed without one.
async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(timeout, call).await {
        Ok(answer) => answer.map(tonic::Response::into_inner),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no answer within {timeout:?} (the batching enqueuer's timeout): the event may or may not be enqueued; retry with the same id or idempotency_key"
        ))),
    }
}

/// Answers each caller of a batch with its item's result.
fn answer_each(batch: Vec<Pending>, results: Vec<EnqueueResult>) {
    let mut results = results.into_iter();
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

    /// A peer that takes connections and never answers: each call ends at the timeout, and
    /// frees its place for the next (one call in flight at most).
    #[tokio::test]
    async fn a_call_without_an_answer_ends_at_the_timeout_and_frees_its_place() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        let client = crate::Client::connect_lazy(&format!("http://{addr}"), &Default::default())
            .expect("client");
        let options = BatchingOptions {
            max_in_flight: 1,
            timeout: Duration::from_millis(200),
            ..BatchingOptions::default()
        };
        let enqueuer = client.batching_enqueuer(options);
        for call in 0..2 {
            let request = EnqueueRequest {
                queue: "q".into(),
                ..EnqueueRequest::default()
            };
            // The outer bound only keeps a broken enqueuer from hanging the test.
            let answer = tokio::time::timeout(Duration::from_secs(60), enqueuer.enqueue(request))
                .await
                .unwrap_or_else(|_| panic!("call {call} got no answer at all"));
            let status = answer.expect_err("no answer from the peer");
            assert_eq!(
                status.code(),
                Code::DeadlineExceeded,
                "call {call}: {status:?}"
            );
        }
        silent.abort();
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
