//! Corruption: a flipped byte in the middle of the log is refused with the file and offset;
//! a torn log tail recovers exactly the records before it; a damaged store never serves a
//! damaged payload.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cascade_core::{EventId, QueueConfig, Timestamp};
use cascade_store::shard::EnqueueCmd;
use cascade_store::{Shard, ShardSettings, StoreOptions, durable};
use common::{events, q, reopen};

const T: Timestamp = Timestamp::from_micros(1_700_000_000_000_000);

fn payload(i: usize) -> Vec<u8> {
    format!("PAYLOAD-MARKER-{i:06}-").repeat(8).into_bytes()
}

/// Writes `n` events to a new store, one log record each, synced; with `checkpoint`,
/// ends with a clean shutdown (a checkpoint into sled) instead of leaving them in the log.
fn write_events(dir: &Path, n: usize, checkpoint: bool) {
    let options = StoreOptions {
        wal_segment_bytes: 4 << 10,
        ..StoreOptions::default()
    };
    let (kv, mut wal) = durable::recover(dir, &options).expect("create");
    let mut shard = Shard::new(kv, ShardSettings::default()).expect("shard");
    shard
        .create_queue(T, q("jobs"), QueueConfig::default())
        .expect("create queue");
    for i in 0..n {
        let cmd = EnqueueCmd {
            queue: q("jobs"),
            id: Some(EventId::parse(&format!("e{i:06}")).expect("id")),
            idempotency_key: None,
            payload: payload(i).into(),
            headers: BTreeMap::new(),
            activate_at: None,
        };
        shard.enqueue(T, cmd).expect("enqueue");
        for record in shard.take_unlogged() {
            wal.append(&record).expect("append");
        }
        wal.sync().expect("sync");
    }
    if checkpoint {
        use cascade_store::durable::Maintenance;
        let layer = shard.kv_mut().freeze();
        let state = dir.join("state");
        let lsn = wal.last_lsn();
        cascade_store::kv::checkpoint::write(shard.kv().db(), &state, &layer, lsn)
            .expect("checkpoint");
        // As the store does after a checkpoint: a restart then reads sled's copy of what
        // the checkpoint holds, not the log's.
        wal.roll().expect("roll");
        wal.detach_through(lsn)
            .and_then(|covered| covered.remove())
            .expect("delete the covered segments");
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("wal"))
        .expect("wal dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

#[test]
fn flipped_byte_in_the_middle_of_the_log_is_refused_naming_file_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_events(dir.path(), 100, false);
    let segs = segments(dir.path());
    assert!(
        segs.len() >= 3,
        "expected several segments, got {}",
        segs.len()
    );
    let victim = &segs[1];
    let mut bytes = std::fs::read(victim).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(victim, bytes).expect("write");
    let report = durable::verify(dir.path()).expect("verify");
    assert_eq!(report.problems.len(), 1, "{report:?}");
    let err = reopen(dir.path())
        .err()
        .expect("a corrupt log must be refused");
    let msg = err.to_string();
    let name = victim
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(msg.contains(&name), "message does not name the file: {msg}");
    assert!(
        msg.contains("offset"),
        "message does not name the offset: {msg}"
    );
    assert_eq!(err.code(), cascade_core::Code::Internal, "{msg}");
}

/// A checkpointed store whose log is gone, the directory or only its segments: the
/// records after the checkpoint may have gone with it, so it is refused, and verify says so.
#[test]
fn a_checkpointed_store_whose_log_is_gone_is_refused() {
    for remove_dir in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        write_events(dir.path(), 20, true);
        match remove_dir {
            true => std::fs::remove_dir_all(dir.path().join("wal")).expect("remove the log"),
            false => segments(dir.path())
                .iter()
                .for_each(|s| std::fs::remove_file(s).expect("remove a segment")),
        }
        let report = durable::verify(dir.path()).expect("verify");
        assert_eq!(report.problems.len(), 1, "{report:?}");
        assert!(report.problems[0].contains("has no segment"), "{report:?}");
        let err = reopen(dir.path()).err().expect("a store without its log");
        let msg = err.to_string();
        assert!(msg.contains("has no segment"), "{msg}");
        assert!(msg.contains("cascade data verify"), "{msg}");
    }
}

#[test]
fn torn_tail_recovers_exactly_the_records_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_events(dir.path(), 50, false);
    let last = segments(dir.path()).pop().expect("a segment");
    let len = std::fs::metadata(&last).expect("metadata").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .expect("open");
    file.set_len(len - 3).expect("truncate");
    drop(file);
    let report = durable::verify(dir.path()).expect("verify");
    assert!(report.is_healthy(), "{report:?}");
    assert_eq!(report.notes.len(), 1, "the torn tail is noted: {report:?}");
    let shard = reopen(dir.path()).expect("a torn tail is recovered");
    let stored = events(&shard, "jobs");
    let expected: Vec<String> = (0..49).map(|i| format!("e{i:06}")).collect();
    let got: Vec<String> = stored.iter().map(|e| e.id.to_string()).collect();
    assert_eq!(got, expected);
    for (i, ev) in stored.iter().enumerate() {
        assert_eq!(ev.payload, payload(i));
    }
}

#[test]
fn damaged_payload_in_the_store_is_never_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_events(dir.path(), 200, true);
    {
        // Flip one payload byte of a stored event behind the shard's back.
        // Through `Kv::open`, which waits for the writer's sled lock to be released.
        let kv =
            cascade_store::kv::Kv::open(&dir.path().join("state"), 16 << 20).expect("open sled");
        let db = kv.db();
        let marker = b"PAYLOAD-MARKER-000123-";
        let (key, mut value) = db
            .iter()
            .map(|kv| kv.expect("read sled"))
            .find(|(_, v)| find(v, marker).is_some())
            .map(|(k, v)| (k, v.to_vec()))
            .expect("the event is in sled after the checkpoint");
        let at = find(&value, marker).expect("marker") + 3;
        value[at] ^= 0x20;
        db.insert(key, value).expect("write back");
        db.flush().expect("flush");
    }
    let report = durable::verify(dir.path()).expect("verify");
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(report.problems[0].contains("checksum"), "{report:?}");
    let mut shard = reopen(dir.path()).expect("reopen");
    let err = shard
        .get(&q("jobs"), "e000123")
        .expect_err("a damaged payload must not be served");
    assert_eq!(err.code(), cascade_core::Code::DataLoss, "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
    // Takes deliver the events before it, then stop at it with the same error.
    let taken = shard
        .take(T, &q("jobs"), 123, None)
        .expect("take the intact ones");
    assert_eq!(taken.len(), 123);
    let err = shard
        .take(T, &q("jobs"), 10, None)
        .expect_err("never delivered");
    assert_eq!(err.code(), cascade_core::Code::DataLoss, "{err}");
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
