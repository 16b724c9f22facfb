//! One bus request to one answer: take it off the bus (a value in one process, decoded
//! over NATS), convert (validating again what the gateway
//! validated), run as ONE closure on the shard's writer, wake whoever may care, encode.
//! Per-item failures of a batch are answered per item; a failure of the whole request is a
//! `Status` reply.

mod events;
mod handoffs;
mod pipelines;
mod queues;
pub(crate) mod worker;

use cascade_bus::BusError;
use cascade_proto::bus::v1::dispatcher_reply::Result as Answer;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest};
use prost::Message;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::take;

/// The reply to a request. Never fails: a failure (the request's too) is a reply too.
pub(crate) async fn answer(
    ctx: &ShardContext,
    request: Result<DispatcherRequest, BusError>,
) -> DispatcherReply {
    let result = match request {
        Err(e) => Err(DispatcherError::BadRequest {
            reason: format!("cannot decode a DispatcherRequest: {e}"),
        }),
        Ok(DispatcherRequest { op: None }) => Err(DispatcherError::BadRequest {
            reason: "op: must be set".into(),
        }),
        Ok(DispatcherRequest { op: Some(op) }) => {
            let name = op.name();
            let result = dispatch(ctx, op).await;
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

async fn dispatch(ctx: &ShardContext, op: Op) -> Result<Answer, DispatcherError> {
    Ok(match op {
        Op::Enqueue(r) => Answer::Enqueue(events::enqueue(ctx, r).await?),
        Op::Get(r) => Answer::Event(events::get(ctx, r).await?),
        Op::Update(r) => Answer::Event(events::update(ctx, r).await?),
        Op::Delete(r) => Answer::Done(events::delete(ctx, r).await?),
        Op::Take(r) => {
            let item = cascade_proto::convert::take_from_proto(&r)?;
            let completions = worker::completion_items(ctx, r.completions);
            Answer::Take(take::take(ctx, item, completions).await?)
        }
        Op::Complete(r) => Answer::Complete(worker::complete(ctx, r).await?),
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
