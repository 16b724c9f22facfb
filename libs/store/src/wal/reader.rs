//! Sequential replay of records from the segment files, used once at start.
//!
//! The reader works on a snapshot of the segment list taken by `Wal::read_after` and owns its
//! file handles, so it does not borrow the log. It re-checks every frame it returns; after the
//! first error it yields nothing more.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::PathBuf;

use super::frame::{FRAME_HEADER_LEN, FrameHeader};
use super::segment::{HEADER_LEN, MAGIC, SegmentMeta};
use super::{Lsn, WalError};

const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Iterator over `(lsn, payload)` of the records after a given LSN, in order.
#[derive(Debug)]
pub struct WalReader {
    after: Lsn,
    pending: VecDeque<SegmentMeta>,
    current: Option<SegmentCursor>,
    failed: bool,
}

impl WalReader {
    pub(crate) fn new(after: Lsn, segments: VecDeque<SegmentMeta>) -> WalReader {
        WalReader {
            after,
            pending: segments,
            current: None,
            failed: false,
        }
    }

    fn next_record(&mut self) -> Result<Option<(Lsn, Vec<u8>)>, WalError> {
        loop {
            let cursor = match &mut self.current {
                Some(cursor) => cursor,
                None => {
                    let Some(meta) = self.pending.pop_front() else {
                        return Ok(None);
                    };
                    self.current.insert(SegmentCursor::open(meta)?)
                }
            };
            match cursor.next_after(self.after)? {
                Some(record) => return Ok(Some(record)),
                None => self.current = None,
            }
        }
    }
}

impl Iterator for WalReader {
    type Item = Result<(Lsn, Vec<u8>), WalError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_record() {
            Ok(record) => record.map(Ok),
            Err(err) => {
                self.failed = true;
                Some(Err(err))
            }
        }
    }
}

#[derive(Debug)]
struct SegmentCursor {
    reader: BufReader<File>,
    path: PathBuf,
    offset: u64,
    /// The file's length when it was opened: no frame runs past it.
    file_len: u64,
    next_lsn: Lsn,
    /// Frames past this were not written when the snapshot was taken.
    last_lsn: Lsn,
}

impl SegmentCursor {
    fn open(meta: SegmentMeta) -> Result<SegmentCursor, WalError> {
        let file =
            File::open(&meta.path).map_err(|e| WalError::io("open segment", &meta.path, e))?;
        let file_len = file
            .metadata()
            .map_err(|e| WalError::io("read the length of segment", &meta.path, e))?
            .len();
        let mut cursor = SegmentCursor {
            reader: BufReader::with_capacity(READ_BUFFER_BYTES, file),
            path: meta.path,
            offset: 0,
            file_len,
            next_lsn: meta.first_lsn,
            last_lsn: meta.last_lsn,
        };
        let mut header = [0u8; HEADER_LEN as usize];
        cursor.read(&mut header)?;
        if &header != MAGIC {
            return Err(WalError::corrupt(&cursor.path, 0, "unknown segment header"));
        }
        cursor.offset = HEADER_LEN;
        Ok(cursor)
    }

    fn next_after(&mut self, after: Lsn) -> Result<Option<(Lsn, Vec<u8>)>, WalError> {
        while self.next_lsn <= self.last_lsn {
            let mut header_bytes = [0u8; FRAME_HEADER_LEN];
            self.read(&mut header_bytes)?;
            let header = FrameHeader::decode(&header_bytes);
            if header.lsn != self.next_lsn {
                return Err(self.corrupt(format!(
                    "expected lsn {}, found lsn {}",
                    self.next_lsn, header.lsn
                )));
            }
            // `len` is outside the checksum: a damaged one (read by salvage, which reads a
            // damaged segment up to its damage) must not size an allocation.
            let left = self.file_len.saturating_sub(self.offset);
            if header.frame_len() > left {
                return Err(self.corrupt(format!(
                    "the frame of lsn {} claims {} bytes, the segment has {left} left",
                    header.lsn,
                    header.frame_len()
                )));
            }
            if header.lsn <= after {
                // Checked at open; skipping without reading keeps replay from the middle cheap.
                self.reader
                    .seek_relative(i64::from(header.payload_len))
                    .map_err(|e| WalError::io("seek segment", &self.path, e))?;
                self.advance(&header);
                continue;
            }
            let mut payload = vec![0u8; header.payload_len as usize];
            self.read(&mut payload)?;
            if !header.checksum_matches(&payload) {
                return Err(
                    self.corrupt(format!("checksum mismatch in frame for lsn {}", header.lsn))
                );
            }
            self.advance(&header);
            return Ok(Some((header.lsn, payload)));
        }
        Ok(None)
    }

    fn advance(&mut self, header: &FrameHeader) {
        self.offset += header.frame_len();
        self.next_lsn += 1;
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<(), WalError> {
        self.reader.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => self.corrupt(format!(
                "segment ends before lsn {}, which it held at open",
                self.last_lsn
            )),
            _ => WalError::io("read segment", &self.path, e),
        })
    }

    fn corrupt(&self, reason: String) -> WalError {
        WalError::corrupt(&self.path, self.offset, reason)
    }
}
