//! Workers' requests besides `Take` (see `take`): complete a batch of leases (one closure, a
//! result per completion) and extend a lease.

use cascade_core::{Outcome, QueueName};
use cascade_proto::convert::{self, CompletionItem, timestamp_to_proto};
use cascade_proto::v1;

use super::item_error;
use crate::DispatcherError;
use crate::context::ShardContext;

pub(super) async fn complete(
    ctx: &ShardContext,
    request: v1::CompleteRequest,
) -> Result<v1::CompleteResponse, DispatcherError> {
    let items: Vec<Result<CompletionItem, DispatcherError>> =
        convert::completions_from_proto(request)
            .into_iter()
            .map(|item| {
                let item = item?;
                ctx.check_owned(&item.queue)?;
                Ok(item)
            })
            .collect();
    let outcomes = ctx
        .store
        .run(move |shard, now| {
            let outcomes = items
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
                .collect::<Vec<Result<Vec<QueueName>, DispatcherError>>>();
            Ok(outcomes)
        })
        .await?;
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
    Ok(v1::CompleteResponse { results })
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
