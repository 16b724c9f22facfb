//! Power loss: a SIGKILL keeps the page cache, so the crash test cannot lose unsynced data.
//! This test drives the shard, its log and its checkpoints step by step, keeps an image of
//! exactly what was durable (sled as copied right after its last checkpoint's fsync, each
//! log file at its length at the last `fdatasync`), then builds the disk a power cut would
//! leave: that image plus a random part of the unsynced log tail. Recovery from it must
//! hold every acknowledged write.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cascade_core::{EventId, Outcome, QueueConfig, Timestamp};
use cascade_store::durable::Maintenance;
use cascade_store::kv::checkpoint;
use cascade_store::shard::EnqueueCmd;
use cascade_store::wal::Wal;
use cascade_store::{Shard, ShardSettings, StoreOptions, durable};
use common::{assert_counters_match, q, reopen};

const STEPS: usize = 3000;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("file name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy file");
        }
    }
}

fn file_lengths(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .expect("read wal dir")
        .map(|e| {
            let e = e.expect("entry");
            let len = e.metadata().expect("metadata").len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect()
}

/// What was acknowledged: synced to the log.
#[derive(Default)]
struct Ledger {
    present: BTreeMap<String, Vec<u8>>,
    absent: BTreeSet<String>,
    pending_present: Vec<(String, Vec<u8>)>,
    pending_absent: Vec<String>,
}

impl Ledger {
    fn synced(&mut self) {
        for (id, payload) in self.pending_present.drain(..) {
            self.present.insert(id, payload);
        }
        for id in self.pending_absent.drain(..) {
            self.present.remove(&id);
            self.absent.insert(id);
        }
    }
}

fn log(shard: &mut Shard, wal: &mut Wal) {
    for record in shard.take_unlogged() {
        wal.append(&record).expect("append");
    }
}

fn now(step: usize) -> Timestamp {
    Timestamp::from_micros(1_700_000_000_000_000 + step as u64 * 1000)
}

#[test]
fn power_cut_keeps_every_acknowledged_write() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("shard");
    let options = StoreOptions {
        wal_segment_bytes: 16 << 10,
        ..StoreOptions::default()
    };
    let (kv, mut wal) = durable::recover(&dir, &options).expect("create");
    let mut shard = Shard::new(kv, ShardSettings::default()).expect("shard");
    let state_dir = dir.join("state");
    let image = root.path().join("image");
    copy_dir(&state_dir, &image.join("0"));
    let mut image_gen = 0;
    shard
        .create_queue(now(0), q("jobs"), QueueConfig::default())
        .expect("create queue");
    log(&mut shard, &mut wal);
    wal.sync().expect("sync");
    let mut durable_wal = file_lengths(wal.dir());
    let mut ledger = Ledger::default();
    let mut rng = fastrand::Rng::with_seed(0x90e7);
    for step in 1..=STEPS {
        if rng.u8(0..10) < 8 {
            let id = format!("e{step}");
            let payload = vec![rng.u8(..); rng.usize(0..300)];
            let cmd = EnqueueCmd {
                queue: q("jobs"),
                id: Some(EventId::parse(&id).expect("id")),
                idempotency_key: None,
                payload: payload.clone().into(),
                headers: BTreeMap::new(),
                activate_at: None,
            };
            shard.enqueue(now(step), cmd).expect("enqueue");
            ledger.pending_present.push((id, payload));
        } else {
            let taken = shard.take(now(step), &q("jobs"), 3, None).expect("take");
            for l in taken {
                let id = l.event.id.to_string();
                shard
                    .complete(now(step), &q("jobs"), &id, l.token, Outcome::Ack)
                    .expect("ack");
                ledger.pending_absent.push(id);
            }
        }
        log(&mut shard, &mut wal);
        if step % 7 == 0 {
            wal.sync().expect("sync");
            ledger.synced();
            durable_wal = file_lengths(wal.dir());
        }
        if step % 450 == 0 {
            wal.sync().expect("sync before checkpoint");
            ledger.synced();
            let layer = shard.kv_mut().freeze();
            let lsn = wal.last_lsn();
            checkpoint::write(shard.kv().db(), &state_dir, &layer, lsn).expect("checkpoint");
            shard.kv_mut().finish_checkpoint();
            image_gen += 1;
            copy_dir(&state_dir, &image.join(image_gen.to_string()));
            let covered = wal.detach_through(lsn).expect("detach old segments");
            covered.remove().expect("remove old segments");
            durable_wal = file_lengths(wal.dir());
        }
    }
    // Writes after the last sync reach the page cache only.
    for i in 0..20 {
        let cmd = EnqueueCmd {
            queue: q("jobs"),
            id: Some(EventId::parse(&format!("unsynced{i}")).expect("id")),
            idempotency_key: None,
            payload: vec![7; 100].into(),
            headers: BTreeMap::new(),
            activate_at: None,
        };
        shard.enqueue(now(STEPS + 1), cmd).expect("enqueue");
        log(&mut shard, &mut wal);
    }
    wal.write_buffered().expect("write");
    assert!(image_gen >= 5, "too few checkpoints: {image_gen}");
    assert!(ledger.absent.len() > 100 && ledger.present.len() > 100);

    // The disk after the cut: the last checkpoint's sled, each log file at its synced
    // length plus a random part of what was written after.
    let crash = root.path().join("crash");
    copy_dir(&image.join(image_gen.to_string()), &crash.join("state"));
    std::fs::create_dir_all(crash.join("wal")).expect("wal dir");
    for (name, synced_len) in &durable_wal {
        let bytes = std::fs::read(wal.dir().join(name)).expect("read segment");
        let len = (*synced_len as usize + rng.usize(0..=bytes.len() - *synced_len as usize))
            .min(bytes.len());
        std::fs::write(crash.join("wal").join(name), &bytes[..len]).expect("write segment");
    }
    drop(shard);
    drop(wal);

    let recovered = reopen(&crash).expect("recover after the power cut");
    // An operation after the last sync was never acknowledged: it may or may not survive.
    let unacknowledged: BTreeSet<&String> = ledger.pending_absent.iter().collect();
    for (id, payload) in ledger
        .present
        .iter()
        .filter(|(id, _)| !unacknowledged.contains(id))
    {
        let ev = recovered
            .get(&q("jobs"), id)
            .unwrap_or_else(|e| panic!("acknowledged {id} lost: {e}"));
        assert_eq!(&ev.payload, payload, "payload of {id}");
    }
    for id in &ledger.absent {
        assert!(
            recovered.get(&q("jobs"), id).is_err(),
            "acknowledged ack of {id} undone"
        );
    }
    assert_counters_match(&recovered, "jobs");
}
