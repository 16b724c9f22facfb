//! Operations on one event by ID (get, update, delete), activation by the timer, and the
//! dead letters of a dead-letter queue (list, redrive).

use cascade_core::{Event, EventState, QueueName, Timestamp};

use super::state::State;
use super::{
    DEAD_LETTER_FROM, DEAD_LETTER_REASON, EventUpdate, LAST_FAILURE, Page, RedriveSelection, Shard,
    Step,
};
use crate::codec::keys;
use crate::codec::records::{self, Delivery, EventRecord, QueueKind, QueueRecord};
use crate::error::StoreError;
use crate::kv::{Flow, Kv, Txn};

/// A redrive of a whole dead-letter queue moves at most this many events per step.
pub const REDRIVE_STEP: usize = 1000;

pub(super) fn to_event(queue: &QueueName, ev: EventRecord) -> Event {
    Event {
        id: ev.id,
        queue: queue.clone(),
        payload: ev.payload,
        headers: ev.headers,
        activate_at: ev.activate_at,
        state: ev.state,
        attempts: ev.attempts,
        created_at: ev.created_at,
        version: ev.version,
        lease_expires_at: ev.lease_expires_at,
    }
}

impl Shard {
    pub fn get(&self, queue: &QueueName, id: &str) -> Result<Event, StoreError> {
        let txn = Txn::new(&self.kv);
        let (rec, ev) = self.find(&txn, queue, id)?;
        Ok(to_event(&rec.name, ev))
    }

    /// Changes payload, headers (merged) and/or activation time. Refused while leased.
    pub fn update(
        &mut self,
        now: Timestamp,
        queue: &QueueName,
        id: &str,
        update: EventUpdate,
    ) -> Result<Event, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let (rec, mut ev) = self.find(&txn, queue, id)?;
        refuse_if_leased(&rec, &ev)?;
        if let Some(payload) = &update.payload {
            let (size, max) = (payload.len() as u64, rec.config.max_payload_bytes);
            if size > max {
                return Err(StoreError::PayloadTooLarge {
                    queue: queue.to_string(),
                    size,
                    max,
                });
            }
        }
        let mut headers = ev.headers.clone();
        headers.extend(update.headers);
        cascade_core::event::validate_headers(&headers)?;
        let payload_len = update.payload.as_ref().unwrap_or(&ev.payload).len();
        let field = match update.payload {
            Some(_) => "payload",
            None => "headers",
        };
        self.st
            .check_event_size(field, &ev, payload_len, &headers)?;
        ev.headers = headers;
        if let Some(payload) = update.payload {
            ev.payload = payload;
        }
        let was = ev.state;
        if was == EventState::Ready {
            State::remove_ready(&mut txn, rec.id, &ev);
        }
        if let Some(at) = update.activate_at {
            ev.activate_at = at;
        }
        ev.state = if ev.activate_at <= now {
            EventState::Ready
        } else {
            EventState::Delayed
        };
        self.st.write_event(&mut txn, &rec, &mut ev, false);
        if ev.state == EventState::Ready {
            self.st.add_ready(&mut txn, rec.id, &ev);
        }
        let now_state = ev.state;
        self.st.update_counters(&mut txn, &rec, |c| {
            match was {
                EventState::Ready => c.ready -= 1,
                _ => c.delayed -= 1,
            }
            match now_state {
                EventState::Ready => c.ready += 1,
                _ => c.delayed += 1,
            }
        })?;
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(to_event(&rec.name, ev))
    }

    /// Removes an event. Refused while leased: complete it instead.
    pub fn delete(&mut self, queue: &QueueName, id: &str) -> Result<(), StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let (rec, ev) = self.find(&txn, queue, id)?;
        refuse_if_leased(&rec, &ev)?;
        remove_event(&mut self.st, &mut txn, &rec, &ev)?;
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(())
    }

    /// The timer's activation of `(queue, id, version)`: a delayed event of that version
    /// becomes ready; anything else (a newer version, a gone event) is ignored. Idempotent.
    pub fn activate(
        &mut self,
        queue: &QueueName,
        id: &str,
        version: u64,
    ) -> Result<bool, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let Some(resolved) = self.st.resolve(&txn, queue)? else {
            return Ok(false);
        };
        let rec = resolved.rec;
        if !resolved.stored {
            return Ok(false);
        }
        let Some(mut ev) = State::read_event(&txn, rec.id, id)? else {
            return Ok(false);
        };
        if ev.state != EventState::Delayed || ev.version != version {
            return Ok(false);
        }
        ev.state = EventState::Ready;
        let family = self.st.family(queue);
        self.st.settings.observer.activated(&family, ev.activate_at);
        self.st.write_event(&mut txn, &rec, &mut ev, false);
        self.st.add_ready(&mut txn, rec.id, &ev);
        self.st.update_counters(&mut txn, &rec, |c| {
            c.delayed -= 1;
            c.ready += 1;
        })?;
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(true)
    }

    /// The events of a dead-letter queue, in ID order, `page_token` being the last ID seen.
    pub fn list_dead_letters(
        &self,
        dlq: &QueueName,
        page_size: usize,
        page_token: &str,
    ) -> Result<Page<Event>, StoreError> {
        let txn = Txn::new(&self.kv);
        let Some(resolved) = self.st.resolve(&txn, dlq)?.filter(|r| r.stored) else {
            return Ok(Page {
                items: Vec::new(),
                next_page_token: String::new(),
            });
        };
        let rec = resolved.rec;
        let (events, next) = events_after(&self.kv, &rec, page_token, page_size)?;
        Ok(Page {
            items: events
                .into_iter()
                .map(|ev| to_event(&rec.name, ev))
                .collect(),
            next_page_token: next.unwrap_or_default(),
        })
    }

    /// Moves dead letters back to the queues they came from, as new ready events with fresh
    /// attempts, in one transaction. Leased ones are skipped. `All` moves one step of up to
    /// `REDRIVE_STEP`, those after the dead letter `after` in ID order ("": from the first);
    /// the dispatcher runs the steps in separate turns of the writer.
    pub fn redrive(
        &mut self,
        now: Timestamp,
        dlq: &QueueName,
        which: &RedriveSelection,
        after: &str,
    ) -> Result<Step, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let Some(resolved) = self.st.resolve(&txn, dlq)? else {
            return Ok(Step::default());
        };
        if !resolved.stored {
            return Ok(Step::default());
        }
        let rec = resolved.rec;
        let mut moved = 0;
        let next = match which {
            RedriveSelection::Ids(ids) => {
                for id in ids {
                    // Read in turn: an ID named twice is moved once.
                    if let Some(ev) = State::read_event(&txn, rec.id, id.as_str())? {
                        moved += redrive_one(&mut self.st, &mut txn, now, &rec, &ev)?;
                    }
                }
                None
            }
            RedriveSelection::All => {
                let (events, next) = events_after(&self.kv, &rec, after, REDRIVE_STEP)?;
                for ev in &events {
                    moved += redrive_one(&mut self.st, &mut txn, now, &rec, ev)?;
                }
                next
            }
        };
        let left = State::held(&txn, rec.id)?;
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(Step {
            done: moved,
            left,
            next,
        })
    }

    fn find(
        &self,
        txn: &Txn<'_>,
        queue: &QueueName,
        id: &str,
    ) -> Result<(QueueRecord, EventRecord), StoreError> {
        let not_found = || StoreError::EventNotFound {
            queue: queue.to_string(),
            id: id.to_string(),
        };
        let resolved = self.st.resolve_queue(txn, queue)?;
        if !resolved.stored {
            return Err(not_found());
        }
        let ev = State::read_event(txn, resolved.rec.id, id)?.ok_or_else(not_found)?;
        Ok((resolved.rec, ev))
    }
}

/// Up to `max` events of a queue, in ID order after the event `after` ("": from the first),
/// and the ID after which the next step starts if the queue holds more.
pub(super) fn events_after(
    kv: &Kv,
    rec: &QueueRecord,
    after: &str,
    max: usize,
) -> Result<(Vec<EventRecord>, Option<String>), StoreError> {
    let (space_start, end) = keys::event_space(rec.id);
    let start = match after {
        "" => space_start,
        after => keys::successor(&keys::event(rec.id, after)),
    };
    let (mut events, mut more) = (Vec::new(), false);
    kv.scan(&start, &end, |k, v| {
        if events.len() == max {
            more = true;
            return Ok(Flow::Stop);
        }
        events.push(records::decode_event(k, v).map_err(|e| State::corrupt(kv, e))?);
        Ok(Flow::Continue)
    })?;
    let next = match events.last() {
        Some(last) if more => Some(last.id.to_string()),
        _ => None,
    };
    Ok((events, next))
}

/// Moves one dead letter back to the queue it came from, unless it is leased or names no
/// queue. Returns how many moved (0 or 1).
fn redrive_one(
    st: &mut State,
    txn: &mut Txn<'_>,
    now: Timestamp,
    rec: &QueueRecord,
    ev: &EventRecord,
) -> Result<u64, StoreError> {
    if ev.state == EventState::Leased {
        return Ok(0);
    }
    let Some(origin) = ev
        .headers
        .get(DEAD_LETTER_FROM)
        .and_then(|q| QueueName::parse(q).ok())
    else {
        return Ok(0);
    };
    remove_event(st, txn, rec, ev)?;
    let mut headers = ev.headers.clone();
    headers.remove(DEAD_LETTER_FROM);
    headers.remove(DEAD_LETTER_REASON);
    headers.remove(LAST_FAILURE);
    let delivery = Delivery {
        queue: origin,
        id: ev.id.clone(),
        payload: ev.payload.clone(),
        headers,
        activate_at: now,
        created_at: ev.created_at,
    };
    st.deliver(txn, now, delivery, QueueKind::Explicit)?;
    Ok(1)
}

/// Deletes an event, leased or not, with its index entries, and counts it out of its queue.
pub(super) fn remove_event(
    st: &mut State,
    txn: &mut Txn<'_>,
    rec: &QueueRecord,
    ev: &EventRecord,
) -> Result<(), StoreError> {
    txn.delete(keys::event(rec.id, ev.id.as_str()));
    let state = ev.state;
    if state == EventState::Ready {
        State::remove_ready(txn, rec.id, ev);
    }
    if let Some(deadline) = ev.lease_expires_at {
        txn.delete(keys::lease(deadline.as_micros(), rec.id, ev.id.as_str()));
    }
    st.update_counters(txn, rec, |c| match state {
        EventState::Ready => c.ready -= 1,
        EventState::Delayed => c.delayed -= 1,
        EventState::Leased => c.leased -= 1,
    })
}

/// A leased event belongs to its lease holder, even past its deadline until expiry sweeps it.
fn refuse_if_leased(rec: &QueueRecord, ev: &EventRecord) -> Result<(), StoreError> {
    match (ev.state, ev.lease_expires_at) {
        (EventState::Leased, Some(until)) => Err(StoreError::LeaseHeld {
            queue: rec.name.to_string(),
            id: ev.id.to_string(),
            until,
        }),
        _ => Ok(()),
    }
}
