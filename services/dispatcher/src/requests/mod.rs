//! One bus request to one answer: take it off the bus, run it as ONE closure on the shard's
//! writer (a purge or a redrive of a whole queue as several, one per step), wake whoever may
//! care, answer. In one process an enqueue, a take or a completion
//! comes as the values the gateway validated; a message (any request over NATS, any other
//! request) is converted here, validating again what the gateway validated, since the bus
//! between processes is not a trust boundary. Per-item failures of a batch are answered per
//! item; a failure of the whole request is a `Status` reply.

mod events;
mod handoffs;
mod pipelines;
mod queues;
pub(crate) mod worker;

use cascade_bus::{BusError, Received};
use cascade_proto::bus::v1::dispatcher_reply::Result as Answer;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest};
use cascade_proto::convert::{self, ConvertError, ShardRequest};
use prost::Message;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::take;

/// The reply to a request. Never fails: a failure (the request's too) is a reply too.
pub(crate) async fn answer(
    ctx: &ShardContext,
    request: Result<Received<ShardRequest, DispatcherRequest>, BusError>,
) -> DispatcherReply {
    let result = match received(request) {
        Err(e) => Err(e),
        Ok(request) => {
            let name = request.name();
            let result = dispatch(ctx, request).await;
            if let Err(e) = &result {
                tracing::debug!(shard = ctx.shard, op = name, code = e.code().as_str(), error = %e, "dispatcher.request.failed");
            }
            result
        }
    };
    let reply = DispatcherReply {
        result: Some(result.unwrap_or_else(|e| Answer::Error(e.to_status()))),
    };
    let size = reply.encoded_len();
    let max = ctx.bus.max_payload();
    if size <= max {
        return reply;
    }
    let too_large = DispatcherError::TooLarge {
        what: "the reply".into(),
        size,
        max,
    };
    DispatcherReply {
        result: Some(Answer::Error(too_large.to_status())),
    }
}

/// The request as the gateway's values, or as its message.
fn received(
    request: Result<Received<ShardRequest, DispatcherRequest>, BusError>,
) -> Result<ShardRequest, DispatcherError> {
    match request {
        Err(e) => Err(DispatcherError::BadRequest {
            reason: format!("cannot decode a DispatcherRequest: {e}"),
        }),
        Ok(Received::Message(DispatcherRequest { op: None })) => Err(DispatcherError::BadRequest {
            reason: "op: must be set".into(),
        }),
        Ok(Received::Message(DispatcherRequest { op: Some(op) })) => Ok(ShardRequest::Message(op)),
        Ok(Received::Value(request)) => Ok(request),
    }
}

/// Items of a request, each valid or why it is not: one item's failure is its own result.
pub(crate) type Items<T> = Vec<Result<T, DispatcherError>>;

/// The gateway's items, validated when it converted them.
fn valid<T>(items: Vec<T>) -> Items<T> {
    items.into_iter().map(Ok).collect()
}

/// Items converted from a message here.
fn checked<T>(items: Vec<Result<T, ConvertError>>) -> Items<T> {
    items
        .into_iter()
        .map(|item| item.map_err(DispatcherError::from))
        .collect()
}

async fn dispatch(ctx: &ShardContext, request: ShardRequest) -> Result<Answer, DispatcherError> {
    Ok(match request {
        ShardRequest::Enqueue(items) => Answer::Enqueue(events::enqueue(ctx, valid(items)).await?),
        ShardRequest::Take(item, completions) => {
            Answer::Take(take::take(ctx, item, valid(completions)).await?)
        }
        ShardRequest::Complete(completions) => {
            Answer::Complete(worker::complete(ctx, valid(completions)).await?)
        }
        ShardRequest::Message(op) => dispatch_message(ctx, op).await?,
    })
}

async fn dispatch_message(ctx: &ShardContext, op: Op) -> Result<Answer, DispatcherError> {
    Ok(match op {
        Op::Enqueue(r) => {
            let items = checked(convert::enqueue_batch_from_proto(r));
            Answer::Enqueue(events::enqueue(ctx, items).await?)
        }
        Op::Get(r) => Answer::Event(events::get(ctx, r).await?),
        Op::Update(r) => Answer::Event(events::update(ctx, r).await?),
        Op::Delete(r) => Answer::Done(events::delete(ctx, r).await?),
        Op::Take(r) => {
            let item = convert::take_from_proto(&r)?;
            let completions = checked(convert::completions_from_proto(r.completions));
            Answer::Take(take::take(ctx, item, completions).await?)
        }
        Op::Complete(r) => {
            let completions = checked(convert::completions_from_proto(r.completions));
            Answer::Complete(worker::complete(ctx, completions).await?)
        }
        Op::Extend(r) => Answer::Extend(worker::extend(ctx, r).await?),
        Op::CreateQueue(r) => Answer::Queue(queues::create(ctx, r).await?),
        Op::GetQueue(r) => Answer::Queue(queues::get(ctx, r).await?),
        Op::ListQueues(r) => Answer::Queues(queues::list(ctx, r).await?),
        Op::DeleteQueue(r) => Answer::Done(queues::delete(ctx, r).await?),
        Op::PurgeQueue(r) => Answer::Purge(queues::purge(ctx, r).await?),
        Op::QueueStats(r) => Answer::Stats(queues::stats(ctx, r).await?),
        Op::ListDeadLetters(r) => Answer::DeadLetters(queues::list_dead_letters(ctx, r).await?),
        Op::Redrive(r) => Answer::Redrive(queues::redrive(ctx, r).await?),
        Op::Activate(r) => Answer::Done(handoffs::activate(ctx, r).await?),
        Op::Deliver(r) => Answer::Done(handoffs::deliver(ctx, r).await?),
        Op::ApplyPipeline(r) => Answer::Pipeline(pipelines::apply(ctx, r).await?),
        Op::GetPipeline(r) => Answer::Pipeline(pipelines::get(ctx, r).await?),
        Op::ListPipelines(_) => Answer::Pipelines(pipelines::list(ctx).await?),
    })
}
