//! Helpers shared by the durability tests: reopen a store and read what it holds.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;

use cascade_core::{Event, QueueName};
use cascade_store::{Shard, ShardSettings, StoreError, StoreOptions, durable};

pub fn reopen(dir: &Path) -> Result<Shard, StoreError> {
    let (kv, _wal) = durable::recover(dir, &StoreOptions::default())?;
    Shard::new(kv, ShardSettings::default())
}

pub fn q(name: &str) -> QueueName {
    QueueName::parse(name).expect("valid queue name")
}

/// Every event stored in `queue`, by ID.
pub fn events(shard: &Shard, queue: &str) -> Vec<Event> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = shard
            .list_dead_letters(&q(queue), 1000, &token)
            .expect("list events");
        out.extend(page.items);
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

pub fn ids(events: &[Event]) -> BTreeSet<String> {
    events.iter().map(|e| e.id.to_string()).collect()
}

/// The queue's counters agree with the events actually stored in it.
pub fn assert_counters_match(shard: &Shard, queue: &str) {
    let now = cascade_core::Timestamp::from_micros(u64::MAX / 2);
    let stats = shard.queue_stats(now, &q(queue)).expect("stats");
    let stored = events(shard, queue).len() as u64;
    assert_eq!(
        stats.ready + stats.delayed + stats.leased,
        stored,
        "counters of '{queue}' disagree with its {stored} stored events: {stats:?}"
    );
}
