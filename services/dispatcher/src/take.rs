//! `Take`, with long polling and a reply that always fits on the bus.
//!
//! Long poll: when nothing is ready, the request waits (at most `dispatcher.max_take_wait`)
//! until its queue is woken (see `wakeups`) or a short re-check interval passes — the
//! re-check catches leases expired by the store's own tick — and tries again. The requester
//! must wait longer than `wait` for the answer, or events leased for it are held by no one
//! until their lease expires.
//!
//! Size: events are leased, measured, and those that do not fit in the bus's `max_payload`
//! are released in the same writer closure, so no one ever holds a lease on them. A release
//! still counts an attempt (the store's rule), so the shard remembers for a while how many
//! events of that queue fit in one reply and asks for no more. A take carrying completions
//! keeps room in its reply for their results.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cascade_core::{EventId, Outcome, QueueName};
use cascade_proto::convert::{TakeItem, leased_event_into_proto};
use cascade_proto::v1;
use cascade_store::Shard;
use cascade_store::shard::LeaseToken;
use prost::Message;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::requests::worker::{Completed, CompletionItems, apply_completions, owned};

/// How often a waiting take looks again without being woken.
const RECHECK: Duration = Duration::from_millis(100);
/// How long a learnt "this many fit" cap holds.
const HINT_TTL: Duration = Duration::from_secs(10);
/// Queues with a learnt cap at most; beyond, the caps are forgotten.
const MAX_HINTS: usize = 4096;

/// The reply budget of a shard and the caps it learnt per queue.
pub(crate) struct TakeLimits {
    budget: usize,
    hints: Mutex<HashMap<QueueName, (usize, Instant)>>,
}

impl TakeLimits {
    pub fn new(budget: usize) -> TakeLimits {
        TakeLimits {
            budget,
            hints: Mutex::new(HashMap::new()),
        }
    }

    /// Bytes of events one reply may carry.
    pub fn budget(&self) -> usize {
        self.budget
    }

    fn cap(&self, queue: &QueueName, requested: usize) -> usize {
        let hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        match hints.get(queue) {
            Some(&(fits, until)) if Instant::now() < until => requested.min(fits),
            _ => requested,
        }
    }

    fn learn(&self, queue: &QueueName, fitted: usize) {
        let mut hints = self.hints.lock().unwrap_or_else(|p| p.into_inner());
        if hints.len() >= MAX_HINTS {
            hints.clear();
        }
        hints.insert(queue.clone(), (fitted.max(1), Instant::now() + HINT_TTL));
    }
}

/// Leases up to `max_events` ready events, waiting for them as the request asks, and
/// applies `completions` once the first attempt has chosen its events. Once they are
/// applied, their results are answered whatever a later attempt meets.
pub(crate) async fn take(
    ctx: &ShardContext,
    request: TakeItem,
    completions: CompletionItems,
) -> Result<v1::TakeResponse, DispatcherError> {
    ctx.check_owned(&request.queue)?;
    let completions = owned(ctx, completions);
    let wait = request.wait.unwrap_or_default().min(ctx.max_take_wait);
    let deadline = Instant::now() + wait;
    let waiter = (!wait.is_zero()).then(|| ctx.wakeups.register(&request.queue));
    let mut completions = Some(completions);
    let mut results = Vec::new();
    loop {
        let woken = waiter.as_ref().map(|w| w.notify().notified());
        tokio::pin!(woken);
        // Registered before the store is checked: a wake in between is not lost.
        if let Some(woken) = woken.as_mut().as_pin_mut() {
            woken.enable();
        }
        let items = completions.take().unwrap_or_default();
        let attempt = match take_once(ctx, &request, items, &mut results).await {
            Ok(attempt) => attempt,
            Err(err) if !results.is_empty() => {
                tracing::debug!(shard = ctx.shard, queue = %request.queue, error = %err, "dispatcher.take.failed_after_completions");
                Attempt {
                    events: Vec::new(),
                    ended: true,
                }
            }
            Err(err) => return Err(err),
        };
        let now = Instant::now();
        let done = !attempt.events.is_empty()
            || attempt.ended
            || now >= deadline
            || ctx.stopping.is_triggered();
        let (Some(woken), false) = (woken.as_mut().as_pin_mut(), done) else {
            return Ok(v1::TakeResponse {
                events: attempt.events,
                completions: results,
            });
        };
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(RECHECK.min(deadline - now)) => {}
            () = ctx.stopping.wait() => {}
        }
    }
}

/// What one attempt leased, and whether the take should answer now even without events.
struct Attempt {
    events: Vec<v1::LeasedEvent>,
    /// The first event did not fit beside the completions' results (a later attempt would
    /// find it so again), or an attempt failed after they were applied: the results go now,
    /// and the next take, without them, has room.
    ended: bool,
}

struct Taken {
    events: Vec<v1::LeasedEvent>,
    released: usize,
    /// Events that a reply with no results would have held.
    fit_whole: usize,
    /// The first event, alone larger than what the reply had room for: (id, encoded bytes).
    too_large: Option<(EventId, usize)>,
    completed: Completed,
    /// Bytes of the reply kept for the completions' results.
    reserved: usize,
}

/// One attempt, in one writer closure: lease, apply `completions` (so a take that fails
/// applies none), keep the events that fit in the reply beside every result in `results`,
/// and release the rest. The new results are added to `results`.
async fn take_once(
    ctx: &ShardContext,
    request: &TakeItem,
    completions: CompletionItems,
    results: &mut Vec<v1::CompletionResult>,
) -> Result<Attempt, DispatcherError> {
    let queue = request.queue.clone();
    let max = ctx.takes.cap(&queue, request.max_events);
    let lease = request.lease;
    let held = reply_bytes(results);
    let budget = ctx.takes.budget();
    let synced = !completions.is_empty();
    let op = move |shard: &mut Shard, now| {
        let leased = shard.take(now, &queue, max, lease)?;
        let completed = apply_completions(shard, now, completions);
        let reserved = held + reply_bytes(&completed.results);
        let room = budget.saturating_sub(reserved);
        let mut events = Vec::with_capacity(leased.len());
        let mut used = 0usize;
        let mut overflow: Vec<(EventId, LeaseToken)> = Vec::new();
        let mut too_large = None;
        // How many would have fitted a reply of the whole budget: what the queue's cap learns.
        let mut fit_whole = 0;
        for item in leased {
            let (id, token) = (item.event.id.clone(), item.token);
            let event = leased_event_into_proto(item);
            let cost = repeated_field_cost(event.encoded_len());
            used = used.saturating_add(cost);
            if used <= budget {
                fit_whole += 1;
            }
            if !overflow.is_empty() || used > room {
                if events.is_empty() && overflow.is_empty() {
                    too_large = Some((id.clone(), cost));
                }
                overflow.push((id, token));
                continue;
            }
            events.push(event);
        }
        for (id, token) in &overflow {
            // Failing here would drop the events that fit, leased to no one; the one
            // not released is taken again when its lease expires.
            if let Err(e) = shard.complete(now, &queue, id.as_str(), *token, Outcome::Release) {
                tracing::warn!(queue = %queue, id = %id, error = %e, "dispatcher.take.release");
            }
        }
        Ok(Taken {
            events,
            released: overflow.len(),
            fit_whole,
            too_large,
            completed,
            reserved,
        })
    };
    // A plain take is answered before its fsync: a take lost in a crash only gives its events
    // back, and no lease token is handed out twice (the store's `begin_run`). Completions
    // are answered once durable, and the events with them.
    let taken = match synced {
        true => ctx.store.run(op).await?,
        false => ctx.store.run_unsynced(op).await?,
    };
    taken.completed.wake(ctx);
    results.extend(taken.completed.results);
    if taken.released > 0 {
        ctx.takes.learn(&request.queue, taken.fit_whole);
        ctx.wakeups.wake(&request.queue);
        tracing::debug!(
            shard = ctx.shard,
            queue = %request.queue,
            sent = taken.events.len(),
            released = taken.released,
            "dispatcher.take.cut_to_bus_size"
        );
    }
    match taken.too_large {
        Some(_) if taken.reserved > 0 => Ok(Attempt {
            events: Vec::new(),
            ended: true,
        }),
        Some((id, size)) => Err(DispatcherError::TooLarge {
            what: format!("event '{id}' of queue '{}'", request.queue),
            size,
            max: budget,
        }),
        None => Ok(Attempt {
            events: taken.events,
            ended: false,
        }),
    }
}

/// Bytes `results` take in a reply.
fn reply_bytes(results: &[v1::CompletionResult]) -> usize {
    results
        .iter()
        .map(|result| repeated_field_cost(result.encoded_len()))
        .sum()
}

/// Bytes one element of a repeated message field takes: tag, length, body.
pub(crate) fn repeated_field_cost(len: usize) -> usize {
    1 + prost::length_delimiter_len(len) + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_learnt_and_bounded() {
        let limits = TakeLimits::new(1000);
        let queue = QueueName::parse("big").expect("queue");
        assert_eq!(limits.cap(&queue, 100), 100);
        limits.learn(&queue, 3);
        assert_eq!(limits.cap(&queue, 100), 3);
        assert_eq!(limits.cap(&queue, 2), 2);
        limits.learn(&queue, 0);
        assert_eq!(
            limits.cap(&queue, 100),
            1,
            "at least one event is always asked for"
        );
        for i in 0..MAX_HINTS + 1 {
            limits.learn(&QueueName::parse(&format!("q{i}")).expect("queue"), 1);
        }
        assert!(limits.hints.lock().expect("lock").len() <= MAX_HINTS);
    }

    #[test]
    fn field_cost_counts_tag_and_length() {
        assert_eq!(repeated_field_cost(0), 2);
        assert_eq!(repeated_field_cost(127), 129);
        assert_eq!(repeated_field_cost(128), 131);
    }
}
