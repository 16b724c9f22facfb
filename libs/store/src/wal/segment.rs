//! Segment files: naming, the format header, creation and directory fsyncs.
//!
//! A segment is named by the LSN of its first record, zero-padded to 20 digits so that name
//! order is LSN order, and starts with `MAGIC`. It becomes visible to a restart only once
//! both the file (header included) and the directory entry are synced.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Lsn, WalError};

/// Magic and format version at the start of every segment file.
pub(crate) const MAGIC: &[u8; 8] = b"CSCWAL01";
pub(crate) const HEADER_LEN: u64 = MAGIC.len() as u64;
const EXTENSION: &str = "wal";
const NAME_DIGITS: usize = 20;

/// What the log knows about one segment file; `last_lsn`/`bytes` cover written frames only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SegmentMeta {
    pub(crate) path: PathBuf,
    pub(crate) first_lsn: Lsn,
    /// `first_lsn - 1` while the segment holds no record.
    pub(crate) last_lsn: Lsn,
    pub(crate) bytes: u64,
}

impl SegmentMeta {
    pub(crate) fn is_empty(&self) -> bool {
        self.last_lsn < self.first_lsn
    }
}

pub(crate) fn file_name(first_lsn: Lsn) -> String {
    format!("{first_lsn:0NAME_DIGITS$}.{EXTENSION}")
}

/// The first LSN encoded in a segment file name, or `None` if the name is not one of ours.
pub(crate) fn parse_file_name(name: &OsStr) -> Option<Lsn> {
    let stem = name.to_str()?.strip_suffix(EXTENSION)?.strip_suffix('.')?;
    if stem.len() != NAME_DIGITS || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// Segment files in `dir`, ordered by first LSN (none when `dir` is missing). Files that are
/// not segments are ignored.
pub(crate) fn list(dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, WalError> {
    let entries = match fs::read_dir(dir) {
        // As an empty one: opening creates it, and judges a log with no segment.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        listed => listed.map_err(|e| WalError::io("list log directory", dir, e))?,
    };
    let mut segments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| WalError::io("list log directory", dir, e))?;
        let path = entry.path();
        let Some(first_lsn) = parse_file_name(&entry.file_name()) else {
            if path.extension() == Some(OsStr::new(EXTENSION)) {
                tracing::warn!(path = %path.display(), "ignoring a .wal file with a name that is not a segment name");
            }
            continue;
        };
        if first_lsn == 0 {
            return Err(WalError::corrupt(
                &path,
                0,
                "segment name gives lsn 0, but lsns start at 1",
            ));
        }
        segments.push((first_lsn, path));
    }
    segments.sort_unstable_by_key(|(first_lsn, _)| *first_lsn);
    Ok(segments)
}

/// Creates an empty segment whose first record will be `first_lsn` and returns it opened for
/// appending. Header and directory entry are durable before this returns.
pub(crate) fn create(dir: &Path, first_lsn: Lsn) -> Result<(File, SegmentMeta), WalError> {
    let path = dir.join(file_name(first_lsn));
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| WalError::io("create segment", &path, e))?;
    file.write_all(MAGIC)
        .map_err(|e| WalError::io("write segment header", &path, e))?;
    file.sync_data()
        .map_err(|e| WalError::io("fsync new segment", &path, e))?;
    sync_dir(dir)?;
    let meta = SegmentMeta {
        path,
        first_lsn,
        last_lsn: first_lsn - 1,
        bytes: HEADER_LEN,
    };
    Ok((file, meta))
}

pub(crate) fn open_for_append(path: &Path) -> Result<File, WalError> {
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| WalError::io("open segment for append", path, e))
}

/// Makes file creations, truncations and removals in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|e| WalError::io("fsync log directory", dir, e))
}

/// Creates `dir` and any missing ancestors, fsyncing each new entry's parent so that the
/// directory survives a crash along with the first segment written into it.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), WalError> {
    if dir.is_dir() {
        return Ok(());
    }
    let missing: Vec<&Path> = dir.ancestors().take_while(|path| !path.exists()).collect();
    fs::create_dir_all(dir).map_err(|e| WalError::io("create log directory", dir, e))?;
    // Outermost first, so every parent is durable before the entry below it is relied on.
    for created in missing.iter().rev() {
        match created.parent() {
            Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new("."))?,
            Some(parent) => sync_dir(parent)?,
            None => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_like_lsns() {
        assert_eq!(file_name(1), "00000000000000000001.wal");
        assert_eq!(file_name(u64::MAX), "18446744073709551615.wal");
        assert!(file_name(9) < file_name(10));
    }

    #[test]
    fn parse_accepts_only_segment_names() {
        assert_eq!(
            parse_file_name(OsStr::new("00000000000000000042.wal")),
            Some(42)
        );
        assert_eq!(parse_file_name(OsStr::new("42.wal")), None);
        assert_eq!(
            parse_file_name(OsStr::new("00000000000000000042.wal.tmp")),
            None
        );
        assert_eq!(
            parse_file_name(OsStr::new("0000000000000000004x.wal")),
            None
        );
        assert_eq!(parse_file_name(OsStr::new("00000000000000000042wal")), None);
        assert_eq!(
            parse_file_name(OsStr::new("99999999999999999999.wal")),
            None
        );
    }

    #[test]
    fn ensure_dir_creates_nested_directories() -> Result<(), WalError> {
        let root = tempfile::tempdir().expect("temp dir");
        let nested = root.path().join("a").join("b");
        ensure_dir(&nested)?;
        assert!(nested.is_dir());
        ensure_dir(&nested)?;
        Ok(())
    }
}
