//! A store with some of everything, written through its log as a service writes it, for the
//! tests of the offline tools (export, import, repair).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use cascade_core::{EnqueueCmd, IdempotencyKey, QueueConfig, QueueName, QueueStats, Timestamp};

use super::{StoreOptions, recover};
use crate::shard::{Shard, ShardSettings};

const T0: u64 = 1_700_000_000_000_000;

pub(super) fn at(secs: u64) -> Timestamp {
    Timestamp::from_micros(T0 + secs * 1_000_000)
}

pub(super) fn q(name: &str) -> QueueName {
    QueueName::parse(name).expect("a queue name")
}

pub(super) fn event(queue: &str, payload: &str) -> EnqueueCmd {
    EnqueueCmd {
        queue: q(queue),
        id: None,
        idempotency_key: None,
        payload: payload.as_bytes().to_vec().into(),
        headers: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
        activate_at: None,
    }
}

/// An event under the idempotency key `order-7`.
pub(super) fn keyed() -> EnqueueCmd {
    let mut keyed = event("jobs", "keyed");
    keyed.idempotency_key = Some(IdempotencyKey::parse("order-7").expect("a key"));
    keyed
}

/// Opens the store in `dir` as a service does.
pub(super) fn open(dir: &Path) -> (Shard, crate::wal::Wal) {
    let (kv, wal) = recover(dir, &StoreOptions::default()).expect("recover");
    (
        Shard::new(kv, ShardSettings::default()).expect("shard"),
        wal,
    )
}

/// Writes, through the log only (nothing checkpointed): `jobs` with three events ready
/// (one under an idempotency key), one leased and one delayed an hour; the template
/// `inbox:*` with an event in `inbox:alice`; a pipeline.
pub(super) fn fill(dir: &Path) {
    let (mut shard, mut wal) = open(dir);
    shard
        .create_queue(at(0), q("jobs"), QueueConfig::default())
        .expect("jobs");
    shard
        .create_queue(at(0), q("inbox:*"), QueueConfig::default())
        .expect("inbox");
    for payload in ["one", "two", "three", "four"] {
        shard
            .enqueue(at(1), event("jobs", payload))
            .expect("enqueue");
    }
    shard.enqueue(at(1), keyed()).expect("keyed");
    let mut later = event("jobs", "later");
    later.activate_at = Some(at(3600));
    shard.enqueue(at(1), later).expect("delayed");
    shard
        .enqueue(at(1), event("inbox:alice", "hi"))
        .expect("inbox");
    let lease = Some(Duration::from_secs(600));
    assert_eq!(
        shard.take(at(2), &q("jobs"), 2, lease).expect("take").len(),
        2
    );
    shard
        .apply_pipeline(at(3), crate::shard::tests::pipeline("flow", &["a", "b"]))
        .expect("pipeline");
    for record in shard.take_unlogged() {
        wal.append(&record).expect("append");
    }
    wal.sync().expect("sync");
}

/// `jobs`' counts as the store in `dir` has them: `[ready, delayed, leased]`.
pub(super) fn jobs_counts(dir: &Path) -> [u64; 3] {
    let (shard, _wal) = open(dir);
    let QueueStats {
        ready,
        delayed,
        leased,
        ..
    } = shard.queue_stats(at(4), &q("jobs")).expect("stats");
    [ready, delayed, leased]
}
