//! Errors of the write-ahead log. `Corrupt`, `Missing` and `Gone` are refusals to start: the operator
//! has to look at the files; `Poisoned` means an earlier write or fsync failed in this process.

use std::path::{Path, PathBuf};

use super::Lsn;

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "corrupt write-ahead log segment {} at byte offset {offset}: {reason}; run `cascade data verify`",
        path.display()
    )]
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    #[error(
        "write-ahead log in {} is missing records: expected lsn {expected}, found lsn {found}",
        dir.display()
    )]
    Missing {
        dir: PathBuf,
        expected: Lsn,
        found: Lsn,
    },
    /// No segment at all, where the checkpoint says there was a log: the records written
    /// after the checkpoint, if any, went with it.
    #[error(
        "write-ahead log in {} has no segment, but the store was checkpointed at lsn {checkpoint_lsn}: the log was removed, with any records written after that; run `cascade data verify`",
        dir.display()
    )]
    Gone { dir: PathBuf, checkpoint_lsn: Lsn },
    #[error("write-ahead log is poisoned by an earlier write or fsync failure; restart to recover")]
    Poisoned,
    #[error("record of {len} bytes is larger than the frame limit of {max} bytes")]
    RecordTooLarge { len: usize, max: u64 },
}

impl WalError {
    pub(crate) fn io(op: &'static str, path: &Path, source: std::io::Error) -> WalError {
        WalError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> WalError {
        WalError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }
}
