//! Enqueue with dedup, the dedup window's ageing, and the two ends of a hand-off: the outbox
//! this shard drains and the deliveries it receives from others.

use cascade_core::{EventId, Timestamp};

use super::state::State;
use super::{EnqueueCmd, Enqueued, OutboxRead, Shard};
use crate::codec::keys;
use crate::codec::records::{self, DedupRecord, Delivery, QueueKind};
use crate::error::StoreError;
use crate::kv::{Flow, Txn};

const CLIENT_ID: u8 = b'i';
const IDEMPOTENCY_KEY: u8 = b'k';
/// Expired dedup entries removed per enqueue beyond the count bound: ageing keeps pace with
/// arrivals without a separate sweep.
const PRUNE_PER_ENQUEUE: usize = 4;

impl Shard {
    pub fn enqueue(&mut self, now: Timestamp, cmd: EnqueueCmd) -> Result<Enqueued, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let resolved = self.st.resolve_queue(&txn, &cmd.queue)?;
        if !resolved.stored {
            // A template-made queue: the template allowed it, but the name may be too long
            // for the queue's own dead-letter queue.
            resolved.rec.config.check_dead_letter_room(&cmd.queue)?;
        }
        let max = resolved.rec.config.max_payload_bytes;
        let size = cmd.payload.len() as u64;
        if size > max {
            return Err(StoreError::PayloadTooLarge {
                queue: cmd.queue.to_string(),
                size,
                max,
            });
        }
        cascade_core::event::validate_headers(&cmd.headers)?;
        let queue_name = cmd.queue.as_str();
        let id_key = cmd
            .id
            .as_ref()
            .map(|id| keys::dedup(queue_name, CLIENT_ID, id.as_str()));
        let idem_key = cmd
            .idempotency_key
            .as_ref()
            .map(|k| keys::dedup(queue_name, IDEMPOTENCY_KEY, k.as_str()));
        for key in [&id_key, &idem_key].into_iter().flatten() {
            if let Some(original) = live_dedup(&txn, key, now)? {
                self.st.observe_enqueued(&cmd.queue, true);
                return Ok(Enqueued {
                    id: original.event_id,
                    duplicate: true,
                    queue: cmd.queue,
                    activate_at: original.activate_at,
                });
            }
        }
        if let (Some(id), true) = (&cmd.id, resolved.stored)
            && let Some(existing) = State::read_event(&txn, resolved.rec.id, id.as_str())?
        {
            self.st.observe_enqueued(&cmd.queue, true);
            return Ok(Enqueued {
                id: existing.id,
                duplicate: true,
                queue: cmd.queue,
                activate_at: existing.activate_at,
            });
        }
        let id = cmd.id.unwrap_or_else(|| EventId::generate(now));
        let activate_at = cmd.activate_at.unwrap_or(now);
        let window = resolved.rec.config.dedup_window;
        let queue = self.st.materialize(&mut txn, resolved, now);
        let ev = self.st.insert_event(
            &mut txn,
            now,
            &queue,
            id,
            cmd.payload,
            cmd.headers,
            activate_at,
            now,
        )?;
        for key in [id_key, idem_key].into_iter().flatten() {
            let seq = self.st.seqs.next_seq();
            let rec = DedupRecord {
                event_id: ev.id.clone(),
                activate_at,
                seq,
                expires_at: now.saturating_add(window),
            };
            txn.put_fresh(keys::dedup_age(seq), key.clone());
            // Not fresh: an expired entry may still be stored under the same key.
            txn.put(key, records::encode_dedup(&rec));
            self.st.seqs.add_dedup(1);
        }
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        self.st.observe_enqueued(&queue.name, false);
        // The event is in: a prune that fails (an unreadable dedup record) must not tell
        // the producer otherwise, or its retry would enqueue the event again.
        if let Err(e) = self.prune_dedup(now, PRUNE_PER_ENQUEUE) {
            tracing::error!(error = %e, "store.dedup.prune_failed");
        }
        Ok(Enqueued {
            id: ev.id,
            duplicate: false,
            queue: queue.name,
            activate_at,
        })
    }

    /// Removes dedup entries oldest first: all those beyond the count bound, and up to
    /// `expired_budget` whose window has passed. Returns how many went.
    pub fn prune_dedup(
        &mut self,
        now: Timestamp,
        expired_budget: usize,
    ) -> Result<usize, StoreError> {
        let over = self
            .st
            .seqs
            .dedup_count
            .saturating_sub(self.st.settings.dedup_max_entries) as usize;
        let head_live = self.st.dedup_head_expiry.is_some_and(|t| now < t);
        if over == 0 && (self.st.seqs.dedup_count == 0 || head_live) {
            return Ok(0);
        }
        self.st.dedup_head_expiry = None;
        let mut head_expiry = None;
        let mut doomed = Vec::new();
        let start = keys::dedup_age(self.st.dedup_floor);
        let (_, end) = keys::dedup_age_space();
        let kv = &self.kv;
        kv.scan(&start, &end, |age_key, dedup_key| {
            if doomed.len() < over {
                doomed.push((age_key.to_vec(), dedup_key.to_vec()));
                return Ok(Flow::Continue);
            }
            if doomed.len() >= over + expired_budget {
                return Ok(Flow::Stop);
            }
            // `None`: the entry is gone or was written again under a newer age key (this
            // age key is garbage, and the newer one's expiry is not its own), or it cannot
            // be read and is of no use to anyone: all go.
            let age_seq =
                keys::seq_of(age_key, "dedup age key").map_err(|e| State::corrupt(kv, e))?;
            let expiry = match kv.get(dedup_key)? {
                Some(v) => readable_dedup(&v)
                    .filter(|rec| rec.seq == age_seq)
                    .map(|rec| rec.expires_at),
                None => None,
            };
            if let Some(t) = expiry.filter(|t| now < *t) {
                head_expiry = Some(t);
                return Ok(Flow::Stop);
            }
            doomed.push((age_key.to_vec(), dedup_key.to_vec()));
            Ok(Flow::Continue)
        })?;
        self.st.dedup_head_expiry = head_expiry;
        if doomed.is_empty() {
            return Ok(0);
        }
        let mut txn = self.st.begin(&self.kv);
        let mut last_age_seq = 0;
        for (age_key, dedup_key) in &doomed {
            let age_seq =
                keys::seq_of(age_key, "dedup age key").map_err(|e| State::corrupt(&self.kv, e))?;
            last_age_seq = age_seq;
            // The entry may have been replaced by a newer one with its own age key.
            if let Some(v) = txn.get(dedup_key)?
                && records::decode_dedup(&v)
                    .ok()
                    .is_none_or(|rec| rec.seq == age_seq)
            {
                txn.delete(dedup_key.clone());
            }
            txn.delete(age_key.clone());
        }
        self.st.seqs.add_dedup(-(doomed.len() as i64));
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        // The doomed are the oldest age keys from the floor on, and new ones take higher
        // sequences: the next scan starts after them.
        self.st.dedup_floor = last_age_seq.saturating_add(1);
        Ok(doomed.len())
    }

    /// Live dedup entries on this shard.
    pub fn dedup_entries(&self) -> u64 {
        self.st.seqs.dedup_count
    }

    /// Hand-offs waiting for their receivers, oldest first from sequence `from` on: at most
    /// `limit` of them, and no more once their encoded values reach `max_bytes` (deliveries
    /// carry payloads).
    ///
    /// A reader that reads on from the read's `next` walks each entry once, where reads
    /// from the head would walk the deletions left in the in-memory layers by every hand-off
    /// acknowledged since the last checkpoint (a million after a million delayed enqueues),
    /// and every entry of a receiver that is down.
    pub fn outbox(
        &mut self,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<OutboxRead, StoreError> {
        let start = keys::outbox(from);
        let (_, end) = keys::outbox_space();
        let mut entries = Vec::new();
        let mut bytes = 0;
        let mut more = false;
        self.kv.scan(&start, &end, |k, v| {
            let seq = keys::seq_of(k, "outbox key").map_err(|e| State::corrupt(&self.kv, e))?;
            let h = records::decode_hand_off(v).map_err(|e| State::corrupt(&self.kv, e))?;
            entries.push((seq, h));
            bytes += v.len();
            more = entries.len() >= limit || bytes >= max_bytes;
            Ok(if more { Flow::Stop } else { Flow::Continue })
        })?;
        let next = match entries.last() {
            Some((seq, _)) if more => seq.saturating_add(1),
            // New entries take higher sequences than any taken so far.
            _ => self.st.seqs.seq.saturating_add(1).max(from),
        };
        Ok(OutboxRead {
            entries,
            next,
            more,
        })
    }

    /// The receivers have applied these hand-offs: forget them.
    pub fn outbox_ack(&mut self, seqs: &[u64]) {
        let mut txn = self.st.begin(&self.kv);
        for seq in seqs {
            txn.delete(keys::outbox(*seq));
        }
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
    }

    /// Applies deliveries sent by shard `source` in its outbox order. A sequence at or below the
    /// last one applied from that source was applied before (a resend after a crash): skipped.
    /// The sender must send its hand-offs to this shard in sequence order, one batch at a time.
    /// A delivery its queue refuses (no such queue, its ID taken there) is dead-lettered here
    /// (`State::dead_letter_refused`): the sender has let go of the event, and a resend would
    /// be refused forever, holding up every hand-off behind it.
    pub fn receive(
        &mut self,
        now: Timestamp,
        source: u32,
        deliveries: Vec<(u64, Delivery)>,
    ) -> Result<usize, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let mark_key = keys::received(source);
        let mut mark = match txn.get(&mark_key)? {
            Some(v) => {
                records::decode_u64(&v, "received mark").map_err(|e| State::corrupt(&self.kv, e))?
            }
            None => 0,
        };
        let mut applied = 0;
        for (seq, d) in deliveries {
            if seq <= mark {
                continue;
            }
            let kind = if d.headers.contains_key(super::DEAD_LETTER_REASON) {
                QueueKind::DeadLetter
            } else {
                QueueKind::Explicit
            };
            if let Err(refused) = self.st.try_deliver(&mut txn, now, d, kind)? {
                self.st.dead_letter_refused(&mut txn, now, refused)?;
            }
            mark = seq;
            applied += 1;
        }
        txn.put(mark_key, records::encode_u64(mark));
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(applied)
    }
}

fn live_dedup(
    txn: &Txn<'_>,
    key: &[u8],
    now: Timestamp,
) -> Result<Option<DedupRecord>, StoreError> {
    let Some(v) = txn.get(key)? else {
        return Ok(None);
    };
    let rec = records::decode_dedup(&v).map_err(|e| State::corrupt(txn.kv(), e))?;
    Ok((rec.expires_at > now).then_some(rec))
}

/// A stored dedup record, or `None` (logged) when it cannot be read: pruning removes a
/// damaged record like an expired one, where failing would stop every later pruning at it.
/// Until then an enqueue with its key is refused (`DATA_LOSS`); after, the key dedups
/// nothing, as after its window.
fn readable_dedup(value: &[u8]) -> Option<DedupRecord> {
    records::decode_dedup(value)
        .inspect_err(|e| tracing::error!(error = %e, "store.dedup.unreadable; removed"))
        .ok()
}
