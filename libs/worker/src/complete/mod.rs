//! Sends completions in batches: whatever queued up while the previous `Complete`s were in
//! flight goes in the next one (like a group commit), bounded by count and bytes. Up to
//! `COMPLETES_IN_FLIGHT` requests are out at once, so that the next batch travels while
//! the gateway makes the previous one durable; completions are of distinct leases, so no
//! order is needed between them.
//!
//! Failure policy: a completion whose failure may pass (a request that failed whole with
//! UNAVAILABLE or the like, as while the gateway restarts, or a completion its answer says
//! is UNAVAILABLE, as while the event's shard restarts) is tried again after a pause that
//! doubles, for as long as its lease lasts: after that the gateway would refuse it as stale,
//! and the event is delivered again anyway. It waits for its next try apart from the
//! requests, so that it holds no request's place meanwhile, and joins the next batch when
//! its pause is over. A retry of a completion that did apply is refused as a stale lease and
//! changes nothing. A request refused whole for what its completions are goes again without
//! those the gateway lists as outside the worker's grants, or in halves, so only the
//! completions at fault are refused. A completion that is refused or cannot be sent in time
//! is logged and counted; its lease expires and the event is delivered again (at least once).
//! Once the worker has stopped, nothing is tried past the flush it gets.

mod send;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cascade_client::WorkerCalls;
use cascade_proto::v1;
use prost::Message;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use crate::stats::{Counter, Stats};

pub(crate) use send::{fail_forbidden, fits_one_request, may_pass, record_results};

/// Bytes per `Complete` request at most (advances may carry payloads); one larger
/// completion still goes, alone. Well under tonic's 4 MiB default request limit.
const MAX_REQUEST_BYTES: usize = 2 << 20;
/// `Complete` requests unanswered at once at most.
const COMPLETES_IN_FLIGHT: usize = 2;
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Pauses between tries double up to this: a shard back from a restart is seen within it.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// A completion to send, until when sending it is worth a try (the end of its lease), and
/// how often it was sent before.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    pub(crate) completion: v1::Completion,
    pub(crate) until: Instant,
    pub(crate) tries: u32,
}

impl Pending {
    pub(crate) fn new(completion: v1::Completion, until: Instant) -> Pending {
        Pending {
            completion,
            until,
            tries: 0,
        }
    }

    /// This completion, to be sent again after its failure.
    pub(crate) fn again(self) -> Pending {
        Pending {
            tries: self.tries + 1,
            ..self
        }
    }

    /// How long to wait before the next try.
    fn pause(&self) -> Duration {
        let doublings = self.tries.saturating_sub(1).min(16);
        (FIRST_RETRY_PAUSE * 2u32.pow(doublings)).min(MAX_RETRY_PAUSE)
    }
}

/// The completions of `pending`, for a request.
pub(crate) fn completions_of(pending: &[Pending]) -> Vec<v1::Completion> {
    pending.iter().map(|p| p.completion.clone()).collect()
}

/// Runs until every sender is dropped, the queue is empty and no completion waits for a
/// retry. Completions that come back from a take's answer to be sent again
/// ([`Pending::again`]) wait for their pause like the completer's own.
pub(crate) async fn run_completer(
    client: WorkerCalls,
    mut queued: mpsc::Receiver<Pending>,
    max_batch: usize,
    stats: Arc<Stats>,
    flush: Duration,
) {
    let mut retries = Retries::new(Arc::clone(&stats));
    let mut carried: Option<Pending> = None;
    let mut sending: JoinSet<Vec<Pending>> = JoinSet::new();
    let mut open = true;
    loop {
        // While every slot is taken, completions gather in the queue for the next request.
        while sending.len() >= COMPLETES_IN_FLIGHT {
            if let Some(sent) = sending.join_next().await {
                retries.schedule_all(sent);
            }
        }
        let first = match carried.take().or_else(|| retries.take_due()) {
            Some(first) => first,
            None if !open && retries.is_empty() && sending.is_empty() => break,
            None => {
                let due = retries.next_due();
                // Every branch is cancel-safe: joins, a sleep, and a channel receive.
                tokio::select! {
                    Some(sent) = sending.join_next() => {
                        retries.schedule_all(sent);
                        continue;
                    }
                    () = sleep_until(due), if due.is_some() => continue,
                    next = queued.recv(), if open => match next {
                        Some(pending) if pending.tries > 0 => {
                            retries.schedule(pending);
                            continue;
                        }
                        Some(pending) => pending,
                        None => {
                            open = false;
                            retries.stop_at(Instant::now() + flush);
                            continue;
                        }
                    },
                }
            }
        };
        let mut bytes = first.completion.encoded_len();
        let mut batch = vec![first];
        while batch.len() < max_batch {
            let next = match retries.take_due() {
                Some(due) => due,
                None => match queued.try_recv() {
                    Ok(next) if next.tries > 0 => {
                        retries.schedule(next);
                        continue;
                    }
                    Ok(next) => next,
                    Err(_) => break,
                },
            };
            let size = next.completion.encoded_len();
            if bytes + size > MAX_REQUEST_BYTES {
                carried = Some(next);
                break;
            }
            bytes += size;
            batch.push(next);
        }
        sending.spawn(send::send(client.clone(), batch, Arc::clone(&stats)).in_current_span());
    }
}

/// Completions waiting to be tried again, by when their pause ends.
struct Retries {
    waiting: BTreeMap<(Instant, u64), Pending>,
    /// Tells apart completions due at the same instant.
    next_key: u64,
    /// Once the worker has stopped: nothing is tried after it.
    stop_at: Option<Instant>,
    stats: Arc<Stats>,
}

impl Retries {
    fn new(stats: Arc<Stats>) -> Retries {
        Retries {
            waiting: BTreeMap::new(),
            next_key: 0,
            stop_at: None,
            stats,
        }
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    fn next_due(&self) -> Option<Instant> {
        self.waiting.keys().next().map(|(due, _)| *due)
    }

    /// The first completion whose pause is over, counted as tried again.
    fn take_due(&mut self) -> Option<Pending> {
        let entry = self.waiting.first_entry()?;
        if entry.key().0 > Instant::now() {
            return None;
        }
        self.stats.add(Counter::CompleteRetries, 1);
        Some(entry.remove())
    }

    /// What a request's task gave back to be sent again; a task that failed gave nothing.
    fn schedule_all(&mut self, sent: Result<Vec<Pending>, JoinError>) {
        match sent {
            Ok(again) => again.into_iter().for_each(|pending| self.schedule(pending)),
            Err(err) => tracing::error!(error = %err, "worker.complete.panicked"),
        }
    }

    /// Waits out `pending`'s pause before its next try, unless its lease (or the worker's
    /// flush) ends first: then it is counted as failed, since the gateway would refuse it
    /// as stale by then.
    fn schedule(&mut self, pending: Pending) {
        let due = Instant::now() + pending.pause();
        let until = self
            .stop_at
            .map_or(pending.until, |stop| stop.min(pending.until));
        if due >= until {
            self.give_up(&pending);
            return;
        }
        self.next_key += 1;
        self.waiting.insert((due, self.next_key), pending);
    }

    /// The worker has stopped: what cannot be tried before `at` is given up now.
    fn stop_at(&mut self, at: Instant) {
        self.stop_at = Some(at);
        let late = self.waiting.split_off(&(at, 0));
        late.values().for_each(|pending| self.give_up(pending));
    }

    fn give_up(&self, pending: &Pending) {
        tracing::error!(
            id = %pending.completion.id,
            tries = pending.tries,
            "worker.complete.failed; not sent before its lease ended or the worker stopped, the event comes back"
        );
        self.stats.add(Counter::CompleteFailures, 1);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
