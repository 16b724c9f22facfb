//! One batch of completions on its way: the `Complete` requests it takes, and what their
//! answers say of each completion (done, refused, or to be tried again).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cascade_client::{WorkerCalls, forbidden_apart, is_refused_whole};
use cascade_proto::convert::completion_to_proto;
use cascade_proto::v1;
use prost::Message;

use super::{MAX_REQUEST_BYTES, Pending, completions_of};
use crate::stats::{Counter, Stats};

/// How long a `Complete` may go unanswered before it is tried again: well above the
/// gateway's own wait for its shards, so that only a connection gone silent reaches it.
const COMPLETE_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends `batch` and gives back the completions to try again ([`Pending::again`]). A
/// request the gateway refuses whole for what its completions are goes again without those
/// it lists as outside the worker's grants (they fail here), or, when it lists none (more or
/// larger than its limits), in halves down to single completions: one completion at fault
/// does not fail the others.
///
/// `unsettled` counts the completions neither counted in `stats` yet nor given back, so that
/// the completer can count them if it cuts the task off.
pub(super) async fn send(
    client: WorkerCalls,
    batch: Vec<Pending>,
    stats: Arc<Stats>,
    unsettled: Arc<AtomicUsize>,
) -> Vec<Pending> {
    let mut again = Vec::new();
    // Requests still to send, the next one last.
    let mut to_send = vec![batch];
    while let Some(batch) = to_send.pop() {
        let sent = batch.len();
        // Counted in `stats` as they are settled, with no wait before `unsettled` follows.
        let refused = match send_one(&client, batch, &stats).await {
            Sent::Answered { mut retry } => {
                unsettled.fetch_sub(sent - retry.len(), Ordering::AcqRel);
                again.append(&mut retry);
                continue;
            }
            Sent::RefusedWhole(refused, status) => fail_forbidden(refused, &status, &stats),
        };
        match refused {
            Ok(others) => {
                unsettled.fetch_sub(sent - others.len(), Ordering::AcqRel);
                to_send.extend(Some(others).filter(|others| !others.is_empty()));
            }
            Err(mut refused) => {
                let second = refused.split_off(refused.len() / 2);
                to_send.extend([second, refused]);
            }
        }
    }
    again
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

/// What became of one request.
enum Sent {
    /// Answered (or failed whole in a way that may pass): those to try again.
    Answered { retry: Vec<Pending> },
    /// Refused whole for what its completions are, which may go again apart.
    RefusedWhole(Vec<Pending>, tonic::Status),
}

/// Sends one request, once.
async fn send_one(client: &WorkerCalls, batch: Vec<Pending>, stats: &Stats) -> Sent {
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
    let count = batch.len();
    let retry = match answer {
        Ok(response) => record_results(batch, &response.into_inner().results, stats),
        Err(status) if count > 1 && is_refused_whole(&status) => {
            tracing::warn!(count, code = ?status.code(), message = %status.message(), "worker.complete.refused_whole; sending it again in parts");
            return Sent::RefusedWhole(batch, status);
        }
        // Sent again as it is, a request refused whole would be refused again.
        Err(status) if may_pass(status.code()) && !is_refused_whole(&status) => {
            tracing::warn!(count, code = ?status.code(), message = %status.message(), "worker.complete.failed; trying again");
            batch.into_iter().map(Pending::again).collect()
        }
        Err(status) => {
            tracing::error!(
                count,
                code = ?status.code(),
                message = %status.message(),
                "worker.complete.failed; the leases will expire and the events come back"
            );
            stats.add(Counter::CompleteFailures, count as u64);
            Vec::new()
        }
    };
    Sent::Answered { retry }
}

/// Counts the answers to `completions` (sent by `Complete` or carried by a take), logs each
/// refused one, and gives back those whose shard could not be reached ([`Pending::again`]),
/// to be tried again. A release counts as released only once accepted; a completion the
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
            Some(result) if item_may_pass(tonic::Code::from_i32(result.code)) => {
                tracing::debug!(id = %completion.id, code = result.code, message = %result.message, "worker.complete.unavailable; trying it again");
                again.push(pending.again());
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
                again.extend(answer.and_then(|result| retry_instead(&pending, result)));
            }
        }
    }
    stats.add(Counter::Completed, completed);
    stats.add(Counter::Released, released);
    stats.add(Counter::CompleteFailures, refused);
    again
}

/// An advance or a reschedule the gateway refused for what it says (a target that does not
/// exist or already holds the event's ID, a time out of range) would be refused again each
/// time the event came back, which
/// would wait out its lease each time and be dead-lettered for that. The event is retried
/// instead, with the refusal as its reason: it comes back after the queue's backoff and, once
/// its attempts run out, is dead-lettered saying why.
fn retry_instead(pending: &Pending, result: &v1::CompletionResult) -> Option<Pending> {
    use v1::completion::Outcome as Sent;
    let refused = &pending.completion;
    let kind = match refused.outcome {
        Some(Sent::Advance(_)) => "advance",
        Some(Sent::Reschedule(_)) => "reschedule",
        _ => return None,
    };
    let for_what_it_is = matches!(
        tonic::Code::from_i32(result.code),
        tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::AlreadyExists
    );
    if !for_what_it_is {
        return None;
    }
    let reason = format!(
        "the gateway refused the handler's {kind}: {}",
        result.message
    );
    tracing::warn!(id = %refused.id, "worker.complete.retrying_instead");
    let completion = completion_to_proto(
        &refused.queue,
        &refused.id,
        &refused.lease_token,
        crate::call::retry(reason),
    );
    // Only the lease's end and the tries carry over; the refused payload is not copied.
    Some(
        Pending {
            completion,
            until: pending.until,
            tries: pending.tries,
        }
        .again(),
    )
}

/// Whether `completions` may go with a take: within the completer's own batch bounds.
pub(crate) fn fits_one_request(completions: &[Pending], max_batch: usize) -> bool {
    let bytes: usize = completions.iter().map(|p| p.completion.encoded_len()).sum();
    completions.len() <= max_batch && bytes <= MAX_REQUEST_BYTES
}

/// Failures of a whole request that retrying the same request may get past.
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

/// Failures of one completion in an answer that its retry may get past: its shard could not
/// be reached, or did not answer in time. Not RESOURCE_EXHAUSTED or INTERNAL, which an item
/// also gets for what it is (an advance's payload over a limit, a shard's bad reply).
fn item_may_pass(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
    )
}
