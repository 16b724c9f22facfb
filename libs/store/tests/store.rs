//! The store actor: group-committed answers in every durability mode, maintenance on the
//! writer thread (lease expiry under a simulated clock), a clean shutdown that checkpoints,
//! and the activation timer behind the same actor.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cascade_core::{EventId, QueueConfig, QueueName, SimClock, Timestamp};
use cascade_store::durable::Maintenance;
use cascade_store::shard::EnqueueCmd;
use cascade_store::{
    Durability, ScheduleEntry, Shard, ShardSettings, Store, StoreOptions, Timer, durable,
};
use common::{q, reopen};

fn start(dir: &std::path::Path, durability: Durability, clock: SimClock) -> Store<Shard> {
    let options = StoreOptions {
        durability,
        wal_segment_bytes: 32 << 10,
        checkpoint_interval: Duration::from_millis(50),
        ..StoreOptions::default()
    };
    let (kv, wal) = durable::recover(dir, &options).expect("recover");
    let shard = Shard::new(kv, ShardSettings::default()).expect("shard");
    Store::start(shard, wal, options, Arc::new(clock))
}

/// Checks that the running store holds `events` ready in `jobs`, stops it cleanly, and checks
/// that the store opened again does too; returns it.
async fn stop_and_reopen_with_ready(
    store: Store<Shard>,
    dir: &std::path::Path,
    events: usize,
) -> Shard {
    let ready = store
        .run(|s, now| Ok(s.queue_stats(now, &q("jobs"))?.ready))
        .await
        .expect("stats");
    assert_eq!(ready, events as u64);
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("clean shutdown");
    let shard = reopen(dir).expect("reopen");
    let stats = shard
        .queue_stats(Timestamp::from_micros(u64::MAX / 2), &q("jobs"))
        .expect("stats");
    assert_eq!(stats.ready, events as u64);
    shard
}

fn enqueue_cmd(id: String) -> EnqueueCmd {
    EnqueueCmd {
        queue: q("jobs"),
        id: Some(EventId::parse(&id).expect("id")),
        idempotency_key: None,
        payload: id.into_bytes().into(),
        headers: BTreeMap::new(),
        activate_at: None,
    }
}

async fn wait_for<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn concurrent_enqueues_survive_shutdown_and_reopen(durability: Durability) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = SimClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let store = Arc::new(start(dir.path(), durability, clock));
    store
        .run(|s, now| s.create_queue(now, q("jobs"), QueueConfig::default()))
        .await
        .expect("create");
    let mut tasks = Vec::new();
    for t in 0..32 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for n in 0..50 {
                let cmd = enqueue_cmd(format!("t{t}-{n}"));
                store
                    .run(move |s, now| s.enqueue(now, cmd))
                    .await
                    .expect("enqueue");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let store = Arc::into_inner(store).expect("sole owner");
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("clean shutdown");
    let wal_files: Vec<_> = std::fs::read_dir(dir.path().join("wal"))
        .expect("wal dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(
        wal_files.len(),
        1,
        "the shutdown checkpoint lets every older segment go"
    );
    let header_only = std::fs::metadata(&wal_files[0]).expect("stat").len();
    assert_eq!(
        header_only, 8,
        "the checkpoint rolled the log where it began: no record it holds is left to read"
    );
    let shard = reopen(dir.path()).expect("reopen");
    let stats = shard
        .queue_stats(Timestamp::from_micros(u64::MAX / 2), &q("jobs"))
        .expect("stats");
    assert_eq!(stats.ready, 32 * 50);
    assert_eq!(
        shard.get(&q("jobs"), "t31-49").expect("get").payload,
        &b"t31-49"[..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_mode_answers_after_the_barrier_and_keeps_everything() {
    concurrent_enqueues_survive_shutdown_and_reopen(Durability::Fsync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interval_mode_keeps_everything_across_a_clean_shutdown() {
    concurrent_enqueues_survive_shutdown_and_reopen(Durability::Interval(Duration::from_millis(
        20,
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_mode_keeps_everything_across_a_clean_shutdown() {
    concurrent_enqueues_survive_shutdown_and_reopen(Durability::None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_expires_leases_as_the_clock_passes_their_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = SimClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let store = start(dir.path(), Durability::Fsync, clock.clone());
    store
        .run(|s, now| s.create_queue(now, q("jobs"), QueueConfig::default()))
        .await
        .expect("create");
    store
        .run(|s, now| s.enqueue(now, enqueue_cmd("x".into())))
        .await
        .expect("enqueue");
    let jobs = || QueueName::parse("jobs").expect("queue");
    let first = store
        .run(move |s, now| s.take(now, &jobs(), 1, Some(Duration::from_secs(5))))
        .await
        .expect("take");
    assert_eq!(first.len(), 1);
    clock.advance(Duration::from_secs(6));
    let again = wait_for("the expired lease to come back", async || {
        let taken = store
            .run(move |s, now| s.take(now, &jobs(), 1, None))
            .await
            .expect("take");
        taken.into_iter().next()
    })
    .await;
    assert_eq!(again.event.attempts, 2);
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("shutdown");
}

/// A template family's sums are kept in memory: after a restart they are summed again from
/// the stored counters of its queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_families_are_summed_again_on_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = SimClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let store = start(dir.path(), Durability::Fsync, clock);
    store
        .run(|s, now| s.create_queue(now, q("inbox:*"), QueueConfig::default()))
        .await
        .expect("template");
    for (n, user) in ["alice", "alice", "bob"].into_iter().enumerate() {
        let cmd = EnqueueCmd {
            queue: q(&format!("inbox:{user}")),
            ..enqueue_cmd(format!("e{n}"))
        };
        store
            .run(move |s, now| s.enqueue(now, cmd))
            .await
            .expect("enqueue");
    }
    let before = store.run(|s, _| Ok(s.family_stats())).await.expect("stats");
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("clean shutdown");
    let shard = reopen(dir.path()).expect("reopen");
    let after = shard.family_stats();
    assert_eq!(after, before);
    assert_eq!((after[0].queues, after[0].stats.ready), (2, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_schedule_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions::default();
    let entry = ScheduleEntry {
        at: Timestamp::from_micros(5_000_000),
        queue: q("jobs"),
        id: EventId::parse("e1").expect("id"),
        version: 3,
    };
    let (kv, wal) = durable::recover(dir.path(), &options).expect("recover");
    let clock = SimClock::new(Timestamp::from_micros(1_000_000));
    let store = Store::start(
        Timer::open(kv, Duration::from_secs(60)).expect("open"),
        wal,
        options.clone(),
        Arc::new(clock),
    );
    let e = entry.clone();
    store
        .run(move |t, _| {
            t.schedule(&[e]);
            Ok(())
        })
        .await
        .expect("schedule");
    let early = store.run(|t, now| t.due(now, 10)).await.expect("due");
    assert!(early.is_empty());
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("shutdown");
    let (kv, _wal) = durable::recover(dir.path(), &options).expect("recover");
    let mut timer = Timer::open(kv, Duration::from_secs(60)).expect("open");
    assert_eq!(
        timer
            .due(Timestamp::from_micros(6_000_000), 10)
            .expect("due"),
        vec![entry]
    );
}

fn bytes_under(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .map(|p| match p.is_dir() {
            true => bytes_under(&p),
            false => std::fs::metadata(&p).expect("metadata").len(),
        })
        .sum()
}

/// With the count bound reached, every new key ages the oldest out: rounds of fresh
/// idempotency keys (each event taken and acknowledged) leave the number of stored entries
/// flat, and the bytes on disk stop growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_stays_bounded_on_disk() {
    const BOUND: u64 = 200;
    const PER_ROUND: usize = 1_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        durability: Durability::None,
        wal_segment_bytes: 64 << 10,
        checkpoint_bytes: 256 << 10,
        ..StoreOptions::default()
    };
    let settings = ShardSettings {
        dedup_max_entries: BOUND,
        ..ShardSettings::default()
    };
    let clock = SimClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let (mut entries, mut bytes) = (Vec::new(), Vec::new());
    for round in 0..12 {
        let (kv, wal) = durable::recover(dir.path(), &options).expect("recover");
        let shard = Shard::new(kv, settings.clone()).expect("shard");
        let store = Store::start(shard, wal, options.clone(), Arc::new(clock.clone()));
        store
            .run(
                |s, now| match s.create_queue(now, q("jobs"), QueueConfig::default()) {
                    Err(cascade_store::StoreError::QueueExists { .. }) => Ok(()),
                    other => other.map(|_| ()),
                },
            )
            .await
            .expect("create");
        for n in 0..PER_ROUND {
            let mut cmd = enqueue_cmd(format!("r{round}-{n}"));
            cmd.id = None;
            cmd.idempotency_key =
                Some(cascade_core::IdempotencyKey::parse(&format!("k{round}-{n}")).expect("key"));
            store
                .run(move |s, now| s.enqueue(now, cmd))
                .await
                .expect("enqueue");
        }
        let taken = store
            .run(|s, now| s.take(now, &q("jobs"), PER_ROUND, None))
            .await
            .expect("take");
        assert_eq!(taken.len(), PER_ROUND);
        for leased in taken {
            store
                .run(move |s, now| {
                    let id = leased.event.id.to_string();
                    s.complete(
                        now,
                        &q("jobs"),
                        &id,
                        leased.token,
                        cascade_core::Outcome::Ack,
                    )
                })
                .await
                .expect("ack");
        }
        let dedup = store
            .run(|s, _| Ok(s.dedup_entries()))
            .await
            .expect("count");
        assert!(dedup <= BOUND, "round {round}: {dedup} dedup entries");
        tokio::task::spawn_blocking(move || store.shutdown())
            .await
            .expect("join")
            .expect("shutdown");
        let (kv, _wal) = durable::recover(dir.path(), &options).expect("reopen");
        entries.push(kv.db().len());
        drop(kv);
        bytes.push(bytes_under(dir.path()));
    }
    // Entries: the queue, its counters and the dedup keys with their age index, whatever
    // the number of keys ever seen.
    assert!(
        entries.iter().all(|&n| n == entries[0]),
        "stored entries vary: {entries:?}"
    );
    assert!(entries[0] as u64 <= 2 * BOUND + 16, "{entries:?}");
    // sled reuses its space once it reaches a steady state: its size then moves up and down
    // by whole 512 KiB segments from one round to the next (seen: 3.2, 3.7, 4.2 and 4.7 MB in
    // any order), so no two samples compare. A store that stops growing comes back down; one
    // that keeps growing never does. So the smallest size of the last four rounds is compared
    // with the largest of the first four, five rounds earlier, with room for three segments
    // (the lowest of those levels against the highest) and one segment of our own log.
    // Without its dedup bound the store grew from 5.3 to 8.4 MB between those rounds.
    const SLACK: u64 = 3 * (512 << 10) + (64 << 10);
    let early = bytes[..4].iter().copied().max().unwrap_or_default();
    let late = bytes[bytes.len() - 4..]
        .iter()
        .copied()
        .min()
        .unwrap_or_default();
    assert!(late <= early + SLACK, "disk use keeps growing: {bytes:?}");
}

/// The LSN of sled's newest snapshot of its page table in `state` (`snap.<LSN in hex>`),
/// which sled writes when it opens.
fn sled_snapshot_lsn(state: &std::path::Path) -> u64 {
    std::fs::read_dir(state)
        .expect("read the sled dir")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().into_string().ok()?;
            u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok()
        })
        .max()
        .unwrap_or(0)
}

/// Checkpoints close sled and open it again now and then, so that it writes a snapshot and a
/// restart does not read everything written since the process started; no write is lost on
/// the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_reopened_between_checkpoints_loses_nothing() {
    const EVENTS: usize = 3_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        durability: Durability::None,
        wal_segment_bytes: 64 << 10,
        checkpoint_bytes: 16 << 10,
        reopen_bytes: 64 << 10,
        ..StoreOptions::default()
    };
    let clock = SimClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let (kv, wal) = durable::recover(dir.path(), &options).expect("recover");
    let shard = Shard::new(kv, ShardSettings::default()).expect("shard");
    let store = Store::start(shard, wal, options.clone(), Arc::new(clock));
    let state = dir.path().join("state");
    let opened_at = sled_snapshot_lsn(&state);
    store
        .run(|s, now| s.create_queue(now, q("jobs"), QueueConfig::default()))
        .await
        .expect("create");
    for n in 0..EVENTS {
        let cmd = enqueue_cmd(format!("e{n}"));
        store
            .run(move |s, now| s.enqueue(now, cmd))
            .await
            .expect("enqueue");
    }
    let reopened_at = sled_snapshot_lsn(&state);
    assert!(
        reopened_at > opened_at,
        "sled was not opened again: its snapshot is still at {opened_at}"
    );
    let shard = stop_and_reopen_with_ready(store, dir.path(), EVENTS).await;
    for n in [0, EVENTS / 2, EVENTS - 1] {
        let id = format!("e{n}");
        assert_eq!(
            shard.get(&q("jobs"), &id).expect("get").payload,
            id.as_bytes()
        );
    }
}

/// A writer faster than sled's checkpoints is held back so that the in-memory layers stay
/// within twice `checkpoint_bytes`, whatever sled's pace, and every write still lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_faster_than_checkpoints_keep_memory_within_twice_checkpoint_bytes() {
    const EVENTS: usize = 2_000;
    const CHECKPOINT: usize = 64 << 10;
    // What one enqueue of a 1-KiB payload adds to the layers, generously: the writer checks
    // the bound after each group it applies, so one enqueue may lie beyond it.
    const ONE_ENQUEUE: usize = 4 << 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = StoreOptions {
        durability: Durability::None,
        checkpoint_bytes: CHECKPOINT,
        ..StoreOptions::default()
    };
    let clock = SimClock::new(Timestamp::from_micros(1_700_000_000_000_000));
    let (kv, wal) = durable::recover(dir.path(), &options).expect("recover");
    let shard = Shard::new(kv, ShardSettings::default()).expect("shard");
    let store = Store::start(shard, wal, options, Arc::new(clock));
    store
        .run(|s, now| s.create_queue(now, q("jobs"), QueueConfig::default()))
        .await
        .expect("create");
    let mut most = 0;
    for n in 0..EVENTS {
        let cmd = EnqueueCmd {
            payload: vec![7; 1024].into(),
            ..enqueue_cmd(format!("e{n}"))
        };
        store
            .run(move |s, now| s.enqueue(now, cmd))
            .await
            .expect("enqueue");
        // A job of its own: it runs after the writer has held back for the enqueue's group.
        let held = store
            .run(|s, _| Ok(s.kv().memory_bytes()))
            .await
            .expect("memory");
        most = most.max(held);
    }
    assert!(
        most <= 2 * CHECKPOINT + ONE_ENQUEUE,
        "the layers held {most} bytes, past twice checkpoint_bytes ({CHECKPOINT})"
    );
    stop_and_reopen_with_ready(store, dir.path(), EVENTS).await;
}
