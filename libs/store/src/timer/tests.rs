//! The schedule: due order, idempotent schedule and cancel, in-flight until acknowledged,
//! and only the near future in memory.

use std::time::Duration;

use cascade_core::{EventId, QueueName, Timestamp};

use super::*;
use crate::codec::records;

fn entry(secs: u64, id: &str, version: u64) -> ScheduleEntry {
    ScheduleEntry {
        at: Timestamp::from_micros(secs * 1_000_000),
        queue: QueueName::parse("jobs").expect("queue"),
        id: EventId::parse(id).expect("id"),
        version,
    }
}

fn timer() -> (tempfile::TempDir, Timer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("kv");
    (dir, Timer::open(kv, Duration::from_secs(60)).expect("open"))
}

fn secs(s: u64) -> Timestamp {
    Timestamp::from_micros(s * 1_000_000)
}

#[test]
fn due_entries_come_in_time_order_and_stay_until_acknowledged() {
    let (_d, mut t) = timer();
    t.schedule(&[entry(30, "b", 1), entry(10, "a", 1), entry(500, "c", 1)]);
    t.schedule(&[entry(10, "a", 1)]);
    assert!(t.due(secs(5), 10).expect("due").is_empty());
    let due = t.due(secs(40), 10).expect("due");
    assert_eq!(due, vec![entry(10, "a", 1), entry(30, "b", 1)]);
    assert!(t.due(secs(40), 10).expect("due").is_empty(), "in flight");
    t.release(&due[1..]);
    assert_eq!(t.due(secs(40), 10).expect("due"), vec![entry(30, "b", 1)]);
    t.acknowledge(&due);
    assert_eq!(t.due(secs(600), 10).expect("due"), vec![entry(500, "c", 1)]);
}

#[test]
fn cancel_names_the_entry_as_scheduled() {
    let (_d, mut t) = timer();
    t.schedule(&[entry(10, "a", 1), entry(10, "a", 2)]);
    assert!(!t.cancel(&entry(11, "a", 1)).expect("another time"));
    assert!(t.cancel(&entry(10, "a", 1)).expect("cancel"));
    assert!(!t.cancel(&entry(10, "a", 1)).expect("again"));
    assert_eq!(t.due(secs(20), 10).expect("due"), vec![entry(10, "a", 2)]);
}

#[test]
fn open_deletes_the_index_earlier_builds_kept_and_logs_that() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("kv");
    let mut earlier = Batch::default();
    earlier.put(entry_key(&entry(10, "a", 1)), Vec::new());
    earlier.put(
        keys::legacy_schedule_index("jobs", "a", 1),
        records::encode_u64(secs(10).as_micros()),
    );
    kv.apply(earlier);
    let mut t = Timer::open(kv, Duration::from_secs(60)).expect("open");
    let (start, end) = keys::legacy_schedule_index_space();
    let mut left = 0;
    t.kv.scan(&start, &end, |_, _| {
        left += 1;
        Ok(Flow::Continue)
    })
    .expect("scan");
    assert_eq!(left, 0);
    assert_eq!(t.take_unlogged().len(), 1, "the deletion goes to the log");
    assert_eq!(t.due(secs(20), 10).expect("due"), vec![entry(10, "a", 1)]);

    let (_d, mut current) = timer();
    assert!(
        current.take_unlogged().is_empty(),
        "nothing to delete, nothing logged"
    );
}

#[test]
fn only_the_near_future_is_held_in_memory() {
    let (_d, mut t) = timer();
    let far: Vec<ScheduleEntry> = (0..1000)
        .map(|i| entry(3600 + i, &format!("e{i}"), 1))
        .collect();
    t.schedule(&far);
    t.schedule(&[entry(1, "soon", 1)]);
    assert_eq!(t.due(secs(2), 10).expect("due").len(), 1);
    assert_eq!(t.in_memory(), 1, "only the in-flight entry");
    assert_eq!(t.due(secs(3600 + 999), 2000).expect("due").len(), 1000);
}

/// A backlog of overdue entries (the dispatcher down for hours) is held in memory a part
/// at a time, and every entry still fires once, in time order; entries of one instant cut
/// by a load are all found.
#[test]
fn an_overdue_backlog_is_loaded_a_part_at_a_time() {
    let (_d, mut t) = timer();
    t.max_in_memory = 4;
    let backlog: Vec<ScheduleEntry> = (0..10)
        .map(|i| entry(10 + i / 3, &format!("e{i}"), 1))
        .collect();
    t.schedule(&backlog);
    let mut fired = Vec::new();
    loop {
        let due = t.due(secs(3600), 3).expect("due");
        assert!(t.in_memory() <= 4, "{} held", t.in_memory());
        if due.is_empty() {
            break;
        }
        t.acknowledge(&due);
        fired.extend(due);
    }
    assert_eq!(fired, backlog);
    // Loaded up to the time reached, and past it once all fired.
    assert_eq!(t.loaded_until(), secs(3600 + 60));
}

#[test]
fn due_counts_per_queue_and_bucket_with_a_bounded_scan() {
    let (_d, mut t) = timer();
    let other = |secs: u64, id: &str| ScheduleEntry {
        queue: QueueName::parse("mail").expect("queue"),
        ..entry(secs, id, 1)
    };
    t.schedule(&[
        entry(5, "overdue", 1),
        entry(20, "a", 1),
        entry(30, "b", 1),
        entry(45, "c", 1),
        other(40, "m"),
        entry(500, "late", 1),
    ]);
    let jobs = QueueName::parse("jobs").expect("queue");
    let mail = QueueName::parse("mail").expect("queue");
    let both = BTreeSet::from([jobs.clone(), mail.clone()]);
    // Bounds 30 s and 60 s: "overdue", "a" and "b" (at the bound) go to the first bucket.
    let counts = t
        .due_counts(&[secs(30), secs(60)], &both, 100)
        .expect("counts");
    assert_eq!(counts.bounds, vec![secs(30), secs(60)]);
    assert_eq!(counts.queues.get(&jobs), Some(&vec![3, 1]));
    assert_eq!(counts.queues.get(&mail), Some(&vec![0, 1]));
    assert_eq!(
        counts.queues.len(),
        2,
        "nothing due past the last bound is counted"
    );
    // A limit of 4 reads up to "m" at 40 s: the last bucket ends there.
    let counts = t
        .due_counts(&[secs(30), secs(60)], &both, 4)
        .expect("counts");
    assert_eq!(counts.bounds, vec![secs(30), secs(40)]);
    assert_eq!(counts.queues.get(&jobs), Some(&vec![3, 0]));
    assert_eq!(counts.queues.get(&mail), Some(&vec![0, 1]));
    // Only the queues asked for are counted.
    let only_mail = BTreeSet::from([mail.clone()]);
    let counts = t.due_counts(&[secs(60)], &only_mail, 100).expect("counts");
    assert_eq!(
        counts.queues.into_iter().collect::<Vec<_>>(),
        vec![(mail.clone(), vec![1])]
    );
    // Once time moved on, what is due before the loaded horizon (81 s) is counted from
    // memory: "overdue" fired and was acknowledged, "a" is in flight, "late" is beyond.
    let fired = t.due(secs(21), 2).expect("due");
    t.acknowledge(&fired[..1]);
    let counts = t
        .due_counts(&[secs(30), secs(600)], &both, 100)
        .expect("counts");
    assert_eq!(counts.queues.get(&jobs), Some(&vec![2, 2]));
    assert_eq!(counts.queues.get(&mail), Some(&vec![0, 1]));
    // The limit cuts in time order across memory and the store: a, b, m, c.
    let counts = t
        .due_counts(&[secs(30), secs(600)], &both, 4)
        .expect("counts");
    assert_eq!(counts.bounds, vec![secs(30), secs(45)]);
    assert_eq!(counts.queues.get(&jobs), Some(&vec![2, 1]));
    assert_eq!(counts.queues.get(&mail), Some(&vec![0, 1]));
}
