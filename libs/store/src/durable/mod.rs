//! Durability for a state machine over `Kv`: opening and recovering a store directory (`recover`), and the
//! `Store` actor that runs operations on one writer thread and answers them only after their
//! log records are durable (group commit).
//!
//! Layout of a store directory: `state/` is sled, `wal/` the write-ahead log. Recovery opens
//! sled, reads the log position of its last checkpoint, and replays the later log records into
//! the in-memory layers; replay is idempotent because records are whole-key writes applied in
//! order, and it leaves a tombstone for every delete because an interrupted checkpoint may
//! have written any key of its layer into sled. A store or log that fails its checks is refused, never repaired in place (except a
//! torn log tail, which only an unacknowledged write can leave); `repair` rebuilds one beside
//! it when an operator asks, and `export`/`import` copy a stopped store through a file.

mod actor;
mod backpressure;
mod disk;
mod export;
mod identity;
mod new_store;
mod options;
mod recover;
mod repair;
#[cfg(test)]
mod test_store;
mod verify;

use std::path::Path;

pub use actor::{Maintenance, Store};
pub use disk::{DiskState, DiskWatch, Watermark};
pub use export::{export, import};
pub use new_store::Contents;
pub use options::{ClusterIdentity, Durability, StoreOptions};
pub use recover::recover;
pub use repair::{RepairReport, repair};
pub use verify::{VerifyReport, verify};

use crate::codec::{keys, records};
use crate::error::StoreError;
use crate::kv::{Kv, checkpoint};

/// A new store gets the format version; an existing one must have one this build reads, and
/// an older one is marked with this build's (what the newer format adds is built when the
/// shard or timer opens it), so that an older build no longer opens it.
fn check_format(kv: &Kv) -> Result<(), StoreError> {
    let key = keys::meta("format");
    let db = kv.db();
    match db
        .get(&key)
        .map_err(|e| StoreError::sled("read the format", kv.dir(), e))?
    {
        Some(v) => {
            let found = records::decode_u64(&v, "store format")
                .map_err(|e| StoreError::corrupt(kv.dir(), e.to_string()))?;
            if !keys::readable_format(found) {
                return Err(StoreError::corrupt(
                    kv.dir(),
                    format!(
                        "store format {found}, this build reads formats up to {}",
                        keys::FORMAT_VERSION
                    ),
                ));
            }
            if found == keys::FORMAT_VERSION {
                return Ok(());
            }
            write_meta(
                kv,
                key,
                records::encode_u64(keys::FORMAT_VERSION),
                "write the format",
            )
        }
        None if db.is_empty() => write_meta(
            kv,
            key,
            records::encode_u64(keys::FORMAT_VERSION),
            "write the format",
        ),
        None => Err(StoreError::corrupt(
            kv.dir(),
            "store has data but no format version".into(),
        )),
    }
}

/// The `state/` directory of the store in `dir`, for an offline tool; refused when there is
/// none, saying where a shard's store is (its parent, the data directory, is a common slip).
fn tool_state_dir(dir: &Path) -> Result<std::path::PathBuf, StoreError> {
    let state_dir = dir.join("state");
    if state_dir.is_dir() {
        return Ok(state_dir);
    }
    Err(StoreError::tool(
        dir,
        "no store here (it has no state/ directory): a shard's store is \
         <data.dir>/dispatcher-<shard> or <data.dir>/timer-<shard>",
    ))
}

/// Refuses a store written by a later build: an offline tool of this build would take its
/// newer records for damage, and `repair` would drop them. A format that is missing or does
/// not decode is left to the tool's own checks (it is damage).
fn refuse_later_format(db: &sled::Db, dir: &Path) -> Result<(), StoreError> {
    let format = db
        .get(keys::meta("format"))
        .map_err(|e| StoreError::sled("read the format", dir, e))?
        .and_then(|v| records::decode_u64(&v, "store format").ok());
    match format {
        Some(format) if !keys::readable_format(format) => Err(StoreError::tool(
            dir,
            format!(
                "store format {format}, this build reads formats up to {}: use the build that wrote it",
                keys::FORMAT_VERSION
            ),
        )),
        _ => Ok(()),
    }
}

/// Writes a record about the store itself straight into sled and makes it durable: it is
/// written once, at creation or first open, outside the log.
fn write_meta(kv: &Kv, key: Vec<u8>, value: Vec<u8>, op: &'static str) -> Result<(), StoreError> {
    let db = kv.db();
    db.insert(key, value)
        .map_err(|e| StoreError::sled(op, kv.dir(), e))?;
    db.flush()
        .map_err(|e| StoreError::sled("flush", kv.dir(), e))?;
    checkpoint::fsync_tree(kv.dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Batch;

    /// Writes `format` as the store's format, straight into sled as `check_format` does.
    fn mark_format(kv: &Kv, format: u64) {
        let db = kv.db();
        db.insert(keys::meta("format"), records::encode_u64(format))
            .expect("insert");
        db.flush().expect("flush");
    }

    #[test]
    fn an_earlier_format_is_carried_forward_and_a_later_one_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = StoreOptions::default();
        let (kv, _wal) = recover(dir.path(), &options).expect("create");
        mark_format(&kv, 1);
        drop((kv, _wal));
        let (kv, _wal) = recover(dir.path(), &options).expect("format 1 opens");
        let format = kv.db().get(keys::meta("format")).expect("get");
        let format = format.map(|v| records::decode_u64(&v, "format").expect("format"));
        assert_eq!(format, Some(keys::FORMAT_VERSION), "marked as this build's");
        mark_format(&kv, keys::FORMAT_VERSION + 1);
        drop((kv, _wal));
        let refused = recover(dir.path(), &options)
            .err()
            .expect("a later format is refused")
            .to_string();
        let expected = format!(
            "store format {}, this build reads formats up to {}",
            keys::FORMAT_VERSION + 1,
            keys::FORMAT_VERSION
        );
        assert!(refused.contains(&expected), "{refused}");
    }

    /// An older build's tools took a newer store's records for damage, and its repair dropped
    /// them: this build's refuse a store of a later format and change nothing.
    #[test]
    fn the_offline_tools_refuse_a_later_format() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("store");
        let (kv, _wal) = recover(&store, &StoreOptions::default()).expect("create");
        mark_format(&kv, keys::FORMAT_VERSION + 1);
        drop((kv, _wal));
        let expected = format!(
            "store format {}, this build reads",
            keys::FORMAT_VERSION + 1
        );
        let refused = verify(&store).expect_err("verify refuses").to_string();
        assert!(refused.contains(&expected), "{refused}");
        let refused = repair(&store, true)
            .expect_err("repair refuses")
            .to_string();
        assert!(refused.contains(&expected), "{refused}");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["store"], "nothing set aside or rebuilt");
    }

    /// A checkpoint interrupted after writing part of its layer into sled: recovery replays
    /// from the previous position, and a key made fresh and deleted afterwards (absorbed in
    /// memory, never meant for sled) does not come back from the partial write.
    #[test]
    fn interrupted_checkpoint_leaves_nothing_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = StoreOptions::default();
        {
            let (mut kv, mut wal) = recover(dir.path(), &options).expect("create");
            let mut put = Batch::default();
            put.put_fresh(b"\x10fresh".to_vec(), b"v".to_vec());
            put.put(b"\x10kept".to_vec(), b"v1".to_vec());
            wal.append(&put.encode()).expect("append");
            kv.apply(put);
            // The checkpoint got as far as one chunk, without its position.
            let layer = kv.freeze();
            for (key, dirty) in layer.iter() {
                let value = dirty.value.as_deref().expect("a put");
                kv.db()
                    .insert(key.as_slice(), value)
                    .expect("partial chunk");
            }
            kv.db().flush().expect("flush");
            let mut later = Batch::default();
            later.delete(b"\x10fresh".to_vec());
            later.put(b"\x10kept".to_vec(), b"v2".to_vec());
            wal.append(&later.encode()).expect("append");
            kv.apply(later);
            wal.sync().expect("sync");
        }
        let (kv, _wal) = recover(dir.path(), &options).expect("recover");
        assert!(kv.get(b"\x10fresh").expect("get").is_none());
        assert_eq!(
            kv.get(b"\x10kept").expect("get").as_deref(),
            Some(&b"v2"[..])
        );
    }
}
