//! The firing loop of one timer shard: sleep until the earliest entry is due (or a new
//! entry due earlier arrives), take what is due, send it to the dispatcher shard of the same
//! number as one `ActivateBatch`, and forget it once the dispatcher answered OK. If the
//! dispatcher cannot be reached the entries are released and sent again after a short
//! pause: an entry leaves the schedule only when its activation is durable.
//!
//! The store keeps only the next `horizon` of the schedule in memory (and only so many
//! entries) and loads more when `due` is called past what it loaded; the loop wakes by then,
//! to load entries that are on disk only.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cascade_bus::subject;
use cascade_core::{Clock, SystemClock};
use cascade_proto::bus::v1::{
    ActivateBatch, DispatcherReply, DispatcherRequest, dispatcher_reply, dispatcher_request,
};
use cascade_proto::convert::activation_to_proto;
use cascade_store::{ScheduleEntry, StoreError, Timer};

use crate::shard::TimerShard;

/// `next_wake` while the loop is looking at the schedule: any new entry wakes it again.
pub(crate) const AWAKE: u64 = u64::MAX;
/// The pause before activations the dispatcher did not take are sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// An upper bound of one encoded activation (a 200-byte queue name, a 128-byte id, a
/// version, framing), so that a batch always fits in a bus message.
const MAX_ACTIVATION_BYTES: usize = 400;

pub(crate) async fn fire(ctx: Arc<TimerShard>) {
    let batch = ctx
        .batch
        .min(ctx.bus.max_payload() / MAX_ACTIVATION_BYTES)
        .max(1);
    while !ctx.stopping.is_triggered() {
        ctx.next_wake.store(AWAKE, Ordering::Release);
        let looked = ctx
            .store
            .run(move |timer, now| {
                let due = timer.due(now, batch)?;
                let next = timer.next_due().map_or(u64::MAX, |at| at.as_micros());
                Ok((due, next.min(timer.loaded_until().as_micros())))
            })
            .await;
        let (due, wake_at) = match looked {
            Ok(looked) => looked,
            Err(e) => {
                // The store stopped; the shard's watchdog ends the shard.
                tracing::warn!(shard = ctx.shard, error = %e, "timer.due");
                pause(&ctx, RETRY_PAUSE).await;
                continue;
            }
        };
        if !due.is_empty() {
            deliver(&ctx, due).await;
            continue;
        }
        ctx.next_wake.store(wake_at, Ordering::Release);
        let now = SystemClock.now().as_micros();
        let sleep = Duration::from_micros(wake_at.saturating_sub(now));
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = ctx.earlier.notified() => {}
            () = ctx.stopping.wait() => {}
        }
    }
}

/// Sends one batch of due entries; acknowledges or releases them as the dispatcher answers.
async fn deliver(ctx: &TimerShard, due: Vec<ScheduleEntry>) {
    // A shutdown does not wait for a slow dispatcher: what was not acknowledged stays
    // scheduled and fires again after the restart (activation is idempotent).
    let answer = tokio::select! {
        answer = activate(ctx, &due) => answer,
        () = ctx.stopping.wait() => return,
    };
    match answer {
        Ok(()) => {
            let count = due.len();
            settle(ctx, due, Timer::acknowledge, "timer.acknowledge").await;
            tracing::trace!(shard = ctx.shard, count, "timer.fired");
        }
        Err(reason) => {
            tracing::warn!(shard = ctx.shard, %reason, retry_in = ?RETRY_PAUSE, "timer.activate_failed");
            settle(ctx, due, Timer::release, "timer.release").await;
            pause(ctx, RETRY_PAUSE).await;
        }
    }
}

/// Acknowledges or releases `due` (`change`), again after a pause while the store's inbox is
/// full: entries left in flight would not fire again before a restart, and would take the
/// room of entries to load. A store that stopped ends the shard through its watchdog.
async fn settle(
    ctx: &TimerShard,
    due: Vec<ScheduleEntry>,
    change: fn(&mut Timer, &[ScheduleEntry]),
    what: &'static str,
) {
    let due = Arc::new(due);
    while !ctx.stopping.is_triggered() {
        let entries = Arc::clone(&due);
        let changed = ctx
            .store
            .run(move |timer, _| {
                change(timer, &entries);
                Ok(())
            })
            .await;
        match changed {
            Ok(()) => return,
            Err(e @ StoreError::Busy { .. }) => {
                tracing::warn!(shard = ctx.shard, error = %e, retry_in = ?RETRY_PAUSE, "{what}");
                pause(ctx, RETRY_PAUSE).await;
            }
            Err(e) => {
                tracing::warn!(shard = ctx.shard, error = %e, "{what}");
                return;
            }
        }
    }
}

async fn activate(ctx: &TimerShard, due: &[ScheduleEntry]) -> Result<(), String> {
    let activations = due
        .iter()
        .map(|entry| activation_to_proto(&entry.queue, &entry.id, entry.version))
        .collect();
    let request = DispatcherRequest {
        op: Some(dispatcher_request::Op::Activate(ActivateBatch {
            activations,
        })),
    };
    let subject = subject::dispatcher(&ctx.cluster, ctx.shard);
    let reply: DispatcherReply = ctx
        .bus
        .call_as("activate", &subject, request, ctx.request_timeout)
        .await
        .map_err(|e| e.to_string())?;
    match reply.result {
        Some(dispatcher_reply::Result::Done(_)) => Ok(()),
        Some(dispatcher_reply::Result::Error(status)) => Err(format!(
            "dispatcher shard {} answered {}: {}",
            ctx.shard, status.code, status.message
        )),
        Some(_) => Err(format!(
            "dispatcher shard {} answered a reply of another kind",
            ctx.shard
        )),
        None => Err(format!("dispatcher shard {} answered nothing", ctx.shard)),
    }
}

async fn pause(ctx: &TimerShard, duration: Duration) {
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        () = ctx.stopping.wait() => {}
    }
}
