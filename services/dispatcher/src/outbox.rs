//! The outbox pump: store-and-forward of this shard's hand-offs.
//!
//! Schedules go to the activation timer of the same shard number, deliveries to the
//! dispatcher shard that owns their queue. Per receiver, hand-offs are sent in outbox
//! (sequence) order, one batch in flight at a time, and deleted from the outbox only after
//! the receiver answered OK — it has made them durable, and it ignores a resend. That
//! deletion and the read of the next window are one store operation. A failed
//! send is retried after `dispatcher.outbox_retry`, forever; other receivers carry on.
//!
//! The store reads the outbox only from its head, so the pump reads a window of it that
//! grows with the receivers it cannot send to; a receiver whose backlog fills the whole
//! window holds the others up until it answers again.
//!
//! Woken after writes that may add hand-offs, and every `outbox_retry` anyway (the store's
//! own tick may add some: a lease that expires into a dead-letter queue on another shard).
//! Cancel-safe at any await: what was not acknowledged is sent again, and receivers
//! deduplicate.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use cascade_bus::subject;
use cascade_core::shard_of;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert::{delivery_to_proto, schedule_entry_to_proto};
use cascade_store::ScheduleEntry;
use cascade_store::codec::records::HandOff;
use prost::Message;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::context::ShardContext;
use crate::take::repeated_field_cost;

/// The window read is at most this many batches.
const MAX_WINDOW_BATCHES: usize = 16;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
enum Receiver {
    Timer,
    Dispatcher(u32),
}

/// What one send did: which receiver, which outbox sequences, and the failure if any.
struct Sent {
    receiver: Receiver,
    seqs: Vec<u64>,
    failure: Option<String>,
}

/// Runs until the shard stops.
pub(crate) async fn pump(ctx: Arc<ShardContext>) {
    let mut in_flight: HashSet<Receiver> = HashSet::new();
    let mut resting: HashMap<Receiver, Instant> = HashMap::new();
    let mut sends: JoinSet<Sent> = JoinSet::new();
    // Which receiver each send task serves, to free it if the task panics.
    let mut tasks: HashMap<tokio::task::Id, Receiver> = HashMap::new();
    // The window read by the store operation that acknowledged the last batch.
    let mut read_ahead: Option<Vec<(u64, HandOff)>> = None;
    while !ctx.stopping.is_triggered() {
        let now = Instant::now();
        resting.retain(|_, until| *until > now);
        let read = match read_ahead.take() {
            Some(entries) => Ok(entries),
            None => {
                let (entries, bytes) = window(&ctx, in_flight.len() + resting.len());
                ctx.store
                    .run(move |shard, _| shard.outbox(entries, bytes))
                    .await
            }
        };
        match read {
            Ok(entries) => {
                let limits = Limits {
                    entries: ctx.outbox_batch,
                    bytes: ctx.reply_budget(),
                    shards: ctx.shards,
                };
                let busy = |r| in_flight.contains(&r) || resting.contains_key(&r);
                for (receiver, batch) in batches(limits, entries, busy) {
                    in_flight.insert(receiver);
                    let task = sends.spawn(send(Arc::clone(&ctx), receiver, batch));
                    tasks.insert(task.id(), receiver);
                }
            }
            // The store stopped; the shard's watchdog ends the shard.
            Err(e) => tracing::warn!(shard = ctx.shard, error = %e, "dispatcher.outbox.read"),
        }
        let wake_at = resting
            .values()
            .min()
            .copied()
            .unwrap_or(now + ctx.outbox_retry)
            .min(now + ctx.outbox_retry);
        tokio::select! {
            Some(joined) = sends.join_next_with_id(), if !sends.is_empty() => {
                match joined {
                    Ok((task, sent)) => {
                        tasks.remove(&task);
                        read_ahead = finish(&ctx, sent, &mut in_flight, &mut resting).await;
                    }
                    Err(e) => {
                        // A send task panicked: its receiver is sent to again after a pause.
                        tracing::error!(shard = ctx.shard, error = %e, "dispatcher.outbox.send_panicked");
                        if let Some(receiver) = tasks.remove(&e.id()) {
                            in_flight.remove(&receiver);
                            resting.insert(receiver, Instant::now() + ctx.outbox_retry);
                        }
                    }
                }
            }
            // While a batch is in flight a re-read finds mostly its entries: wait for it.
            () = ctx.outbox_ready.notified(), if in_flight.is_empty() => {}
            () = tokio::time::sleep_until(wake_at) => {}
            () = ctx.stopping.wait() => {}
        }
    }
    // Whatever is in flight is sent again after the restart.
    sends.shutdown().await;
}

/// How much a read of the outbox takes, in hand-offs and in bytes: a batch's worth, and one
/// more for each `busy` receiver whose entries at the head are passed over.
fn window(ctx: &ShardContext, busy: usize) -> (usize, usize) {
    let batches = (1 + busy).min(MAX_WINDOW_BATCHES);
    (ctx.outbox_batch * batches, ctx.reply_budget() * batches)
}

/// Acknowledges a successful send and, in the same store operation, reads the next window
/// (under load each store operation waits its turn behind the writes, and a round trip
/// fewer per batch is a faster hand-off); rests a receiver that failed.
async fn finish(
    ctx: &ShardContext,
    sent: Sent,
    in_flight: &mut HashSet<Receiver>,
    resting: &mut HashMap<Receiver, Instant>,
) -> Option<Vec<(u64, HandOff)>> {
    in_flight.remove(&sent.receiver);
    let Some(reason) = sent.failure else {
        let count = sent.seqs.len();
        let seqs = sent.seqs;
        let (entries, bytes) = window(ctx, in_flight.len() + resting.len());
        let acked = ctx
            .store
            .run(move |shard, _| {
                shard.outbox_ack(&seqs);
                shard.outbox(entries, bytes)
            })
            .await;
        tracing::trace!(shard = ctx.shard, receiver = ?sent.receiver, count, "dispatcher.outbox.sent");
        return acked
            .inspect_err(|e| tracing::warn!(shard = ctx.shard, error = %e, "dispatcher.outbox.ack"))
            .ok();
    };
    tracing::warn!(
        shard = ctx.shard,
        receiver = ?sent.receiver,
        retry_in = ?ctx.outbox_retry,
        %reason,
        "dispatcher.outbox.send_failed"
    );
    resting.insert(sent.receiver, Instant::now() + ctx.outbox_retry);
    None
}

/// How batches are cut: per message, at most `entries` hand-offs and `bytes` bytes.
#[derive(Copy, Clone, Debug)]
struct Limits {
    entries: usize,
    bytes: usize,
    /// `cluster.shards`, to find a delivery's receiver.
    shards: u32,
}

/// The next batch of each receiver that is free to take one: its oldest hand-offs, in
/// order, at most `limits.entries` of them and `limits.bytes` (but at least one, so a
/// hand-off too large for the bus fails loudly instead of waiting).
fn batches(
    limits: Limits,
    entries: Vec<(u64, HandOff)>,
    busy: impl Fn(Receiver) -> bool,
) -> Vec<(Receiver, Vec<(u64, HandOff)>)> {
    let mut open: HashMap<Receiver, (Vec<(u64, HandOff)>, usize)> = HashMap::new();
    let mut full: HashSet<Receiver> = HashSet::new();
    for (seq, hand_off) in entries {
        let receiver = match &hand_off {
            HandOff::Schedule { .. } => Receiver::Timer,
            HandOff::Deliver(delivery) => {
                Receiver::Dispatcher(shard_of(&delivery.queue, limits.shards))
            }
        };
        if busy(receiver) || full.contains(&receiver) {
            continue;
        }
        let cost = repeated_field_cost(encoded_len(seq, &hand_off));
        let (batch, bytes) = open.entry(receiver).or_default();
        let fits =
            batch.is_empty() || (batch.len() < limits.entries && *bytes + cost <= limits.bytes);
        if !fits {
            // Later entries of this receiver wait for this batch, to keep the order.
            full.insert(receiver);
            continue;
        }
        *bytes += cost;
        batch.push((seq, hand_off));
    }
    let mut ready: Vec<_> = open
        .into_iter()
        .map(|(receiver, (batch, _))| (receiver, batch))
        .collect();
    ready.sort_by_key(|(_, batch)| batch.first().map(|(seq, _)| *seq));
    ready
}

fn encoded_len(seq: u64, hand_off: &HandOff) -> usize {
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

async fn send(ctx: Arc<ShardContext>, receiver: Receiver, batch: Vec<(u64, HandOff)>) -> Sent {
    let seqs: Vec<u64> = batch.iter().map(|(seq, _)| *seq).collect();
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

async fn send_schedules(ctx: &ShardContext, batch: Vec<(u64, HandOff)>) -> Result<(), String> {
    let entries = batch
        .into_iter()
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
    batch: Vec<(u64, HandOff)>,
) -> Result<(), String> {
    let deliveries = batch
        .into_iter()
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cascade_core::{EventId, QueueName, Timestamp};
    use cascade_store::codec::records::Delivery;

    use super::*;

    const SHARDS: u32 = 4;

    fn schedule(id: &str) -> HandOff {
        HandOff::Schedule {
            queue: QueueName::parse("jobs").expect("queue"),
            id: EventId::parse(id).expect("id"),
            version: 1,
            at: Timestamp::from_micros(1),
        }
    }

    /// A delivery to a queue of shard `shard`, with a payload of `bytes`.
    fn deliver(shard: u32, bytes: usize) -> HandOff {
        let queue = (0..)
            .map(|i| QueueName::parse(&format!("q{i}")).expect("queue"))
            .find(|q| shard_of(q, SHARDS) == shard)
            .expect("a queue of that shard");
        HandOff::Deliver(Delivery {
            queue,
            id: EventId::parse("e").expect("id"),
            payload: vec![0; bytes].into(),
            headers: BTreeMap::new(),
            activate_at: Timestamp::ZERO,
            created_at: Timestamp::ZERO,
        })
    }

    fn seqs(batch: &[(u64, HandOff)]) -> Vec<u64> {
        batch.iter().map(|(seq, _)| *seq).collect()
    }

    const ROOMY: Limits = Limits {
        entries: 100,
        bytes: 1 << 20,
        shards: SHARDS,
    };

    #[test]
    fn each_receiver_gets_its_entries_in_order() {
        let entries = vec![
            (1, schedule("a")),
            (2, deliver(2, 10)),
            (3, schedule("b")),
            (4, deliver(3, 10)),
            (5, deliver(2, 10)),
        ];
        let ready = batches(ROOMY, entries, |_| false);
        let got: Vec<(Receiver, Vec<u64>)> = ready.iter().map(|(r, b)| (*r, seqs(b))).collect();
        assert_eq!(
            got,
            [
                (Receiver::Timer, vec![1, 3]),
                (Receiver::Dispatcher(2), vec![2, 5]),
                (Receiver::Dispatcher(3), vec![4]),
            ]
        );
    }

    #[test]
    fn busy_receivers_are_skipped_and_others_go_on() {
        let entries = vec![(1, deliver(1, 10)), (2, schedule("a")), (3, deliver(1, 10))];
        let ready = batches(ROOMY, entries, |r| r == Receiver::Dispatcher(1));
        assert_eq!(ready.len(), 1);
        assert_eq!((ready[0].0, seqs(&ready[0].1)), (Receiver::Timer, vec![2]));
    }

    #[test]
    fn a_full_batch_stops_its_receiver_without_skipping_ahead() {
        let limits = Limits {
            entries: 100,
            bytes: 250,
            shards: SHARDS,
        };
        // The second delivery does not fit; the small third must not overtake it.
        let entries = vec![
            (1, deliver(1, 150)),
            (2, deliver(1, 150)),
            (3, deliver(1, 1)),
        ];
        let ready = batches(limits, entries, |_| false);
        assert_eq!(seqs(&ready[0].1), [1]);
        let counted = Limits {
            entries: 2,
            ..ROOMY
        };
        let entries = (1..=5).map(|seq| (seq, schedule("a"))).collect();
        assert_eq!(seqs(&batches(counted, entries, |_| false)[0].1), [1, 2]);
    }

    #[test]
    fn a_hand_off_too_large_for_the_bus_is_still_sent_alone() {
        let limits = Limits {
            entries: 100,
            bytes: 50,
            shards: SHARDS,
        };
        let ready = batches(
            limits,
            vec![(7, deliver(0, 500)), (8, deliver(0, 1))],
            |_| false,
        );
        assert_eq!(seqs(&ready[0].1), [7]);
    }
}
