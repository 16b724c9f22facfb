//! Producers' requests: enqueue (a batch, one closure, a result per item), get, update,
//! delete.

use cascade_proto::bus::v1::Empty;
use cascade_proto::convert::{
    self, Destination, EnqueueItem, enqueued_to_proto, event_into_proto, event_ref_from_proto,
};
use cascade_proto::v1;
use cascade_store::shard::Enqueued;

use super::Items;
use crate::DispatcherError;
use crate::context::ShardContext;

pub(super) async fn enqueue(
    ctx: &ShardContext,
    items: Items<EnqueueItem>,
) -> Result<v1::EnqueueBatchResponse, DispatcherError> {
    ctx.check_space()?;
    // Checked before the closure: a misrouted item must change nothing.
    let items: Items<EnqueueItem> = items
        .into_iter()
        .map(|item| {
            let item = item?;
            if let Destination::Queue(queue) = &item.destination {
                ctx.check_owned(queue)?;
            }
            Ok(item)
        })
        .collect();
    let outcomes = ctx
        .store
        .run(move |shard, now| {
            let outcomes = items
                .into_iter()
                .map(|item| {
                    let command = item?.into_command(now)?;
                    let delayed = command.activate_at.is_some_and(|at| at > now);
                    let enqueued = shard.enqueue(now, command)?;
                    Ok((enqueued, delayed))
                })
                .collect::<Vec<Result<(Enqueued, bool), DispatcherError>>>();
            Ok(outcomes)
        })
        .await?;
    let mut results = Vec::with_capacity(outcomes.len());
    let mut schedules = false;
    let mut last_woken = None;
    for outcome in outcomes {
        let result = match outcome {
            Ok((enqueued, delayed)) => {
                if !enqueued.duplicate {
                    if delayed {
                        schedules = true;
                    } else if last_woken.as_ref() != Some(&enqueued.queue) {
                        ctx.wakeups.wake(&enqueued.queue);
                        last_woken = Some(enqueued.queue.clone());
                    }
                }
                v1::EnqueueResult {
                    ok: Some(enqueued_to_proto(&enqueued)),
                    ..v1::EnqueueResult::default()
                }
            }
            Err(e) => {
                let (code, message, field) = e.item_failure();
                v1::EnqueueResult {
                    ok: None,
                    code,
                    message,
                    field,
                }
            }
        };
        results.push(result);
    }
    if schedules {
        ctx.wake_outbox();
    }
    Ok(v1::EnqueueBatchResponse { results })
}

pub(super) async fn get(
    ctx: &ShardContext,
    request: v1::GetRequest,
) -> Result<v1::Event, DispatcherError> {
    let event = event_ref_from_proto(&request.queue, &request.id)?;
    ctx.check_owned(&event.queue)?;
    let found = ctx
        .store
        .run(move |shard, _| shard.get(&event.queue, event.id.as_str()))
        .await?;
    Ok(event_into_proto(found))
}

pub(super) async fn update(
    ctx: &ShardContext,
    request: v1::UpdateRequest,
) -> Result<v1::Event, DispatcherError> {
    let item = convert::update_from_proto(request)?;
    ctx.check_owned(&item.event.queue)?;
    ctx.check_space()?;
    let updated = ctx
        .store
        .run(move |shard, now| {
            let (event, update) = item.into_update(now);
            shard.update(now, &event.queue, event.id.as_str(), update)
        })
        .await?;
    match updated.state {
        cascade_core::EventState::Delayed => ctx.wake_outbox(),
        _ => ctx.wakeups.wake(&updated.queue),
    }
    Ok(event_into_proto(updated))
}

pub(super) async fn delete(
    ctx: &ShardContext,
    request: v1::DeleteRequest,
) -> Result<Empty, DispatcherError> {
    let event = event_ref_from_proto(&request.queue, &request.id)?;
    ctx.check_owned(&event.queue)?;
    ctx.store
        .run(move |shard, _| shard.delete(&event.queue, event.id.as_str()))
        .await?;
    Ok(Empty {})
}
