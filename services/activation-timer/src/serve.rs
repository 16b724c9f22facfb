//! The timer shard's requests: `schedule` and `cancel` batches from the dispatcher shard of
//! the same number, each one writer closure, durable before the `done` reply; and
//! `due_counts` from the resource manager, a read of the schedule. Requests are
//! handled one after another (one dispatcher sends, one batch at a time); on stop the one
//! being handled is finished and answered.
//!
//! An entry that fails validation can name no event: it is skipped with a warning rather
//! than failing the batch, which the sender would resend forever.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use cascade_bus::{Message, Subscription};
use cascade_core::QueueName;
use cascade_proto::bus::v1::{
    DueBucket, DueCounts, DueCountsRequest, Empty, QueueDue, ScheduleBatch, TimerReply,
    TimerRequest, timer_reply, timer_request,
};
use cascade_proto::convert::{schedule_entry_from_proto, timestamp_from_proto, timestamp_to_proto};

use crate::TimerError;
use crate::shard::TimerShard;

/// Schedule entries one `due_counts` reads at most: a few milliseconds of the writer.
const MAX_DUE_SCAN: usize = 50_000;
/// Buckets one `due_counts` may ask for.
const MAX_DUE_BOUNDS: usize = 64;
/// Queues one `due_counts` may ask about: the reply (about 150 bytes a queue) must fit a
/// bus message.
const MAX_DUE_QUEUES: usize = 4_096;

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

async fn answer(ctx: &TimerShard, mut message: Message) {
    let result = match message.take::<TimerRequest>() {
        Err(e) => Err(TimerError::BadRequest {
            reason: format!("cannot decode a TimerRequest: {e}"),
        }),
        Ok(TimerRequest { op: None }) => Err(TimerError::BadRequest {
            reason: "op: must be set".into(),
        }),
        Ok(TimerRequest {
            op: Some(timer_request::Op::Schedule(batch)),
        }) => schedule(ctx, batch).await.map(|()| done()),
        Ok(TimerRequest {
            op: Some(timer_request::Op::Cancel(batch)),
        }) => cancel(ctx, batch).await.map(|()| done()),
        Ok(TimerRequest {
            op: Some(timer_request::Op::DueCounts(request)),
        }) => due_counts(ctx, request)
            .await
            .map(timer_reply::Result::DueCounts),
    };
    let result = match result {
        Ok(result) => result,
        Err(e) => {
            tracing::debug!(shard = ctx.shard, code = e.code().as_str(), error = %e, "timer.request.failed");
            timer_reply::Result::Error(e.to_status())
        }
    };
    let reply = TimerReply {
        result: Some(result),
    };
    if let Err(e) = message.respond_with(reply).await {
        tracing::debug!(shard = ctx.shard, error = %e, "timer.respond");
    }
}

fn done() -> timer_reply::Result {
    timer_reply::Result::Done(Empty {})
}

/// The resource manager's question: delayed events due soon, per queue. One bounded scan
/// on the writer (at most `MAX_DUE_SCAN` entries), so it cannot hold up firing for long.
async fn due_counts(ctx: &TimerShard, request: DueCountsRequest) -> Result<DueCounts, TimerError> {
    if request.bounds.len() > MAX_DUE_BOUNDS {
        return Err(TimerError::BadRequest {
            reason: format!(
                "bounds: at most {MAX_DUE_BOUNDS}, got {}",
                request.bounds.len()
            ),
        });
    }
    let mut bounds = Vec::with_capacity(request.bounds.len());
    for (index, bound) in request.bounds.iter().enumerate() {
        let bound = timestamp_from_proto(bound, &format!("bounds[{index}]")).map_err(|e| {
            TimerError::BadRequest {
                reason: e.to_string(),
            }
        })?;
        if bounds.last().is_some_and(|&last| bound <= last) {
            return Err(TimerError::BadRequest {
                reason: format!("bounds[{index}]: must be later than the bound before it"),
            });
        }
        bounds.push(bound);
    }
    if request.queues.len() > MAX_DUE_QUEUES {
        return Err(TimerError::BadRequest {
            reason: format!(
                "queues: at most {MAX_DUE_QUEUES}, got {}",
                request.queues.len()
            ),
        });
    }
    let mut queues = BTreeSet::new();
    for (index, queue) in request.queues.iter().enumerate() {
        let queue = QueueName::parse(queue).map_err(|e| TimerError::BadRequest {
            reason: format!("queues[{index}]: {e}"),
        })?;
        queues.insert(queue);
    }
    let counts = ctx
        .store
        .run(move |timer, _| timer.due_counts(&bounds, &queues, MAX_DUE_SCAN))
        .await?;
    let queues = counts
        .queues
        .into_iter()
        .map(|(queue, per_bound)| {
            // Empty buckets inside the range stay (each bucket starts where the one before
            // it ends); trailing ones say nothing.
            let used = per_bound
                .iter()
                .rposition(|&count| count > 0)
                .map_or(0, |i| i + 1);
            QueueDue {
                queue: queue.to_string(),
                buckets: counts
                    .bounds
                    .iter()
                    .zip(per_bound)
                    .take(used)
                    .map(|(&until, count)| DueBucket {
                        until: Some(timestamp_to_proto(until)),
                        count,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(DueCounts { queues })
}

async fn schedule(ctx: &TimerShard, batch: ScheduleBatch) -> Result<(), TimerError> {
    // Refused while the disk is below its watermark: the entries wait in the dispatcher's
    // outbox. Cancels and firings go on, and shrink the schedule.
    ctx.store.disk().check_space()?;
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
    let mut entries = Vec::with_capacity(batch.entries.len());
    for (index, entry) in batch.entries.iter().enumerate() {
        match schedule_entry_from_proto(entry, &format!("entries[{index}]")) {
            Ok(valid) => entries.push(valid),
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "timer.cancel.invalid"),
        }
    }
    ctx.store
        .run(move |timer, _| {
            for entry in &entries {
                timer.cancel(entry)?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}
