//! A small key-value layer: sled below, in-memory layers above it, writes in atomic batches.
//! The shard's write-ahead log makes each batch durable; sled only receives the layers at
//! checkpoints, so a key written and deleted between two checkpoints never reaches sled.

mod batch;
pub mod checkpoint;
mod layers;

use std::cmp::Ordering;
use std::path::{Path, PathBuf};

pub use batch::{Batch, Op};
pub use layers::{Layer, Value};

use crate::error::StoreError;
use layers::Layers;

/// How long `open` waits for another handle in this process to release the store.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Batches read back from the log during recovery (while sled opens) or by a tool, gathered
/// into a layer that the store then takes (`Kv::adopt`).
#[derive(Default)]
pub struct Replayed(Layers);

impl Replayed {
    /// Applies a batch read back from the log: no put counts as fresh, since sled may hold
    /// any key of an interrupted checkpoint (see `Layers::apply`).
    pub fn apply(&mut self, batch: Batch) {
        self.0.apply(batch, true);
    }
}

/// Whether a scan goes on after the key it just visited.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

pub struct Kv {
    /// `None` between closing sled and opening it again in `reopen_sled`, and after a
    /// reopen failed: reads then fail with `Stopped` (the store stops on that failure).
    db: Option<sled::Db>,
    dir: PathBuf,
    cache_bytes: u64,
    layers: Layers,
}

/// Opens sled in `dir` with its own periodic flush off: that flush is no durability
/// barrier, and checkpoints flush and fsync it themselves.
///
/// Stores write sled one key at a time, never through a batch or a transaction: sled 0.34's
/// first batch or transaction in a process switches every sled tree of the process, each
/// shard's, to one global reader-writer lock, and each batch then holds it exclusively, so a
/// checkpoint's batches would stall every shard's reads. (`clippy.toml` forbids both.)
pub fn open_sled(dir: &Path, cache_bytes: u64) -> Result<sled::Db, StoreError> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(cache_bytes)
        .flush_every_ms(None)
        .mode(sled::Mode::HighThroughput);
    // After a close, sled's background writers may hold the file lock a moment longer:
    // an opener in the same process waits for them rather than failing.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut partial_removed = false;
    loop {
        match config.open() {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(sled::Error::Corruption { .. })
                if !partial_removed && remove_partial_snapshots(dir) =>
            {
                partial_removed = true;
            }
            result => return result.map_err(|e| StoreError::sled("open the store", dir, e)),
        }
    }
}

/// sled writes a snapshot of its page table at every open, as `snap.<lsn>.generating`,
/// renamed into place once complete and fsynced (the previous one is deleted after that).
/// A process killed before the rename leaves it behind, and sled 0.34's next open takes it
/// for the newest snapshot and refuses the store as corrupt. Such a file is not needed while
/// a complete snapshot is beside it, and only then is it removed. Returns whether one was;
/// a failure to list or remove leaves sled's own error to be reported.
fn remove_partial_snapshots(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let snapshots: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap."))
        })
        .collect();
    let (partial, complete): (Vec<_>, Vec<_>) = snapshots
        .into_iter()
        .partition(|path| path.extension().is_some_and(|e| e == "generating"));
    if complete.is_empty() {
        return false;
    }
    let mut removed = false;
    for path in partial {
        tracing::warn!(path = %path.display(), "removing a snapshot sled left half-written");
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) => tracing::warn!(path = %path.display(), error = %e, "could not remove it"),
        }
    }
    removed
}

impl Kv {
    /// Opens (or creates) the sled store in `dir`.
    pub fn open(dir: &Path, cache_bytes: u64) -> Result<Kv, StoreError> {
        Ok(Kv {
            db: Some(open_sled(dir, cache_bytes)?),
            dir: dir.to_path_buf(),
            cache_bytes,
            layers: Layers::default(),
        })
    }

    /// Closes sled and opens it again, which makes it write a snapshot of its page table:
    /// sled 0.34 writes one only at open, and an open reads its whole log since the last
    /// snapshot, so without this a restart reads everything written since the process
    /// started. Only between checkpoints (no other handle may hold sled open). On an error
    /// the store cannot go on: the caller stops it.
    pub fn reopen_sled(&mut self) -> Result<(), StoreError> {
        assert!(self.layers.frozen.is_none(), "no checkpoint may run");
        self.db = None;
        self.db = Some(open_sled(&self.dir, self.cache_bytes)?);
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// sled itself, for checkpoints and tools. Panics after a failed `reopen_sled`, which
    /// stops the store before it would start another checkpoint.
    pub fn db(&self) -> &sled::Db {
        self.db
            .as_ref()
            .expect("sled is open: only a failed reopen leaves it closed, and that stops the store")
    }

    fn sled(&self) -> Result<&sled::Db, StoreError> {
        self.db.as_ref().ok_or_else(|| StoreError::Stopped {
            reason: "the store could not open sled again".into(),
        })
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Value<'_>>, StoreError> {
        if let Some(mem) = self.layers.get(key) {
            return Ok(mem.map(Value::Mem));
        }
        self.sled()?
            .get(key)
            .map(|v| v.map(Value::Disk))
            .map_err(|e| StoreError::sled("read", &self.dir, e))
    }

    /// Visits the live keys in `[start, end)` in order, merging the layers (upper wins).
    pub fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<Flow, StoreError>,
    ) -> Result<(), StoreError> {
        if start >= end {
            return Ok(()); // Empty, as a `Range` whose start is not below its end.
        }
        let mut active = self.layers.active.range(start, end).peekable();
        let mut frozen = self
            .layers
            .frozen
            .as_ref()
            .map(|f| f.range(start, end).peekable());
        let mut disk = self.sled()?.range(start..end);
        let mut disk_head = next_disk(&mut disk, &self.dir)?;
        loop {
            // At each step: the lowest key in memory, which layers hold it, and whether sled
            // holds a lower one or the same.
            let active_head = active.peek().map(|(k, _)| k.as_slice());
            let frozen_head = frozen
                .as_mut()
                .and_then(|f| f.peek())
                .map(|(k, _)| k.as_slice());
            let (from_active, from_frozen) = match (active_head, frozen_head) {
                (Some(a), Some(f)) => {
                    let order = a.cmp(f);
                    (order.is_le(), order.is_ge())
                }
                (a, f) => (a.is_some(), f.is_some()),
            };
            let in_memory = if from_active {
                active_head
            } else {
                frozen_head
            };
            let disk_order = match (&disk_head, in_memory) {
                (Some((k, _)), Some(m)) => Some((**k).cmp(m)),
                (Some(_), None) => Some(Ordering::Less),
                (None, _) => None,
            };
            if disk_order == Some(Ordering::Less)
                && let Some((k, v)) = disk_head.take()
            {
                disk_head = next_disk(&mut disk, &self.dir)?;
                if visit(&k, &v)? == Flow::Stop {
                    return Ok(());
                }
                continue;
            }
            let Some(key) = in_memory else {
                return Ok(());
            };
            // The uppermost layer holding the key wins; every layer moves past it. Memory
            // keys and values are visited where they lie, without a copy.
            let mut value = None;
            if from_active {
                value = active.next().map(|(_, d)| d.value.as_deref());
            }
            if from_frozen && let Some((_, d)) = frozen.as_mut().and_then(Iterator::next) {
                value.get_or_insert(d.value.as_deref());
            }
            if disk_order == Some(Ordering::Equal) {
                disk_head = next_disk(&mut disk, &self.dir)?;
            }
            if let Some(Some(v)) = value
                && visit(key, v)? == Flow::Stop
            {
                return Ok(());
            }
        }
    }

    /// Applies `batch` to the in-memory layer, taking its keys and values.
    pub fn apply(&mut self, batch: Batch) {
        self.layers.apply(batch, false);
    }

    /// Takes the changes of a log read back before sled was open as its in-memory layer;
    /// the store must have no change of its own yet.
    pub fn adopt(&mut self, replayed: Replayed) {
        assert!(
            self.layers.active.is_empty() && self.layers.frozen.is_none(),
            "a replay is adopted before any change"
        );
        self.layers = replayed.0;
    }

    /// Changes not yet checkpointed nor being checkpointed.
    pub fn dirty_bytes(&self) -> usize {
        self.layers.active_bytes()
    }

    /// Memory held by the changes not yet in sled, those being checkpointed included.
    pub fn memory_bytes(&self) -> usize {
        self.layers.bytes()
    }

    pub fn checkpoint_running(&self) -> bool {
        self.layers.frozen.is_some()
    }

    /// Starts a checkpoint: the active layer is frozen and handed to the caller, who writes it
    /// into sled (`checkpoint::write`) and then calls `finish_checkpoint`.
    pub fn freeze(&mut self) -> std::sync::Arc<Layer> {
        self.layers.freeze()
    }

    /// The checkpoint is in sled: reads stop looking at its layer, which is returned (freeing
    /// millions of keys takes a while).
    pub fn finish_checkpoint(&mut self) -> Option<std::sync::Arc<Layer>> {
        self.layers.thaw()
    }
}

fn next_disk(
    iter: &mut sled::Iter,
    dir: &Path,
) -> Result<Option<(sled::IVec, sled::IVec)>, StoreError> {
    iter.next()
        .transpose()
        .map_err(|e| StoreError::sled("scan", dir, e))
}

/// One state transition being built: its reads see its own earlier writes, then the store.
pub struct Txn<'a> {
    kv: &'a Kv,
    batch: Batch,
}

impl<'a> Txn<'a> {
    pub fn new(kv: &'a Kv) -> Self {
        Txn {
            kv,
            batch: Batch::default(),
        }
    }

    pub fn kv(&self) -> &'a Kv {
        self.kv
    }

    /// This transaction's own latest write to `key`, if it made one: `Some(None)` if it
    /// deletes it.
    pub fn own(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.batch.lookup(key)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Value<'_>>, StoreError> {
        match self.own(key) {
            Some(own) => Ok(own.map(Value::Mem)),
            None => self.kv.get(key),
        }
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.batch.put(key, value);
    }

    pub fn put_fresh(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.batch.put_fresh(key, value);
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.batch.delete(key);
    }

    pub fn into_batch(self) -> Batch {
        self.batch
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn collect(kv: &Kv) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        kv.scan(b"", &[0xff], |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(Flow::Continue)
        })
        .expect("scan");
        out
    }

    /// sled writes a snapshot at every open, as `snap.<lsn>.generating` renamed into place
    /// once complete; a process killed before the rename left a partial one that sled 0.34's
    /// next open took for the newest snapshot and refused as corrupt.
    #[test]
    fn a_snapshot_left_half_written_by_a_killed_open_is_ignored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Kv::open(dir.path(), 1 << 20).expect("create");
        kv.db().insert(b"k", b"v").expect("insert");
        kv.db().flush().expect("flush");
        drop(kv);
        drop(Kv::open(dir.path(), 1 << 20).expect("an open writes a complete snapshot"));
        let snapshots = || {
            let names = std::fs::read_dir(dir.path()).expect("list");
            let names = names.map(|e| e.expect("entry").file_name().into_string().expect("name"));
            names.filter(|n| n.starts_with("snap.")).count()
        };
        assert_eq!(snapshots(), 1);
        std::fs::write(
            dir.path().join("snap.7FFFFFFFFFFFFFFF.generating"),
            b"half a snapshot",
        )
        .expect("write");
        let kv = Kv::open(dir.path(), 1 << 20).expect("opens");
        assert_eq!(kv.get(b"k").expect("get").as_deref(), Some(&b"v"[..]));
        drop(kv);
        assert_eq!(snapshots(), 1, "the half-written one is gone");
    }

    #[test]
    fn layers_merge_with_upper_winning_and_tombstones_hiding() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
        kv.db().insert(b"a", b"disk-a").expect("insert");
        kv.db().insert(b"b", b"disk-b").expect("insert");
        kv.db().insert(b"d", b"disk-d").expect("insert");
        let mut b = Batch::default();
        b.put(b"b".to_vec(), b"mem-b".to_vec());
        b.put_fresh(b"c".to_vec(), b"mem-c".to_vec());
        b.delete(b"d".to_vec());
        kv.apply(b);
        let _frozen = kv.freeze();
        let mut top = Batch::default();
        top.delete(b"a".to_vec());
        top.put(b"c".to_vec(), b"top-c".to_vec());
        kv.apply(top);
        assert_eq!(
            collect(&kv),
            vec![
                (b"b".to_vec(), b"mem-b".to_vec()),
                (b"c".to_vec(), b"top-c".to_vec())
            ]
        );
        assert!(kv.get(b"a").expect("get").is_none());
        assert_eq!(kv.get(b"b").expect("get").as_deref(), Some(&b"mem-b"[..]));
    }

    /// Key bytes at the edges of the layers' keyspaces (a map per first byte).
    const EDGES: [u8; 7] = [0x00, 0x01, b'a', 0x7f, 0x80, 0xfe, 0xff];

    /// Random writes to sled, to a frozen layer and to the active one, scanned over random
    /// ranges and stopped at random points: the same keys and values as a map of what each
    /// key holds now.
    #[test]
    fn scans_see_each_key_as_its_uppermost_layer_holds_it() {
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..40 {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
            let mut now: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let byte = |rng: &mut fastrand::Rng| EDGES[rng.usize(..EDGES.len())];
            let key = |rng: &mut fastrand::Rng| vec![byte(rng), byte(rng)];
            for n in 0..rng.usize(0..30) {
                let (k, v) = (key(&mut rng), format!("disk-{n}").into_bytes());
                kv.db().insert(&k, v.clone()).expect("insert");
                now.insert(k, v);
            }
            // Two layers of writes; the first one frozen half the time, as in a checkpoint.
            for layer in 0..2 {
                let mut batch = Batch::default();
                for n in 0..rng.usize(0..30) {
                    let k = key(&mut rng);
                    if rng.bool() {
                        let v = format!("mem{layer}-{n}").into_bytes();
                        batch.put(k.clone(), v.clone());
                        now.insert(k, v);
                    } else {
                        batch.delete(k.clone());
                        now.remove(&k);
                    }
                }
                kv.apply(batch);
                if layer == 0 && rng.bool() {
                    kv.freeze();
                }
            }
            for _ in 0..20 {
                // Bounds of any length, in either order: those between stored keys, before
                // and after all of them, and reversed (an empty scan) are all visited.
                let bound = |rng: &mut fastrand::Rng| {
                    let len = rng.usize(0..4);
                    (0..len).map(|_| byte(rng)).collect::<Vec<u8>>()
                };
                let (start, end) = (bound(&mut rng), bound(&mut rng));
                let stop_after = rng.usize(1..12);
                let mut seen = Vec::new();
                kv.scan(&start, &end, |k, v| {
                    seen.push((k.to_vec(), v.to_vec()));
                    Ok(if seen.len() == stop_after {
                        Flow::Stop
                    } else {
                        Flow::Continue
                    })
                })
                .expect("scan");
                let expected: Vec<(Vec<u8>, Vec<u8>)> = match start < end {
                    true => now
                        .range(start.clone()..end.clone())
                        .take(stop_after)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                    false => Vec::new(),
                };
                let frozen = kv.checkpoint_running();
                assert_eq!(
                    seen, expected,
                    "scan {start:?}..{end:?} stopped after {stop_after}, a frozen layer: {frozen}"
                );
            }
        }
    }

    /// The layers keep a map per keyspace (first byte): a scan crosses them in key order,
    /// from the empty key to keys of the last keyspace, and stops at a bound inside one.
    #[test]
    fn scans_cross_keyspaces_in_key_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
        let keys: [&[u8]; 7] = [
            b"",
            &[0],
            &[0, 9],
            &[0x7f, 1],
            &[0x80],
            &[0xff],
            &[0xff, 0xff],
        ];
        let mut batch = Batch::default();
        for key in keys.iter().rev() {
            batch.put(key.to_vec(), key.to_vec());
        }
        kv.apply(batch);
        let scanned = |start: &[u8], end: &[u8]| {
            let mut seen = Vec::new();
            kv.scan(start, end, |k, _| {
                seen.push(k.to_vec());
                Ok(Flow::Continue)
            })
            .expect("scan");
            seen
        };
        let all: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        assert_eq!(scanned(b"", &[0xff, 0xff, 0]), all);
        assert_eq!(scanned(&[0, 1], &[0xff, 0xff]), all[2..6]);
        assert_eq!(scanned(&[0x7f], &[0x80]), all[3..4]);
        for key in keys {
            assert_eq!(kv.get(key).expect("get").as_deref(), Some(key));
        }
        assert_eq!(kv.freeze().len(), keys.len());
    }

    #[test]
    fn fresh_key_deleted_before_checkpoint_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
        let mut b = Batch::default();
        b.put_fresh(b"k".to_vec(), b"v".to_vec());
        kv.apply(b);
        let mut d = Batch::default();
        d.delete(b"k".to_vec());
        kv.apply(d);
        assert!(kv.freeze().is_empty());
    }

    #[test]
    fn reopening_sled_keeps_what_checkpoints_wrote() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
        let mut b = Batch::default();
        b.put_fresh(b"kept".to_vec(), b"v".to_vec());
        kv.apply(b);
        let layer = kv.freeze();
        checkpoint::write(kv.db(), dir.path(), &layer, 7).expect("checkpoint");
        kv.finish_checkpoint();
        let mut above = Batch::default();
        above.put_fresh(b"in memory".to_vec(), b"m".to_vec());
        kv.apply(above);

        kv.reopen_sled().expect("reopen");
        assert_eq!(kv.get(b"kept").expect("get").as_deref(), Some(&b"v"[..]));
        assert_eq!(
            kv.get(b"in memory").expect("get").as_deref(),
            Some(&b"m"[..])
        );
        assert_eq!(checkpoint::lsn(kv.db(), dir.path()).expect("lsn"), 7);
        kv.db()
            .insert(b"after", b"a")
            .expect("sled takes writes after the reopen");
    }

    #[test]
    fn a_checkpoint_counts_each_key_it_wrote_deletes_included() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
        let mut b = Batch::default();
        for i in 0..10u8 {
            b.put_fresh(vec![b'k', i], b"v".to_vec());
        }
        b.delete(b"below".to_vec());
        kv.apply(b);
        let layer = kv.freeze();
        let progress = checkpoint::Progress::default();
        assert_eq!(progress.written(), 0);
        checkpoint::write_paced(kv.db(), dir.path(), &layer, 1, &mut progress.clone().pace())
            .expect("checkpoint");
        assert_eq!(progress.written(), 11);
    }

    #[test]
    fn after_a_failed_reopen_reads_answer_stopped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("state");
        let mut kv = Kv::open(&state, 1 << 20).expect("open");
        // sled's directory goes away under it, and a file takes its place: it cannot open.
        std::fs::rename(&state, dir.path().join("moved")).expect("move sled's directory");
        std::fs::write(&state, b"not a directory").expect("write");
        assert!(kv.reopen_sled().is_err());
        assert!(matches!(kv.get(b"k"), Err(StoreError::Stopped { .. })));
        let scanned = kv.scan(b"a", b"z", |_, _| Ok(Flow::Continue));
        assert!(matches!(scanned, Err(StoreError::Stopped { .. })));
    }

    #[test]
    fn a_frozen_layer_counts_in_memory_until_its_checkpoint_lands() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut kv = Kv::open(dir.path(), 1 << 20).expect("open");
        let mut b = Batch::default();
        b.put_fresh(b"k".to_vec(), vec![0; 1000]);
        kv.apply(b);
        let held = kv.memory_bytes();
        assert!(held >= 1000, "{held}");
        let _frozen = kv.freeze();
        assert_eq!((kv.dirty_bytes(), kv.memory_bytes()), (0, held));
        let mut more = Batch::default();
        more.put_fresh(b"j".to_vec(), vec![0; 500]);
        kv.apply(more);
        let dirty = kv.dirty_bytes();
        assert_eq!(kv.memory_bytes(), held + dirty);
        kv.finish_checkpoint();
        assert_eq!(kv.memory_bytes(), dirty);
    }
}
