//! Opening the log: scan every segment (`ScannedLog::scan`), then check that the log covers
//! everything after the checkpoint, cut a torn tail, and pick the segment to append to
//! (`ScannedLog::open`).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use super::scan::{self, TornTail};
use super::segment::{self, SegmentMeta};
use super::{Lsn, Wal, WalError, WalOptions, WalReader};

impl Wal {
    /// Opens the log in `dir`, creating it if missing, and validates every segment.
    ///
    /// `checkpoint_lsn` is the last LSN contained in the checkpointed store: the log must hold
    /// every record after it (`Missing` otherwise), and the next LSN is always greater.
    pub fn open(dir: &Path, opts: WalOptions, checkpoint_lsn: Lsn) -> Result<Wal, WalError> {
        ScannedLog::scan(dir)?.open(opts, checkpoint_lsn)
    }
}

/// A log directory whose segments have all been read and checked, not yet opened for
/// appends: recovery reads its records while sled opens, and opens it once sled has said
/// where the checkpoint stands. Scanning changes nothing but a missing directory.
#[derive(Debug)]
pub struct ScannedLog {
    dir: PathBuf,
    /// Oldest first, in LSN order; gaps and overlaps are judged at `open`.
    segments: VecDeque<SegmentMeta>,
    /// The last segment's torn tail, cut off at `open`.
    torn: Option<TornTail>,
}

impl ScannedLog {
    /// Reads and checks every segment in `dir`, creating the directory if missing.
    pub fn scan(dir: &Path) -> Result<ScannedLog, WalError> {
        segment::ensure_dir(dir)?;
        let found = segment::list(dir)?;
        let count = found.len();
        let mut segments = VecDeque::with_capacity(count + 1);
        let mut torn = None;
        for (index, (first_lsn, path)) in found.into_iter().enumerate() {
            let scanned = scan::scan(&path, first_lsn, index + 1 == count)?;
            torn = scanned.torn; // `scan` refuses a bad frame in any other than the last
            segments.push_back(scanned.meta);
        }
        Ok(ScannedLog {
            dir: dir.to_path_buf(),
            segments,
            torn,
        })
    }

    /// Whether each segment takes up exactly where the previous one ended.
    pub fn is_contiguous(&self) -> bool {
        self.segments
            .iter()
            .zip(self.segments.iter().skip(1))
            .all(|(previous, next)| next.first_lsn == previous.last_lsn + 1)
    }

    /// The LSN of the last record, 0 when the log holds none.
    pub fn last_lsn(&self) -> Lsn {
        self.segments.back().map_or(0, |s| s.last_lsn)
    }

    /// Every record, oldest first (a torn tail excluded).
    pub fn read_all(&self) -> WalReader {
        let holding = self.segments.iter().filter(|s| !s.is_empty()).cloned();
        WalReader::new(0, holding.collect())
    }

    /// Checks that the log holds every record after `checkpoint_lsn`, cuts a torn tail off,
    /// and picks the segment to append to.
    pub fn open(self, opts: WalOptions, checkpoint_lsn: Lsn) -> Result<Wal, WalError> {
        let ScannedLog {
            dir,
            mut segments,
            torn,
        } = self;
        for (previous, next) in segments.iter().zip(segments.iter().skip(1)) {
            check_continuity(&dir, previous, next, checkpoint_lsn)?;
        }
        check_start(&dir, segments.front().map(|s| s.first_lsn), checkpoint_lsn)?;
        if let (Some(tail), Some(last)) = (torn, segments.back()) {
            tracing::warn!(
                path = %last.path.display(), offset = tail.offset, reason = %tail.reason,
                "write-ahead log segment has a torn tail from a crash; truncating it"
            );
            scan::cut_torn_tail(&last.path, tail.offset)?;
        }
        let log_end = segments.back().map_or(0, |s| s.last_lsn);
        let last_lsn = log_end.max(checkpoint_lsn);
        let file = match segments.back() {
            Some(current) if current.last_lsn == last_lsn => {
                let file = segment::open_for_append(&current.path)?;
                // A crashed predecessor may have left written but unsynced frames in the
                // page cache; make them durable before anything builds on them.
                file.sync_data()
                    .map_err(|e| WalError::io("fsync segment", &current.path, e))?;
                segment::sync_dir(&dir)?;
                file
            }
            _ => {
                if !segments.is_empty() {
                    tracing::warn!(
                        dir = %dir.display(), log_end, checkpoint_lsn,
                        "write-ahead log ends before the checkpoint; starting a new segment after it"
                    );
                }
                let (file, meta) = segment::create(&dir, last_lsn + 1)?;
                segments.push_back(meta);
                file
            }
        };
        tracing::info!(dir = %dir.display(), segments = segments.len(), last_lsn, checkpoint_lsn, "opened write-ahead log");
        Ok(Wal {
            dir,
            opts,
            segments,
            file,
            buf: Vec::new(),
            next_lsn: last_lsn + 1,
            written_lsn: last_lsn,
            durable_lsn: last_lsn,
            poisoned: false,
        })
    }
}

/// Checks every segment without changing anything: `Err` for what would refuse to open,
/// `Ok` with a note for each torn tail that opening would cut off.
pub fn verify(dir: &Path, checkpoint_lsn: Lsn) -> Result<Vec<String>, WalError> {
    let found = segment::list(dir)?;
    check_start(
        dir,
        found.first().map(|(first_lsn, _)| *first_lsn),
        checkpoint_lsn,
    )?;
    let count = found.len();
    let mut notes = Vec::new();
    let mut previous: Option<SegmentMeta> = None;
    for (index, (first_lsn, path)) in found.into_iter().enumerate() {
        let scanned = scan::scan(&path, first_lsn, index + 1 == count)?;
        if let Some(torn) = &scanned.torn {
            notes.push(format!(
                "{}: torn tail at byte offset {} ({}); opening cuts it off and keeps the records before it",
                path.display(),
                torn.offset,
                torn.reason
            ));
        }
        if let Some(previous) = &previous {
            check_continuity(dir, previous, &scanned.meta, checkpoint_lsn)?;
        }
        previous = Some(scanned.meta);
    }
    Ok(notes)
}

/// The oldest segment (`oldest`: its first LSN) must start at or before the first record
/// after the checkpoint. A checkpointed store must have a segment: the log never deletes its
/// current one, so none at all means the log was removed. Without a checkpoint there is no
/// telling (a crash in a store's first open may leave its state without a log yet).
fn check_start(dir: &Path, oldest: Option<Lsn>, checkpoint_lsn: Lsn) -> Result<(), WalError> {
    match oldest {
        Some(found) if found > checkpoint_lsn + 1 => Err(WalError::Missing {
            dir: dir.to_path_buf(),
            expected: checkpoint_lsn + 1,
            found,
        }),
        None if checkpoint_lsn > 0 => Err(WalError::Gone {
            dir: dir.to_path_buf(),
            checkpoint_lsn,
        }),
        _ => Ok(()),
    }
}

/// Consecutive segments must continue each other's LSNs; a gap is only harmless when every
/// record in it is already in the checkpoint.
fn check_continuity(
    dir: &Path,
    previous: &SegmentMeta,
    next: &SegmentMeta,
    checkpoint_lsn: Lsn,
) -> Result<(), WalError> {
    let expected = previous.last_lsn + 1;
    if next.first_lsn < expected {
        return Err(WalError::corrupt(
            &next.path,
            0,
            format!(
                "segment starts at lsn {}, but the previous segment ends at lsn {}",
                next.first_lsn, previous.last_lsn
            ),
        ));
    }
    if next.first_lsn > expected && next.first_lsn - 1 > checkpoint_lsn {
        return Err(WalError::Missing {
            dir: dir.to_path_buf(),
            expected: expected.max(checkpoint_lsn + 1),
            found: next.first_lsn,
        });
    }
    Ok(())
}
