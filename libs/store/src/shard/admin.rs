//! Queues and templates: create, get, list, delete, purge, stats.

use cascade_core::{QueueConfig, QueueName, Timestamp};

use super::events::{events_after, remove_event};
use super::families::{covered_prefixes, stats_of};
use super::state::{State, not_found};
use super::{FamilyStats, Page, Queue, QueueStats, Shard, Step};
use crate::codec::keys;
use crate::codec::records::{self, QueueKind, QueueRecord};
use crate::error::StoreError;
use crate::kv::{Flow, Txn};

/// Events one step of a purge removes: a step of events checkpointed into sled holds the
/// writer for 20–30 ms on average, about 40 at most, on the benchmark machine (the engine
/// benchmark's `purge-steps`), so the shard's other queues wait for one step at a time, not
/// for a whole purge of millions.
pub const PURGE_STEP: usize = 10_000;

impl Shard {
    /// Creates a queue, or a template when the name ends in `*`. Creating it again with the
    /// same config is a no-op; with another config, `QueueExists`.
    pub fn create_queue(
        &mut self,
        now: Timestamp,
        name: QueueName,
        config: QueueConfig,
    ) -> Result<Queue, StoreError> {
        config.validate()?;
        config.check_dead_letter_room(&name)?;
        let mut txn = self.st.begin(&self.kv);
        let existing = self.st.stored_queue(&txn, &name)?;
        if let Some(rec) = &existing
            && matches!(rec.kind, QueueKind::Explicit | QueueKind::Template)
        {
            if rec.config != config {
                return Err(StoreError::QueueExists {
                    queue: name.to_string(),
                });
            }
            return Ok(Queue { name, config });
        }
        self.st.check_queue_room("name", 1)?;
        // A queue made from a template or as a dead-letter queue becomes explicit, events kept.
        let rec = self.st.write_queue(&mut txn, now, &name, &config, existing);
        let batch = self.st.seal_queue_write(&self.kv, txn, rec, 1)?;
        self.st.commit(&mut self.kv, batch);
        Ok(Queue { name, config })
    }

    /// Creates a queue (or template), or replaces its config: its events stay, and take the
    /// new config from their next transition on (a lease already given keeps its deadline).
    /// What re-applying a pipeline does to the queues of its stages.
    pub fn put_queue(
        &mut self,
        now: Timestamp,
        name: QueueName,
        config: QueueConfig,
    ) -> Result<Queue, StoreError> {
        config.validate()?;
        let mut txn = self.st.begin(&self.kv);
        let existing = self.st.stored_queue(&txn, &name)?;
        if !State::needs_write(existing.as_ref(), &config) {
            return Ok(Queue { name, config });
        }
        let adding = u64::from(State::adds_queue(existing.as_ref()));
        self.st.check_queue_room("name", adding)?;
        let rec = self.st.write_queue(&mut txn, now, &name, &config, existing);
        let batch = self.st.seal_queue_write(&self.kv, txn, rec, adding)?;
        self.st.commit(&mut self.kv, batch);
        Ok(Queue { name, config })
    }

    /// A queue's config: its own, or that of the template it matches.
    pub fn get_queue(&self, name: &QueueName) -> Result<Queue, StoreError> {
        let txn = Txn::new(&self.kv);
        let resolved = self
            .st
            .resolve(&txn, name)?
            .ok_or_else(|| not_found(name))?;
        Ok(Queue {
            name: name.clone(),
            config: resolved.rec.config,
        })
    }

    /// Stored queues and templates whose name starts with `prefix`, in name order.
    pub fn list_queues(
        &self,
        prefix: &str,
        page_size: usize,
        page_token: &str,
    ) -> Result<Page<Queue>, StoreError> {
        let (_, end) = keys::queue_space();
        let start = if page_token.is_empty() || page_token < prefix {
            keys::queue(prefix)
        } else {
            keys::successor(&keys::queue(page_token))
        };
        let mut items = Vec::new();
        let mut more = false;
        self.kv.scan(&start, &end, |k, v| {
            let name = keys::queue_name_of(k).unwrap_or_default();
            if !name.starts_with(prefix.as_bytes()) {
                return Ok(Flow::Stop);
            }
            if items.len() == page_size {
                more = true;
                return Ok(Flow::Stop);
            }
            let rec = records::decode_queue(v).map_err(|e| State::corrupt(&self.kv, e))?;
            items.push(Queue {
                name: rec.name,
                config: rec.config,
            });
            Ok(Flow::Continue)
        })?;
        let next_page_token = match (more, items.last()) {
            (true, Some(last)) => last.name.to_string(),
            _ => String::new(),
        };
        Ok(Page {
            items,
            next_page_token,
        })
    }

    /// Deletes a queue, or a template (the queues it made keep theirs and their events). A
    /// queue that holds events (ready, delayed or leased) is refused unless `force`, which
    /// drops them with it.
    pub fn delete_queue(&mut self, name: &QueueName, force: bool) -> Result<(), StoreError> {
        let txn = self.st.begin(&self.kv);
        let Some(v) = txn.get(&keys::queue(name.as_str()))? else {
            return Err(not_found(name));
        };
        let rec = records::decode_queue(&v).map_err(|e| State::corrupt(&self.kv, e))?;
        if !force
            && let Some(held) = State::stored_counters(&txn, rec.id)?
            && held.ready + held.delayed + held.leased > 0
        {
            return Err(StoreError::QueueNotEmpty {
                queue: name.to_string(),
                ready: held.ready,
                delayed: held.delayed,
                leased: held.leased,
            });
        }
        let mut txn = txn;
        for ev in &events_after(&self.kv, &rec, "", usize::MAX)?.0 {
            remove_event(&mut self.st, &mut txn, &rec, ev)?;
        }
        if let Some(left) = State::stored_counters(&txn, rec.id)? {
            // Its events are gone (counted out above); it leaves its family, its running
            // totals stay in the family's.
            self.st.count_in_family(name, Some(&left), &left, false);
        }
        txn.delete(keys::queue(name.as_str()));
        txn.delete(keys::counters(rec.id));
        // A template's queues change family: summed again before anything is written.
        let templates = (rec.kind == QueueKind::Template).then(|| {
            let mut left = self.st.templates.clone();
            left.retain(|t| t.name != *name);
            left
        });
        let families = templates
            .as_ref()
            .map(|left| {
                let families = &self.st.families;
                families.after_template_change(&self.kv, left, &self.st.stages, name)
            })
            .transpose()?;
        let counted = u64::from(!State::adds_queue(Some(&rec)));
        let left = self.st.seqs.queue_count.saturating_sub(counted);
        self.st.seqs.set_queue_count(left);
        let batch = match (templates, families) {
            (Some(templates), Some(families)) => {
                txn.delete(keys::template(name.as_str()));
                self.st.templates = templates;
                self.st.seal_rebuilt(txn, families)
            }
            _ => self.st.seal(txn),
        };
        self.st.commit(&mut self.kv, batch);
        self.st.ready_cursor.remove(&rec.id);
        Ok(())
    }

    /// Removes up to `max` events of a queue, leased ones included, in one transaction: those
    /// after the event `after` in ID order ("": from the first). A large queue is purged in
    /// steps of `PURGE_STEP`, each starting where the last ended.
    pub fn purge_queue(
        &mut self,
        name: &QueueName,
        max: usize,
        after: &str,
    ) -> Result<Step, StoreError> {
        let mut txn = self.st.begin(&self.kv);
        let resolved = match self.st.resolve_queue(&txn, name) {
            // A dead-letter queue goes with its last event, which someone else may have
            // taken since the last step, and a queue may be deleted between two steps: the
            // purge is over.
            Err(StoreError::QueueNotFound { .. }) if !after.is_empty() => {
                return Ok(Step::default());
            }
            resolved => resolved?,
        };
        if !resolved.stored {
            return Ok(Step::default());
        }
        let rec = resolved.rec;
        let (events, next) = events_after(&self.kv, &rec, after, max)?;
        for ev in &events {
            remove_event(&mut self.st, &mut txn, &rec, ev)?;
        }
        let left = State::held(&txn, rec.id)?;
        let batch = self.st.seal(txn);
        self.st.commit(&mut self.kv, batch);
        Ok(Step {
            done: events.len() as u64,
            left,
            next,
        })
    }

    /// A queue's stats; for a template, the sums of the queues it covers (`family_stats`).
    pub fn queue_stats(&self, now: Timestamp, name: &QueueName) -> Result<QueueStats, StoreError> {
        if name.is_template() {
            if !self.st.templates.iter().any(|t| t.name == *name) {
                return Err(not_found(name));
            }
            return Ok(self.st.families.stats(name.as_str()).stats);
        }
        let txn = Txn::new(&self.kv);
        let resolved = match self.st.resolve_queue(&txn, name) {
            // A dead-letter queue is stored while it holds events; emptied (by a redrive, a
            // purge) it answers as the empty queue it is, not as a name nobody made.
            Err(StoreError::QueueNotFound { .. }) if name.is_default_dead_letter() => {
                return Ok(QueueStats::default());
            }
            resolved => resolved?,
        };
        if !resolved.stored {
            return Ok(QueueStats::default());
        }
        let rec = resolved.rec;
        let c = State::counters(&txn, rec.id)?;
        let (space_start, end) = keys::ready_space(rec.id);
        let start = self
            .st
            .ready_cursor
            .get(&rec.id)
            .cloned()
            .unwrap_or(space_start);
        let mut oldest = None;
        self.kv.scan(&start, &end, |k, _| {
            let (_, at, _) = keys::decode_ready(k).map_err(|e| State::corrupt(&self.kv, e))?;
            oldest = Some(Timestamp::from_micros(at));
            Ok(Flow::Stop)
        })?;
        let oldest_ready_age = oldest.map(|t| now.duration_since(t)).unwrap_or_default();
        Ok(stats_of(&c, oldest_ready_age))
    }

    /// Every template's family (its covered queues summed), and every dead-letter family
    /// (`inbox:*.dlq`) met since the last rebuild, by name: what stats publish instead of the
    /// queues.
    pub fn family_stats(&self) -> Vec<FamilyStats> {
        self.st.families.all(&self.st.templates)
    }

    /// The stored queues of pipeline stages that a template's name range covers: no family
    /// counts them, `list_uncovered_queues` skips them, so stats publish them by name from
    /// here (stages are few).
    pub fn covered_stage_queues(&self) -> Result<Vec<QueueName>, StoreError> {
        let txn = Txn::new(&self.kv);
        let templates = self.st.templates.iter().map(|t| t.name.as_str());
        let mut covered = Vec::new();
        for stage in &self.st.stages {
            let family = cascade_core::queue_family(stage.as_str(), templates.clone());
            if family != stage.as_str() && self.st.stored_queue(&txn, stage)?.is_some() {
                covered.push(stage.clone());
            }
        }
        Ok(covered)
    }

    /// Stored queues that no template covers (explicit queues, pipeline stages, their
    /// dead-letter queues), in name order, without templates: with `covered_stage_queues`
    /// and `family_stats`, what stats publish. The ranges of covered names are skipped, not
    /// read, however many per-user queues they hold.
    pub fn list_uncovered_queues(
        &self,
        page_size: usize,
        page_token: &str,
    ) -> Result<Page<QueueName>, StoreError> {
        let (space_start, end) = keys::queue_space();
        let mut from = if page_token.is_empty() {
            space_start
        } else {
            keys::successor(&keys::queue(page_token))
        };
        let covered = covered_prefixes(&self.st.templates);
        let mut items = Vec::new();
        let mut more = false;
        loop {
            let mut skip_to = None;
            self.kv.scan(&from, &end, |k, v| {
                let name = keys::queue_name_of(k).unwrap_or_default();
                if let Some(prefix) = covered
                    .iter()
                    .find(|p| name.len() > p.len() && name.starts_with(p.as_bytes()))
                {
                    skip_to = Some(keys::prefix_end(&keys::queue(prefix)));
                    return Ok(Flow::Stop);
                }
                if items.len() == page_size {
                    more = true;
                    return Ok(Flow::Stop);
                }
                let rec = records::decode_queue(v).map_err(|e| State::corrupt(&self.kv, e))?;
                if !rec.name.is_template() {
                    items.push(rec.name);
                }
                Ok(Flow::Continue)
            })?;
            match skip_to {
                Some(next) if !more => from = next,
                _ => break,
            }
        }
        let next_page_token = match (more, items.last()) {
            (true, Some(last)) => last.to_string(),
            _ => String::new(),
        };
        Ok(Page {
            items,
            next_page_token,
        })
    }
}

impl State {
    /// Whether `put_queue` with `config` changes `existing`: not when it is already an
    /// explicit queue (or template) with that config.
    pub(super) fn needs_write(existing: Option<&QueueRecord>, config: &QueueConfig) -> bool {
        !existing.is_some_and(|rec| {
            matches!(rec.kind, QueueKind::Explicit | QueueKind::Template) && rec.config == *config
        })
    }

    /// Writes `name`'s record with `config` as an explicit queue (or a template), keeping the
    /// id of `existing` and so its events and counters.
    pub(super) fn write_queue(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        name: &QueueName,
        config: &QueueConfig,
        existing: Option<QueueRecord>,
    ) -> QueueRecord {
        let (id, created_at) = match existing {
            Some(rec) => (rec.id, rec.created_at),
            None => (self.seqs.next_queue_id(), now),
        };
        let kind = if name.is_template() {
            QueueKind::Template
        } else {
            QueueKind::Explicit
        };
        let rec = QueueRecord {
            id,
            name: name.clone(),
            config: config.clone(),
            kind,
            created_at,
        };
        txn.put(keys::queue(name.as_str()), records::encode_queue(&rec));
        rec
    }
}
