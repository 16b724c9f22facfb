//! `verify`: says what is wrong with a store directory, changing nothing (the library side of
//! `cascade data verify`). It checks the log the way opening would (frames, checksums, LSN
//! continuity with the checkpoint) and decodes every value in sled, payload checksums included.

use std::path::Path;

use crate::codec;
use crate::error::StoreError;
use crate::kv::checkpoint;

/// Stop listing after this many damaged entries: the first ones say enough.
pub(super) const MAX_PROBLEMS: usize = 100;

#[derive(Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    /// What would make the store refuse to start, or a value that would be refused on read.
    pub problems: Vec<String>,
    /// What opening repairs by itself (a torn log tail).
    pub notes: Vec<String>,
    pub entries_checked: u64,
}

impl VerifyReport {
    pub fn is_healthy(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verification streams the store once; a small cache is enough.
const VERIFY_CACHE_BYTES: u64 = 16 << 20;

pub fn verify(dir: &Path) -> Result<VerifyReport, StoreError> {
    let state_dir = super::tool_state_dir(dir)?;
    let wal_dir = dir.join("wal");
    let db = crate::kv::open_sled(&state_dir, VERIFY_CACHE_BYTES)?;
    super::refuse_later_format(&db, &state_dir)?;
    let mut report = VerifyReport::default();
    let checkpoint_lsn = checkpoint::lsn(&db, &state_dir)?;
    match crate::wal::verify(&wal_dir, checkpoint_lsn) {
        Ok(notes) => report.notes = notes,
        Err(e) => report.problems.push(e.to_string()),
    }
    for entry in db.iter() {
        let (key, value) = entry.map_err(|e| StoreError::sled("read", &state_dir, e))?;
        report.entries_checked += 1;
        if let Err(e) = codec::check_entry(&key, &value) {
            report
                .problems
                .push(format!("{}: {}", state_dir.display(), describe(&key, &e)));
            if report.problems.len() >= MAX_PROBLEMS {
                break;
            }
        }
    }
    Ok(report)
}

/// A damaged entry, for a person: the start of its key and what is wrong with it.
pub(super) fn describe(key: &[u8], e: &codec::Malformed) -> String {
    format!("key {:02x?}: {e}", &key[..key.len().min(24)])
}
