//! `repair`: rebuilds a damaged store from what can still be read (the library side of
//! `cascade data repair`). Opening refuses a damaged store so that nothing is lost silently;
//! repair is the operator's explicit choice to keep what is readable and drop the rest.
//!
//! What it does, in one pass over the state as the next open would see it:
//! - the log is replayed up to its first record that cannot be read; the records after it
//!   are lost, and the report says where reading stopped;
//! - an entry whose value fails its checks (an event whose payload checksum fails, …) is
//!   dropped and listed, and so is an event of a queue whose record is gone;
//! - the indexes that find events (ready order, lease deadlines) are rebuilt from the events
//!   kept, and every queue's current counts are counted again (its running totals are kept);
//! - every delayed event gets a new schedule hand-off to its timer, since the one that was
//!   sent may be among what was lost (the timer ignores one it already holds).
//!
//! The result is written beside the store, verified, and swapped in; the damaged store is
//! kept beside it as `<dir>.damaged-<unix seconds>` until the operator removes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cascade_core::{Clock, EventId, EventState, QueueName, SystemClock, Timestamp};

use crate::codec::bytes::Reader;
use crate::codec::records::{self, Counters, HandOff};
use crate::codec::{self, Malformed, keys};
use crate::error::StoreError;
use crate::kv::{Batch, Flow, Kv, checkpoint};
use crate::wal::{self, Salvaged};

use super::new_store::{Contents, NewStore, TOOL_CACHE_BYTES};
use super::verify::{self, MAX_PROBLEMS};

#[derive(Debug)]
pub struct RepairReport {
    /// How much of the log was replayed, and where it stopped.
    pub log: Salvaged,
    /// The entries dropped (the first [`MAX_PROBLEMS`]), and how many in all.
    pub dropped: Vec<String>,
    pub dropped_count: u64,
    /// Queues whose current counts were wrong.
    pub counts_corrected: u64,
    /// Schedule hand-offs queued for delayed events.
    pub schedules_queued: u64,
    /// What the repaired store holds.
    pub contents: Contents,
    /// Where the damaged store was moved.
    pub damaged: PathBuf,
}

/// Repairs the stopped store in `dir`; `None` when it verifies healthy (nothing changed).
pub fn repair(dir: &Path) -> Result<Option<RepairReport>, StoreError> {
    if verify::verify(dir)?.is_healthy() {
        return Ok(None);
    }
    let state_dir = dir.join("state");
    let mut kv = Kv::open(&state_dir, TOOL_CACHE_BYTES)?;
    let checkpoint_lsn = checkpoint::lsn(kv.db(), &state_dir)?;
    let log = wal::salvage(&dir.join("wal"), checkpoint_lsn, |_, bytes| {
        let batch = Batch::decode(&bytes).map_err(|e| e.to_string())?;
        kv.replay(batch);
        Ok(())
    })?;
    let mut rebuild = Rebuild {
        store: NewStore::create(dir)?,
        queues: HashMap::new(),
        counters: HashMap::new(),
        delayed: Vec::new(),
        last_seq: 0,
        dedup_entries: 0,
        dropped: Vec::new(),
        dropped_count: 0,
        failed: None,
    };
    kv.scan(&[0x00], &[0xff], |key, value| {
        rebuild.entry(key, value);
        Ok(match rebuild.failed {
            None => Flow::Continue,
            Some(_) => Flow::Stop,
        })
    })?;
    drop(kv);
    if let Some(e) = rebuild.failed.take() {
        return Err(e);
    }
    let (counts_corrected, schedules_queued) = rebuild.finish_state()?;
    let damaged = dir.with_file_name(format!(
        "{}.damaged-{}",
        dir.file_name()
            .map_or("store".into(), |n| n.to_string_lossy()),
        SystemClock.now().as_millis() / 1000
    ));
    let Rebuild {
        store,
        dropped,
        dropped_count,
        ..
    } = rebuild;
    let contents = store.finish(Some(&damaged))?;
    Ok(Some(RepairReport {
        log,
        dropped,
        dropped_count,
        counts_corrected,
        schedules_queued,
        contents,
        damaged,
    }))
}

/// The repaired store being written, and what its last entries are computed from.
struct Rebuild {
    store: NewStore,
    /// Queue records kept, by ID.
    queues: HashMap<u64, QueueName>,
    /// Each queue's counters as stored (`None`: missing or dropped) and as counted.
    counters: HashMap<u64, (Option<Counters>, Counters)>,
    /// `(queue ID, ID, version, activate_at)` of every delayed event kept.
    delayed: Vec<(u64, EventId, u64, Timestamp)>,
    /// The highest sequence number met (events, hand-offs, dedup entries, the store's own).
    last_seq: u64,
    dedup_entries: u64,
    dropped: Vec<String>,
    dropped_count: u64,
    /// The first write that failed.
    failed: Option<StoreError>,
}

impl Rebuild {
    fn drop_entry(&mut self, what: String) {
        self.dropped_count += 1;
        if self.dropped.len() < MAX_PROBLEMS {
            self.dropped.push(what);
        }
    }

    /// One entry of the old store, in key order (queue records come before their events).
    fn entry(&mut self, key: &[u8], value: &[u8]) {
        if let Err(e) = codec::check_entry(key, value) {
            self.drop_entry(verify::describe(key, &e));
            return;
        }
        if let Err(e) = self.keep(key, value) {
            self.drop_entry(verify::describe(key, &e));
        }
    }

    /// Keeps a checked entry, or says why it cannot be kept.
    fn keep(&mut self, key: &[u8], value: &[u8]) -> Result<(), Malformed> {
        match key[0] {
            // Rebuilt from the events.
            keys::READY | keys::LEASE => return Ok(()),
            keys::COUNTERS => {
                let stored = records::decode_counters(value)?;
                self.counters.entry(queue_id(key)?).or_default().0 = Some(stored);
                return Ok(());
            }
            keys::QUEUE => {
                let rec = records::decode_queue(value)?;
                self.queues.insert(rec.id, rec.name);
            }
            keys::EVENT => return self.event(key, value),
            keys::DEDUP => {
                self.dedup_entries += 1;
                self.note_seq(records::decode_dedup(value)?.seq);
            }
            keys::OUTBOX => self.note_seq(keys::seq_of(key, "outbox key")?),
            keys::META if key == keys::meta("seq").as_slice() => {
                self.note_seq(records::decode_u64(value, "sequence")?);
            }
            _ => {}
        }
        self.put(key.to_vec(), value.to_vec())
    }

    fn note_seq(&mut self, seq: u64) {
        self.last_seq = self.last_seq.max(seq);
    }

    /// A write error stops the repair; it is carried out of the scan by `failed`.
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), Malformed> {
        if self.failed.is_none()
            && let Err(e) = self.store.put(key, value)
        {
            self.failed = Some(e);
        }
        Ok(())
    }

    fn event(&mut self, key: &[u8], value: &[u8]) -> Result<(), Malformed> {
        let qid = queue_id(key)?;
        let ev = records::decode_event(value)?;
        let Some(queue) = self.queues.get(&qid).cloned() else {
            self.drop_entry(format!(
                "event {} of queue #{qid}, whose record is gone",
                ev.id.as_str()
            ));
            return Ok(());
        };
        self.note_seq(ev.seq.max(ev.version));
        let counted = &mut self.counters.entry(qid).or_default().1;
        match ev.state {
            EventState::Ready => {
                counted.ready += 1;
                let ready = keys::ready(qid, ev.activate_at.as_micros(), ev.seq);
                self.put(ready, ev.id.as_str().as_bytes().to_vec())?;
            }
            EventState::Leased => {
                counted.leased += 1;
                // A lease without a deadline cannot be; it expires at once.
                let deadline = ev.lease_expires_at.map_or(0, |t| t.as_micros());
                let lease = keys::lease(deadline, qid, ev.id.as_str());
                let name = queue.as_str().as_bytes().to_vec();
                self.put(lease, name)?;
            }
            EventState::Delayed => {
                counted.delayed += 1;
                self.delayed
                    .push((qid, ev.id.clone(), ev.version, ev.activate_at));
            }
        }
        self.put(key.to_vec(), value.to_vec())
    }

    /// The entries computed from the whole store: counters, schedules, sequences. Returns
    /// how many queues' counts were corrected and how many schedules were queued.
    fn finish_state(&mut self) -> Result<(u64, u64), StoreError> {
        let mut corrected = 0;
        for (qid, (stored, counted)) in std::mem::take(&mut self.counters) {
            if !self.queues.contains_key(&qid) {
                continue;
            }
            let mut counters = stored.unwrap_or_default();
            let current = [counters.ready, counters.delayed, counters.leased];
            if current != [counted.ready, counted.delayed, counted.leased] {
                corrected += 1;
            }
            counters.ready = counted.ready;
            counters.delayed = counted.delayed;
            counters.leased = counted.leased;
            self.store
                .put(keys::counters(qid), records::encode_counters(&counters))?;
        }
        let delayed = std::mem::take(&mut self.delayed);
        let scheduled = delayed.len() as u64;
        for (qid, id, version, at) in delayed {
            let schedule = HandOff::Schedule {
                queue: self.queues[&qid].clone(),
                id,
                version,
                at,
            };
            self.last_seq += 1;
            self.store.put(
                keys::outbox(self.last_seq),
                records::encode_hand_off(&schedule),
            )?;
        }
        self.store
            .put(keys::meta("seq"), records::encode_u64(self.last_seq))?;
        self.store.put(
            keys::meta("dedup_count"),
            records::encode_u64(self.dedup_entries),
        )?;
        Ok((corrected, scheduled))
    }
}

/// The queue ID of an event or counters key.
fn queue_id(key: &[u8]) -> Result<u64, Malformed> {
    let mut r = Reader::new(key, "key");
    r.u8()?;
    r.u64()
}

#[cfg(test)]
#[path = "repair_tests.rs"]
mod tests;
