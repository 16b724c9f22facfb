//! The outbox pump: store-and-forward of this shard's hand-offs.
//!
//! Schedules go to the activation timer of the same shard number, deliveries to the
//! dispatcher shard that owns their queue. Per receiver, hand-offs are sent in outbox
//! (sequence) order, one batch in flight at a time, and deleted from the outbox only after
//! the receiver answered OK — it has made them durable, and it ignores a resend. That
//! deletion and the next read of the outbox are one store operation. A failed send rests
//! its receiver for `dispatcher.outbox_retry`, then it is sent to again, forever.
//!
//! The pump reads the outbox once, from a cursor, into one backlog per receiver
//! (`backlog`): a receiver that is down or slow holds up only its own hand-offs, never the
//! shard's timer or the other shards.
//!
//! Woken after writes that may add hand-offs, and every `outbox_retry` anyway (the store's
//! own tick may add some: a lease that expires into a dead-letter queue on another shard).
//! Cancel-safe at any await: what was not acknowledged is sent again, and receivers
//! deduplicate.

mod backlog;
mod send;

use std::collections::HashMap;
use std::sync::Arc;

use cascade_store::StoreError;
use cascade_store::codec::records::HandOff;
use cascade_store::shard::OutboxRead;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::backlog::{Backlogs, Entry, Limits, Receiver};
use self::send::{Sent, encoded_len, send};
use crate::context::ShardContext;
use crate::take::repeated_field_cost;

/// A read of the outbox takes at most this many batches, and the backlogs hold about as
/// many together.
const MAX_WINDOW_BATCHES: usize = 16;

/// One receiver's backlog holds at most this many batches.
const SHARE_BATCHES: usize = 2;

/// Runs until the shard stops.
pub(crate) async fn pump(ctx: Arc<ShardContext>) {
    let mut pump = Pump::new(ctx);
    // The entries read by the store operation that acknowledged the last batch.
    let mut read_ahead: Option<OutboxRead> = None;
    while !pump.ctx.stopping.is_triggered() {
        let now = Instant::now();
        pump.resting.retain(|_, until| *until > now);
        let more_to_read = match read_ahead.take() {
            Some(read) => pump.take_in(read),
            None => pump.read().await,
        };
        let more_to_catch_up = pump.catch_up().await;
        pump.send_ready();
        let wake_at = if more_to_read || more_to_catch_up {
            now
        } else {
            let retry = now + pump.ctx.outbox_retry;
            pump.resting
                .values()
                .min()
                .map_or(retry, |until| retry.min(*until))
        };
        tokio::select! {
            Some(joined) = pump.sends.join_next_with_id(), if !pump.sends.is_empty() => {
                match joined {
                    Ok((task, sent)) => {
                        pump.in_flight.remove(&task);
                        read_ahead = pump.finish(sent).await;
                    }
                    Err(e) => {
                        // A send task panicked: its receiver is sent to again after a pause.
                        let shard = pump.ctx.shard;
                        tracing::error!(shard, error = %e, "dispatcher.outbox.send_panicked");
                        if let Some((receiver, oldest)) = pump.in_flight.remove(&e.id()) {
                            pump.rest(receiver, oldest);
                        }
                    }
                }
            }
            // A write added hand-offs: read them, unless every receiver is busy (an answer
            // then wakes the pump, and reads on in the same store operation as its ack).
            () = pump.ctx.outbox_ready.notified(), if pump.any_free() => {}
            () = tokio::time::sleep_until(wake_at) => {}
            () = pump.ctx.stopping.wait() => {}
        }
    }
    // Whatever is in flight is sent again after the restart.
    pump.sends.shutdown().await;
}

struct Pump {
    ctx: Arc<ShardContext>,
    backlogs: Backlogs,
    /// Every entry below it has been read into a backlog (or left behind by one).
    cursor: u64,
    /// Each send task's receiver and oldest sequence, to rest it if the task panics.
    in_flight: HashMap<tokio::task::Id, (Receiver, u64)>,
    resting: HashMap<Receiver, Instant>,
    sends: JoinSet<Sent>,
}

impl Pump {
    fn new(ctx: Arc<ShardContext>) -> Pump {
        let batches = |n: usize| Limits {
            entries: ctx.outbox_batch.saturating_mul(n),
            bytes: ctx.reply_budget().saturating_mul(n),
        };
        let backlogs = Backlogs::new(batches(SHARE_BATCHES), batches(MAX_WINDOW_BATCHES));
        Pump {
            ctx,
            backlogs,
            cursor: 0,
            in_flight: HashMap::new(),
            resting: HashMap::new(),
            sends: JoinSet::new(),
        }
    }

    /// At most one request's worth of hand-offs, in count and in bytes.
    fn batch_limits(&self) -> Limits {
        Limits {
            entries: self.ctx.outbox_batch,
            bytes: self.ctx.reply_budget(),
        }
    }

    /// How much a read takes: a batch's worth, and one more for each receiver that is busy
    /// (whose entries a read is likely to hold or leave behind, rather than send).
    fn window(&self) -> Limits {
        let batches = (1 + self.in_flight.len() + self.resting.len()).min(MAX_WINDOW_BATCHES);
        let batch = self.batch_limits();
        Limits {
            entries: batch.entries * batches,
            bytes: batch.bytes * batches,
        }
    }

    fn is_busy(&self, receiver: Receiver) -> bool {
        self.resting.contains_key(&receiver)
            || self.in_flight.values().any(|(to, _)| *to == receiver)
    }

    /// A window's worth of the outbox from sequence `from` on.
    async fn read_from(&self, from: u64) -> Result<OutboxRead, StoreError> {
        let window = self.window();
        self.ctx
            .store
            .run(move |shard, _| shard.outbox(from, window.entries, window.bytes))
            .await
    }

    /// Reads on from the cursor; true if there may be more to read.
    async fn read(&mut self) -> bool {
        match self.read_from(self.cursor).await {
            Ok(read) => self.take_in(read),
            // Read again at the next turn (the store was busy); a store that stopped ends
            // the shard through its watchdog.
            Err(e) => {
                tracing::warn!(shard = self.ctx.shard, error = %e, "dispatcher.outbox.read");
                false
            }
        }
    }

    /// Sorts what the cursor read into the receivers' backlogs; true if there may be more.
    fn take_in(&mut self, read: OutboxRead) -> bool {
        for (seq, hand_off) in read.entries {
            let receiver = Receiver::of(&hand_off, self.ctx.shards);
            let resting = self.resting.contains_key(&receiver);
            self.backlogs
                .add(receiver, resting, (seq, hand_off), |h| cost(seq, h));
        }
        self.cursor = read.next;
        read.more
    }

    /// Reads again the hand-offs left in the store of each free receiver that has sent all
    /// it held; true if one found none of its own yet (the read passed over other
    /// receivers' entries) and reads on at once.
    async fn catch_up(&mut self) -> bool {
        let mut more = false;
        for receiver in self.backlogs.receivers() {
            if self.is_busy(receiver) {
                continue;
            }
            let Some(from) = self.backlogs.catch_up_from(receiver) else {
                continue;
            };
            let read = match self.read_from(from).await {
                Ok(read) => read,
                Err(e) => {
                    tracing::warn!(shard = self.ctx.shard, error = %e, "dispatcher.outbox.read");
                    return false;
                }
            };
            // Other receivers' entries are theirs to read.
            let shards = self.ctx.shards;
            let found = read
                .entries
                .into_iter()
                .filter(|(_, hand_off)| Receiver::of(hand_off, shards) == receiver)
                .map(|(seq, hand_off)| Entry {
                    cost: cost(seq, &hand_off),
                    seq,
                    hand_off,
                });
            self.backlogs
                .caught_up(receiver, found, read.next, self.cursor);
            more |= self.backlogs.catch_up_from(receiver).is_some();
        }
        more
    }

    /// Sends the next batch of each free receiver, the oldest hand-offs first.
    fn send_ready(&mut self) {
        let limits = self.batch_limits();
        for receiver in self.backlogs.receivers() {
            if self.is_busy(receiver) {
                continue;
            }
            let batch = self.backlogs.batch(receiver, limits);
            let Some(oldest) = batch.first().map(|entry| entry.seq) else {
                continue;
            };
            let task = self
                .sends
                .spawn(send(Arc::clone(&self.ctx), receiver, batch));
            self.in_flight.insert(task.id(), (receiver, oldest));
        }
    }

    fn rest(&mut self, receiver: Receiver, oldest: u64) {
        self.backlogs.rest(receiver, oldest);
        self.resting
            .insert(receiver, Instant::now() + self.ctx.outbox_retry);
    }

    /// Acknowledges a successful send and, in the same store operation, reads on from the
    /// cursor (under load each store operation waits its turn behind the writes, and a round
    /// trip fewer per batch is a faster hand-off); rests a receiver that failed, and one whose
    /// acknowledgement failed (the store busy), so that its batch is read and sent again.
    async fn finish(&mut self, sent: Sent) -> Option<OutboxRead> {
        let oldest = sent.seqs.first().copied().unwrap_or(self.cursor);
        let Some(reason) = sent.failure else {
            let count = sent.seqs.len();
            let seqs = sent.seqs;
            let (cursor, window) = (self.cursor, self.window());
            let acked = self
                .ctx
                .store
                .run(move |shard, _| {
                    shard.outbox_ack(&seqs);
                    shard.outbox(cursor, window.entries, window.bytes)
                })
                .await;
            let shard = self.ctx.shard;
            tracing::trace!(shard, receiver = ?sent.receiver, count, "dispatcher.outbox.sent");
            return match acked {
                Ok(read) => Some(read),
                Err(e) => {
                    tracing::warn!(shard, error = %e, "dispatcher.outbox.ack");
                    self.rest(sent.receiver, oldest);
                    None
                }
            };
        };
        tracing::warn!(
            shard = self.ctx.shard,
            receiver = ?sent.receiver,
            retry_in = ?self.ctx.outbox_retry,
            %reason,
            "dispatcher.outbox.send_failed"
        );
        self.rest(sent.receiver, oldest);
        None
    }

    /// Whether some receiver is free to take a new hand-off at once.
    fn any_free(&self) -> bool {
        let shard = self.ctx.shard;
        let others = (0..self.ctx.shards).filter(|k| *k != shard);
        std::iter::once(Receiver::Timer)
            .chain(others.map(Receiver::Dispatcher))
            .any(|receiver| !self.is_busy(receiver))
    }
}

/// A hand-off's cost in a request: its encoded length, with its field's framing.
fn cost(seq: u64, hand_off: &HandOff) -> usize {
    repeated_field_cost(encoded_len(seq, hand_off))
}
