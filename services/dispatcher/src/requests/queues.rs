//! Operators' requests: queues and templates (create, get, list, delete, purge, stats) and
//! dead letters (list, redrive). A template lives on every shard (its queues spread over
//! all of them), so only plain queue names are checked for ownership; listing is per shard
//! and the gateway merges the shards' pages.

use std::sync::Arc;

use cascade_core::{QueueName, Timestamp};
use cascade_proto::bus::v1::Empty;
use cascade_proto::convert::{
    self, event_into_proto, queue_name_from_proto, queue_stats_to_proto, queue_to_proto,
};
use cascade_proto::v1;
use cascade_store::shard::{PURGE_STEP, REDRIVE_STEP, Step};
use cascade_store::{Shard, StoreError};
use prost::Message;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::take::repeated_field_cost;

/// A queue name, or a template (which every shard holds).
fn check_queue_or_template(ctx: &ShardContext, name: &QueueName) -> Result<(), DispatcherError> {
    match name.is_template() {
        true => Ok(()),
        false => ctx.check_owned(name),
    }
}

pub(super) async fn create(
    ctx: &ShardContext,
    request: v1::CreateQueueRequest,
) -> Result<v1::Queue, DispatcherError> {
    let (name, config) = convert::create_queue_from_proto(&request)?;
    check_queue_or_template(ctx, &name)?;
    let queue = ctx
        .store
        .run(move |shard, now| shard.create_queue(now, name, config))
        .await?;
    Ok(queue_to_proto(&queue))
}

pub(super) async fn get(
    ctx: &ShardContext,
    request: v1::GetQueueRequest,
) -> Result<v1::Queue, DispatcherError> {
    let name = queue_name_from_proto(&request.name, "name")?;
    check_queue_or_template(ctx, &name)?;
    let queue = ctx
        .store
        .run(move |shard, _| shard.get_queue(&name))
        .await?;
    Ok(queue_to_proto(&queue))
}

pub(super) async fn list(
    ctx: &ShardContext,
    request: v1::ListQueuesRequest,
) -> Result<v1::ListQueuesResponse, DispatcherError> {
    let (prefix, page) = convert::list_queues_from_proto(&request)?;
    let listed = ctx
        .store
        .run(move |shard, _| shard.list_queues(&prefix, page.size, &page.token))
        .await?;
    Ok(v1::ListQueuesResponse {
        queues: listed.items.iter().map(queue_to_proto).collect(),
        next_page_token: listed.next_page_token,
    })
}

pub(super) async fn delete(
    ctx: &ShardContext,
    request: v1::DeleteQueueRequest,
) -> Result<Empty, DispatcherError> {
    let name = queue_name_from_proto(&request.name, "name")?;
    check_queue_or_template(ctx, &name)?;
    let mut purged = 0;
    if request.force && !name.is_template() {
        // The events first, in steps; the delete then takes what came meanwhile.
        purged = purge_in_steps(ctx, &name).await?;
    }
    let deleted = ctx
        .store
        .run(move |shard, _| shard.delete_queue(&name, request.force))
        .await;
    match deleted {
        // A per-user or dead-letter queue goes with its last event: the purge deleted it.
        Err(StoreError::QueueNotFound { .. }) if purged > 0 => Ok(Empty {}),
        deleted => deleted.map(|()| Empty {}).map_err(DispatcherError::from),
    }
}

pub(super) async fn purge(
    ctx: &ShardContext,
    request: v1::PurgeQueueRequest,
) -> Result<v1::PurgeQueueResponse, DispatcherError> {
    let name = queue_name_from_proto(&request.name, "name")?;
    ctx.check_owned(&name)?;
    let purged = purge_in_steps(ctx, &name).await?;
    Ok(v1::PurgeQueueResponse { purged })
}

async fn purge_in_steps(ctx: &ShardContext, name: &QueueName) -> Result<u64, DispatcherError> {
    let step = |after: String| {
        let name = name.clone();
        move |shard: &mut Shard, _| shard.purge_queue(&name, PURGE_STEP, &after)
    };
    in_steps(ctx, "purge", PURGE_STEP, step, |_: &Step| {}).await
}

/// Runs a purge or a redrive as its steps (`Step`), each in a turn of the shard's writer and
/// durable on its own, so that the shard's other queues wait for one step at a time; `each`
/// sees every step once it is durable. Each step starts where the last ended; the last says
/// there is no more. What comes while it runs may go with it, but it takes no more steps
/// than the queue held events when it began (`left` after its first step, in steps of
/// `size`), so a steady producer cannot keep it going. The shard's stop cuts it short
/// (`CutShort`). Returns the events done.
async fn in_steps<S>(
    ctx: &ShardContext,
    what: &'static str,
    size: usize,
    step: impl Fn(String) -> S,
    each: impl Fn(&Step),
) -> Result<u64, DispatcherError>
where
    S: FnOnce(&mut Shard, Timestamp) -> Result<Step, StoreError> + Send + 'static,
{
    let first = ctx.store.run(step(String::new())).await?;
    each(&first);
    let (mut done, mut next) = (first.done, first.next);
    let mut steps_left = first.left.div_ceil(size as u64);
    while let Some(after) = next {
        if steps_left == 0 {
            break;
        }
        if ctx.stopping.is_triggered() {
            return Err(DispatcherError::CutShort { what, done });
        }
        steps_left -= 1;
        let taken = ctx.store.run(step(after)).await?;
        each(&taken);
        done += taken.done;
        next = taken.next;
    }
    Ok(done)
}

pub(super) async fn stats(
    ctx: &ShardContext,
    request: v1::QueueStatsRequest,
) -> Result<v1::QueueStats, DispatcherError> {
    let name = queue_name_from_proto(&request.name, "name")?;
    // A template is on every shard: each answers the sums of its own share of the queues.
    if !name.is_template() {
        ctx.check_owned(&name)?;
    }
    let stats = ctx
        .store
        .run(move |shard, now| {
            let stats = shard.queue_stats(now, &name)?;
            Ok(queue_stats_to_proto(name.as_str(), &stats))
        })
        .await?;
    Ok(stats)
}

/// A page of dead letters, cut short (with a token for the rest) if it would not fit on
/// the bus; a single dead letter larger than that is RESOURCE_EXHAUSTED.
pub(super) async fn list_dead_letters(
    ctx: &ShardContext,
    request: v1::ListDeadLettersRequest,
) -> Result<v1::ListDeadLettersResponse, DispatcherError> {
    let (queue, page) = convert::list_dead_letters_from_proto(&request)?;
    ctx.check_owned(&queue)?;
    let listed = ctx
        .store
        .run(move |shard, _| shard.list_dead_letters(&queue, page.size, &page.token))
        .await?;
    let budget = ctx.reply_budget();
    let mut used = 0usize;
    let mut events = Vec::with_capacity(listed.items.len());
    let mut next_page_token = listed.next_page_token;
    for event in listed.items {
        let id = event.id.to_string();
        let proto = event_into_proto(event);
        let cost = repeated_field_cost(proto.encoded_len());
        if used.saturating_add(cost) > budget {
            let Some(last) = events.last().map(|e: &v1::Event| e.id.clone()) else {
                return Err(DispatcherError::TooLarge {
                    what: format!("dead letter '{id}' of queue '{}'", request.queue),
                    size: cost,
                    max: budget,
                });
            };
            next_page_token = last;
            break;
        }
        used += cost;
        events.push(proto);
    }
    Ok(v1::ListDeadLettersResponse {
        events,
        next_page_token,
    })
}

pub(super) async fn redrive(
    ctx: &ShardContext,
    request: v1::RedriveRequest,
) -> Result<v1::RedriveResponse, DispatcherError> {
    let (queue, selection) = convert::redrive_from_proto(&request)?;
    ctx.check_owned(&queue)?;
    let selection = Arc::new(selection);
    let step = |after: String| {
        let (queue, selection) = (queue.clone(), Arc::clone(&selection));
        move |shard: &mut Shard, now| shard.redrive(now, &queue, &selection, &after)
    };
    let moved_back = |step: &Step| {
        if step.done > 0 {
            // The events went back to the queues they came from, here or through the outbox.
            ctx.wakeups.wake_all();
            ctx.wake_outbox();
        }
    };
    let moved = in_steps(ctx, "redrive", REDRIVE_STEP, step, moved_back).await?;
    Ok(v1::RedriveResponse { moved })
}
