//! Sending a batch of hand-offs to its receiver, and reading the answer.

use std::sync::Arc;

use cascade_bus::subject;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert::{delivery_to_proto, schedule_entry_to_proto};
use cascade_store::ScheduleEntry;
use cascade_store::codec::records::HandOff;
use prost::Message;

use super::backlog::{Entry, Receiver};
use crate::context::ShardContext;

/// What one send did: which receiver, which outbox sequences, and the failure if any.
pub(super) struct Sent {
    pub receiver: Receiver,
    pub seqs: Vec<u64>,
    pub failure: Option<String>,
}

/// A hand-off's length as encoded in its request.
pub(super) fn encoded_len(seq: u64, hand_off: &HandOff) -> usize {
    match hand_off {
        HandOff::Schedule {
            queue,
            id,
            version,
            at,
        } => schedule_entry_to_proto(&ScheduleEntry {
            at: *at,
            queue: queue.clone(),
            id: id.clone(),
            version: *version,
        })
        .encoded_len(),
        HandOff::Deliver(delivery) => delivery_to_proto(seq, delivery).encoded_len(),
    }
}

/// Sends one batch to its receiver.
pub(super) async fn send(ctx: Arc<ShardContext>, receiver: Receiver, batch: Vec<Entry>) -> Sent {
    let seqs: Vec<u64> = batch.iter().map(|entry| entry.seq).collect();
    let batch = batch.into_iter().map(|entry| (entry.seq, entry.hand_off));
    let failure = match receiver {
        Receiver::Timer => send_schedules(&ctx, batch).await,
        Receiver::Dispatcher(to) => send_deliveries(&ctx, to, batch).await,
    }
    .err();
    Sent {
        receiver,
        seqs,
        failure,
    }
}

async fn send_schedules(
    ctx: &ShardContext,
    batch: impl Iterator<Item = (u64, HandOff)>,
) -> Result<(), String> {
    let entries = batch
        .filter_map(|(_, hand_off)| match hand_off {
            HandOff::Schedule {
                queue,
                id,
                version,
                at,
            } => Some(schedule_entry_to_proto(&ScheduleEntry {
                at,
                queue,
                id,
                version,
            })),
            HandOff::Deliver(_) => None,
        })
        .collect();
    let request = bus::TimerRequest {
        op: Some(bus::timer_request::Op::Schedule(bus::ScheduleBatch {
            entries,
        })),
    };
    let subject = subject::timer(&ctx.cluster, ctx.shard);
    let reply: bus::TimerReply = ctx
        .bus
        .call_as("schedule", &subject, request, ctx.request_timeout)
        .await
        .map_err(|e| format!("timer shard {}: {e}", ctx.shard))?;
    match reply.result {
        Some(bus::timer_reply::Result::Done(_)) => Ok(()),
        Some(bus::timer_reply::Result::Error(status)) => Err(format!(
            "timer shard {} answered {}: {}",
            ctx.shard, status.code, status.message
        )),
        Some(bus::timer_reply::Result::DueCounts(_)) => Err(format!(
            "timer shard {} answered due counts to a schedule",
            ctx.shard
        )),
        None => Err(format!("timer shard {} answered nothing", ctx.shard)),
    }
}

async fn send_deliveries(
    ctx: &ShardContext,
    to: u32,
    batch: impl Iterator<Item = (u64, HandOff)>,
) -> Result<(), String> {
    let deliveries = batch
        .filter_map(|(seq, hand_off)| match hand_off {
            HandOff::Deliver(delivery) => Some(delivery_to_proto(seq, &delivery)),
            HandOff::Schedule { .. } => None,
        })
        .collect();
    let request = bus::DispatcherRequest {
        op: Some(bus::dispatcher_request::Op::Deliver(bus::DeliveryBatch {
            source_shard: ctx.shard,
            deliveries,
        })),
    };
    let subject = subject::dispatcher(&ctx.cluster, to);
    let reply: bus::DispatcherReply = ctx
        .bus
        .call_as("deliver", &subject, request, ctx.request_timeout)
        .await
        .map_err(|e| format!("dispatcher shard {to}: {e}"))?;
    match reply.result {
        Some(bus::dispatcher_reply::Result::Done(_)) => Ok(()),
        Some(bus::dispatcher_reply::Result::Error(status)) => Err(format!(
            "dispatcher shard {to} answered {}: {}",
            status.code, status.message
        )),
        Some(_) => Err(format!(
            "dispatcher shard {to} answered a reply of another kind"
        )),
        None => Err(format!("dispatcher shard {to} answered nothing")),
    }
}
