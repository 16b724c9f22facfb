//! The timer shard's requests: `schedule` and `cancel` batches from the dispatcher shard of
//! the same number, each one writer closure, durable before the `done` reply. Requests are
//! handled one after another (one dispatcher sends, one batch at a time); on stop the one
//! being handled is finished and answered.
//!
//! An entry that fails validation can name no event: it is skipped with a warning rather
//! than failing the batch, which the sender would resend forever.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use cascade_bus::{Message, Subscription};
use cascade_proto::bus::v1::{
    Empty, ScheduleBatch, TimerReply, TimerRequest, timer_reply, timer_request,
};
use cascade_proto::convert::{cancel_entry_from_proto, schedule_entry_from_proto};
use prost::Message as _;

use crate::TimerError;
use crate::shard::TimerShard;

pub(crate) async fn serve(ctx: Arc<TimerShard>, mut requests_in: Subscription) {
    loop {
        let message = tokio::select! {
            message = requests_in.next() => message,
            () = ctx.stopping.wait() => break,
        };
        let Some(message) = message else {
            tracing::error!(shard = ctx.shard, "timer.subscription.ended");
            break;
        };
        answer(&ctx, message).await;
    }
}

async fn answer(ctx: &TimerShard, message: Message) {
    let result = match TimerRequest::decode(message.payload.clone()) {
        Err(e) => Err(TimerError::BadRequest {
            reason: format!("cannot decode a TimerRequest: {e}"),
        }),
        Ok(TimerRequest { op: None }) => Err(TimerError::BadRequest {
            reason: "op: must be set".into(),
        }),
        Ok(TimerRequest {
            op: Some(timer_request::Op::Schedule(batch)),
        }) => schedule(ctx, batch).await,
        Ok(TimerRequest {
            op: Some(timer_request::Op::Cancel(batch)),
        }) => cancel(ctx, batch).await,
    };
    let result = match result {
        Ok(()) => timer_reply::Result::Done(Empty {}),
        Err(e) => {
            tracing::debug!(shard = ctx.shard, code = e.code().as_str(), error = %e, "timer.request.failed");
            timer_reply::Result::Error(e.to_status())
        }
    };
    let reply = TimerReply {
        result: Some(result),
    };
    if let Err(e) = message.respond(Bytes::from(reply.encode_to_vec())).await {
        tracing::debug!(shard = ctx.shard, error = %e, "timer.respond");
    }
}

async fn schedule(ctx: &TimerShard, batch: ScheduleBatch) -> Result<(), TimerError> {
    let mut entries = Vec::with_capacity(batch.entries.len());
    for (index, entry) in batch.entries.iter().enumerate() {
        match schedule_entry_from_proto(entry, &format!("entries[{index}]")) {
            Ok(valid) => entries.push(valid),
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "timer.schedule.invalid"),
        }
    }
    let Some(earliest) = entries.iter().map(|e| e.at.as_micros()).min() else {
        return Ok(());
    };
    ctx.store
        .run(move |timer, _| {
            timer.schedule(&entries);
            Ok(())
        })
        .await?;
    // Only an entry due before the firing loop's planned wake needs it awake sooner.
    if earliest < ctx.next_wake.load(Ordering::Acquire) {
        ctx.earlier.notify_one();
    }
    Ok(())
}

async fn cancel(ctx: &TimerShard, batch: ScheduleBatch) -> Result<(), TimerError> {
    let mut keys = Vec::with_capacity(batch.entries.len());
    for (index, entry) in batch.entries.iter().enumerate() {
        match cancel_entry_from_proto(entry, &format!("entries[{index}]")) {
            Ok(valid) => keys.push(valid),
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "timer.cancel.invalid"),
        }
    }
    ctx.store
        .run(move |timer, _| {
            for (queue, id, version) in &keys {
                timer.cancel(queue, id, *version)?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}
