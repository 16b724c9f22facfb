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

mod retries;
mod send;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use cascade_client::WorkerCalls;
use cascade_proto::v1;
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{self, JoinError, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use crate::run_loop::sleep_until;
use crate::stats::{Counter, Stats};
use retries::Retries;

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

/// Runs until every sender is dropped, the queue is empty, no request is out and no
/// completion waits for a retry, or until `flush` after `stop` fires (the worker has
/// stopped): then what is left is counted as failed and given up. Completions
/// that come back from a take's answer to be sent again ([`Pending::again`]) wait for their
/// pause like the completer's own.
pub(crate) async fn run_completer(
    client: WorkerCalls,
    queued: mpsc::Receiver<Pending>,
    max_batch: usize,
    stats: Arc<Stats>,
    stop: oneshot::Receiver<()>,
    flush: Duration,
) {
    Completer {
        client,
        queued,
        open: true,
        max_batch,
        retries: Retries::new(Arc::clone(&stats)),
        carried: None,
        sending: JoinSet::new(),
        in_flight: HashMap::new(),
        stop: Some(stop),
        flush,
        deadline: None,
        stats,
    }
    .run()
    .await;
}

struct Completer {
    client: WorkerCalls,
    queued: mpsc::Receiver<Pending>,
    /// Until every sender is dropped.
    open: bool,
    max_batch: usize,
    retries: Retries,
    /// Taken from the queue, left for the next request (the last one was full).
    carried: Option<Pending>,
    /// Each request's task gives back the completions to try again.
    sending: JoinSet<Vec<Pending>>,
    /// Each request's completions not settled yet, to count them if it is given up.
    in_flight: HashMap<task::Id, Arc<AtomicUsize>>,
    /// Fires (or is dropped) when the worker stops; what is left gets `flush` more.
    stop: Option<oneshot::Receiver<()>>,
    flush: Duration,
    deadline: Option<Instant>,
    stats: Arc<Stats>,
}

impl Completer {
    async fn run(mut self) {
        loop {
            if self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
            {
                return self.give_up_the_rest();
            }
            // While every slot is taken, completions gather in the queue for the next request.
            let slot_free = self.sending.len() < COMPLETES_IN_FLIGHT;
            if slot_free && let Some(first) = self.next_to_send() {
                self.send(first);
                continue;
            }
            if !self.open
                && self.carried.is_none()
                && self.retries.is_empty()
                && self.sending.is_empty()
            {
                return;
            }
            let due = self.retries.next_due().filter(|_| slot_free);
            let deadline = self.deadline;
            // Every branch is cancel-safe: joins, sleeps, and channel receives.
            tokio::select! {
                Some(sent) = self.sending.join_next_with_id() => self.on_sent(sent),
                () = sleep_until(due), if due.is_some() => {}
                () = stop_signal(&mut self.stop), if self.stop.is_some() => {
                    self.stop = None;
                    let deadline = Instant::now() + self.flush;
                    self.deadline = Some(deadline);
                    self.retries.stop_at(deadline);
                }
                () = sleep_until(deadline), if deadline.is_some() => {}
                next = self.queued.recv(), if self.open && slot_free => match next {
                    Some(pending) if pending.tries > 0 => self.retries.schedule(pending),
                    Some(pending) => self.carried = Some(pending),
                    None => self.open = false,
                },
            }
        }
    }

    /// What goes first in the next request: the completion left over, a retry whose pause
    /// is over, or the next in the queue.
    fn next_to_send(&mut self) -> Option<Pending> {
        if let Some(carried) = self.carried.take() {
            return Some(carried);
        }
        if let Some(due) = self.retries.take_due() {
            return Some(due);
        }
        loop {
            match self.queued.try_recv().ok()? {
                pending if pending.tries > 0 => self.retries.schedule(pending),
                pending => return Some(pending),
            }
        }
    }

    /// Sends `first` and whatever else may go with it, within the request's bounds.
    fn send(&mut self, first: Pending) {
        let mut bytes = first.completion.encoded_len();
        let mut batch = vec![first];
        while batch.len() < self.max_batch {
            let Some(next) = self.next_to_send() else {
                break;
            };
            let size = next.completion.encoded_len();
            if bytes + size > MAX_REQUEST_BYTES {
                self.carried = Some(next);
                break;
            }
            bytes += size;
            batch.push(next);
        }
        let unsettled = Arc::new(AtomicUsize::new(batch.len()));
        let request = send::send(
            self.client.clone(),
            batch,
            Arc::clone(&self.stats),
            Arc::clone(&unsettled),
        );
        let task = self.sending.spawn(request.in_current_span());
        self.in_flight.insert(task.id(), unsettled);
    }

    /// A request's task ended: what it gave back waits for its retry; a task that failed
    /// lost its completions.
    fn on_sent(&mut self, sent: Result<(task::Id, Vec<Pending>), JoinError>) {
        let id = sent.as_ref().map_or_else(JoinError::id, |(id, _)| *id);
        let count = self
            .in_flight
            .remove(&id)
            .map_or(0, |unsettled| unsettled.load(Ordering::Acquire));
        match sent {
            Ok((_, again)) => again
                .into_iter()
                .for_each(|pending| self.retries.schedule(pending)),
            Err(err) => {
                tracing::error!(error = %err, count, "worker.complete.panicked");
                self.stats.add(Counter::CompleteFailures, count as u64);
            }
        }
    }

    /// The stop's deadline has come: what is still out, waiting or queued is counted as
    /// failed; the gateway lets those leases expire.
    fn give_up_the_rest(mut self) {
        // Requests that have ended are settled as usual (what they give back is past the
        // deadline, so given up); those still out are cut off.
        while let Some(sent) = self.sending.try_join_next_with_id() {
            self.on_sent(sent);
        }
        self.sending.abort_all();
        let mut count: usize = self
            .in_flight
            .values()
            .map(|unsettled| unsettled.load(Ordering::Acquire))
            .sum();
        count += self.retries.len() + usize::from(self.carried.is_some());
        while self.queued.try_recv().is_ok() {
            count += 1;
        }
        if count > 0 {
            tracing::error!(
                count,
                "worker.complete.flush_timed_out; unsent leases will expire and the events come back"
            );
            self.stats.add(Counter::CompleteFailures, count as u64);
        }
    }
}

/// Once the worker stops: it says so, or drops its end (it was cancelled).
async fn stop_signal(stop: &mut Option<oneshot::Receiver<()>>) {
    match stop {
        Some(stop) => {
            let _ = stop.await;
        }
        None => std::future::pending().await,
    }
}
