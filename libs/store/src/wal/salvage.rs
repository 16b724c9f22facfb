//! Reading a damaged log, for `cascade data repair`: every record after the checkpoint in
//! order, up to the first one that cannot be read (a bad frame, a segment missing from the
//! sequence), and where and why reading stopped. Opening refuses such a log instead
//! (`open`): dropping records is never silent, only asked for.

use std::collections::VecDeque;
use std::path::Path;

use super::reader::WalReader;
use super::scan;
use super::segment::{self, SegmentMeta};
use super::{Lsn, WalError};

/// How far a salvage read got.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Salvaged {
    /// Records read and kept.
    pub records: u64,
    /// Where reading stopped before the end of the log, and why; `None`: it read it all.
    pub stopped: Option<String>,
}

/// Hands `keep` each record after `after`, in order, until the log ends, a record cannot be
/// read, or `keep` refuses one (`Err` with why). Changes nothing on disk.
pub fn salvage(
    dir: &Path,
    after: Lsn,
    mut keep: impl FnMut(Lsn, Vec<u8>) -> Result<(), String>,
) -> Result<Salvaged, WalError> {
    let found = segment::list(dir)?;
    let mut salvaged = Salvaged::default();
    let mut expected = after + 1;
    for (index, (first_lsn, path)) in found.iter().enumerate() {
        // A segment ends where its valid frames end (a torn tail of the last one was never
        // acknowledged); a damaged one is read up to its damage, which stops the read.
        let is_last = index + 1 == found.len();
        let last_lsn = match scan::scan(path, *first_lsn, is_last) {
            Ok(scanned) => scanned.meta.last_lsn,
            Err(_) => found.get(index + 1).map_or(Lsn::MAX, |(next, _)| next - 1),
        };
        if last_lsn < expected {
            continue;
        }
        if *first_lsn > expected {
            salvaged.stopped = Some(format!(
                "{}: records {expected} to {} are missing: no segment holds them",
                dir.display(),
                first_lsn - 1
            ));
            return Ok(salvaged);
        }
        let meta = SegmentMeta {
            path: path.clone(),
            first_lsn: *first_lsn,
            last_lsn,
            bytes: 0,
        };
        for record in WalReader::new(expected - 1, VecDeque::from([meta])) {
            let stopped = match record {
                Ok((lsn, bytes)) => match keep(lsn, bytes) {
                    Ok(()) => {
                        salvaged.records += 1;
                        expected = lsn + 1;
                        continue;
                    }
                    Err(why) => format!("{}: record {lsn}: {why}", path.display()),
                },
                Err(e) => e.to_string(),
            };
            salvaged.stopped = Some(stopped);
            return Ok(salvaged);
        }
    }
    Ok(salvaged)
}
