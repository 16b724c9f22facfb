//! `repair`: rebuilds a damaged store from what can still be read (the library side of
//! `cascade data repair`). Opening refuses a damaged store so that nothing is lost silently;
//! repair is the operator's explicit choice to keep what is readable and drop the rest.
//!
//! What it does, in two passes over the state as the next open would see it (the first
//! surveys, the second writes):
//! - the log is replayed up to its first record that cannot be read; the records after it
//!   are lost, and the report says where reading stopped;
//! - an entry whose value fails its checks (an event whose payload checksum fails, …) is
//!   dropped and listed, and so is an event of a queue whose record is gone or whose record
//!   names another ID than its key (only a V1 record names one: a V2 record's ID is its key's);
//! - the indexes that find events (ready order, lease deadlines; a timer's two views of its
//!   schedule) are rebuilt from what they index, and every queue's current counts are
//!   counted again (its running totals are kept); a leased event without a deadline is made
//!   ready again;
//! - the store's sequences (hand-off and version numbers, lease epochs) jump far past any
//!   number found: lost records may have used higher ones that other shards, the timer or
//!   clients remember, and a number must never be given out twice. Queue IDs continue after
//!   the highest one found;
//! - every delayed event gets a new schedule hand-off to its timer, since the one that was
//!   sent may be among what was lost (the timer keeps one copy of a schedule).
//!
//! The result is written beside the store, verified, and swapped in; the damaged store is
//! kept beside it as `<dir>.damaged-<unix seconds>` until the operator removes it. `force`
//! repairs a healthy store too: after its timer's store lost records, a dispatcher store's
//! repair schedules its delayed events again.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use cascade_core::{Clock, EventId, EventState, QueueName, SystemClock};

use crate::codec::bytes::Reader;
use crate::codec::records::{self, Counters, EventRecord, HandOff};
use crate::codec::{self, Malformed, keys};
use crate::error::StoreError;
use crate::kv::{Batch, Flow, Kv, Replayed, checkpoint};
use crate::wal::{self, Salvaged};

use super::new_store::{Contents, NewStore, TOOL_CACHE_BYTES};
use super::verify::{self, MAX_PROBLEMS};

/// Entries to write, `(key, value)`.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// How far the sequences jump: more numbers than any log tail can have used (a tail is at
/// most a checkpoint's worth of records), fewer than could ever run out.
const SEQUENCE_GAP: u64 = 1 << 40;

#[derive(Debug, serde::Serialize)]
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
    /// Where the old store was moved.
    pub damaged: PathBuf,
}

/// Repairs the stopped store in `dir`; `None` when it verifies healthy and `force` is not
/// set (nothing changed).
pub fn repair(dir: &Path, force: bool) -> Result<Option<RepairReport>, StoreError> {
    if !force && verify::verify(dir)?.is_healthy() {
        return Ok(None);
    }
    let state_dir = super::tool_state_dir(dir)?;
    let mut kv = Kv::open(&state_dir, TOOL_CACHE_BYTES)?;
    super::refuse_later_format(kv.db(), &state_dir)?;
    let checkpoint_lsn = checkpoint::lsn(kv.db(), &state_dir)?;
    let wal_dir = dir.join("wal");
    let mut replayed = Replayed::default();
    let log = match wal_dir.is_dir() {
        true => wal::salvage(&wal_dir, checkpoint_lsn, |_, bytes| {
            let batch = Batch::decode(&bytes).map_err(|e| e.to_string())?;
            replayed.apply(batch);
            Ok(())
        })?,
        false => Salvaged {
            records: 0,
            stopped: Some(format!("{}: missing", wal_dir.display())),
        },
    };
    kv.adopt(replayed);
    let mut survey = Survey::default();
    scan_all(&kv, |key, value| survey.entry(key, value))?;
    let mut rebuild = Rebuild::new(NewStore::create(dir)?, survey);
    scan_all(&kv, |key, value| rebuild.entry(key, value))?;
    drop(kv);
    rebuild.finish_state()?;
    let damaged = free_name(dir, SystemClock.now().as_millis() / 1000);
    let Rebuild {
        store,
        dropped,
        dropped_count,
        counts_corrected,
        schedules_queued,
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

/// Where the damaged store in `dir` goes: `<dir>.damaged-<unix seconds>`, with `-2`, `-3`…
/// after it when a repair of the same second took that name.
fn free_name(dir: &Path, seconds: u64) -> PathBuf {
    let name = dir
        .file_name()
        .map_or("store".into(), |n| n.to_string_lossy());
    let base = format!("{name}.damaged-{seconds}");
    (1..)
        .map(|n| match n {
            1 => dir.with_file_name(&base),
            _ => dir.with_file_name(format!("{base}-{n}")),
        })
        .find(|path| !path.exists())
        .expect("a free name")
}

/// Visits every live entry of `kv` in key order; `visit` fails only to stop the repair.
fn scan_all(
    kv: &Kv,
    mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    kv.scan(&[0x00], &[0xff], |key, value| {
        visit(key, value)?;
        Ok(Flow::Continue)
    })
}

/// What the first pass learns: the queues, and the highest numbers in use.
#[derive(Default)]
struct Survey {
    /// Queue records that pass their checks, by ID.
    queues: HashMap<u64, QueueName>,
    seq: u64,
    epoch: u64,
    queue_id: u64,
    /// Whether this is a dispatcher's store (it has the shard's sequences).
    sequences: bool,
    /// The sequence of every dedup age key, to give an entry that lost its own a new one.
    dedup_ages: HashSet<u64>,
}

impl Survey {
    fn entry(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        if codec::check_entry(key, value).is_err() {
            return Ok(());
        }
        let number = |name: &str| key == keys::meta(name).as_slice();
        let decoded = records::decode_u64(value, "sequence").ok();
        match key[0] {
            keys::QUEUE => {
                if let Ok(rec) = records::decode_queue(value)
                    && key == keys::queue(rec.name.as_str()).as_slice()
                {
                    self.queue_id = self.queue_id.max(rec.id);
                    self.queues.insert(rec.id, rec.name);
                }
            }
            keys::EVENT => {
                if let Ok(ev) = records::decode_event(key, value) {
                    self.seq = self.seq.max(ev.seq).max(ev.version);
                    self.epoch = self.epoch.max(ev.lease_epoch);
                }
            }
            keys::DEDUP => {
                if let Ok(dedup) = records::decode_dedup(value) {
                    self.seq = self.seq.max(dedup.seq);
                }
            }
            keys::OUTBOX | keys::DEDUP_AGE => {
                let seq = keys::seq_of(key, "sequence key").unwrap_or(0);
                self.seq = self.seq.max(seq);
                if key[0] == keys::DEDUP_AGE {
                    self.dedup_ages.insert(seq);
                }
            }
            keys::META if number("seq") || number("epoch") || number("queue_id") => {
                self.sequences = true;
                let found = decoded.unwrap_or(0);
                let slot = match () {
                    _ if number("seq") => &mut self.seq,
                    _ if number("epoch") => &mut self.epoch,
                    _ => &mut self.queue_id,
                };
                *slot = (*slot).max(found);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The repaired store being written, and what its last entries are computed from.
struct Rebuild {
    store: NewStore,
    survey: Survey,
    /// The next sequence number to give out: past every one that may have been used.
    next_seq: u64,
    /// Each queue's counters as stored (`None`: missing or dropped) and as counted.
    counters: HashMap<u64, (Option<Counters>, Counters)>,
    dedup_ages: u64,
    dropped: Vec<String>,
    dropped_count: u64,
    counts_corrected: u64,
    schedules_queued: u64,
}

impl Rebuild {
    fn new(store: NewStore, survey: Survey) -> Rebuild {
        Rebuild {
            store,
            next_seq: survey.seq + SEQUENCE_GAP,
            survey,
            counters: HashMap::new(),
            dedup_ages: 0,
            dropped: Vec::new(),
            dropped_count: 0,
            counts_corrected: 0,
            schedules_queued: 0,
        }
    }

    fn drop_entry(&mut self, what: String) {
        self.dropped_count += 1;
        if self.dropped.len() < MAX_PROBLEMS {
            self.dropped.push(what);
        }
    }

    /// One entry of the old store: kept, rebuilt, or dropped.
    fn entry(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let kept = codec::check_entry(key, value).and_then(|()| self.keep(key, value));
        match kept {
            Ok(write) => {
                for (key, value) in write {
                    self.store.put(key, value)?;
                }
            }
            Err(e) => self.drop_entry(verify::describe(key, &e)),
        }
        Ok(())
    }

    /// The entries to write for a checked entry, or why it cannot be kept.
    fn keep(&mut self, key: &[u8], value: &[u8]) -> Result<Entries, Malformed> {
        let same = || vec![(key.to_vec(), value.to_vec())];
        Ok(match key[0] {
            // Rebuilt from the events.
            keys::READY | keys::LEASE => Vec::new(),
            // Written once the whole store is counted.
            keys::COUNTERS => {
                let stored = records::decode_counters(value)?;
                self.counters.entry(queue_id(key)?).or_default().0 = Some(stored);
                Vec::new()
            }
            keys::META if is_sequence(key) => Vec::new(),
            // Summed from the queues again when the shard opens the repaired store.
            keys::TEMPLATE | keys::FAMILY => Vec::new(),
            keys::META if is_summary(key) => Vec::new(),
            keys::QUEUE => {
                let rec = records::decode_queue(value)?;
                if self.survey.queues.get(&rec.id) != Some(&rec.name) {
                    return Err(Malformed(format!(
                        "queue record {} under another name's key",
                        rec.name
                    )));
                }
                same()
            }
            keys::EVENT => self.event(key, value)?,
            keys::DEDUP_AGE => {
                self.dedup_ages += 1;
                same()
            }
            keys::DEDUP => {
                let seq = records::decode_dedup(value)?.seq;
                let mut write = same();
                if !self.survey.dedup_ages.contains(&seq) {
                    // Without its age key the entry would never be let go.
                    self.dedup_ages += 1;
                    write.push((keys::dedup_age(seq), key.to_vec()));
                }
                write
            }
            keys::SCHEDULE => {
                let (at, queue, id, version) = keys::decode_schedule(key)?;
                schedule_entry(at, &queue, &id, version)?
            }
            // An earlier build's index of an entry: the entry it names, in case the entry's
            // own key is what was lost.
            keys::LEGACY_SCHEDULE_INDEX => {
                let (queue, id, version) = keys::decode_legacy_schedule_index(key)?;
                let at = records::decode_u64(value, "schedule index")?;
                schedule_entry(at, &queue, &id, version)?
            }
            _ => same(),
        })
    }

    fn event(&mut self, key: &[u8], value: &[u8]) -> Result<Entries, Malformed> {
        let qid = queue_id(key)?;
        let mut ev = records::decode_event(key, value)?;
        let Some(queue) = self.survey.queues.get(&qid).cloned() else {
            return Err(Malformed(format!(
                "event {} of queue #{qid}, whose record is gone",
                ev.id.as_str()
            )));
        };
        // A V1 record holds its own ID, which may disagree with its key.
        if keys::event(qid, ev.id.as_str()) != key {
            return Err(Malformed(format!(
                "event record {} under another ID's key",
                ev.id.as_str()
            )));
        }
        if ev.state == EventState::Leased && ev.lease_expires_at.is_none() {
            // Cannot be: nothing would ever end the lease. Deliver it again.
            ev.state = EventState::Ready;
        }
        let mut write = vec![(key.to_vec(), records::encode_event(&ev))];
        let counted = &mut self.counters.entry(qid).or_default().1;
        match ev.state {
            EventState::Ready => {
                counted.ready += 1;
                let ready = keys::ready(qid, ev.activate_at.as_micros(), ev.seq);
                write.push((ready, ev.id.as_str().as_bytes().to_vec()));
            }
            EventState::Leased => {
                counted.leased += 1;
                let deadline = ev.lease_expires_at.map_or(0, |t| t.as_micros());
                let lease = keys::lease(deadline, qid, ev.id.as_str());
                write.push((lease, queue.as_str().as_bytes().to_vec()));
            }
            EventState::Delayed => {
                counted.delayed += 1;
                write.push(self.schedule_again(queue, &ev));
            }
        }
        Ok(write)
    }

    /// A new schedule hand-off for a delayed event, in the outbox.
    fn schedule_again(&mut self, queue: QueueName, ev: &EventRecord) -> (Vec<u8>, Vec<u8>) {
        let schedule = HandOff::Schedule {
            queue,
            id: ev.id.clone(),
            version: ev.version,
            at: ev.activate_at,
        };
        self.next_seq += 1;
        self.schedules_queued += 1;
        (
            keys::outbox(self.next_seq),
            records::encode_hand_off(&schedule),
        )
    }

    /// The entries computed from the whole store: counters and the sequences.
    fn finish_state(&mut self) -> Result<(), StoreError> {
        for (qid, (stored, counted)) in std::mem::take(&mut self.counters) {
            if !self.survey.queues.contains_key(&qid) {
                continue;
            }
            let mut counters = stored.unwrap_or_default();
            let current = [counters.ready, counters.delayed, counters.leased];
            if current != [counted.ready, counted.delayed, counted.leased] {
                self.counts_corrected += 1;
            }
            counters.ready = counted.ready;
            counters.delayed = counted.delayed;
            counters.leased = counted.leased;
            self.store
                .put(keys::counters(qid), records::encode_counters(&counters))?;
        }
        if self.survey.sequences || !self.survey.queues.is_empty() {
            let sequences = [
                ("seq", self.next_seq),
                ("epoch", self.survey.epoch + SEQUENCE_GAP),
                ("queue_id", self.survey.queue_id),
                // The shard counts dedup entries by their age keys.
                ("dedup_count", self.dedup_ages),
            ];
            for (name, value) in sequences {
                self.store
                    .put(keys::meta(name), records::encode_u64(value))?;
            }
        }
        Ok(())
    }
}

/// What marks and counts the shard's summary (templates, families, queues), which the shard
/// builds again when it opens a store without it.
fn is_summary(key: &[u8]) -> bool {
    [crate::shard::SUMMARIZED, "queue_count"]
        .iter()
        .any(|name| key == keys::meta(name).as_slice())
}

/// The shard's sequences, which repair writes itself.
fn is_sequence(key: &[u8]) -> bool {
    ["seq", "epoch", "queue_id", "dedup_count"]
        .iter()
        .any(|name| key == keys::meta(name).as_slice())
}

/// A timer's schedule entry, checked.
fn schedule_entry(at: u64, queue: &str, id: &str, version: u64) -> Result<Entries, Malformed> {
    QueueName::parse(queue).map_err(|e| Malformed(format!("schedule of queue {queue}: {e}")))?;
    EventId::parse(id).map_err(|e| Malformed(format!("schedule of event {id}: {e}")))?;
    Ok(vec![(keys::schedule(at, queue, id, version), Vec::new())])
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
