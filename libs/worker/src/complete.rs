//! Sends completions in batches: whatever queued up while the previous `Complete`s were in
//! flight goes in the next one (like a group commit), bounded by count and bytes. Up to
//! `COMPLETES_IN_FLIGHT` requests are out at once, so that the next batch travels while
//! the gateway makes the previous one durable; completions are of distinct leases, so no
//! order is needed between them.
//!
//! Failure policy: a failure that may pass (the gateway or the event's shard away for a
//! moment, as while either restarts), of the whole request or of single completions in its
//! answer, is tried again after a pause that doubles, for as long as the completion's lease
//! lasts: after that the gateway would refuse it as stale, and the event is delivered again
//! anyway. A retry of a completion that did apply is refused as a stale lease and changes
//! nothing. A request refused whole for what its completions are goes again without those
//! the gateway lists as outside the worker's grants, or in halves, so only the completions
//! at fault are refused. A completion that is refused or cannot be sent in time is logged
//! and counted; its lease expires and the event is delivered again (at least once).

use std::sync::Arc;
use std::time::Duration;

use cascade_client::{WorkerCalls, forbidden_apart, is_refused_whole};
use cascade_proto::v1;
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::stats::{Counter, Stats};

/// Bytes per `Complete` request at most (advances may carry payloads); one larger
/// completion still goes, alone. Well under tonic's 4 MiB default request limit.
const MAX_REQUEST_BYTES: usize = 2 << 20;
/// `Complete` requests unanswered at once at most.
const COMPLETES_IN_FLIGHT: usize = 2;
/// How long a `Complete` may go unanswered before it is tried again: well above the
/// gateway's own wait for its shards, so that only a connection gone silent reaches it.
const COMPLETE_TIMEOUT: Duration = Duration::from_secs(30);
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Pauses between tries double up to this: a shard back from a restart is seen within it.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// A completion to send, and until when sending it is worth a try: the end of its lease.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) completion: v1::Completion,
    pub(crate) until: Instant,
}

/// The completions of `pending`, for a request.
pub(crate) fn completions_of(pending: &[Pending]) -> Vec<v1::Completion> {
    pending.iter().map(|p| p.completion.clone()).collect()
}

/// Runs until every sender is dropped and the queue is empty.
pub(crate) async fn run_completer(
    client: WorkerCalls,
    mut queued: mpsc::Receiver<Pending>,
    max_batch: usize,
    stats: Arc<Stats>,
) {
    let mut carried: Option<Pending> = None;
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
        let mut bytes = first.completion.encoded_len();
        let mut batch = vec![first];
        while batch.len() < max_batch {
            let Ok(next) = queued.try_recv() else { break };
            let size = next.completion.encoded_len();
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
async fn send(client: WorkerCalls, batch: Vec<Pending>, stats: Arc<Stats>) {
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
    completions: Vec<Pending>,
    status: &tonic::Status,
    stats: &Stats,
) -> Result<Vec<Pending>, Vec<Pending>> {
    let (forbidden, others) = forbidden_apart(completions, status)?;
    for Pending { completion, .. } in &forbidden {
        let to = match &completion.outcome {
            Some(v1::completion::Outcome::Advance(advance)) => advance.to.as_str(),
            _ => "",
        };
        tracing::warn!(queue = %completion.queue, id = %completion.id, to, "worker.complete.refused: outside the worker's grants");
    }
    stats.add(Counter::CompleteFailures, forbidden.len() as u64);
    Ok(others)
}

/// Sends one request, and again what failed in a way that may pass (the request, or single
/// completions in its answer) while their leases last; gives back its completions, with the
/// status, when it was refused whole for what they are and more than one could be sent apart.
async fn send_one(
    client: &WorkerCalls,
    mut batch: Vec<Pending>,
    stats: &Stats,
) -> Option<(Vec<Pending>, tonic::Status)> {
    let mut pause = FIRST_RETRY_PAUSE;
    loop {
        let request = v1::CompleteRequest {
            completions: completions_of(&batch),
        };
        let mut calls = client.clone();
        let answer = match tokio::time::timeout(COMPLETE_TIMEOUT, calls.complete(request)).await {
            Ok(answer) => answer,
            Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                "no answer within {COMPLETE_TIMEOUT:?}"
            ))),
        };
        match answer {
            Ok(response) => {
                batch = record_results(batch, &response.into_inner().results, stats);
                if batch.is_empty() {
                    return None;
                }
                tracing::warn!(
                    count = batch.len(),
                    "worker.complete.unavailable; trying those completions again"
                );
            }
            Err(status) if batch.len() > 1 && is_refused_whole(&status) => {
                tracing::warn!(count = batch.len(), code = ?status.code(), message = %status.message(), "worker.complete.refused_whole; sending it again in parts");
                return Some((batch, status));
            }
            // Sent again as it is, a request refused whole would be refused again.
            Err(status) if may_pass(status.code()) && !is_refused_whole(&status) => {
                tracing::warn!(count = batch.len(), code = ?status.code(), message = %status.message(), "worker.complete.retrying");
            }
            Err(status) => {
                tracing::error!(
                    count = batch.len(),
                    code = ?status.code(),
                    message = %status.message(),
                    "worker.complete.failed; the leases will expire and the events come back"
                );
                stats.add(Counter::CompleteFailures, batch.len() as u64);
                return None;
            }
        }
        batch = within_leases(batch, Instant::now() + pause, stats);
        if batch.is_empty() {
            return None;
        }
        stats.add(Counter::CompleteRetries, batch.len() as u64);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_RETRY_PAUSE);
    }
}

/// Those of `batch` whose leases last past `at`; the others are counted as failed, since
/// the gateway would refuse them as stale by then.
fn within_leases(batch: Vec<Pending>, at: Instant, stats: &Stats) -> Vec<Pending> {
    let (live, ended): (Vec<_>, Vec<_>) = batch.into_iter().partition(|p| p.until > at);
    if !ended.is_empty() {
        tracing::error!(
            count = ended.len(),
            "worker.complete.failed; not sent before their leases end, the events come back"
        );
        stats.add(Counter::CompleteFailures, ended.len() as u64);
    }
    live
}

/// Counts the answers to `completions` (sent by `Complete` or carried by a take), logs each
/// refused one, and gives back those whose failure may pass (their shard away for a moment),
/// to be sent again. A release counts as released only once accepted; a completion the
/// answer has no result for (a gateway's bug) counts as a failure.
pub(crate) fn record_results(
    completions: Vec<Pending>,
    results: &[v1::CompletionResult],
    stats: &Stats,
) -> Vec<Pending> {
    let (mut completed, mut released, mut refused) = (0, 0, 0);
    let mut again = Vec::new();
    for (index, pending) in completions.into_iter().enumerate() {
        let completion = &pending.completion;
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
            Some(result) if may_pass(tonic::Code::from_i32(result.code)) => {
                tracing::debug!(id = %completion.id, code = result.code, message = %result.message, "worker.complete.item_unavailable");
                again.push(pending);
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
    again
}

/// Whether `completions` may go with a take: within the completer's own batch bounds.
pub(crate) fn fits_one_request(completions: &[Pending], max_batch: usize) -> bool {
    let bytes: usize = completions.iter().map(|p| p.completion.encoded_len()).sum();
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

    /// How the stand-in gateway answers a `Complete`.
    #[derive(Clone, Copy)]
    enum Answer {
        /// Never, as over a connection gone silent.
        Silent,
        /// UNAVAILABLE for the whole request, as while the gateway restarts.
        Unavailable,
        /// OK, with UNAVAILABLE for each completion, as while its shard restarts.
        ItemsUnavailable,
        /// OK, each completion applied.
        Applied,
    }

    /// A gateway's `Worker` service that answers its `n`th `Complete` with `answers(n)`.
    struct StandIn {
        answers: fn(u32) -> Answer,
        calls: AtomicU32,
    }

    impl StandIn {
        fn client(answers: fn(u32) -> Answer) -> (Arc<StandIn>, WorkerCalls) {
            let gateway = Arc::new(StandIn {
                answers,
                calls: AtomicU32::new(0),
            });
            let client = WorkerCalls::InProcess(Arc::clone(&gateway) as Arc<dyn Worker>);
            (gateway, client)
        }

        fn calls(&self) -> u32 {
            self.calls.load(Ordering::Relaxed)
        }
    }

    #[tonic::async_trait]
    impl Worker for StandIn {
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
            let code = match (self.answers)(self.calls.fetch_add(1, Ordering::Relaxed)) {
                Answer::Silent => std::future::pending().await,
                Answer::Unavailable => return Err(Status::unavailable("restarting")),
                Answer::ItemsUnavailable => tonic::Code::Unavailable,
                Answer::Applied => tonic::Code::Ok,
            };
            let results = request
                .into_inner()
                .completions
                .iter()
                .map(|_| v1::CompletionResult {
                    code: code as i32,
                    ..v1::CompletionResult::default()
                })
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

    /// Sends one ack whose lease lasts `lease`, bounded by an hour so that a completer
    /// that never gives up fails the test instead of hanging it. On paused time, so waits
    /// pass as soon as nothing else can run.
    async fn send_ack(client: WorkerCalls, lease: Duration) -> Arc<Stats> {
        let stats = Arc::new(Stats::default());
        let ack = v1::completion::Outcome::Ack(v1::Ack {});
        let batch = vec![pending(completion("a", ack), Instant::now() + lease)];
        let sent = send(client, batch, Arc::clone(&stats));
        tokio::time::timeout(Duration::from_secs(3600), sent)
            .await
            .expect("sent within an hour");
        stats
    }

    #[tokio::test(start_paused = true)]
    async fn a_complete_left_unanswered_is_tried_again_after_its_timeout() {
        let (gateway, client) = StandIn::client(|n| match n {
            0 => Answer::Silent,
            _ => Answer::Applied,
        });
        let stats = send_ack(client, Duration::from_secs(600)).await.snapshot();
        assert_eq!(gateway.calls(), 2, "tried again");
        assert_eq!((stats.completed, stats.complete_failures), (1, 0));
        assert_eq!(stats.complete_retries, 1);
    }

    /// Twenty seconds of a gateway, then of a shard, that cannot answer: more than a few
    /// quick tries, less than the lease.
    #[tokio::test(start_paused = true)]
    async fn a_completion_is_tried_again_while_its_lease_lasts() {
        let (gateway, client) = StandIn::client(|n| match n {
            0..6 => Answer::Unavailable,
            6..12 => Answer::ItemsUnavailable,
            _ => Answer::Applied,
        });
        let started = Instant::now();
        let stats = send_ack(client, Duration::from_secs(60)).await.snapshot();
        assert_eq!(gateway.calls(), 13);
        assert_eq!((stats.completed, stats.complete_failures), (1, 0));
        assert_eq!(stats.complete_retries, 12);
        // Pauses of 0.1, 0.2, 0.4, 0.8, 1.6, then 2 s.
        assert_eq!(started.elapsed(), Duration::from_millis(3100 + 7 * 2000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_completion_is_given_up_once_its_lease_has_ended() {
        let (gateway, client) = StandIn::client(|_| Answer::ItemsUnavailable);
        let started = Instant::now();
        let stats = send_ack(client, Duration::from_secs(10)).await.snapshot();
        assert_eq!((stats.completed, stats.complete_failures), (0, 1));
        // The last try is the last whose pause ends within the lease.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(gateway.calls(), stats.complete_retries as u32 + 1);
    }

    fn completion(id: &str, outcome: v1::completion::Outcome) -> v1::Completion {
        v1::Completion {
            queue: "jobs".into(),
            id: id.into(),
            lease_token: format!("token-{id}"),
            outcome: Some(outcome),
        }
    }

    fn pending(completion: v1::Completion, until: Instant) -> Pending {
        Pending { completion, until }
    }

    #[test]
    fn only_accepted_releases_count_as_released_and_a_missing_result_as_a_failure() {
        let release = || v1::completion::Outcome::Release(v1::Release {});
        let ack = v1::completion::Outcome::Ack(v1::Ack {});
        let until = Instant::now();
        let completions = vec![
            pending(completion("a", release()), until),
            pending(completion("b", release()), until),
            pending(completion("c", ack.clone()), until),
            pending(completion("d", ack), until),
        ];
        let stale = v1::CompletionResult {
            code: tonic::Code::FailedPrecondition as i32,
            message: "lease of b is not current".into(),
            ..v1::CompletionResult::default()
        };
        let unavailable = v1::CompletionResult {
            code: tonic::Code::Unavailable as i32,
            message: "shard 1: no responders".into(),
            ..v1::CompletionResult::default()
        };
        // "d" has no result: the answer is one short.
        let results = [v1::CompletionResult::default(), stale, unavailable];
        let stats = Stats::default();
        let again = record_results(completions, &results, &stats);
        let counted = stats.snapshot();
        assert_eq!(
            (
                counted.completed,
                counted.released,
                counted.complete_failures
            ),
            (1, 1, 2)
        );
        let again: Vec<_> = again.iter().map(|p| p.completion.id.as_str()).collect();
        assert_eq!(again, ["c"], "to be sent again");
    }
}
