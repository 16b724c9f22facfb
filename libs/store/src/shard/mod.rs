//! The dispatcher shard's state machine. Every public operation reads the current
//! state, builds one `Txn`, and commits it: the batch is applied to the in-memory layers at
//! once and queued in `unlogged` for the write-ahead log. The state machine does no I/O of its
//! own beyond reading the store, and takes `now` from its caller, so tests drive it with a
//! simulated clock. Failure policy: an operation validates everything before it writes, so an
//! error changes nothing.

mod admin;
mod enqueue;
mod events;
mod families;
mod lease;
mod limits;
mod pipelines;
mod queue_cache;
mod refused;
mod state;
pub mod types;

use std::collections::HashMap;
use std::sync::Arc;

use cascade_core::{QueueConfig, QueueName};

use crate::codec::keys;
use crate::codec::records::{self, QueueKind, QueueRecord};
use crate::error::StoreError;
use crate::kv::{Flow, Kv};
use crate::observe::{NoObserver, ShardObserver};
pub use admin::PURGE_STEP;
pub use events::REDRIVE_STEP;
pub use limits::ShardLimits;
pub use refused::UNDELIVERABLE;
pub use state::Resolved;
use state::State;
pub use types::*;

/// Decides whether a queue belongs to this shard; hand-offs go to the others.
pub type Router = Arc<dyn Fn(&QueueName) -> bool + Send + Sync>;

#[derive(Clone)]
pub struct ShardSettings {
    /// Live dedup entries (client IDs and idempotency keys) at most; the oldest age out first.
    pub dedup_max_entries: u64,
    /// Seed of the backoff jitter; fixed in tests for reproducible runs.
    pub jitter_seed: u64,
    pub router: Router,
    /// Told of enqueues, dead letters, lease expiries and activations (metrics).
    pub observer: Arc<dyn ShardObserver>,
    pub limits: ShardLimits,
}

impl Default for ShardSettings {
    fn default() -> Self {
        ShardSettings {
            dedup_max_entries: 1_000_000,
            jitter_seed: 0x5eed,
            router: Arc::new(|_| true),
            observer: Arc::new(NoObserver),
            limits: ShardLimits::default(),
        }
    }
}

/// Lease epochs skipped at every start: far more than the takes a run can apply between two
/// fsyncs, which are all that a crash can lose.
const EPOCHS_PER_RUN: u64 = 1 << 32;

pub struct Shard {
    kv: Kv,
    st: State,
}

impl Shard {
    /// Builds the state machine over a store whose log has already been replayed into `kv`.
    pub fn new(kv: Kv, settings: ShardSettings) -> Result<Shard, StoreError> {
        let seqs = state::Sequences::load(&kv)?;
        let st = State {
            rng: fastrand::Rng::with_seed(settings.jitter_seed),
            settings,
            templates: Vec::new(),
            seqs,
            ready_cursor: HashMap::new(),
            families: families::Families::default(),
            family_changes: Vec::new(),
            stages: Default::default(),
            lease_cursor: 0,
            faulted_leases: Default::default(),
            dedup_floor: 0,
            dedup_head_expiry: None,
            unlogged: Vec::new(),
            queues: Default::default(),
        };
        let mut shard = Shard { kv, st };
        shard.st.stages = families::stage_queues(&shard.list_pipelines()?);
        if shard.kv.get(&keys::meta(SUMMARIZED))?.is_some() {
            shard.st.templates = load_templates(&shard.kv)?;
            shard.st.families = families::Families::stored(&shard.kv)?;
        } else {
            shard.summarize()?;
        }
        Ok(shard)
    }

    /// Builds what a store written before format 2 lacks, from a scan of every queue record
    /// (one per per-user queue): the template index, the family sums and the queue count,
    /// written through the log like any change and kept in step from then on.
    fn summarize(&mut self) -> Result<(), StoreError> {
        let (templates, count) = scan_queues(&self.kv)?;
        let families = families::Families::load(&self.kv, &templates, &self.st.stages)?;
        let mut txn = self.st.begin(&self.kv);
        for template in &templates {
            txn.put(keys::template(template.name.as_str()), Vec::new());
        }
        txn.put(keys::meta(SUMMARIZED), records::encode_u64(1));
        self.st.templates = templates;
        self.st.seqs.set_queue_count(count);
        let batch = self.st.seal_rebuilt(txn, families);
        self.st.commit(&mut self.kv, batch);
        Ok(())
    }

    /// The batches committed since the last call, in order: the caller logs them.
    pub fn take_unlogged(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.st.unlogged)
    }

    /// Config of a dead-letter queue created on first use: it keeps what it is given.
    pub(crate) fn dead_letter_config() -> QueueConfig {
        QueueConfig {
            max_attempts: 0,
            ..QueueConfig::default()
        }
    }
}

/// Present once the store keeps its template index, family sums and queue count (`summarize`).
pub(crate) const SUMMARIZED: &str = "summarized";

/// Templates, longest name first (the most specific match wins), by their index.
fn load_templates(kv: &Kv) -> Result<Vec<QueueRecord>, StoreError> {
    let (start, end) = keys::template_space();
    let mut templates = Vec::new();
    kv.scan(&start, &end, |k, _| {
        let name = keys::template_name_of(k).unwrap_or_default();
        let missing = || StoreError::corrupt(kv.dir(), "template index: no such template".into());
        let name = std::str::from_utf8(name).map_err(|_| missing())?;
        let record = kv.get(&keys::queue(name))?.ok_or_else(missing)?;
        templates.push(records::decode_queue(&record).map_err(|e| State::corrupt(kv, e))?);
        Ok(Flow::Continue)
    })?;
    sort_templates(&mut templates);
    Ok(templates)
}

/// Templates, longest name first, and the count of queues and templates that
/// `ShardLimits::max_queues` bounds, from every queue record.
fn scan_queues(kv: &Kv) -> Result<(Vec<QueueRecord>, u64), StoreError> {
    let (start, end) = keys::queue_space();
    let mut templates = Vec::new();
    let mut counted = 0;
    kv.scan(&start, &end, |_, v| {
        let rec = records::decode_queue(v).map_err(|e| State::corrupt(kv, e))?;
        counted += u64::from(!State::adds_queue(Some(&rec)));
        if rec.kind == QueueKind::Template {
            templates.push(rec);
        }
        Ok(Flow::Continue)
    })?;
    sort_templates(&mut templates);
    Ok((templates, counted))
}

fn sort_templates(templates: &mut [QueueRecord]) {
    templates.sort_by_key(|t| std::cmp::Reverse(t.name.as_str().len()));
}

fn dead_letter_queue(rec: &QueueRecord) -> Result<QueueName, StoreError> {
    match &rec.config.dead_letter_queue {
        Some(q) => Ok(q.clone()),
        None => Ok(rec.name.dead_letter_default()?),
    }
}

/// Lease expiries handled per maintenance tick at most, so one tick never stalls the writer.
const EXPIRE_PER_TICK: usize = 1024;
/// Expired dedup entries aged out per tick at most.
const PRUNE_PER_TICK: usize = 1024;

impl crate::durable::Maintenance for Shard {
    fn kv(&self) -> &Kv {
        &self.kv
    }

    fn kv_mut(&mut self) -> &mut Kv {
        &mut self.kv
    }

    fn take_unlogged(&mut self) -> Vec<Vec<u8>> {
        Shard::take_unlogged(self)
    }

    /// Both chores, whatever the other did; the first failure is returned.
    fn tick(&mut self, now: cascade_core::Timestamp) -> Result<(), StoreError> {
        let expired = self.expire_leases(now, EXPIRE_PER_TICK);
        let pruned = self.prune_dedup(now, PRUNE_PER_TICK);
        expired.and(pruned).map(drop)
    }

    /// Moves the lease epoch past every one the previous run may have handed out without
    /// making it durable (a take is answered before its fsync), so that no lease token is
    /// ever handed out twice.
    fn begin_run(&mut self) {
        self.st.seqs.skip_epochs(EPOCHS_PER_RUN);
        let txn = self.st.begin(&self.kv);
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
    }
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod observe_tests;

#[cfg(test)]
mod stuck_tests;
