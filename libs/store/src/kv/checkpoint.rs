//! Writing a frozen layer into sled durably. sled 0.34's `flush` ends in `sync_file_range`,
//! which flushes neither the disk cache nor metadata, and large values live in blob files it
//! never fsyncs; so after the flush every file and directory of the store is fsynced through
//! our own handles. Only then may the log segments the checkpoint covers be deleted.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::Layer;
use crate::codec::{keys, records};
use crate::error::StoreError;

/// The last log record the checkpointed state includes: a fact about this copy of the store
/// and its log, not part of its contents (an export leaves it out).
pub(crate) const CHECKPOINT_LSN: &str = "checkpoint_lsn";

/// How long an unhurried checkpoint writes into sled before it rests.
const SLICE: Duration = Duration::from_millis(1);
/// An unhurried checkpoint rests this many times as long as it worked...
const REST_PER_WORK: u32 = 4;
/// ...but never longer than this at once, so that a hurry is heard soon.
const MAX_REST: Duration = Duration::from_millis(10);

/// How fast a checkpoint writes into sled. Unhurried, it rests four times as long as it
/// works, so it takes at most a fifth of a core and of the write rate it could reach. At full
/// rate sled keeps the disk busy writing its segments, and every fsync of the log, which is
/// what each acknowledgement waits for, queues behind those writes: on the benchmark machine a
/// checkpoint every 2 s took the lateness p99 of delayed events from 2 to 5-10 ms.
/// The store's writer hurries a checkpoint when it must not be slow ([`Progress::hurry`]).
pub struct Pace {
    progress: Progress,
    slice_started: Instant,
}

/// What a running checkpoint and the store's writer share: whether it goes flat out, and how
/// many of its keys it has written into sled (the writer lets new work in as that grows).
/// Clones share both.
#[derive(Clone, Default)]
pub struct Progress(Arc<Shared>);

#[derive(Default)]
struct Shared {
    hurried: AtomicBool,
    written: AtomicUsize,
}

impl Progress {
    /// Makes the checkpoint go flat out from now on.
    pub fn hurry(&self) {
        self.0.hurried.store(true, Ordering::Relaxed);
    }

    fn is_hurried(&self) -> bool {
        self.0.hurried.load(Ordering::Relaxed)
    }

    /// The keys of its layer the checkpoint has written into sled so far.
    pub fn written(&self) -> usize {
        self.0.written.load(Ordering::Relaxed)
    }

    /// A pace, starting now, that goes flat out once hurried and counts what it wrote here.
    pub fn pace(self) -> Pace {
        Pace {
            progress: self,
            slice_started: Instant::now(),
        }
    }
}

impl Pace {
    /// Never rests.
    pub fn flat_out() -> Pace {
        let progress = Progress::default();
        progress.hurry();
        progress.pace()
    }

    /// Called before each key: rests once a slice of work is done, unless hurried.
    fn step(&mut self) {
        if self.progress.is_hurried() {
            return;
        }
        if let Some(rest) = rest_after(self.slice_started.elapsed()) {
            std::thread::sleep(rest);
            self.slice_started = Instant::now();
        }
    }

    fn wrote_one(&self) {
        self.progress.0.written.fetch_add(1, Ordering::Relaxed);
    }
}

/// The rest that `worked` without a rest has earned, once it is a slice or more.
fn rest_after(worked: Duration) -> Option<Duration> {
    (worked >= SLICE).then(|| (worked * REST_PER_WORK).min(MAX_REST))
}

/// [`write_paced`] flat out.
pub fn write(db: &sled::Db, dir: &Path, layer: &Layer, lsn: u64) -> Result<Duration, StoreError> {
    write_paced(db, dir, layer, lsn, &mut Pace::flat_out())
}

/// Writes `layer` into sled key by key at `pace`, then the checkpoint's log position, then
/// makes the store durable; returns how long that last part took (flushes and fsyncs), which
/// the writer cannot see coming in [`Progress::written`]. Runs on a background thread; the
/// shard keeps serving meanwhile, reading sled as it goes: that is why this never uses a sled
/// batch (see `kv::open_sled`).
///
/// Not atomic, and need not be: until the position is written and durable, recovery replays
/// the log from the previous checkpoint, which rewrites every key of this layer (whole-key
/// writes, in order, leaving tombstones; see `Replayed::apply`).
pub fn write_paced(
    db: &sled::Db,
    dir: &Path,
    layer: &Layer,
    lsn: u64,
    pace: &mut Pace,
) -> Result<Duration, StoreError> {
    for (key, dirty) in layer.iter() {
        pace.step();
        match &dirty.value {
            Some(v) => db.insert(key.as_slice(), v.as_slice()).map(drop),
            None => db.remove(key.as_slice()).map(drop),
        }
        .map_err(|e| StoreError::sled("apply a checkpoint", dir, e))?;
        pace.wrote_one();
    }
    let landing = Instant::now();
    // Flushed and synced before the position is written: sled must not claim a position
    // whose keys could still be lost.
    db.flush()
        .map_err(|e| StoreError::sled("flush a checkpoint", dir, e))?;
    fsync_tree(dir)?;
    db.insert(keys::meta(CHECKPOINT_LSN), records::encode_u64(lsn))
        .map_err(|e| StoreError::sled("write the checkpoint position", dir, e))?;
    db.flush()
        .map_err(|e| StoreError::sled("flush a checkpoint", dir, e))?;
    fsync_tree(dir)?;
    Ok(landing.elapsed())
}

/// The log position the store contains, 0 for a new store.
pub fn lsn(db: &sled::Db, dir: &Path) -> Result<u64, StoreError> {
    let value = db
        .get(keys::meta(CHECKPOINT_LSN))
        .map_err(|e| StoreError::sled("read the checkpoint position", dir, e))?;
    match value {
        None => Ok(0),
        Some(v) => records::decode_u64(&v, "checkpoint position")
            .map_err(|e| StoreError::corrupt(dir, e.to_string())),
    }
}

/// fsyncs every file and directory under `dir`, and `dir` itself. An entry gone between the
/// listing and its fsync is passed over: sled deletes the files of large values it no longer
/// needs on its own threads, even after a flush returned, and a deleted file has nothing left
/// to make durable (the directory's own fsync, last, covers its removal).
pub fn fsync_tree(dir: &Path) -> Result<(), StoreError> {
    sync_tree(dir).map_err(|(path, source)| StoreError::Fsync { path, source })
}

fn sync_tree(dir: &Path) -> Result<(), (PathBuf, std::io::Error)> {
    let failed = |e| (dir.to_path_buf(), e);
    for entry in std::fs::read_dir(dir).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        let path = entry.path();
        let synced = match entry.file_type() {
            Ok(kind) if kind.is_dir() => sync_tree(&path),
            _ => File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| (path.clone(), e)),
        };
        match synced {
            Err((_, e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    File::open(dir).and_then(|f| f.sync_all()).map_err(failed)
}

pub fn fsync_path(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StoreError::Fsync {
            path: path.to_path_buf(),
            source: e,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file gone between the listing and its fsync (here a link to nothing, which opens as
    /// a deleted file does) is passed over; the rest is synced.
    #[test]
    fn a_file_gone_before_its_fsync_is_passed_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let blobs = dir.path().join("blobs");
        std::fs::create_dir(&blobs).expect("mkdir");
        std::fs::write(blobs.join("kept"), b"x").expect("write");
        std::os::unix::fs::symlink(blobs.join("deleted"), blobs.join("gone")).expect("link");
        fsync_tree(dir.path()).expect("synced");
        let missing = fsync_tree(&dir.path().join("nowhere")).expect_err("no such directory");
        assert!(matches!(missing, StoreError::Fsync { .. }), "{missing:?}");
    }

    #[test]
    fn a_checkpoint_rests_four_times_what_it_worked_once_a_slice_is_done() {
        assert_eq!(rest_after(SLICE / 2), None);
        assert_eq!(rest_after(SLICE), Some(SLICE * REST_PER_WORK));
        assert_eq!(rest_after(SLICE * 2), Some(SLICE * 2 * REST_PER_WORK));
        assert_eq!(rest_after(Duration::from_secs(1)), Some(MAX_REST));
    }

    #[test]
    fn a_pace_rests_after_a_slice_until_hurried() {
        let progress = Progress::default();
        let mut pace = progress.clone().pace();
        // As if a second of work had gone by without a rest.
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .expect("the machine has been up a second");
        pace.slice_started = long_ago;
        pace.step();
        assert!(pace.slice_started > long_ago, "a rest starts a new slice");
        progress.hurry();
        pace.slice_started = long_ago;
        pace.step();
        assert_eq!(pace.slice_started, long_ago, "a hurried pace does not rest");
        assert!(Pace::flat_out().progress.is_hurried());
    }
}
