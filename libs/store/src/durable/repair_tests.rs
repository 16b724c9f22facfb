//! Repair against real store directories: damage in sled and in the log, and a healthy store
//! that is left alone.

use std::fs;
use std::path::Path;

use super::super::new_store::REPLACED_MARKER as REPLACED;
use super::super::test_store::{at, event, fill, jobs_counts, keyed, open, q};
use super::super::{StoreOptions, export, import, recover};
use super::*;
use crate::kv::open_sled;

#[test]
fn a_healthy_store_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    fill(&store);
    assert!(repair(&store, false).expect("repair").is_none());
    let names: Vec<_> = fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["store"]);
}

/// The store of `fill` with everything in sled (an import writes there), and the event
/// whose payload is "three" damaged on disk.
fn with_a_damaged_event(dir: &Path) -> std::path::PathBuf {
    let source = dir.join("source");
    fill(&source);
    let file = dir.join("export");
    export(&source, &file).expect("export");
    let store = dir.join("store");
    import(&file, &store).expect("import");
    let db = open_sled(&store.join("state"), 1 << 20).expect("sled");
    let (key, mut value) = db
        .scan_prefix([keys::EVENT])
        .map(|entry| entry.expect("read"))
        .find(|(k, v)| records::decode_event(k, v).is_ok_and(|e| e.payload == b"three"[..]))
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .expect("the event");
    let last = value.len() - 1;
    value[last] ^= 0x20;
    db.insert(key, value).expect("damage");
    db.flush().expect("flush");
    store
}

#[test]
fn a_damaged_event_is_dropped_and_the_rest_kept_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = with_a_damaged_event(dir.path());
    assert!(!verify::verify(&store).expect("verify").is_healthy());

    let report = repair(&store, false).expect("repair").expect("repaired");
    assert_eq!(report.dropped_count, 1, "{report:?}");
    assert!(report.dropped[0].contains("payload checksum"), "{report:?}");
    assert_eq!(report.counts_corrected, 1, "jobs had one ready event fewer");
    assert_eq!(
        report.schedules_queued, 1,
        "the delayed event's schedule, again"
    );
    assert_eq!(report.log.stopped, None);
    assert_eq!(report.contents.events, 6);
    assert!(
        report.damaged.join("state").is_dir(),
        "the damaged store is kept"
    );
    assert!(report.damaged.join(REPLACED).exists(), "and marked");
    assert!(!store.join(REPLACED).exists());
    assert!(verify::verify(&store).expect("verify").is_healthy());

    assert_eq!(jobs_counts(&store), [2, 1, 2]);
    let (mut shard, _wal) = open(&store);
    let taken = shard.take(at(5), &q("jobs"), 10, None).expect("take");
    let mut payloads: Vec<_> = taken.iter().map(|l| l.event.payload.clone()).collect();
    payloads.sort();
    assert_eq!(payloads, [b"four".to_vec(), b"keyed".to_vec()]);

    // Numbers given out from now on are new: far past any the lost records may have used.
    let fresh = shard
        .enqueue(at(6), event("jobs", "fresh"))
        .expect("enqueue");
    let version = shard
        .get(&q("jobs"), fresh.id.as_str())
        .expect("get")
        .version;
    assert!(version > SEQUENCE_GAP, "{version}");
    assert!(
        taken.iter().all(|l| l.token.0 > SEQUENCE_GAP),
        "lease epochs jumped too"
    );
    // The idempotency key's entry is counted once, and still dedups.
    assert_eq!(shard.dedup_entries(), 1);
    assert!(shard.enqueue(at(6), keyed()).expect("again").duplicate);
}

/// A crash after the new store took the old one's place, before the old one was moved
/// aside, leaves the old one where the new one was built, marked: the next repair keeps it.
#[test]
fn a_replaced_store_left_by_a_crash_is_not_started_over_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = with_a_damaged_event(dir.path());
    let left = dir.path().join("store.building");
    fs::create_dir_all(left.join("state")).expect("a store left behind");
    fs::write(left.join(REPLACED), b"").expect("marked");
    let err = repair(&store, false).expect_err("refused");
    assert!(
        err.to_string()
            .contains("the store an earlier repair replaced"),
        "{err}"
    );
    assert!(left.join("state").is_dir(), "kept");
    assert!(
        !verify::verify(&store).expect("verify").is_healthy(),
        "unchanged"
    );
}

#[test]
fn a_damaged_store_set_aside_takes_a_name_no_other_has() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    assert_eq!(free_name(&store, 5), dir.path().join("store.damaged-5"));
    fs::create_dir(dir.path().join("store.damaged-5")).expect("taken");
    fs::create_dir(dir.path().join("store.damaged-5-2")).expect("taken");
    assert_eq!(free_name(&store, 5), dir.path().join("store.damaged-5-3"));
}

#[test]
fn export_refuses_a_damaged_store_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = with_a_damaged_event(dir.path());
    let file = dir.path().join("out.export");
    let e = export(&store, &file).expect_err("refused").to_string();
    assert!(
        e.contains("payload checksum") && e.contains("repair"),
        "{e}"
    );
    assert!(!file.exists());
    assert!(!dir.path().join("out.export.partial").exists());
}

#[test]
fn a_forced_repair_of_a_healthy_store_schedules_its_delayed_events_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    fill(&store);
    let report = repair(&store, true).expect("repair").expect("repaired");
    assert_eq!(
        (
            report.dropped_count,
            report.counts_corrected,
            report.schedules_queued
        ),
        (0, 0, 1),
        "{report:?}"
    );
    assert_eq!(jobs_counts(&store), [3, 1, 2]);
}

#[test]
fn a_timer_entry_lost_beside_an_earlier_builds_index_comes_back_from_it() {
    use crate::timer::{ScheduleEntry, Timer};

    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("timer");
    let (kv, mut wal) = recover(&source, &StoreOptions::default()).expect("recover");
    let mut timer = Timer::open(kv, std::time::Duration::from_secs(60)).expect("open");
    let entry = |id: &str| ScheduleEntry {
        at: at(100),
        queue: q("jobs"),
        id: cascade_core::EventId::parse(id).expect("id"),
        version: 7,
    };
    timer.schedule(&[entry("a"), entry("b")]);
    for record in crate::durable::Maintenance::take_unlogged(&mut timer) {
        wal.append(&record).expect("append");
    }
    wal.sync().expect("sync");
    drop((timer, wal));
    let file = dir.path().join("export");
    export(&source, &file).expect("export");
    let store = dir.path().join("store");
    import(&file, &store).expect("import");
    // `b` loses its entry; the index an earlier build kept of it survives.
    let db = open_sled(&store.join("state"), 1 << 20).expect("sled");
    db.remove(keys::schedule(at(100).as_micros(), "jobs", "b", 7))
        .expect("remove");
    db.insert(
        keys::legacy_schedule_index("jobs", "b", 7),
        records::encode_u64(at(100).as_micros()),
    )
    .expect("insert");
    db.flush().expect("flush");
    drop(db);

    let report = repair(&store, true).expect("repair").expect("repaired");
    assert_eq!(report.contents.schedules, 2, "{report:?}");
    let (kv, _wal) = recover(&store, &StoreOptions::default()).expect("recover");
    let mut timer = Timer::open(kv, std::time::Duration::from_secs(60)).expect("open");
    for id in ["a", "b"] {
        let cancelled = timer.cancel(&entry(id)).expect("cancel");
        assert!(cancelled, "{id} is scheduled");
    }
}

#[test]
fn a_damaged_log_is_replayed_up_to_the_damage() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    fill(&store);
    let segment = fs::read_dir(store.join("wal"))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "wal"))
        .expect("a segment");
    let mut bytes = fs::read(&segment).expect("read");
    let middle = bytes.len() * 3 / 5;
    bytes[middle] ^= 0x01;
    fs::write(&segment, &bytes).expect("damage");
    assert!(
        recover(&store, &StoreOptions::default()).is_err(),
        "opening refuses it"
    );

    let report = repair(&store, false).expect("repair").expect("repaired");
    let stopped = report.log.stopped.clone().expect("where it stopped");
    assert!(stopped.contains(".wal"), "{stopped}");
    assert!(report.log.records > 0, "{report:?}");
    assert!(verify::verify(&store).expect("verify").is_healthy());
    // What the records before the damage made: at least the queue, consistent.
    let (shard, _wal) = open(&store);
    let stats = shard.queue_stats(at(4), &q("jobs")).expect("jobs");
    assert_eq!(
        stats.ready + stats.delayed + stats.leased,
        report.contents.events - inbox(&shard)
    );
}

/// Events in `inbox:alice`, if its record made it.
fn inbox(shard: &crate::shard::Shard) -> u64 {
    shard
        .queue_stats(at(4), &q("inbox:alice"))
        .map_or(0, |s| s.ready)
}
