//! The sums of the queues each template covers (`inbox:alice`, `inbox:bob`… under
//! `inbox:*`; their dead-letter queues under `inbox:*.dlq`), kept in memory in step with the
//! counters. Stats then cost one entry per template, not one per queue: a shard with millions
//! of per-user queues publishes a handful of families each round instead of reading every
//! queue.
//!
//! Membership follows [`cascade_core::queue_family`], by name, except that a pipeline stage's
//! queue is never a member: stages are published, shown and scaled one by one, even under a
//! template such as `*`. The sums are rebuilt from the stored counters whenever the templates
//! or the set of stages change (that moves queues in or out of families), before the change
//! is written, so a failed rebuild fails the change (a template with no other inside or
//! around its name range rebuilds only its own: `after_template_change`, which leaves the
//! other families' sums, their members' vanished totals and any drift as they were); in
//! between, every counter write applies its difference. A member's
//! running totals stay in its family's after the member is removed (an emptied per-user queue
//! is), so a family's totals only grow between rebuilds; a rebuild may lower them to what the
//! live members hold, which a reader takes as a counter reset.
//!
//! The sums are stored too (`keys::family`), written with each transaction that changes them,
//! so a shard opens with them in one short scan instead of reading every queue: with millions
//! of per-user queues that read took longer than a restart may. A store without them (written
//! before they were kept, or repaired) gets them from a rebuild when it opens (`Shard::new`).

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use cascade_core::commands::{FamilyStats, QueueStats};
use cascade_core::queue::DEAD_LETTER_SUFFIX;
use cascade_core::{Pipeline, QueueName};

use super::State;
use crate::codec::Malformed;
use crate::codec::keys;
use crate::codec::records::{self, Counters, QueueRecord};
use crate::error::StoreError;
use crate::kv::{Flow, Kv, Txn};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct FamilySum {
    counters: Counters,
    /// Members that hold a counters record (a per-user queue has one while it holds events).
    queues: u64,
}

/// One member's counters went from `old` (`None`: it had no record) to `new`, which is
/// `stored` or, for a member removed (an emptied per-user queue), not: its running totals
/// stay in the family's either way.
#[derive(Clone, Debug)]
pub(super) struct MemberChange {
    pub family: String,
    pub old: Option<Counters>,
    pub new: Counters,
    pub stored: bool,
}

#[derive(Debug, Default)]
pub(super) struct Families {
    sums: HashMap<String, FamilySum>,
}

impl Families {
    /// Sums the stored counters of every queue a template covers, stages left out.
    pub fn load(
        kv: &Kv,
        templates: &[QueueRecord],
        stages: &BTreeSet<QueueName>,
    ) -> Result<Families, StoreError> {
        let mut families = Families::default();
        for prefix in covered_prefixes(templates) {
            let start = keys::successor(&keys::queue(prefix));
            let end = keys::prefix_end(&keys::queue(prefix));
            kv.scan(&start, &end, |_, v| {
                let rec = records::decode_queue(v).map_err(|e| State::corrupt(kv, e))?;
                let family = family_of(&rec.name, templates, stages);
                if rec.name.is_template() || family == rec.name.as_str() {
                    return Ok(Flow::Continue);
                }
                if let Some(v) = kv.get(&keys::counters(rec.id))? {
                    let counters =
                        records::decode_counters(&v).map_err(|e| State::corrupt(kv, e))?;
                    families.apply(MemberChange {
                        family: family.into_owned(),
                        old: None,
                        new: counters,
                        stored: true,
                    });
                }
                Ok(Flow::Continue)
            })?;
        }
        Ok(families)
    }

    /// The sums once the template `changed` was added or removed (`templates`: the list
    /// after). Only the families of templates whose prefix holds `changed`'s, or lies within
    /// it, can change. When no other template is like that, the other families keep their
    /// sums and only `changed`'s own are summed again from its prefix (or dropped), so that
    /// a new template of its own beside a million per-user queues costs a scan of its own
    /// queues, not of theirs. Otherwise every family is summed again (`load`).
    pub fn after_template_change(
        &self,
        kv: &Kv,
        templates: &[QueueRecord],
        stages: &BTreeSet<QueueName>,
        changed: &QueueName,
    ) -> Result<Families, StoreError> {
        let prefix = changed.template_prefix().unwrap_or_default();
        let nested = templates.iter().any(|t| {
            t.name != *changed
                && t.name
                    .template_prefix()
                    .is_some_and(|p| p.starts_with(prefix) || prefix.starts_with(p))
        });
        if nested {
            return Families::load(kv, templates, stages);
        }
        let own = [
            changed.as_str().to_owned(),
            format!("{changed}{DEAD_LETTER_SUFFIX}"),
        ];
        let mut families = Families {
            sums: self
                .sums
                .iter()
                .filter(|(family, _)| !own.contains(family))
                .map(|(family, sum)| (family.clone(), *sum))
                .collect(),
        };
        if let Some(added) = templates.iter().find(|t| t.name == *changed) {
            let summed = Families::load(kv, std::slice::from_ref(added), stages)?;
            families.sums.extend(summed.sums);
        }
        Ok(families)
    }

    /// The sums as stored.
    pub fn stored(kv: &Kv) -> Result<Families, StoreError> {
        let mut families = Families::default();
        let (start, end) = keys::family_space();
        kv.scan(&start, &end, |k, v| {
            let malformed = |e| State::corrupt(kv, e);
            let name = keys::family_name_of(k).unwrap_or_default();
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| malformed(Malformed("family key: name".into())))?;
            let (counters, queues) = records::decode_family(v).map_err(malformed)?;
            families.sums.insert(name, FamilySum { counters, queues });
            Ok(Flow::Continue)
        })?;
        Ok(families)
    }

    /// Stores the sums of `family` as they are now.
    pub fn write(&self, txn: &mut Txn<'_>, family: &str) {
        let sum = self.sums.get(family).copied().unwrap_or_default();
        txn.put(
            keys::family(family),
            records::encode_family(&sum.counters, sum.queues),
        );
    }

    /// Stores the sums of `self` in place of those of `before`, which are the stored ones:
    /// only those that differ, so that a template's change beside thousands of others
    /// writes its own families, not every one.
    pub fn write_all(&self, txn: &mut Txn<'_>, before: &Families) {
        for gone in before.sums.keys().filter(|f| !self.sums.contains_key(*f)) {
            txn.delete(keys::family(gone));
        }
        for (family, sum) in &self.sums {
            if before.sums.get(family) != Some(sum) {
                self.write(txn, family);
            }
        }
    }

    /// Applies one change.
    pub fn apply(&mut self, change: MemberChange) {
        let MemberChange {
            family,
            old,
            new,
            stored,
        } = change;
        let sum = self.sums.entry(family).or_default();
        let before = old.unwrap_or_default();
        let s = &mut sum.counters;
        let moved =
            |sum: u64, before: u64, after: u64| sum.wrapping_sub(before).wrapping_add(after);
        s.ready = moved(s.ready, before.ready, new.ready);
        s.delayed = moved(s.delayed, before.delayed, new.delayed);
        s.leased = moved(s.leased, before.leased, new.leased);
        s.dead_lettered = moved(s.dead_lettered, before.dead_lettered, new.dead_lettered);
        s.enqueued_total = moved(s.enqueued_total, before.enqueued_total, new.enqueued_total);
        s.completed_total = moved(
            s.completed_total,
            before.completed_total,
            new.completed_total,
        );
        s.expired_leases_total = moved(
            s.expired_leases_total,
            before.expired_leases_total,
            new.expired_leases_total,
        );
        s.retries_total = moved(s.retries_total, before.retries_total, new.retries_total);
        // Never below zero, even if the sums drifted: this runs on the writer thread.
        sum.queues = (sum.queues + u64::from(stored)).saturating_sub(u64::from(old.is_some()));
    }

    /// One family's sums (zero for a template whose queues hold nothing).
    pub fn stats(&self, family: &str) -> FamilyStats {
        let sum = self.sums.get(family).copied().unwrap_or_default();
        FamilyStats {
            name: family.to_owned(),
            // The age of a family's oldest ready event would take a read of every member.
            stats: stats_of(&sum.counters, Duration::ZERO),
            queues: sum.queues,
        }
    }

    /// Every template's family, and every dead-letter family met since the last rebuild
    /// (with no members left it keeps its totals), by name.
    pub fn all(&self, templates: &[QueueRecord]) -> Vec<FamilyStats> {
        let mut names: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
        names.extend(self.sums.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(|name| self.stats(name)).collect()
    }
}

/// `name`'s family by [`cascade_core::queue_family`] over `templates`: its own name when none
/// covers it or when it is the queue of a pipeline stage (in `stages`).
pub(super) fn family_of<'a>(
    name: &'a QueueName,
    templates: &'a [QueueRecord],
    stages: &BTreeSet<QueueName>,
) -> Cow<'a, str> {
    if stages.contains(name) {
        return Cow::Borrowed(name.as_str());
    }
    let templates = templates.iter().map(|t| t.name.as_str());
    cascade_core::queue_family(name.as_str(), templates)
}

/// The queues of the stages of `pipelines`.
pub(super) fn stage_queues(pipelines: &[Pipeline]) -> BTreeSet<QueueName> {
    let stages = pipelines
        .iter()
        .flat_map(|p| p.stages.iter().map(|s| p.stage_queue(&s.name)));
    stages.collect()
}

/// The prefixes whose extensions some template covers, without those inside another one:
/// `inbox:` for `inbox:*` and `inbox:vip:*`. Every queue record past such a prefix belongs to
/// a family (or is a template), so a scan for the queues no template covers skips the range.
pub(super) fn covered_prefixes(templates: &[QueueRecord]) -> Vec<&str> {
    let mut prefixes: Vec<&str> = templates
        .iter()
        .filter_map(|t| t.name.template_prefix())
        .collect();
    prefixes.sort_unstable();
    let mut outer: Vec<&str> = Vec::with_capacity(prefixes.len());
    for prefix in prefixes {
        if !outer.last().is_some_and(|o| prefix.starts_with(o)) {
            outer.push(prefix);
        }
    }
    outer
}

/// What `QueueStats` reports of `c`.
pub(super) fn stats_of(c: &Counters, oldest_ready_age: Duration) -> QueueStats {
    QueueStats {
        ready: c.ready,
        delayed: c.delayed,
        leased: c.leased,
        dead_lettered: c.dead_lettered,
        oldest_ready_age,
        enqueued_total: c.enqueued_total,
        completed_total: c.completed_total,
        expired_leases_total: c.expired_leases_total,
        retries_total: c.retries_total,
    }
}
