//! The activation timer's store: a durable schedule of `(activate_at, queue, id, version)`.
//! Only the near future (up to `horizon` ahead of the last `due` call, and at most
//! `MAX_IN_MEMORY` entries) is held in memory; the rest stays on disk and is loaded as time
//! reaches it and room is made, so 100M pending timers cost memory only for the next
//! minute's worth, and a backlog of overdue ones (a dispatcher down for hours) only for a
//! bounded part of it. An entry stays stored until the dispatcher acknowledges
//! its activation; after a restart every due entry is fired again (activation is idempotent).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use cascade_core::{EventId, QueueName, Timestamp};

use crate::codec::keys;
use crate::durable::Maintenance;
use crate::error::StoreError;
use crate::kv::{Batch, Flow, Kv, Txn};

pub use cascade_core::commands::ScheduleEntry;

/// The entry's key in the schedule keyspace (see `keys::schedule`).
fn entry_key(e: &ScheduleEntry) -> Vec<u8> {
    keys::schedule(e.at.as_micros(), e.queue.as_str(), e.id.as_str(), e.version)
}

/// The entry a schedule key names; a key that does not decode is corruption.
fn decode_entry(key: &[u8], kv: &Kv) -> Result<ScheduleEntry, StoreError> {
    let bad = |reason: String| StoreError::corrupt(kv.dir(), format!("schedule key: {reason}"));
    let (at, queue, id, version) = keys::decode_schedule(key).map_err(|e| bad(e.to_string()))?;
    Ok(ScheduleEntry {
        at: Timestamp::from_micros(at),
        queue: QueueName::parse(&queue).map_err(|e| bad(e.to_string()))?,
        id: EventId::parse(&id).map_err(|e| bad(e.to_string()))?,
        version,
    })
}

/// What [`Timer::due_counts`] found: per queue, a count for each bound.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DueCounts {
    /// The bounds asked for, the last one cut to the time reached if the scan was cut.
    pub bounds: Vec<Timestamp>,
    /// Queues with at least one entry counted, and one count per bound.
    pub queues: BTreeMap<QueueName, Vec<u64>>,
}

/// Entries held in memory at most, loaded ahead or in flight (about 100 bytes each); more
/// can be held only when entries are scheduled into the part already loaded.
const MAX_IN_MEMORY: usize = 100_000;

pub struct Timer {
    kv: Kv,
    unlogged: Vec<Vec<u8>>,
    horizon: Duration,
    /// Keys of entries due before `loaded_until`, not yet handed out.
    near: BTreeSet<Vec<u8>>,
    /// Handed out by `due`, waiting for `acknowledge` or `release`.
    in_flight: HashSet<Vec<u8>>,
    /// Every stored entry due before this is in `near` or `in_flight`.
    loaded_until: u64,
    /// `MAX_IN_MEMORY`, smaller in tests.
    max_in_memory: usize,
}

impl Timer {
    /// The timer of a recovered store. The index of entries by event that earlier builds kept
    /// beside the schedule is deleted here, through the log like any change: a cancel names
    /// the entry's time now, so the index only cost a second key per entry.
    pub fn open(kv: Kv, horizon: Duration) -> Result<Timer, StoreError> {
        let mut timer = Timer {
            kv,
            unlogged: Vec::new(),
            horizon,
            near: BTreeSet::new(),
            in_flight: HashSet::new(),
            loaded_until: 0,
            max_in_memory: MAX_IN_MEMORY,
        };
        let (start, end) = keys::legacy_schedule_index_space();
        let mut txn = Txn::new(&timer.kv);
        timer.kv.scan(&start, &end, |key, _| {
            txn.delete(key.to_vec());
            Ok(Flow::Continue)
        })?;
        let batch = txn.into_batch();
        timer.commit(batch);
        Ok(timer)
    }

    /// Stores entries; scheduling one that is already stored changes nothing.
    pub fn schedule(&mut self, entries: &[ScheduleEntry]) {
        let mut txn = Txn::new(&self.kv);
        for e in entries {
            let key = entry_key(e);
            if e.at.as_micros() < self.loaded_until && !self.in_flight.contains(&key) {
                self.near.insert(key.clone());
            }
            txn.put(key, Vec::new());
        }
        let batch = txn.into_batch();
        self.commit(batch);
    }

    /// Removes `entry` (as scheduled: its time is part of its key); false if it was not there.
    pub fn cancel(&mut self, entry: &ScheduleEntry) -> Result<bool, StoreError> {
        let key = entry_key(entry);
        if self.kv.get(&key)?.is_none() {
            return Ok(false);
        }
        self.near.remove(&key);
        self.in_flight.remove(&key);
        let mut txn = Txn::new(&self.kv);
        txn.delete(key);
        let batch = txn.into_batch();
        self.commit(batch);
        Ok(true)
    }

    /// Up to `limit` entries due at `now`, earliest first, marked in flight.
    pub fn due(&mut self, now: Timestamp, limit: usize) -> Result<Vec<ScheduleEntry>, StoreError> {
        let now = now.as_micros();
        if now >= self.loaded_until {
            self.load_until(now.saturating_add(self.horizon.as_micros() as u64))?;
        }
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(first) = self.near.first() else {
                break;
            };
            let entry = decode_entry(first, &self.kv)?;
            if entry.at.as_micros() > now {
                break;
            }
            let key = self.near.pop_first().expect("first exists");
            self.in_flight.insert(key);
            out.push(entry);
        }
        Ok(out)
    }

    /// The dispatcher applied these activations: forget them.
    pub fn acknowledge(&mut self, entries: &[ScheduleEntry]) {
        let mut txn = Txn::new(&self.kv);
        for e in entries {
            let key = entry_key(e);
            self.in_flight.remove(&key);
            self.near.remove(&key);
            txn.delete(key);
        }
        let batch = txn.into_batch();
        self.commit(batch);
    }

    /// These activations were not delivered: hand them out again.
    pub fn release(&mut self, entries: &[ScheduleEntry]) {
        for e in entries {
            let key = entry_key(e);
            if self.in_flight.remove(&key) {
                self.near.insert(key);
            }
        }
    }

    /// Every stored entry due before this is held in memory (or in flight): `due` loads more
    /// once it is reached.
    pub fn loaded_until(&self) -> Timestamp {
        Timestamp::from_micros(self.loaded_until)
    }

    /// When the earliest entry held in memory is due, if any.
    pub fn next_due(&self) -> Option<Timestamp> {
        let first = self.near.first()?;
        keys::decode_schedule(first)
            .ok()
            .map(|(at, ..)| Timestamp::from_micros(at))
    }

    /// Entries held in memory (the near future and those in flight).
    pub fn in_memory(&self) -> usize {
        self.near.len() + self.in_flight.len()
    }

    /// Stored entries of `queues` due at or before the last of `bounds` (ascending), overdue
    /// and in-flight ones included, counted per queue into buckets: an entry goes to the
    /// first bound at or after its time. Reads at most `limit` entries (of any queue), in
    /// time order; when that cuts the scan, the last bound becomes the time reached and later
    /// entries go uncounted. For the resource manager, which staffs stages ahead of a wave.
    pub fn due_counts(
        &self,
        bounds: &[Timestamp],
        queues: &BTreeSet<QueueName>,
        limit: usize,
    ) -> Result<DueCounts, StoreError> {
        let mut counts = DueCounts {
            bounds: bounds.to_vec(),
            queues: BTreeMap::new(),
        };
        let Some(last) = bounds.last() else {
            return Ok(counts);
        };
        if queues.is_empty() {
            return Ok(counts);
        }
        let last = last.as_micros();
        let mut read = 0usize;
        let mut reached = None;
        let mut bucket = 0usize;
        let mut count = |key: &[u8]| -> Result<Flow, StoreError> {
            if read == limit {
                return Ok(Flow::Stop);
            }
            let entry = decode_entry(key, &self.kv)?;
            if entry.at.as_micros() > last {
                return Ok(Flow::Stop);
            }
            read += 1;
            while bounds[bucket] < entry.at {
                bucket += 1;
            }
            reached = Some(entry.at);
            if !queues.contains(&entry.queue) {
                return Ok(Flow::Continue);
            }
            let per_bucket = counts
                .queues
                .entry(entry.queue)
                .or_insert_with(|| vec![0; bounds.len()]);
            per_bucket[bucket] += 1;
            Ok(Flow::Continue)
        };
        // Every entry due before `loaded_until` is in memory: counted from there, in time
        // order, so that the scan does not walk the deletions that fired entries leave in the
        // in-memory layers until the next checkpoint. `near` is sorted already; only the few
        // in flight need sorting before the two are merged.
        let mut in_flight: Vec<&Vec<u8>> = self.in_flight.iter().collect();
        in_flight.sort_unstable();
        let mut in_flight = in_flight.into_iter().peekable();
        let mut near = self.near.iter().peekable();
        let mut flow = Flow::Continue;
        while flow == Flow::Continue {
            let key = match (near.peek(), in_flight.peek()) {
                (Some(n), Some(f)) if f < n => in_flight.next(),
                (Some(_), _) => near.next(),
                (None, _) => in_flight.next(),
            };
            let Some(key) = key else {
                break;
            };
            flow = count(key)?;
        }
        if flow == Flow::Continue {
            let (start, end) = keys::schedule_range(self.loaded_until, last);
            self.kv.scan(&start, &end, |key, _| count(key))?;
        }
        if read == limit
            && let Some(reached) = reached
        {
            let kept = bucket + 1;
            counts.bounds.truncate(kept);
            counts.bounds[bucket] = reached;
            for per_bucket in counts.queues.values_mut() {
                per_bucket.truncate(kept);
            }
        }
        Ok(counts)
    }

    /// Loads the entries due before `until`, or as many as there is room for: then only
    /// up to the time of the last one loaded (entries of that very time may be left, and
    /// are read again by the next load, which finds the others in memory already).
    fn load_until(&mut self, until: u64) -> Result<(), StoreError> {
        let room = self.max_in_memory.saturating_sub(self.in_memory());
        if room == 0 {
            return Ok(());
        }
        let (start, end) = keys::schedule_range(self.loaded_until, until.saturating_sub(1));
        let (kv, near, in_flight) = (&self.kv, &mut self.near, &self.in_flight);
        let mut read = 0;
        let mut cut_at = None;
        kv.scan(&start, &end, |k, _| {
            if !in_flight.contains(k) {
                near.insert(k.to_vec());
            }
            read += 1;
            if read < room {
                return Ok(Flow::Continue);
            }
            cut_at = Some(decode_entry(k, kv)?.at.as_micros());
            Ok(Flow::Stop)
        })?;
        self.loaded_until = cut_at.unwrap_or(until).max(self.loaded_until);
        Ok(())
    }

    fn commit(&mut self, batch: Batch) {
        if !batch.is_empty() {
            self.unlogged.push(batch.encode());
            self.kv.apply(batch);
        }
    }
}

impl Maintenance for Timer {
    fn kv(&self) -> &Kv {
        &self.kv
    }

    fn kv_mut(&mut self) -> &mut Kv {
        &mut self.kv
    }

    fn take_unlogged(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.unlogged)
    }

    fn tick(&mut self, _now: Timestamp) -> Result<(), StoreError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
