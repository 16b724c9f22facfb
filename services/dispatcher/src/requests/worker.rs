//! Workers' requests besides `Take` (see `take`): complete a batch of leases (one closure, a
//! result per completion; a take may carry completions too) and extend a lease.

use cascade_core::{Outcome, QueueName, Timestamp};
use cascade_proto::convert::{self, CompletionItem, timestamp_to_proto};
use cascade_proto::v1;
use cascade_store::Shard;

use super::Items;
use crate::DispatcherError;
use crate::context::ShardContext;

pub(super) async fn complete(
    ctx: &ShardContext,
    completions: CompletionItems,
) -> Result<v1::CompleteResponse, DispatcherError> {
    let items = owned(ctx, completions);
    let completed = ctx
        .store
        .run(move |shard, now| Ok(apply_completions(shard, now, items)))
        .await?;
    completed.wake(ctx);
    Ok(v1::CompleteResponse {
        results: completed.results,
    })
}

/// A request's completions, each valid or why not.
pub(crate) type CompletionItems = Items<CompletionItem>;

/// Each completion that is not of this shard's queues fails on its own.
pub(crate) fn owned(ctx: &ShardContext, completions: CompletionItems) -> CompletionItems {
    completions
        .into_iter()
        .map(|item| {
            let item = item?;
            ctx.check_owned(&item.queue)?;
            Ok(item)
        })
        .collect()
}

/// What a request's completions did: a result each, in order, and the queues they may have
/// made ready.
#[derive(Default)]
pub(crate) struct Completed {
    pub results: Vec<v1::CompletionResult>,
    woken: Vec<QueueName>,
}

impl Completed {
    /// Wakes the takes waiting on what the completions made ready, and the outbox if they
    /// handed anything off.
    pub fn wake(&self, ctx: &ShardContext) {
        for queue in &self.woken {
            ctx.wakeups.wake(queue);
        }
        if !self.woken.is_empty() {
            ctx.wake_outbox();
        }
    }
}

/// In the writer: each completion applied on its own, a failure its result alone.
pub(crate) fn apply_completions(
    shard: &mut Shard,
    now: Timestamp,
    items: CompletionItems,
) -> Completed {
    let mut completed = Completed::default();
    for item in items {
        let applied = item.and_then(|item| {
            let woken = woken_by(&item);
            shard.complete(now, &item.queue, item.id.as_str(), item.token, item.outcome)?;
            Ok(woken)
        });
        let result = match applied {
            Ok(woken) => {
                completed.woken.extend(woken);
                v1::CompletionResult::default()
            }
            Err(e) => {
                let (code, message, field) = e.item_failure();
                v1::CompletionResult {
                    code,
                    message,
                    field,
                }
            }
        };
        completed.results.push(result);
    }
    completed
}

/// Queues where an outcome may make an event ready, now or through the timer. Every outcome
/// but `ack` may also add a hand-off (a schedule, an advance, a dead letter).
fn woken_by(item: &CompletionItem) -> Vec<QueueName> {
    match &item.outcome {
        Outcome::Ack => Vec::new(),
        Outcome::Advance { to, .. } => {
            let target = to.as_deref().and_then(|to| QueueName::parse(to).ok());
            target.into_iter().collect()
        }
        Outcome::Retry { .. }
        | Outcome::Reschedule { .. }
        | Outcome::Release
        | Outcome::DeadLetter { .. } => vec![item.queue.clone()],
    }
}

pub(super) async fn extend(
    ctx: &ShardContext,
    request: v1::ExtendLeaseRequest,
) -> Result<v1::ExtendLeaseResponse, DispatcherError> {
    let item = convert::extend_from_proto(&request)?;
    ctx.check_owned(&item.queue)?;
    let deadline = ctx
        .store
        .run(move |shard, now| {
            let by = match item.extend_by {
                Some(by) => by,
                None => shard.get_queue(&item.queue)?.config.lease,
            };
            shard.extend(now, &item.queue, item.id.as_str(), item.token, by)
        })
        .await?;
    Ok(v1::ExtendLeaseResponse {
        lease_expires_at: Some(timestamp_to_proto(deadline)),
    })
}
