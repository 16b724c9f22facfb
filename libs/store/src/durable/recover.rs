//! Recovery: open sled and replay the write-ahead log after its checkpoint into the in-memory
//! layers.
//!
//! sled 0.34's open reads its own log since its previous open, seconds for a store of
//! millions of events, and only then says where the last checkpoint stands. So the log is
//! read meanwhile, on the calling thread, from its oldest record, into a layer of its own
//! (`Replayed`). Records the checkpoint already holds are harmless there: records are
//! whole-key writes applied in order, so replaying a contiguous run of them that reaches past
//! the checkpoint leaves every key as it stands after the last record, whatever the run's
//! start. That early replay is used when the log is contiguous and reaches the checkpoint;
//! otherwise (a gap in the log, which is harmless only below the checkpoint, or a log that
//! ends before it) the records after the checkpoint are replayed once sled is open, as if
//! nothing had been read early.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::StoreError;
use crate::kv::{Batch, Kv, Replayed, checkpoint};
use crate::wal::{Lsn, ScannedLog, Wal, WalError, WalOptions};

use super::{StoreOptions, check_format, identity};

/// Opens the store in `dir` (creating it) and replays its log. Returns the state and the log
/// positioned for appends.
pub fn recover(dir: &Path, options: &StoreOptions) -> Result<(Kv, Wal), StoreError> {
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io("create", dir, e))?;
    if created && let Some(parent) = dir.parent() {
        checkpoint::fsync_path(parent)?;
    }
    let state_dir = dir.join("state");
    let wal_dir = dir.join("wal");
    let state_created = !state_dir.exists();
    // 0 until sled has said where the checkpoint stands: no record has LSN 0.
    let checkpoint_known = AtomicU64::new(0);
    let (opened, open_took, read, read_took) = std::thread::scope(|scope| {
        let opening = std::thread::Builder::new()
            .name("cascade-sled-open".into())
            .spawn_scoped(scope, || {
                let started = Instant::now();
                let opened = open_state(&state_dir, options);
                if let Ok((_, checkpoint_lsn)) = &opened {
                    checkpoint_known.store(*checkpoint_lsn, Ordering::Release);
                }
                (opened, started.elapsed())
            })
            .map_err(|e| StoreError::io("start a thread to open", &state_dir, e))?;
        let started = Instant::now();
        let read = read_early(&wal_dir, &checkpoint_known);
        let read_took = started.elapsed();
        let (opened, open_took) = opening
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok::<_, StoreError>((opened, open_took, read, read_took))
    })?;
    // sled's refusals (format, cluster) come first, as they would without the early read.
    let (mut kv, checkpoint_lsn) = opened?;
    if state_created {
        // sled made `state/`; its entry must be durable before a checkpoint lets the log go.
        checkpoint::fsync_path(dir)?;
    }
    let (log, early) = read?;
    let log_end = log.last_lsn();
    let wal = log.open(
        WalOptions {
            segment_bytes: options.wal_segment_bytes,
        },
        checkpoint_lsn,
    )?;
    let (replayed, records, early) = match early.filter(|e| e.usable(checkpoint_lsn, log_end)) {
        Some(early) => (early.replayed, early.records, true),
        None => {
            let mut replayed = Replayed::default();
            let records = replay(wal.read_after(checkpoint_lsn)?, &wal_dir, |_, batch| {
                replayed.apply(batch)
            })?;
            (replayed, records, false)
        }
    };
    kv.adopt(replayed);
    tracing::info!(
        dir = %dir.display(),
        checkpoint_lsn,
        replayed = records,
        early,
        sled_open_ms = open_took.as_millis() as u64,
        early_read_ms = read_took.as_millis() as u64,
        last_lsn = wal.last_lsn(),
        "store.recover"
    );
    Ok((kv, wal))
}

/// Opens sled in `state_dir`, checks what it says about the store, and reads where its last
/// checkpoint stands.
fn open_state(state_dir: &Path, options: &StoreOptions) -> Result<(Kv, Lsn), StoreError> {
    let kv = Kv::open(state_dir, options.cache_bytes)?;
    check_format(&kv)?;
    if let Some(cluster) = &options.cluster {
        identity::check(&kv, cluster)?;
    }
    let checkpoint_lsn = checkpoint::lsn(kv.db(), state_dir)?;
    Ok((kv, checkpoint_lsn))
}

/// The log's records replayed before the checkpoint's position was known.
struct EarlyReplay {
    replayed: Replayed,
    records: u64,
    /// The first record applied; those before it were skipped as the checkpoint's.
    first_applied: Option<Lsn>,
}

impl EarlyReplay {
    /// Whether this replay leaves every key as replaying only what follows `checkpoint_lsn`
    /// would: it ran contiguously from `first_applied` to the log's end (`log_end`), and it
    /// either began after the checkpoint or went past it. A log that ends before the
    /// checkpoint misses records sled has, which a key's older value must not hide.
    fn usable(&self, checkpoint_lsn: Lsn, log_end: Lsn) -> bool {
        self.first_applied
            .is_none_or(|first| first > checkpoint_lsn || log_end >= checkpoint_lsn)
    }
}

/// Scans the log in `wal_dir` and, when it is contiguous, replays it from its oldest record.
/// Until a record is applied, those at or below `checkpoint_known` (0 while sled is still
/// opening) are skipped; after one is applied, every later one is, so that what is applied is
/// one contiguous run. `None` when the replay cannot be used as it is: a gap, or a record that
/// does not read back, which the replay after the checkpoint reports if it is one it needs.
fn read_early(
    wal_dir: &Path,
    checkpoint_known: &AtomicU64,
) -> Result<(ScannedLog, Option<EarlyReplay>), StoreError> {
    let log = ScannedLog::scan(wal_dir)?;
    if !log.is_contiguous() {
        return Ok((log, None));
    }
    let mut early = EarlyReplay {
        replayed: Replayed::default(),
        records: 0,
        first_applied: None,
    };
    let mut skipping = true;
    let records = log.read_all().filter(|record| {
        let Ok((lsn, _)) = record else {
            return true;
        };
        skipping = skipping && *lsn <= checkpoint_known.load(Ordering::Acquire);
        !skipping
    });
    let applied = replay(records, wal_dir, |lsn, batch| {
        early.first_applied.get_or_insert(lsn);
        early.replayed.apply(batch);
    });
    Ok((
        log,
        applied.ok().map(|records| EarlyReplay { records, ..early }),
    ))
}

/// Decodes each record and hands it to `apply`; returns how many there were.
fn replay(
    records: impl Iterator<Item = Result<(Lsn, Vec<u8>), WalError>>,
    wal_dir: &Path,
    mut apply: impl FnMut(Lsn, Batch),
) -> Result<u64, StoreError> {
    let mut count = 0;
    for record in records {
        let (lsn, bytes) = record?;
        let batch = Batch::decode(&bytes)
            .map_err(|e| StoreError::corrupt(wal_dir, format!("log record {lsn}: {e}")))?;
        apply(lsn, batch);
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(batch: &mut Batch, key: &[u8], value: &[u8]) {
        batch.put(key.to_vec(), value.to_vec());
    }

    fn value(kv: &Kv, key: &[u8]) -> Option<Vec<u8>> {
        kv.get(key).expect("get").map(|v| v.to_vec())
    }

    /// Appends one record and makes it durable; returns its LSN.
    fn append(wal: &mut Wal, batch: &Batch) -> Lsn {
        let lsn = wal.append(&batch.encode()).expect("append");
        wal.sync().expect("sync");
        lsn
    }

    /// Records the checkpoint holds are replayed too when the log is read before sled says
    /// where it stands: the result is the same as replaying only what follows it.
    #[test]
    fn a_replay_from_the_oldest_record_ends_where_the_checkpoint_and_the_rest_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = StoreOptions::default();
        {
            let (mut kv, mut wal) = recover(dir.path(), &options).expect("create");
            let mut first = Batch::default();
            put(&mut first, b"\x10a", b"a1");
            put(&mut first, b"\x10gone", b"g");
            append(&mut wal, &first);
            kv.apply(first);
            let mut second = Batch::default();
            put(&mut second, b"\x10a", b"a2");
            second.delete(b"\x10gone".to_vec());
            let checkpoint_lsn = append(&mut wal, &second);
            kv.apply(second);
            let layer = kv.freeze();
            checkpoint::write(kv.db(), kv.dir(), &layer, checkpoint_lsn).expect("checkpoint");
            drop(kv.finish_checkpoint());
            let mut third = Batch::default();
            put(&mut third, b"\x10b", b"b1");
            append(&mut wal, &third);
        }
        let (kv, wal) = recover(dir.path(), &options).expect("recover");
        assert_eq!(value(&kv, b"\x10a").as_deref(), Some(&b"a2"[..]));
        assert_eq!(value(&kv, b"\x10gone"), None);
        assert_eq!(value(&kv, b"\x10b").as_deref(), Some(&b"b1"[..]));
        assert_eq!(wal.last_lsn(), 3);
    }

    /// A log that ends before the checkpoint lacks records sled has: an older value in it must
    /// not hide sled's, nor later, once a gap separates it from the records that follow.
    #[test]
    fn a_log_that_ends_before_the_checkpoint_hides_nothing_sled_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = StoreOptions::default();
        {
            let (mut kv, mut wal) = recover(dir.path(), &options).expect("create");
            let mut old = Batch::default();
            put(&mut old, b"\x10k", b"old");
            put(&mut old, b"\x10j", b"old");
            assert_eq!(append(&mut wal, &old), 1);
            // sled holds later values, at a position the log never reached.
            let mut later = Batch::default();
            put(&mut later, b"\x10k", b"later");
            put(&mut later, b"\x10j", b"later");
            kv.apply(later);
            let layer = kv.freeze();
            checkpoint::write(kv.db(), kv.dir(), &layer, 5).expect("checkpoint");
        }
        {
            let (kv, mut wal) = recover(dir.path(), &options).expect("recover");
            assert_eq!(value(&kv, b"\x10k").as_deref(), Some(&b"later"[..]));
            assert_eq!(value(&kv, b"\x10j").as_deref(), Some(&b"later"[..]));
            let mut after = Batch::default();
            put(&mut after, b"\x10k", b"after");
            assert_eq!(
                append(&mut wal, &after),
                6,
                "a new segment after the checkpoint"
            );
        }
        let (kv, _wal) = recover(dir.path(), &options).expect("recover across the gap");
        assert_eq!(value(&kv, b"\x10k").as_deref(), Some(&b"after"[..]));
        assert_eq!(value(&kv, b"\x10j").as_deref(), Some(&b"later"[..]));
    }

    /// Once sled has said where the checkpoint stands, the records it holds are skipped, but
    /// only before the first record is applied: what is applied is one contiguous run.
    #[test]
    fn the_early_replay_skips_what_the_checkpoint_holds_only_before_it_applies_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let wal_dir = dir.path().join("wal");
        {
            let mut wal = Wal::open(&wal_dir, WalOptions::default(), 0).expect("open");
            for i in 0..5u8 {
                let mut batch = Batch::default();
                put(&mut batch, b"\x10k", &[i]);
                append(&mut wal, &batch);
            }
        }
        let known = AtomicU64::new(3);
        let (_, early) = read_early(&wal_dir, &known).expect("read");
        let early = early.expect("a contiguous log is replayed");
        assert_eq!((early.first_applied, early.records), (Some(4), 2));
        let unknown = AtomicU64::new(0);
        let (_, early) = read_early(&wal_dir, &unknown).expect("read");
        let early = early.expect("a contiguous log is replayed");
        assert_eq!((early.first_applied, early.records), (Some(1), 5));
    }

    #[test]
    fn an_early_replay_is_used_when_it_ran_past_the_checkpoint_or_began_after_it() {
        let early = |first_applied| EarlyReplay {
            replayed: Replayed::default(),
            records: 0,
            first_applied,
        };
        // (first applied, checkpoint, log end) → usable
        let cases = [
            (None, 7, 0, true),
            (Some(1), 7, 9, true),
            (Some(1), 7, 7, true),
            (Some(8), 7, 9, true),
            (Some(1), 7, 6, false),
        ];
        for (first, checkpoint_lsn, log_end, usable) in cases {
            assert_eq!(
                early(first).usable(checkpoint_lsn, log_end),
                usable,
                "{first:?} {checkpoint_lsn} {log_end}"
            );
        }
    }
}
