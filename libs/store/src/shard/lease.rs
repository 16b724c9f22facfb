//! Leases: take a batch in `(activate_at, seq)` order, complete with an outcome, extend, and
//! expire. Each outcome checks the lease epoch and deadline in the same transaction that
//! applies it, so a stale token changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::event::{MAX_HEADERS, TRACE_CONTEXT_HEADERS, own_header_count};
use cascade_core::{EventState, Outcome, QueueName, Timestamp};

use super::state::State;
use super::{
    DEAD_LETTER_FROM, DEAD_LETTER_REASON, LAST_FAILURE, LeaseToken, LeasedEvent, Shard,
    dead_letter_queue,
};
use crate::codec::keys;
use crate::codec::records::{Delivery, EventRecord, QueueKind, QueueRecord};
use crate::error::StoreError;
use crate::kv::{Flow, Txn};
use crate::observe::{DeadLetterCause, MoveStep};

impl Shard {
    /// Leases up to `max` ready events; `lease`: `None` for the queue's default.
    pub fn take(
        &mut self,
        now: Timestamp,
        queue: &QueueName,
        max: usize,
        lease: Option<Duration>,
    ) -> Result<Vec<LeasedEvent>, StoreError> {
        let txn = self.st.begin(&self.kv);
        let resolved = self.st.resolve_queue(&txn, queue)?;
        if !resolved.stored || max == 0 {
            return Ok(Vec::new());
        }
        let rec = resolved.rec;
        let (space_start, end) = keys::ready_space(rec.id);
        let start = self
            .st
            .ready_cursor
            .get(&rec.id)
            .cloned()
            .unwrap_or(space_start);
        let mut ids = Vec::with_capacity(max.min(1024));
        // One buffer for every key visited: only the last one is kept.
        let mut last_key = Vec::new();
        self.kv.scan(&start, &end, |k, v| {
            ids.push(String::from_utf8_lossy(v).into_owned());
            last_key.clear();
            last_key.extend_from_slice(k);
            Ok(if ids.len() >= max {
                Flow::Stop
            } else {
                Flow::Continue
            })
        })?;
        let mut txn = txn;
        let deadline = now.saturating_add(lease.unwrap_or(rec.config.lease));
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            let mut ev = State::read_event(&txn, rec.id, id)?.ok_or_else(|| {
                StoreError::corrupt(
                    self.kv.dir(),
                    format!(
                        "ready index names missing event '{id}' of queue '{}'",
                        rec.name
                    ),
                )
            })?;
            debug_assert_eq!(ev.state, EventState::Ready);
            State::remove_ready(&mut txn, rec.id, &ev);
            ev.state = EventState::Leased;
            ev.attempts += 1;
            ev.lease_epoch = self.st.seqs.next_epoch();
            ev.lease_expires_at = Some(deadline);
            self.st.write_event(&mut txn, &rec, &mut ev, false);
            self.st.add_lease(&mut txn, deadline, &rec, id);
            out.push(LeasedEvent {
                token: LeaseToken(ev.lease_epoch),
                expires_at: deadline,
                event: super::events::to_event(&rec.name, ev),
            });
        }
        let n = out.len() as u64;
        if n > 0 {
            self.st.update_counters(&mut txn, &rec, |c| {
                c.ready -= n;
                c.leased += n;
            })?;
        }
        if ids.is_empty() {
            self.st.ready_cursor.remove(&rec.id);
        } else {
            self.st
                .ready_cursor
                .insert(rec.id, keys::successor(&last_key));
        }
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(out)
    }

    /// Applies the outcome of a lease. Stale token, expired lease or a missing event:
    /// `StaleLease`, and nothing changes.
    pub fn complete(
        &mut self,
        now: Timestamp,
        queue: &QueueName,
        id: &str,
        token: LeaseToken,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let (rec, mut ev) = self.current_lease(&txn, now, queue, id, token)?;
        end_lease(&mut txn, &rec, &ev);
        ev.lease_expires_at = None;
        let attempts_left = rec.config.max_attempts == 0 || ev.attempts < rec.config.max_attempts;
        let moving = match &outcome {
            Outcome::Advance { .. } => Some(MoveStep::HandOff),
            Outcome::DeadLetter { .. } => Some(MoveStep::DeadLetter),
            Outcome::Retry { .. } if !attempts_left => Some(MoveStep::DeadLetter),
            _ => None,
        };
        if let Err(e) = self
            .st
            .apply_outcome(&mut txn, now, &rec, ev, outcome, attempts_left)
        {
            // The event stays leased, and its lease's end brings it back.
            if let Some(step) = moving
                && !e.is_fault()
            {
                let family = self.st.family(queue);
                self.st.settings.observer.move_failed(&family, step);
            }
            return Err(e);
        }
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(())
    }

    /// Moves a lease's deadline to `now + by`.
    pub fn extend(
        &mut self,
        now: Timestamp,
        queue: &QueueName,
        id: &str,
        token: LeaseToken,
        by: Duration,
    ) -> Result<Timestamp, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let (rec, mut ev) = self.current_lease(&txn, now, queue, id, token)?;
        end_lease(&mut txn, &rec, &ev);
        let deadline = now.saturating_add(by);
        ev.lease_expires_at = Some(deadline);
        self.st.write_event(&mut txn, &rec, &mut ev, false);
        self.st.add_lease(&mut txn, deadline, &rec, id);
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(deadline)
    }

    /// Ends up to `limit` leases whose deadline has passed: back to ready, or to the
    /// dead-letter queue once `attempts` has reached `max_attempts`. Returns how many.
    pub fn expire_leases(&mut self, now: Timestamp, limit: usize) -> Result<usize, StoreError> {
        let (space_start, end) = keys::lease_due_space(now.as_micros());
        // After the wall clock stepped back, `now` is behind the cursor: nothing new is due.
        let cursor = self.st.lease_cursor.min(now.as_micros());
        let start = if cursor == 0 {
            space_start
        } else {
            keys::lease(cursor, 0, "")
        };
        let mut due = Vec::new();
        let faulted = &self.st.faulted_leases;
        self.kv.scan(&start, &end, |k, v| {
            if !faulted.is_empty() && faulted.contains(k) {
                return Ok(Flow::Continue);
            }
            let (_, _, id) = keys::decode_lease(k).map_err(|e| State::corrupt(&self.kv, e))?;
            let name = std::str::from_utf8(v)
                .ok()
                .and_then(|s| QueueName::parse(s).ok())
                .ok_or_else(|| {
                    StoreError::corrupt(self.kv.dir(), "lease entry with a bad queue name".into())
                })?;
            due.push((k.to_vec(), name, id));
            Ok(if due.len() >= limit {
                Flow::Stop
            } else {
                Flow::Continue
            })
        })?;
        if due.len() < limit {
            // Every lease due by `now` is handled; a deadline written behind the cursor
            // later (the clock stepped back) lowers it again.
            self.st.lease_cursor = self.st.lease_cursor.max(now.as_micros());
            // Faulted leases behind the cursor are not swept again this run anyway.
            let swept = keys::lease(self.st.lease_cursor, 0, "");
            self.st.faulted_leases.retain(|key| *key >= swept);
        }
        // One transaction per lease: an event that cannot move on holds up no other. One
        // that faults (its record unreadable, the disk failing) is logged once and passed
        // over by every later sweep of this run, until the shard's next start tries it
        // again: tried at every tick, it would log its fault a hundred times a second, and
        // a thousand of them would fill every sweep. The first fault is returned once the
        // others have been handled.
        let mut first_fault = None;
        for (key, name, id) in due.iter() {
            let family = self.st.family(name);
            self.st.settings.observer.lease_expired(&family);
            let mut txn = self.st.begin(&self.kv);
            let expired = match self.st.expire_lease(&mut txn, now, name, id) {
                Ok(()) => {
                    let batch = self.st.seal(txn);
                    self.st.commit(&mut self.kv, batch);
                    Ok(())
                }
                Err(e) if e.is_fault() => Err(e),
                Err(e) => {
                    drop(txn);
                    self.keep_undead_lettered(now, name, id, &e)
                }
            };
            if let Err(e) = expired {
                tracing::error!(queue = %name, %id, error = %e, "store.lease.expiry_failed");
                self.st.faulted_leases.insert(key.clone());
                first_fault.get_or_insert(e);
            }
        }
        first_fault.map_or(Ok(due.len()), Err)
    }

    /// Dead-lettering event `id` at its lease's end failed with `error` (a dead-letter queue
    /// that cannot exist, say a store older than the name check): the event goes back to its
    /// queue after the queue's retry backoff, to be delivered (and dead-lettered) again.
    fn keep_undead_lettered(
        &mut self,
        now: Timestamp,
        name: &QueueName,
        id: &str,
        error: &StoreError,
    ) -> Result<(), StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let (rec, mut ev) = self.st.expiring(&mut txn, name, id)?;
        let delay = cascade_core::backoff::retry_delay(&rec.config, ev.attempts, self.st.rng.f64());
        ev.activate_at = now.saturating_add(delay);
        self.st
            .requeue(&mut txn, now, &rec, ev, |c| c.expired_leases_total += 1)?;
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        let family = self.st.family(name);
        self.st
            .settings
            .observer
            .move_failed(&family, MoveStep::DeadLetter);
        tracing::warn!(queue = %name, %id, %error, retry_in = ?delay, "store.dead_letter.failed");
        Ok(())
    }

    fn current_lease(
        &self,
        txn: &Txn<'_>,
        now: Timestamp,
        queue: &QueueName,
        id: &str,
        token: LeaseToken,
    ) -> Result<(QueueRecord, EventRecord), StoreError> {
        let stale = || StoreError::StaleLease {
            queue: queue.to_string(),
            id: id.to_string(),
        };
        // A queue gone since the take (an emptied template or dead-letter queue) means the
        // lease is gone with it.
        let resolved = match self.st.resolve_queue(txn, queue) {
            Ok(r) if r.stored => r,
            Ok(_) | Err(StoreError::QueueNotFound { .. }) => return Err(stale()),
            Err(e) => return Err(e),
        };
        let ev = State::read_event(txn, resolved.rec.id, id)?.ok_or_else(stale)?;
        let current = ev.state == EventState::Leased
            && ev.lease_epoch == token.0
            && ev.lease_expires_at.is_some_and(|d| now < d);
        if !current {
            return Err(stale());
        }
        Ok((resolved.rec, ev))
    }
}

impl State {
    /// What `complete` does with a lease's outcome, in `txn`.
    fn apply_outcome(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        rec: &QueueRecord,
        mut ev: EventRecord,
        outcome: Outcome,
        attempts_left: bool,
    ) -> Result<(), StoreError> {
        match outcome {
            Outcome::Ack => {
                txn.delete(keys::event(rec.id, ev.id.as_str()));
                self.update_counters(txn, rec, |c| {
                    c.leased -= 1;
                    c.completed_total += 1;
                })?;
            }
            Outcome::Advance {
                to,
                payload,
                headers,
                delay,
            } => {
                let to = to.ok_or_else(|| cascade_core::Error::InvalidArgument {
                    field: "advance.to".into(),
                    reason: "the shard needs the next queue; the gateway resolves pipeline stages"
                        .into(),
                })?;
                let to = QueueName::parse_field(&to, "advance.to")?;
                let mut merged = ev.headers.clone();
                // Its attempts start again where it goes, and it is no dead letter there (an
                // advance out of a dead-letter queue): this queue's account of it stays here.
                for own in [LAST_FAILURE, DEAD_LETTER_FROM, DEAD_LETTER_REASON] {
                    merged.remove(own);
                }
                merged.extend(headers);
                let payload_len = payload.as_ref().unwrap_or(&ev.payload).len();
                let size = |merged: &BTreeMap<String, String>| {
                    self.check_event_size("advance.payload", &ev, payload_len, merged)
                };
                let mut fits = size(&merged);
                // A trace context the advance brings (its worker's span) has no room in an
                // event whose own headers are full, or that is as large as an event may be:
                // the event goes on untraced, as the gateway lets it, rather than be refused
                // for a header its handler never set.
                if fits.is_err() || own_header_count(&merged) > MAX_HEADERS {
                    for trace in TRACE_CONTEXT_HEADERS {
                        if !ev.headers.contains_key(trace) {
                            merged.remove(trace);
                        }
                    }
                    fits = size(&merged);
                }
                cascade_core::event::validate_headers_at(&merged, "advance.headers")?;
                fits?;
                txn.delete(keys::event(rec.id, ev.id.as_str()));
                self.update_counters(txn, rec, |c| {
                    c.leased -= 1;
                    c.completed_total += 1;
                })?;
                let delivery = Delivery {
                    queue: to,
                    id: ev.id,
                    payload: payload.unwrap_or(ev.payload),
                    headers: merged,
                    activate_at: now.saturating_add(delay.unwrap_or_default()),
                    created_at: ev.created_at,
                };
                self.deliver(txn, now, delivery, QueueKind::Explicit)?;
            }
            Outcome::Retry { reason, .. } if !attempts_left => {
                // Whole in the dead letter's reason (cut to its own bound), cut in the header.
                let last = reason
                    .clone()
                    .or_else(|| ev.headers.get(LAST_FAILURE).cloned());
                if let Some(reason) = reason {
                    keep_last_failure(&mut ev.headers, reason);
                }
                self.dead_letter_exhausted(txn, now, rec, ev, "retry", last)?;
            }
            Outcome::Retry { delay, reason } => {
                let delay = delay.unwrap_or_else(|| {
                    cascade_core::backoff::retry_delay(&rec.config, ev.attempts, self.rng.f64())
                });
                ev.activate_at = now.saturating_add(delay);
                if let Some(reason) = reason {
                    keep_last_failure(&mut ev.headers, reason);
                }
                self.requeue(txn, now, rec, ev, |c| c.retries_total += 1)?;
            }
            Outcome::Reschedule { activate_at } => {
                ev.activate_at = activate_at;
                ev.attempts = 0;
                self.requeue(txn, now, rec, ev, |_| {})?;
            }
            Outcome::Release => self.requeue(txn, now, rec, ev, |_| {})?,
            Outcome::DeadLetter { reason } => {
                self.dead_letter(txn, now, rec, ev, reason, DeadLetterCause::Requested)?
            }
        }
        Ok(())
    }

    /// Ends the lease of event `id`: back to ready, or dead-lettered at `max_attempts`.
    fn expire_lease(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        name: &QueueName,
        id: &str,
    ) -> Result<(), StoreError> {
        let (rec, ev) = self.expiring(txn, name, id)?;
        if rec.config.max_attempts != 0 && ev.attempts >= rec.config.max_attempts {
            self.update_counters(txn, &rec, |c| c.expired_leases_total += 1)?;
            let last = ev.headers.get(LAST_FAILURE).cloned();
            self.dead_letter_exhausted(txn, now, &rec, ev, "lease expired", last)
        } else {
            self.requeue(txn, now, &rec, ev, |c| c.expired_leases_total += 1)
        }
    }

    /// The queue and the event of a lease entry that has come due, its lease ended.
    fn expiring(
        &self,
        txn: &mut Txn<'_>,
        name: &QueueName,
        id: &str,
    ) -> Result<(QueueRecord, EventRecord), StoreError> {
        let rec = self.resolve_queue(txn, name)?.rec;
        let mut ev = State::read_event(txn, rec.id, id)?.ok_or_else(|| {
            StoreError::corrupt(txn.kv().dir(), format!("lease names missing event '{id}'"))
        })?;
        end_lease(txn, &rec, &ev);
        ev.lease_expires_at = None;
        Ok((rec, ev))
    }

    /// Puts a leased event back: ready if its activation time has come, else delayed.
    fn requeue(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        rec: &QueueRecord,
        mut ev: EventRecord,
        count: impl FnOnce(&mut crate::codec::records::Counters),
    ) -> Result<(), StoreError> {
        let ready = ev.activate_at <= now;
        ev.state = if ready {
            EventState::Ready
        } else {
            EventState::Delayed
        };
        self.write_event(txn, rec, &mut ev, false);
        if ready {
            self.add_ready(txn, rec.id, &ev);
        }
        self.update_counters(txn, rec, |c| {
            c.leased -= 1;
            if ready {
                c.ready += 1;
            } else {
                c.delayed += 1;
            }
            count(c);
        })
    }

    /// Dead-letters `ev`, whose attempts ran out at `what` ("retry", "lease expired"); the
    /// reason keeps the last failure a retry gave, so the cause is not lost.
    fn dead_letter_exhausted(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        rec: &QueueRecord,
        ev: EventRecord,
        what: &str,
        last_failure: Option<String>,
    ) -> Result<(), StoreError> {
        let (attempts, max) = (ev.attempts, rec.config.max_attempts);
        let mut reason = format!("{what} after {attempts} of {max} attempts");
        if let Some(last) = last_failure {
            reason.push_str("; last failure: ");
            reason.push_str(&last);
        }
        self.dead_letter(txn, now, rec, ev, reason, DeadLetterCause::MaxAttempts)
    }

    /// Moves a leased event to its queue's dead-letter queue with the reason.
    fn dead_letter(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        rec: &QueueRecord,
        ev: EventRecord,
        reason: String,
        cause: DeadLetterCause,
    ) -> Result<(), StoreError> {
        let dlq = dead_letter_queue(rec)?;
        let family = self.family(&rec.name);
        self.settings.observer.dead_lettered(&family, cause);
        txn.delete(keys::event(rec.id, ev.id.as_str()));
        self.update_counters(txn, rec, |c| {
            c.leased -= 1;
            c.dead_lettered += 1;
        })?;
        let delivery = Delivery {
            queue: dlq,
            id: ev.id,
            payload: ev.payload,
            headers: ev.headers,
            activate_at: now,
            created_at: ev.created_at,
        };
        self.deliver_dead_letter(txn, now, delivery, &rec.name, reason)
    }

    /// Delivers `d` (addressed to a dead-letter queue) now, with the headers that say which
    /// queue it left and why.
    pub(super) fn deliver_dead_letter(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        mut d: Delivery,
        from: &QueueName,
        reason: String,
    ) -> Result<(), StoreError> {
        d.headers.insert(DEAD_LETTER_FROM.into(), from.to_string());
        d.headers
            .insert(DEAD_LETTER_REASON.into(), truncate(reason, REASON_BYTES));
        d.activate_at = now;
        self.deliver(txn, now, d, QueueKind::DeadLetter)
    }
}

/// The longest dead-letter reason kept: room for the count of attempts and a last failure.
const REASON_BYTES: usize = 2048;
/// The longest last failure kept.
const LAST_FAILURE_BYTES: usize = 1024;

/// Records why the last attempt failed, cut to a header's room (Cascade's own headers do
/// not count against an event's limit).
fn keep_last_failure(headers: &mut BTreeMap<String, String>, reason: String) {
    headers.insert(LAST_FAILURE.into(), truncate(reason, LAST_FAILURE_BYTES));
}

fn end_lease(txn: &mut Txn<'_>, rec: &QueueRecord, ev: &EventRecord) {
    if let Some(deadline) = ev.lease_expires_at {
        txn.delete(keys::lease(deadline.as_micros(), rec.id, ev.id.as_str()));
    }
}

fn truncate(mut s: String, max: usize) -> String {
    s.truncate(cascade_core::error::cut_to(&s, max).len());
    s
}
