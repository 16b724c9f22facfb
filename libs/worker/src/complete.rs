//! Sends completions in batches: whatever queued up while the previous `Complete`s were in
//! flight goes in the next one (like a group commit), bounded by count and bytes. Up to
//! `COMPLETES_IN_FLIGHT` requests are out at once, so that the next batch travels while
//! the gateway makes the previous one durable; completions are of distinct leases, so no
//! order is needed between them.
//!
//! Failure policy: a transport failure or UNAVAILABLE is retried a few times; a retry of a
//! completion that did apply is refused as a stale lease and changes nothing. A request
//! refused whole for what its completions are goes again without those the gateway lists as
//! outside the worker's grants, or in halves, so only the completions at fault are refused.
//! A completion that is refused or cannot be sent is logged and counted; its lease expires
//! and the event is delivered again (at least once).

use std::sync::Arc;
use std::time::Duration;

use cascade_client::{WorkerCalls, forbidden_apart, is_refused_whole};
use cascade_proto::v1;
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::stats::{Counter, Stats};

/// Bytes per `Complete` request at most (advances may carry payloads); one larger
/// completion still goes, alone. Well under tonic's 4 MiB default request limit.
const MAX_REQUEST_BYTES: usize = 2 << 20;
/// `Complete` requests unanswered at once at most.
const COMPLETES_IN_FLIGHT: usize = 2;
/// Tries per request for failures that may pass.
const TRIES: u32 = 4;
/// How long a `Complete` may go unanswered before it is tried again: well above the
/// gateway's own wait for its shards, so that only a connection gone silent reaches it.
const COMPLETE_TIMEOUT: Duration = Duration::from_secs(30);
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Runs until every sender is dropped and the queue is empty.
pub(crate) async fn run_completer(
    client: WorkerCalls,
    mut queued: mpsc::Receiver<v1::Completion>,
    max_batch: usize,
    stats: Arc<Stats>,
) {
    let mut carried: Option<v1::Completion> = None;
    let mut sending = JoinSet::new();
    loop {
        // While every slot is taken, completions gather in the queue for the next request.
        while sending.len() >= COMPLETES_IN_FLIGHT {
            if let Some(Err(err)) = sending.join_next().await {
                tracing::error!(error = %err, "worker.complete.panicked");
            }
        }
        let first = match carried.take() {
            Some(completion) => completion,
            // Both branches are cancel-safe: joins, and a channel receive.
            None => tokio::select! {
                Some(sent) = sending.join_next() => {
                    if let Err(err) = sent {
                        tracing::error!(error = %err, "worker.complete.panicked");
                    }
                    continue;
                }
                next = queued.recv() => match next {
                    Some(completion) => completion,
                    None => break,
                },
            },
        };
        let mut bytes = first.encoded_len();
        let mut batch = vec![first];
        while batch.len() < max_batch {
            let Ok(next) = queued.try_recv() else { break };
            let size = next.encoded_len();
            if bytes + size > MAX_REQUEST_BYTES {
                carried = Some(next);
                break;
            }
            bytes += size;
            batch.push(next);
        }
        sending.spawn(send(client.clone(), batch, Arc::clone(&stats)).in_current_span());
    }
    // Every sender is gone and the queue is empty: wait for the requests still out.
    while let Some(sent) = sending.join_next().await {
        if let Err(err) = sent {
            tracing::error!(error = %err, "worker.complete.panicked");
        }
    }
}

/// Sends `batch`; a request the gateway refuses whole for what its completions are goes
/// again without those it lists as outside the worker's grants (they fail here), or,
/// when it lists none (more or larger than its limits), in halves down to single
/// completions: one completion at fault does not fail the others.
async fn send(client: WorkerCalls, batch: Vec<v1::Completion>, stats: Arc<Stats>) {
    // Requests still to send, the next one last.
    let mut to_send = vec![batch];
    while let Some(batch) = to_send.pop() {
        let Some((refused, status)) = send_one(&client, batch, &stats).await else {
            continue;
        };
        match fail_forbidden(refused, &status, &stats) {
            Ok(others) => to_send.extend(Some(others).filter(|others| !others.is_empty())),
            Err(mut refused) => {
                let second = refused.split_off(refused.len() / 2);
                to_send.extend([second, refused]);
            }
        }
    }
}

/// Of `completions`, refused whole by `status`, fails (logs and counts) those the gateway
/// lists as outside the worker's grants and gives back the others, which may go again
/// together; `Err(completions)` when it lists none.
pub(crate) fn fail_forbidden(
    completions: Vec<v1::Completion>,
    status: &tonic::Status,
    stats: &Stats,
) -> Result<Vec<v1::Completion>, Vec<v1::Completion>> {
    let (forbidden, others) = forbidden_apart(completions, status)?;
    for completion in &forbidden {
        let to = match &completion.outcome {
            Some(v1::completion::Outcome::Advance(advance)) => advance.to.as_str(),
            _ => "",
        };
        tracing::warn!(queue = %completion.queue, id = %completion.id, to, "worker.complete.refused: outside the worker's grants");
    }
    stats.add(Counter::CompleteFailures, forbidden.len() as u64);
    Ok(others)
}

/// Sends one request, retrying failures that may pass; gives back its completions, with the
/// status, when it was refused whole for what they are and more than one could be sent apart.
async fn send_one(
    client: &WorkerCalls,
    batch: Vec<v1::Completion>,
    stats: &Stats,
) -> Option<(Vec<v1::Completion>, tonic::Status)> {
    let count = batch.len() as u64;
    let request = v1::CompleteRequest { completions: batch };
    let (mut attempt, mut pause) = (1, FIRST_RETRY_PAUSE);
    loop {
        let mut calls = client.clone();
        let call = calls.complete(request.clone());
        let answer = match tokio::time::timeout(COMPLETE_TIMEOUT, call).await {
            Ok(answer) => answer,
            Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                "no answer within {COMPLETE_TIMEOUT:?}"
            ))),
        };
        match answer {
            Ok(response) => {
                record_results(&request.completions, &response.into_inner().results, stats);
                return None;
            }
            Err(status) if count > 1 && is_refused_whole(&status) => {
                tracing::warn!(count, code = ?status.code(), message = %status.message(), "worker.complete.refused_whole; sending it again in parts");
                return Some((request.completions, status));
            }
            // Sent again as it is, a request refused whole would be refused again.
            Err(status)
                if attempt < TRIES && may_pass(status.code()) && !is_refused_whole(&status) =>
            {
                tracing::warn!(attempt, code = ?status.code(), message = %status.message(), "worker.complete.retrying");
                tokio::time::sleep(pause).await;
                (attempt, pause) = (attempt + 1, pause * 2);
            }
            Err(status) => {
                tracing::error!(
                    count,
                    code = ?status.code(),
                    message = %status.message(),
                    "worker.complete.failed; the leases will expire and the events come back"
                );
                stats.add(Counter::CompleteFailures, count);
                return None;
            }
        }
    }
}

/// Counts the answers to `completions` (sent by `Complete` or carried by a take), and logs
/// each refused one. A release counts as released only once accepted; a completion the
/// answer has no result for (a gateway's bug) counts as a failure.
pub(crate) fn record_results(
    completions: &[v1::Completion],
    results: &[v1::CompletionResult],
    stats: &Stats,
) {
    let (mut completed, mut released, mut refused) = (0, 0, 0);
    for (index, completion) in completions.iter().enumerate() {
        match results.get(index) {
            Some(result) if result.code == 0 => {
                completed += 1;
                if matches!(
                    completion.outcome,
                    Some(v1::completion::Outcome::Release(_))
                ) {
                    released += 1;
                }
            }
            answer => {
                refused += 1;
                let (code, message) = answer.map_or((0, "no result in the answer"), |result| {
                    (result.code, result.message.as_str())
                });
                tracing::warn!(
                    queue = %completion.queue,
                    id = %completion.id,
                    code,
                    message,
                    "worker.complete.refused"
                );
            }
        }
    }
    stats.add(Counter::Completed, completed);
    stats.add(Counter::Released, released);
    stats.add(Counter::CompleteFailures, refused);
}

/// Whether `completions` may go with a take: within the completer's own batch bounds.
pub(crate) fn fits_one_request(completions: &[v1::Completion], max_batch: usize) -> bool {
    let bytes: usize = completions.iter().map(Message::encoded_len).sum();
    completions.len() <= max_batch && bytes <= MAX_REQUEST_BYTES
}

/// Failures that retrying the same request may get past.
pub(crate) fn may_pass(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::ResourceExhausted
            | tonic::Code::Aborted
            | tonic::Code::Internal
            | tonic::Code::Cancelled
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use cascade_proto::v1::worker_server::Worker;
    use tonic::{Request, Response, Status};

    use super::*;

    /// A gateway whose first `Complete` never answers, as over a connection gone silent.
    #[derive(Default)]
    struct SilentOnce {
        calls: AtomicU32,
    }

    #[tonic::async_trait]
    impl Worker for SilentOnce {
        async fn take(
            &self,
            _: Request<v1::TakeRequest>,
        ) -> Result<Response<v1::TakeResponse>, Status> {
            Err(Status::unimplemented("not used here"))
        }

        async fn complete(
            &self,
            request: Request<v1::CompleteRequest>,
        ) -> Result<Response<v1::CompleteResponse>, Status> {
            if self.calls.fetch_add(1, Ordering::Relaxed) == 0 {
                std::future::pending::<()>().await;
            }
            let results = request
                .into_inner()
                .completions
                .iter()
                .map(|_| v1::CompletionResult::default())
                .collect();
            Ok(Response::new(v1::CompleteResponse { results }))
        }

        async fn extend_lease(
            &self,
            _: Request<v1::ExtendLeaseRequest>,
        ) -> Result<Response<v1::ExtendLeaseResponse>, Status> {
            Err(Status::unimplemented("not used here"))
        }
    }

    /// On paused time: the timeout passes as soon as nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn a_complete_left_unanswered_is_tried_again_after_its_timeout() {
        let gateway = Arc::new(SilentOnce::default());
        let client = WorkerCalls::InProcess(Arc::clone(&gateway) as Arc<dyn Worker>);
        let stats = Arc::new(Stats::default());
        let ack = v1::completion::Outcome::Ack(v1::Ack {});
        // The outer bound keeps a completer without a timeout from hanging the test.
        let sent = send(client, vec![completion("a", ack)], Arc::clone(&stats));
        tokio::time::timeout(Duration::from_secs(3600), sent)
            .await
            .expect("sent within an hour");
        assert_eq!(gateway.calls.load(Ordering::Relaxed), 2, "tried again");
        let counted = stats.snapshot();
        assert_eq!((counted.completed, counted.complete_failures), (1, 0));
    }

    fn completion(id: &str, outcome: v1::completion::Outcome) -> v1::Completion {
        v1::Completion {
            queue: "jobs".into(),
            id: id.into(),
            lease_token: format!("token-{id}"),
            outcome: Some(outcome),
        }
    }

    #[test]
    fn only_accepted_releases_count_as_released_and_a_missing_result_as_a_failure() {
        let release = || v1::completion::Outcome::Release(v1::Release {});
        let ack = v1::completion::Outcome::Ack(v1::Ack {});
        let completions = [
            completion("a", release()),
            completion("b", release()),
            completion("c", ack),
        ];
        let stale = v1::CompletionResult {
            code: tonic::Code::FailedPrecondition as i32,
            message: "lease of b is not current".into(),
            ..v1::CompletionResult::default()
        };
        // "c" has no result: the answer is one short.
        let results = [v1::CompletionResult::default(), stale];
        let stats = Stats::default();
        record_results(&completions, &results, &stats);
        let counted = stats.snapshot();
        assert_eq!(
            (
                counted.completed,
                counted.released,
                counted.complete_failures
            ),
            (1, 1, 2)
        );
    }
}
