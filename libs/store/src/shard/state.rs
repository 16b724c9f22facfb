//! The building blocks every operation shares: resolving a queue, reading and writing events
//! and counters inside a transaction, and delivering an event locally or through the outbox.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use cascade_core::{EventId, EventState, QueueName, Timestamp};

use super::ShardSettings;
use super::families::{Families, MemberChange, family_of};
use super::queue_cache::QueueCache;
use crate::codec::keys;
use crate::codec::records::{
    self, Counters, Delivery, EventRecord, HandOff, QueueKind, QueueRecord,
};
use crate::error::StoreError;
use crate::kv::{Batch, Kv, Txn};

/// The shard's persistent sequence numbers, written with the transaction that moves them.
pub(super) struct Sequences {
    /// Insertion order of events, outbox entries and dedup entries.
    pub seq: u64,
    /// Lease epochs: every take gets a new one, so a token is never reused.
    pub epoch: u64,
    pub queue_id: u64,
    /// Live dedup entries.
    pub dedup_count: u64,
    /// Queues and templates stored, those made from a template or as dead-letter queues
    /// left out (`ShardLimits::max_queues`).
    pub queue_count: u64,
    /// Which of the five moved since the last write: only those are written.
    dirty: [bool; 5],
}

const META_KEYS: [&str; 5] = ["seq", "epoch", "queue_id", "dedup_count", "queue_count"];

impl Sequences {
    pub fn load(kv: &Kv) -> Result<Sequences, StoreError> {
        let mut values = [0u64; 5];
        for (slot, name) in values.iter_mut().zip(META_KEYS) {
            if let Some(v) = kv.get(&keys::meta(name))? {
                *slot = records::decode_u64(&v, "shard sequence")
                    .map_err(|e| StoreError::corrupt(kv.dir(), e.to_string()))?;
            }
        }
        Ok(Sequences {
            seq: values[0],
            epoch: values[1],
            queue_id: values[2],
            dedup_count: values[3],
            queue_count: values[4],
            dirty: [false; 5],
        })
    }

    pub fn next_seq(&mut self) -> u64 {
        self.dirty[0] = true;
        self.seq += 1;
        self.seq
    }

    pub fn next_epoch(&mut self) -> u64 {
        self.skip_epochs(1);
        self.epoch
    }

    pub fn skip_epochs(&mut self, count: u64) {
        self.dirty[1] = true;
        self.epoch = self.epoch.saturating_add(count);
    }

    pub fn next_queue_id(&mut self) -> u64 {
        self.dirty[2] = true;
        self.queue_id += 1;
        self.queue_id
    }

    pub fn add_dedup(&mut self, delta: i64) {
        self.dirty[3] = true;
        self.dedup_count = self.dedup_count.saturating_add_signed(delta);
    }

    pub fn set_queue_count(&mut self, count: u64) {
        if count != self.queue_count {
            self.dirty[4] = true;
            self.queue_count = count;
        }
    }

    fn persist(&mut self, txn: &mut Txn<'_>) {
        let values = [
            self.seq,
            self.epoch,
            self.queue_id,
            self.dedup_count,
            self.queue_count,
        ];
        for ((v, name), dirty) in values.into_iter().zip(META_KEYS).zip(&mut self.dirty) {
            if std::mem::take(dirty) {
                txn.put(keys::meta(name), records::encode_u64(v));
            }
        }
    }
}

/// A queue an operation addresses. `stored` is false for a name that only matches a template:
/// it gets a record (and an ID) with its first event.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub rec: QueueRecord,
    pub stored: bool,
}

pub(super) struct State {
    pub settings: ShardSettings,
    pub rng: fastrand::Rng,
    pub templates: Vec<QueueRecord>,
    pub seqs: Sequences,
    pub ready_cursor: HashMap<u64, Vec<u8>>,
    /// The sums of the queues each template covers.
    pub families: Families,
    /// The queues of every stored pipeline's stages: never a family's members.
    pub stages: BTreeSet<QueueName>,
    /// Changes to those sums made by the transaction being built, applied by `seal`.
    pub family_changes: Vec<MemberChange>,
    pub lease_cursor: u64,
    /// Lease keys whose expiry faulted in this run (an unreadable event): passed over by the
    /// sweeps until the next start, so that a few cannot fill every sweep.
    pub faulted_leases: HashSet<Vec<u8>>,
    /// Every dedup age key below this sequence is gone: pruning starts here. The entries it
    /// pruned since the last checkpoint leave deletions in the in-memory layers, and a scan
    /// from the start would walk all of them on every call.
    pub dedup_floor: u64,
    /// When the oldest dedup entry expires, if known: until then only the count bound can
    /// make `prune_dedup` remove anything, so it need not look.
    pub dedup_head_expiry: Option<Timestamp>,
    /// Log records (`Batch::encode`) of the transactions committed since the writer last
    /// took them.
    pub unlogged: Vec<Vec<u8>>,
    /// Read through `resolve`, which borrows the state shared.
    pub queues: RefCell<QueueCache>,
}

impl State {
    /// Starts a transaction that writes. In-memory state that follows the store changes
    /// with `commit` only: what an operation that failed half-way staged is dropped here.
    pub fn begin<'a>(&mut self, kv: &'a Kv) -> Txn<'a> {
        self.family_changes.clear();
        Txn::new(kv)
    }

    /// Applies the transaction to the store and queues it for the log.
    pub fn commit(&mut self, kv: &mut Kv, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        self.queues.get_mut().forget_written(&batch);
        // Encoded first: the layer then takes the keys and values without a copy.
        self.unlogged.push(batch.encode());
        kv.apply(batch);
    }

    /// Writes the moved sequences and the family sums the transaction changed into it, and
    /// applies those changes to the sums in memory; call last, just before commit (nothing
    /// between the two can fail).
    pub fn seal(&mut self, mut txn: Txn<'_>) -> Batch {
        let mut changed: Vec<String> = Vec::new();
        for change in self.family_changes.drain(..) {
            if !changed.contains(&change.family) {
                changed.push(change.family.clone());
            }
            self.families.apply(change);
        }
        for family in &changed {
            self.families.write(&mut txn, family);
        }
        self.seqs.persist(&mut txn);
        txn.into_batch()
    }

    /// `seal` for a transaction after which the families were summed again from the store
    /// (`rebuilt`), which then replace the sums in memory and stored.
    pub fn seal_rebuilt(&mut self, mut txn: Txn<'_>, rebuilt: Families) -> Batch {
        self.family_changes.clear();
        rebuilt.write_all(&mut txn, &self.families);
        self.families = rebuilt;
        self.seqs.persist(&mut txn);
        txn.into_batch()
    }

    /// Seals a transaction that wrote the queue or template `rec`, which adds `adding` to the
    /// queue count: a new template joins the list and its index, and the families are summed
    /// again (before anything is written: a failed read fails the write).
    pub fn seal_queue_write(
        &mut self,
        kv: &Kv,
        mut txn: Txn<'_>,
        rec: QueueRecord,
        adding: u64,
    ) -> Result<Batch, StoreError> {
        let count = self.seqs.queue_count + adding;
        if rec.kind != QueueKind::Template {
            self.seqs.set_queue_count(count);
            return Ok(self.seal(txn));
        }
        let mut templates = self.templates.clone();
        let added = !templates.iter().any(|t| t.name == rec.name);
        txn.put(keys::template(rec.name.as_str()), Vec::new());
        let name = rec.name.clone();
        templates.retain(|t| t.name != rec.name);
        templates.push(rec);
        super::sort_templates(&mut templates);
        let families = added
            .then(|| {
                self.families
                    .after_template_change(kv, &templates, &self.stages, &name)
            })
            .transpose()?;
        self.seqs.set_queue_count(count);
        self.templates = templates;
        Ok(match families {
            Some(families) => self.seal_rebuilt(txn, families),
            None => self.seal(txn),
        })
    }

    pub fn corrupt(kv: &Kv, e: crate::codec::Malformed) -> StoreError {
        StoreError::corrupt(kv.dir(), e.to_string())
    }

    /// `name`'s family for metrics (`observe::ShardObserver`), by
    /// [`cascade_core::queue_family`] over this shard's templates.
    pub fn family<'a>(&'a self, name: &'a QueueName) -> Cow<'a, str> {
        family_of(name, &self.templates, &self.stages)
    }

    pub fn template_for(&self, name: &QueueName) -> Option<&QueueRecord> {
        self.templates
            .iter()
            .find(|t| t.name.template_matches(name))
    }

    /// The queue `name` names, if it exists or a template matches it.
    pub fn resolve(&self, txn: &Txn<'_>, name: &QueueName) -> Result<Option<Resolved>, StoreError> {
        if let Some(rec) = self.stored_queue(txn, name)? {
            return Ok(Some(Resolved { rec, stored: true }));
        }
        Ok(self.template_for(name).map(|t| Resolved {
            rec: QueueRecord {
                id: 0,
                name: name.clone(),
                config: t.config.clone(),
                kind: QueueKind::FromTemplate,
                created_at: Timestamp::ZERO,
            },
            stored: false,
        }))
    }

    /// The stored record of `name` (not a template's config for it) as `txn` sees it: its
    /// own write, else the cached record, else the store's (cached then).
    pub(super) fn stored_queue(
        &self,
        txn: &Txn<'_>,
        name: &QueueName,
    ) -> Result<Option<QueueRecord>, StoreError> {
        let key = keys::queue(name.as_str());
        let decode = |v: &[u8]| records::decode_queue(v).map_err(|e| Self::corrupt(txn.kv(), e));
        if let Some(own) = txn.own(&key) {
            return own.map(decode).transpose();
        }
        if let Some(rec) = self.queues.borrow().get(name) {
            return Ok(Some(rec.clone()));
        }
        let Some(v) = txn.kv().get(&key)? else {
            return Ok(None);
        };
        let rec = decode(&v)?;
        self.queues.borrow_mut().insert(name, rec.clone());
        Ok(Some(rec))
    }

    /// Like `resolve`, for operations on events: a template itself holds none.
    pub fn resolve_queue(&self, txn: &Txn<'_>, name: &QueueName) -> Result<Resolved, StoreError> {
        if name.is_template() {
            return Err(cascade_core::Error::InvalidArgument {
                field: "queue".into(),
                reason: format!("'{name}' is a template; name a queue that matches it"),
            }
            .into());
        }
        self.resolve(txn, name)?.ok_or_else(|| not_found(name))
    }

    /// Gives a template-matched queue its record and ID.
    pub fn materialize(
        &mut self,
        txn: &mut Txn<'_>,
        mut resolved: Resolved,
        now: Timestamp,
    ) -> QueueRecord {
        if resolved.stored {
            return resolved.rec;
        }
        resolved.rec.id = self.seqs.next_queue_id();
        resolved.rec.created_at = now;
        txn.put_fresh(
            keys::queue(resolved.rec.name.as_str()),
            records::encode_queue(&resolved.rec),
        );
        resolved.rec
    }

    pub fn counters(txn: &Txn<'_>, qid: u64) -> Result<Counters, StoreError> {
        Ok(Self::stored_counters(txn, qid)?.unwrap_or_default())
    }

    /// Events a queue holds: ready, delayed and leased.
    pub fn held(txn: &Txn<'_>, qid: u64) -> Result<u64, StoreError> {
        let c = Self::counters(txn, qid)?;
        Ok(c.ready + c.delayed + c.leased)
    }

    pub fn stored_counters(txn: &Txn<'_>, qid: u64) -> Result<Option<Counters>, StoreError> {
        match txn.get(&keys::counters(qid))? {
            None => Ok(None),
            Some(v) => records::decode_counters(&v)
                .map(Some)
                .map_err(|e| Self::corrupt(txn.kv(), e)),
        }
    }

    /// Applies `change` to a queue's counters; an ephemeral queue left empty is removed.
    pub fn update_counters(
        &mut self,
        txn: &mut Txn<'_>,
        rec: &QueueRecord,
        change: impl FnOnce(&mut Counters),
    ) -> Result<(), StoreError> {
        let old = Self::stored_counters(txn, rec.id)?;
        let mut c = old.unwrap_or_default();
        change(&mut c);
        let ephemeral = matches!(rec.kind, QueueKind::FromTemplate | QueueKind::DeadLetter);
        let stored = !(ephemeral && c.ready + c.delayed + c.leased == 0);
        if stored {
            txn.put(keys::counters(rec.id), records::encode_counters(&c));
        } else {
            txn.delete(keys::queue(rec.name.as_str()));
            txn.delete(keys::counters(rec.id));
            self.ready_cursor.remove(&rec.id);
        }
        self.count_in_family(&rec.name, old.as_ref(), &c, stored);
        Ok(())
    }

    /// Keeps the sums of the template family `name` belongs to, if any, in step with a
    /// change of its counters from `old` to `new` (`Families::apply`).
    pub fn count_in_family(
        &mut self,
        name: &QueueName,
        old: Option<&Counters>,
        new: &Counters,
        stored: bool,
    ) {
        // No template, no family: a shard without per-user queues pays nothing here.
        if self.templates.is_empty() {
            return;
        }
        let family = family_of(name, &self.templates, &self.stages);
        if family != name.as_str() {
            self.family_changes.push(MemberChange {
                family: family.into_owned(),
                old: old.copied(),
                new: *new,
                stored,
            });
        }
    }

    pub fn read_event(
        txn: &Txn<'_>,
        qid: u64,
        id: &str,
    ) -> Result<Option<EventRecord>, StoreError> {
        let key = keys::event(qid, id);
        match txn.get(&key)? {
            None => Ok(None),
            Some(v) => records::decode_event(&key, &v)
                .map(Some)
                .map_err(|e| Self::corrupt(txn.kv(), e)),
        }
    }

    /// Writes an event with a new version; a delayed event gets a schedule for that version
    /// (a schedule of an older version is ignored when it fires).
    pub fn write_event(
        &mut self,
        txn: &mut Txn<'_>,
        queue: &QueueRecord,
        ev: &mut EventRecord,
        fresh: bool,
    ) {
        // Shard-wide and increasing: a schedule made for an earlier event with the same ID
        // (deleted, then enqueued again) can never match a later one.
        ev.version = self.seqs.next_seq();
        let key = keys::event(queue.id, ev.id.as_str());
        let value = records::encode_event(ev);
        if fresh {
            txn.put_fresh(key, value);
        } else {
            txn.put(key, value);
        }
        if ev.state == EventState::Delayed {
            self.outbox(
                txn,
                &HandOff::Schedule {
                    queue: queue.name.clone(),
                    id: ev.id.clone(),
                    version: ev.version,
                    at: ev.activate_at,
                },
            );
        }
    }

    pub fn add_ready(&mut self, txn: &mut Txn<'_>, qid: u64, ev: &EventRecord) {
        let key = keys::ready(qid, ev.activate_at.as_micros(), ev.seq);
        if let Some(cursor) = self.ready_cursor.get_mut(&qid)
            && key < *cursor
        {
            cursor.clone_from(&key);
        }
        txn.put_fresh(key, ev.id.as_str().as_bytes().to_vec());
    }

    /// Indexes event `id`'s lease by its deadline; a deadline behind the lease cursor (the
    /// wall clock stepped back) moves the cursor back, so that the lease still expires.
    pub fn add_lease(
        &mut self,
        txn: &mut Txn<'_>,
        deadline: Timestamp,
        rec: &QueueRecord,
        id: &str,
    ) {
        self.lease_cursor = self.lease_cursor.min(deadline.as_micros());
        txn.put_fresh(
            keys::lease(deadline.as_micros(), rec.id, id),
            rec.name.as_str().as_bytes().to_vec(),
        );
    }

    pub fn remove_ready(txn: &mut Txn<'_>, qid: u64, ev: &EventRecord) {
        txn.delete(keys::ready(qid, ev.activate_at.as_micros(), ev.seq));
    }

    pub fn outbox(&mut self, txn: &mut Txn<'_>, h: &HandOff) {
        let seq = self.seqs.next_seq();
        txn.put_fresh(keys::outbox(seq), records::encode_hand_off(h));
    }

    /// Stores a new event in `queue`, ready or delayed by its activation time.
    #[allow(clippy::too_many_arguments)]
    pub fn insert_event(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        queue: &QueueRecord,
        id: EventId,
        payload: Bytes,
        headers: BTreeMap<String, String>,
        activate_at: Timestamp,
        created_at: Timestamp,
    ) -> Result<EventRecord, StoreError> {
        let state = if activate_at <= now {
            EventState::Ready
        } else {
            EventState::Delayed
        };
        let mut ev = EventRecord {
            id,
            state,
            activate_at,
            attempts: 0,
            created_at,
            version: 0,
            seq: self.seqs.next_seq(),
            lease_epoch: 0,
            lease_expires_at: None,
            headers,
            payload,
        };
        self.write_event(txn, queue, &mut ev, true);
        if state == EventState::Ready {
            self.add_ready(txn, queue.id, &ev);
        }
        self.update_counters(txn, queue, |c| {
            c.enqueued_total += 1;
            match state {
                EventState::Ready => c.ready += 1,
                _ => c.delayed += 1,
            }
        })?;
        Ok(ev)
    }

    /// Enqueues a delivered event here, or sends it on through the outbox. The target queue
    /// may already hold another event with the same ID: a dead letter then gets a new ID
    /// (`<id>.<seq>`, the original in `cascade-original-id`); anything else is refused.
    pub fn deliver(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        d: Delivery,
        kind: QueueKind,
    ) -> Result<(), StoreError> {
        self.try_deliver(txn, now, d, kind)?
            .map_err(|refused| refused.error)
    }

    /// Like `deliver`, but a refusal (no such queue, an ID taken, a name too long for its
    /// queue's dead-letter queue) gives the delivery back with nothing written, so that the
    /// caller can send it elsewhere; the outer error is the store's own failure.
    pub fn try_deliver(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        mut d: Delivery,
        kind: QueueKind,
    ) -> Result<Result<(), Refused>, StoreError> {
        if !(self.settings.router)(&d.queue) {
            self.outbox(txn, &HandOff::Deliver(d));
            return Ok(Ok(()));
        }
        let refuse = |error: StoreError, delivery| Ok(Err(Refused { error, delivery }));
        let resolved = match self.resolve(txn, &d.queue)? {
            // A dead-letter queue not created yet is made as one even where a template's
            // pattern covers its name: the template's attempts and its own dead-letter queue
            // would dead-letter dead letters again.
            Some(r) if r.stored || kind != QueueKind::DeadLetter => r,
            None if kind != QueueKind::DeadLetter => return refuse(not_found(&d.queue), d),
            _ => Resolved {
                rec: QueueRecord {
                    id: 0,
                    name: d.queue.clone(),
                    config: super::Shard::dead_letter_config(),
                    kind: QueueKind::DeadLetter,
                    created_at: now,
                },
                stored: false,
            },
        };
        if !resolved.stored
            && kind != QueueKind::DeadLetter
            && let Err(e) = resolved.rec.config.check_dead_letter_room(&d.queue)
        {
            return refuse(e.into(), d);
        }
        // A queue not stored yet holds no event.
        if resolved.stored && Self::read_event(txn, resolved.rec.id, d.id.as_str())?.is_some() {
            if kind != QueueKind::DeadLetter {
                let error = StoreError::IdTaken {
                    queue: d.queue.to_string(),
                    id: d.id.to_string(),
                };
                return refuse(error, d);
            }
            let renamed = self.unique_id(&d.id);
            d.headers.insert(ORIGINAL_ID.into(), d.id.to_string());
            d.id = renamed;
        }
        let queue = self.materialize(txn, resolved, now);
        self.insert_event(
            txn,
            now,
            &queue,
            d.id,
            d.payload,
            d.headers,
            d.activate_at,
            d.created_at,
        )?;
        // A dead letter is counted once, as it leaves its queue (`dead_letter`).
        if kind != QueueKind::DeadLetter {
            self.observe_enqueued(&queue.name, false);
        }
        Ok(Ok(()))
    }

    /// Reports an enqueue of `queue` (by `Enqueue` or an advance) to the observer.
    pub fn observe_enqueued(&self, queue: &QueueName, duplicate: bool) {
        self.settings
            .observer
            .enqueued(&self.family(queue), duplicate);
    }
}

/// Header of a dead letter renamed because its dead-letter queue held its ID already.
pub const ORIGINAL_ID: &str = "cascade-original-id";

/// A delivery its queue would not take, and why.
pub struct Refused {
    pub error: StoreError,
    pub delivery: Delivery,
}

impl State {
    /// `<id>.<seq>`, cut to the 128-byte ID limit: unique, since `seq` is never reused.
    fn unique_id(&mut self, id: &EventId) -> EventId {
        let suffix = format!(".{}", self.seqs.next_seq());
        let keep = id.as_str().len().min(128 - suffix.len());
        EventId::parse(&format!("{}{suffix}", &id.as_str()[..keep]))
            .expect("a prefix of a valid ID plus '.' and digits is valid")
    }
}

pub fn not_found(name: &QueueName) -> StoreError {
    let s = name.as_str();
    let or_template = match name.is_template() {
        true => String::new(),
        false => {
            let prefix = s.rfind([':', '.']).map_or(s, |i| &s[..=i]);
            format!(", or create a template such as '{prefix}*' that matches it")
        }
    };
    StoreError::QueueNotFound {
        queue: s.to_string(),
        or_template,
    }
}
