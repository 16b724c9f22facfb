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
use crate::requests::worker::{
    CompletionItems, CompletionOutcomes, apply_completions, completion_results,
};

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
/// applies `completions` once the first attempt has chosen its events.
pub(crate) async fn take(
    ctx: &ShardContext,
    request: TakeItem,
    completions: CompletionItems,
) -> Result<v1::TakeResponse, DispatcherError> {
    ctx.check_owned(&request.queue)?;
    let wait = request.wait.unwrap_or_default().min(ctx.max_take_wait);
    let deadline = Instant::now() + wait;
    let waiter = (!wait.is_zero()).then(|| ctx.wakeups.register(&request.queue));
    let mut completions = Some(completions);
    let mut completed = Vec::new();
    loop {
        let woken = waiter.as_ref().map(|w| w.notify().notified());
        tokio::pin!(woken);
        // Registered before the store is checked: a wake in between is not lost.
        if let Some(woken) = woken.as_mut().as_pin_mut() {
            woken.enable();
        }
        let items = completions.take().unwrap_or_default();
        let (events, outcomes) = take_once(ctx, &request, items).await?;
        if !outcomes.is_empty() {
            completed = completion_results(ctx, outcomes);
        }
        let now = Instant::now();
        let done = !events.is_empty() || now >= deadline || ctx.stopping.is_triggered();
        let (Some(woken), false) = (woken.as_mut().as_pin_mut(), done) else {
            return Ok(v1::TakeResponse {
                events,
                completions: completed,
            });
        };
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(RECHECK.min(deadline - now)) => {}
            () = ctx.stopping.wait() => {}
        }
    }
}

struct Taken {
    events: Vec<v1::LeasedEvent>,
    released: usize,
    /// The first event, alone larger than a reply may be: (id, encoded bytes).
    too_large: Option<(EventId, usize)>,
    completed: CompletionOutcomes,
}

/// One attempt: lease, keep what fits, release the rest, then apply `completions` — all in
/// one writer closure. A take that fails applies none of them.
async fn take_once(
    ctx: &ShardContext,
    request: &TakeItem,
    completions: CompletionItems,
) -> Result<(Vec<v1::LeasedEvent>, CompletionOutcomes), DispatcherError> {
    let queue = request.queue.clone();
    let max = ctx.takes.cap(&queue, request.max_events);
    let lease = request.lease;
    // The completions' results travel in the same reply.
    let budget = ctx
        .takes
        .budget()
        .saturating_sub(results_reserve(&completions));
    let synced = !completions.is_empty();
    let op = move |shard: &mut Shard, now| {
        let leased = shard.take(now, &queue, max, lease)?;
        let mut events = Vec::with_capacity(leased.len());
        let mut used = 0usize;
        let mut overflow: Vec<(EventId, LeaseToken)> = Vec::new();
        let mut too_large = None;
        for item in leased {
            if !overflow.is_empty() {
                overflow.push((item.event.id, item.token));
                continue;
            }
            let (id, token) = (item.event.id.clone(), item.token);
            let event = leased_event_into_proto(item);
            let cost = repeated_field_cost(event.encoded_len());
            if used.saturating_add(cost) > budget {
                if events.is_empty() {
                    too_large = Some((id.clone(), cost));
                }
                overflow.push((id, token));
                continue;
            }
            used += cost;
            events.push(event);
        }
        for (id, token) in &overflow {
            // Failing here would drop the events that fit, leased to no one; the one
            // not released is taken again when its lease expires.
            if let Err(e) = shard.complete(now, &queue, id.as_str(), *token, Outcome::Release) {
                tracing::warn!(queue = %queue, id = %id, error = %e, "dispatcher.take.release");
            }
        }
        // With completions, the room kept for their results may be what the first event
        // lacked: they apply, and the next attempt, without them, has the whole budget.
        let too_large = too_large.filter(|_| !synced);
        let completed = match too_large {
            Some(_) => Vec::new(),
            None => apply_completions(shard, now, completions),
        };
        Ok(Taken {
            events,
            released: overflow.len(),
            too_large,
            completed,
        })
    };
    // A plain take is answered before its fsync: a take lost in a crash only gives its events
    // back, and no lease token is handed out twice (the store's `begin_run`). Completions
    // are answered once durable, and the events with them.
    let taken = match synced {
        true => ctx.store.run(op).await?,
        false => ctx.store.run_unsynced(op).await?,
    };
    if taken.released > 0 {
        ctx.takes.learn(&request.queue, taken.events.len());
        ctx.wakeups.wake(&request.queue);
        tracing::debug!(
            shard = ctx.shard,
            queue = %request.queue,
            sent = taken.events.len(),
            released = taken.released,
            "dispatcher.take.cut_to_bus_size"
        );
    }
    if let Some((id, size)) = taken.too_large {
        return Err(DispatcherError::TooLarge {
            what: format!("event '{id}' of queue '{}'", request.queue),
            size,
            max: budget,
        });
    }
    Ok((taken.events, taken.completed))
}

/// Bytes a reply keeps for the results of `completions`: a failure's message names at most
/// the queue and the event (twice, with the field) in a sentence.
fn results_reserve(completions: &CompletionItems) -> usize {
    const SENTENCE: usize = 256;
    completions
        .iter()
        .map(|item| match item {
            Ok(item) => SENTENCE + 2 * (item.queue.as_str().len() + item.id.as_str().len()),
            Err(e) => SENTENCE + e.to_string().len(),
        })
        .map(repeated_field_cost)
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
