//! Durability for a state machine over `Kv`: opening and recovering a store directory, and the
//! `Store` actor that runs operations on one writer thread and answers them only after their
//! log records are durable (group commit).
//!
//! Layout of a store directory: `state/` is sled, `wal/` the write-ahead log. Recovery opens
//! sled, reads the log position of its last checkpoint, and replays the later log records into
//! the in-memory layers; replay is idempotent because records are whole-key writes applied in
//! order. A store or log that fails its checks is refused, never repaired in place (except a
//! torn log tail, which only an unacknowledged write can leave).

mod actor;
mod options;
mod verify;

use std::path::Path;

pub use actor::{Maintenance, Store};
pub use options::{Durability, StoreOptions};
pub use verify::{VerifyReport, verify};

use crate::codec::{keys, records};
use crate::error::StoreError;
use crate::kv::{Batch, Kv, checkpoint};
use crate::wal::{Wal, WalOptions};

/// Opens the store in `dir` (creating it) and replays its log. Returns the state and the log
/// positioned for appends.
pub fn recover(dir: &Path, options: &StoreOptions) -> Result<(Kv, Wal), StoreError> {
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| StoreError::io("create", dir, e))?;
    if created && let Some(parent) = dir.parent() {
        checkpoint::fsync_path(parent)?;
    }
    let state_dir = dir.join("state");
    let mut kv = Kv::open(&state_dir, options.cache_bytes)?;
    check_format(&kv)?;
    let checkpoint_lsn = checkpoint::lsn(kv.db(), &state_dir)?;
    let wal = Wal::open(
        &dir.join("wal"),
        WalOptions {
            segment_bytes: options.wal_segment_bytes,
        },
        checkpoint_lsn,
    )?;
    let mut replayed = 0u64;
    for record in wal.read_after(checkpoint_lsn)? {
        let (lsn, bytes) = record?;
        let batch = Batch::decode(&bytes)
            .map_err(|e| StoreError::corrupt(&dir.join("wal"), format!("log record {lsn}: {e}")))?;
        kv.apply(&batch);
        replayed += 1;
    }
    tracing::info!(
        dir = %dir.display(),
        checkpoint_lsn,
        replayed,
        last_lsn = wal.last_lsn(),
        "store.recover"
    );
    Ok((kv, wal))
}

/// A new store gets the format version; an existing one must have this build's.
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
            if found != keys::FORMAT_VERSION {
                return Err(StoreError::corrupt(
                    kv.dir(),
                    format!(
                        "store format {found}, this build reads format {}",
                        keys::FORMAT_VERSION
                    ),
                ));
            }
            Ok(())
        }
        None if db.is_empty() => {
            db.insert(key, records::encode_u64(keys::FORMAT_VERSION))
                .map_err(|e| StoreError::sled("write the format", kv.dir(), e))?;
            db.flush()
                .map_err(|e| StoreError::sled("flush", kv.dir(), e))?;
            checkpoint::fsync_tree(kv.dir())
        }
        None => Err(StoreError::corrupt(
            kv.dir(),
            "store has data but no format version".into(),
        )),
    }
}
