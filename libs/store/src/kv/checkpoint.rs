//! Writing a frozen layer into sled durably. sled 0.34's `flush` ends in `sync_file_range`,
//! which flushes neither the disk cache nor metadata, and large values live in blob files it
//! never fsyncs; so after the flush every file and directory of the store is fsynced through
//! our own handles. Only then may the log segments the checkpoint covers be deleted.

use std::fs::File;
use std::path::Path;

use super::Layer;
use crate::codec::{keys, records};
use crate::error::StoreError;

/// The last log record the checkpointed state includes: a fact about this copy of the store
/// and its log, not part of its contents (an export leaves it out).
pub(crate) const CHECKPOINT_LSN: &str = "checkpoint_lsn";

/// Writes `layer` into sled key by key, then the checkpoint's log position, then makes the
/// store durable. Runs on a background thread; the shard keeps serving meanwhile, reading
/// sled as it goes: that is why this never uses a sled batch (see `kv::open_sled`).
///
/// Not atomic, and need not be: until the position is written and durable, recovery replays
/// the log from the previous checkpoint, which rewrites every key of this layer (whole-key
/// writes, in order, leaving tombstones; see `Kv::replay`).
pub fn write(db: &sled::Db, dir: &Path, layer: &Layer, lsn: u64) -> Result<(), StoreError> {
    for (key, dirty) in layer.iter() {
        match &dirty.value {
            Some(v) => db.insert(key.as_slice(), v.as_slice()).map(drop),
            None => db.remove(key.as_slice()).map(drop),
        }
        .map_err(|e| StoreError::sled("apply a checkpoint", dir, e))?;
    }
    // Flushed and synced before the position is written: sled must not claim a position
    // whose keys could still be lost.
    db.flush()
        .map_err(|e| StoreError::sled("flush a checkpoint", dir, e))?;
    fsync_tree(dir)?;
    db.insert(keys::meta(CHECKPOINT_LSN), records::encode_u64(lsn))
        .map_err(|e| StoreError::sled("write the checkpoint position", dir, e))?;
    db.flush()
        .map_err(|e| StoreError::sled("flush a checkpoint", dir, e))?;
    fsync_tree(dir)
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

/// fsyncs every file and directory under `dir`, and `dir` itself.
pub fn fsync_tree(dir: &Path) -> Result<(), StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| StoreError::io("list", dir, e))?.path();
        if path.is_dir() {
            fsync_tree(&path)?;
        } else {
            fsync_path(&path)?;
        }
    }
    fsync_path(dir)
}

pub fn fsync_path(path: &Path) -> Result<(), StoreError> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| StoreError::Fsync {
            path: path.to_path_buf(),
            source: e,
        })
}
