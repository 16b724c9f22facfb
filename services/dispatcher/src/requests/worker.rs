//! Workers' requests besides `Take` (see `take`): complete a batch of leases (one closure, a
//! result per completion; a take may carry completions too) and extend a lease.

use cascade_core::{Outcome, QueueName, Timestamp};
use cascade_proto::convert::{self, CompletionItem, timestamp_to_proto};
use cascade_proto::v1;
use cascade_store::Shard;

use super::item_error;
use crate::DispatcherError;
use crate::context::ShardContext;

pub(super) async fn complete(
    ctx: &ShardContext,
    request: v1::CompleteRequest,
) -> Result<v1::CompleteResponse, DispatcherError> {
    let items = completion_items(ctx, request.completions);
    let outcomes = ctx
        .store
        .run(move |shard, now| Ok(apply_completions(shard, now, items)))
        .await?;
    Ok(v1::CompleteResponse {
        results: completion_results(ctx, outcomes),
    })
}

/// A request's completions as items of this shard, each valid or why not.
pub(crate) type CompletionItems = Vec<Result<CompletionItem, DispatcherError>>;

/// What applying each completion woke, or why it failed.
pub(crate) type CompletionOutcomes = Vec<Result<Vec<QueueName>, DispatcherError>>;

pub(crate) fn completion_items(
    ctx: &ShardContext,
    completions: Vec<v1::Completion>,
) -> CompletionItems {
    convert::completions_from_proto(completions)
        .into_iter()
        .map(|item| {
            let item = item?;
            ctx.check_owned(&item.queue)?;
            Ok(item)
        })
        .collect()
}

/// In the writer: each completion applied on its own, a failure its result alone.
pub(crate) fn apply_completions(
    shard: &mut Shard,
    now: Timestamp,
    items: CompletionItems,
) -> CompletionOutcomes {
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let item = item?;
            let woken = woken_by(&item);
            shard
                .complete(now, &item.queue, item.id.as_str(), item.token, item.outcome)
                .map_err(|e| item_error(&format!("completions[{index}]"), e))?;
            Ok(woken)
        })
        .collect()
}

/// Wakes what the completions made ready (and the outbox if they handed anything off), and
/// answers each.
pub(crate) fn completion_results(
    ctx: &ShardContext,
    outcomes: CompletionOutcomes,
) -> Vec<v1::CompletionResult> {
    let mut results = Vec::with_capacity(outcomes.len());
    let mut handed_off = false;
    for outcome in outcomes {
        let result = match outcome {
            Ok(woken) => {
                handed_off |= !woken.is_empty();
                for queue in &woken {
                    ctx.wakeups.wake(queue);
                }
                v1::CompletionResult {
                    code: 0,
                    message: String::new(),
                }
            }
            Err(e) => {
                let status = e.to_status();
                v1::CompletionResult {
                    code: status.code,
                    message: status.message,
                }
            }
        };
        results.push(result);
    }
    if handed_off {
        ctx.wake_outbox();
    }
    results
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
