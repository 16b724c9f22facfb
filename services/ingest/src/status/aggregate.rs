//! The dispatcher shards' published stats, summed by queue family.
//!
//! Each shard publishes a round every `dispatcher.stats_interval`, split over several
//! messages when it has many queues; every message of a round carries the same `at`. A
//! round is summed as it arrives and becomes the shard's current one when a newer round
//! starts, so what is shown is complete and at most one interval old.
//!
//! Queues a template covers (`inbox:alice`) arrive summed per shard under the template
//! (`inbox:*`): there may be millions. Other queues keep their own name; past
//! [`MAX_FAMILIES`] in one round, the rest are summed into an overflow entry, so memory stays
//! bounded whatever the shards publish.
//!
//! Activation lateness is not a count of a round: each round carries the largest lateness
//! per family since the shard's previous round, and the aggregator keeps the largest per
//! family over all shards until the history's next sample takes it (`take_lateness`).

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::Timestamp;
use cascade_proto::bus::v1::ShardStats;
use cascade_proto::convert::{ConvertError, timestamp_from_proto};
use cascade_proto::v1::QueueStats;
use serde::Serialize;

/// Families kept per shard and round; further queues go to the overflow entry.
pub(crate) const MAX_FAMILIES: usize = 10_000;

/// Current counts and running totals, as `QueueStats` has them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    pub delayed: u64,
    pub ready: u64,
    pub leased: u64,
    pub dead_lettered: u64,
    pub enqueued_total: u64,
    pub completed_total: u64,
    pub retries_total: u64,
    pub expired_leases_total: u64,
}

impl Counts {
    fn of(stats: &QueueStats) -> Counts {
        Counts {
            delayed: stats.delayed,
            ready: stats.ready,
            leased: stats.leased,
            dead_lettered: stats.dead_lettered,
            enqueued_total: stats.enqueued_total,
            completed_total: stats.completed_total,
            retries_total: stats.retries_total,
            expired_leases_total: stats.expired_leases_total,
        }
    }

    fn add(&mut self, other: &Counts) {
        self.delayed = self.delayed.saturating_add(other.delayed);
        self.ready = self.ready.saturating_add(other.ready);
        self.leased = self.leased.saturating_add(other.leased);
        self.dead_lettered = self.dead_lettered.saturating_add(other.dead_lettered);
        self.enqueued_total = self.enqueued_total.saturating_add(other.enqueued_total);
        self.completed_total = self.completed_total.saturating_add(other.completed_total);
        self.retries_total = self.retries_total.saturating_add(other.retries_total);
        self.expired_leases_total = self
            .expired_leases_total
            .saturating_add(other.expired_leases_total);
    }
}

/// One queue, or the sum of the queues of one template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Family {
    pub counts: Counts,
    /// Queues summed in (1 for a plain queue).
    pub queues: u64,
    pub template: bool,
}

impl Family {
    fn add(&mut self, other: &Family) {
        self.counts.add(&other.counts);
        self.queues = self.queues.saturating_add(other.queues);
        self.template |= other.template;
    }
}

#[derive(Debug)]
struct Round {
    at: Timestamp,
    families: BTreeMap<String, Family>,
    /// Queues past [`MAX_FAMILIES`].
    overflow: Family,
}

impl Round {
    fn new(at: Timestamp) -> Round {
        Round {
            at,
            families: BTreeMap::new(),
            overflow: Family::default(),
        }
    }
}

#[derive(Debug)]
struct ShardRounds {
    building: Round,
    complete: Option<Round>,
}

/// Every shard's latest complete round.
#[derive(Debug, Default)]
pub(crate) struct Aggregator {
    shards: BTreeMap<u32, ShardRounds>,
    /// The largest activation lateness per family since the last `take_lateness`, for at
    /// most [`MAX_FAMILIES`] families.
    lateness: BTreeMap<String, Duration>,
}

/// The shards' latest rounds summed.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    pub families: BTreeMap<String, Family>,
    pub overflow: Family,
    /// Shards with a complete round.
    pub reporting: usize,
    /// Shards whose latest complete round is older than the `stale_after` asked for, with
    /// its age.
    pub stale: Vec<(u32, Duration)>,
    /// Every shard heard from, with the age of its latest complete round (`None`: its first
    /// round is not complete yet).
    pub ages: BTreeMap<u32, Option<Duration>>,
}

impl Aggregator {
    /// Adds one published message. A message older than the round being summed is late
    /// (its round was already superseded) and is ignored.
    pub fn receive(&mut self, stats: &ShardStats) -> Result<(), ConvertError> {
        let at = match &stats.at {
            Some(at) => timestamp_from_proto(at, "at")?,
            None => return Ok(()),
        };
        let rounds = self
            .shards
            .entry(stats.shard)
            .or_insert_with(|| ShardRounds {
                building: Round::new(at),
                complete: None,
            });
        if at < rounds.building.at {
            return Ok(());
        }
        if at > rounds.building.at {
            let finished = std::mem::replace(&mut rounds.building, Round::new(at));
            rounds.complete = Some(finished);
        }
        for late in &stats.lateness {
            let max = Duration::from_micros(late.max_micros);
            let room = self.lateness.len() < MAX_FAMILIES;
            match self.lateness.get_mut(&late.family) {
                Some(kept) => *kept = (*kept).max(max),
                None if room => {
                    self.lateness.insert(late.family.clone(), max);
                }
                None => {}
            }
        }
        let round = &mut rounds.building;
        let queues = stats.queues.iter().map(|queue| (queue, 1, false));
        let families = stats
            .families
            .iter()
            .filter_map(|f| Some((f.stats.as_ref()?, f.queues, true)));
        // Families first: a shard's thousands of plain queues must not push them into the
        // overflow.
        for (stats, queues, template) in families.chain(queues) {
            let family = Family {
                counts: Counts::of(stats),
                queues,
                template,
            };
            let room = round.families.len() < MAX_FAMILIES;
            match round.families.get_mut(&stats.name) {
                Some(kept) => kept.add(&family),
                None if room => {
                    round.families.insert(stats.name.clone(), family);
                }
                None => round.overflow.add(&family),
            }
        }
        Ok(())
    }

    /// Each family's largest activation lateness since the last call, over every shard.
    pub fn take_lateness(&mut self) -> BTreeMap<String, Duration> {
        std::mem::take(&mut self.lateness)
    }

    /// The sum over shards of each one's latest complete round.
    pub fn merged(&self, now: Timestamp, stale_after: Duration) -> Merged {
        let mut merged = Merged::default();
        for (&shard, rounds) in &self.shards {
            let Some(round) = &rounds.complete else {
                merged.ages.insert(shard, None);
                continue;
            };
            merged.reporting += 1;
            let age = now.duration_since(round.at);
            merged.ages.insert(shard, Some(age));
            if age > stale_after {
                merged.stale.push((shard, age));
            }
            for (name, family) in &round.families {
                merged.families.entry(name.clone()).or_default().add(family);
            }
            merged.overflow.add(&round.overflow);
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use cascade_proto::bus::v1::{FamilyLateness, FamilyStats};
    use cascade_proto::convert::timestamp_to_proto;

    use super::*;

    fn queue(name: &str, ready: u64) -> QueueStats {
        QueueStats {
            name: name.to_owned(),
            ready,
            delayed: 1,
            ..QueueStats::default()
        }
    }

    fn message(shard: u32, at_secs: u64, queues: Vec<QueueStats>) -> ShardStats {
        ShardStats {
            shard,
            at: Some(timestamp_to_proto(Timestamp::from_millis(at_secs * 1000))),
            queues,
            ..ShardStats::default()
        }
    }

    /// A shard's sum of `members` queues of `inbox:*`.
    fn inbox(members: u64, ready: u64) -> FamilyStats {
        FamilyStats {
            stats: Some(queue("inbox:*", ready)),
            queues: members,
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_millis(10_000)
    }

    #[test]
    fn a_round_counts_once_the_next_begins_and_families_sum_over_shards() {
        let mut agg = Aggregator::default();
        let mut first = message(0, 1, vec![queue("jobs", 2)]);
        first.families = vec![inbox(2, 7)];
        agg.receive(&first).expect("receive");
        assert!(agg.merged(now(), Duration::MAX).families.is_empty());
        // The same round, split over a second message; another shard's share of the family.
        agg.receive(&message(0, 1, vec![queue("orders", 4)]))
            .expect("receive");
        let mut other = message(1, 1, vec![]);
        other.families = vec![inbox(1, 5)];
        agg.receive(&other).expect("receive");
        agg.receive(&message(0, 2, vec![])).expect("receive");
        agg.receive(&message(1, 2, vec![])).expect("receive");
        let merged = agg.merged(now(), Duration::MAX);
        let names: Vec<&str> = merged.families.keys().map(String::as_str).collect();
        assert_eq!(names, ["inbox:*", "jobs", "orders"]);
        let inbox = &merged.families["inbox:*"];
        assert_eq!((inbox.queues, inbox.counts.ready), (3, 12));
        assert_eq!(inbox.counts.delayed, 2);
        assert!(inbox.template);
        assert!(!merged.families["jobs"].template);
        assert_eq!(merged.families["orders"].counts.ready, 4);
    }

    #[test]
    fn late_messages_are_ignored_and_old_shards_are_stale() {
        let mut agg = Aggregator::default();
        agg.receive(&message(0, 5, vec![queue("jobs", 2)]))
            .expect("receive");
        agg.receive(&message(0, 6, vec![queue("jobs", 7)]))
            .expect("receive");
        agg.receive(&message(0, 5, vec![queue("jobs", 100)]))
            .expect("receive");
        agg.receive(&message(0, 7, vec![])).expect("receive");
        agg.receive(&message(1, 9, vec![])).expect("receive");
        let merged = agg.merged(now(), Duration::from_secs(3));
        assert_eq!(merged.families["jobs"].counts.ready, 7);
        assert_eq!(merged.stale, [(0, Duration::from_secs(4))]);
        let ages: Vec<_> = merged.ages.into_iter().collect();
        assert_eq!(
            ages,
            [(0, Some(Duration::from_secs(4))), (1, None)],
            "shard 1 has no complete round yet"
        );
    }

    #[test]
    fn lateness_is_the_largest_over_shards_until_taken() {
        let mut agg = Aggregator::default();
        let late = |family: &str, max_micros| FamilyLateness {
            family: family.to_owned(),
            max_micros,
        };
        let mut first = message(0, 1, vec![]);
        first.lateness = vec![late("p.a", 3_000), late("p.b", 10)];
        let mut second = message(1, 1, vec![]);
        second.lateness = vec![late("p.a", 7_000)];
        let mut stale = message(0, 0, vec![]);
        stale.lateness = vec![late("p.a", 99_000)];
        for stats in [&first, &second, &stale] {
            agg.receive(stats).expect("receive");
        }
        let taken: Vec<_> = agg.take_lateness().into_iter().collect();
        assert_eq!(
            taken,
            [
                ("p.a".to_owned(), Duration::from_millis(7)),
                ("p.b".to_owned(), Duration::from_micros(10)),
            ],
            "a late message's round was superseded"
        );
        assert!(agg.take_lateness().is_empty());
    }

    #[test]
    fn families_past_the_cap_go_to_the_overflow() {
        let mut agg = Aggregator::default();
        let many = (0..MAX_FAMILIES + 5)
            .map(|i| queue(&format!("q{i:06}"), 1))
            .collect();
        agg.receive(&message(0, 1, many)).expect("receive");
        agg.receive(&message(0, 2, vec![])).expect("receive");
        let merged = agg.merged(now(), Duration::MAX);
        assert_eq!(merged.families.len(), MAX_FAMILIES);
        assert_eq!(
            (merged.overflow.queues, merged.overflow.counts.ready),
            (5, 5)
        );
    }
}
