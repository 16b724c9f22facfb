//! Validation of segment files at open, and the torn-tail rule.
//!
//! Every frame is read and checked. A bad frame is a torn tail from a crash only if it is in
//! the last segment, everything after the frame is zero, and no valid frame for the next LSN
//! hides inside it (a damaged `len` can make a middle frame look like it runs off the end).
//! Anything else is refused as `Corrupt`: dropping records from the middle is never silent.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::frame::{self, FRAME_HEADER_LEN, FrameHeader};
use super::segment::{HEADER_LEN, MAGIC, SegmentMeta};
use super::{Lsn, WalError};

const SCAN_BUFFER_BYTES: usize = 256 * 1024;

/// A scanned segment: its valid part and, for the last segment, a tail to cut off.
#[derive(Debug)]
pub(crate) struct Scanned {
    pub(crate) meta: SegmentMeta,
    pub(crate) torn: Option<TornTail>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TornTail {
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

/// A frame or header that failed validation, before deciding whether it is a torn tail.
struct BadSpot {
    offset: u64,
    /// Where the bad frame claims to end; bytes from here to the end of file must be zero.
    claimed_end: u64,
    /// A valid frame with this LSN after `offset` proves later records exist.
    successor_lsn: Lsn,
    reason: String,
}

/// Reads and validates every frame of the segment at `path`. Only the last segment may end in
/// a torn tail; it is reported, not yet cut (see `cut_torn_tail`).
pub(crate) fn scan(path: &Path, first_lsn: Lsn, is_last: bool) -> Result<Scanned, WalError> {
    let file = File::open(path).map_err(|e| WalError::io("open segment", path, e))?;
    let file_len = file
        .metadata()
        .map_err(|e| WalError::io("stat segment", path, e))?
        .len();
    let mut reader = BufReader::with_capacity(SCAN_BUFFER_BYTES, file);
    let mut scanner = Scanner {
        path,
        file_len,
        reader: &mut reader,
        offset: 0,
        next_lsn: first_lsn,
    };
    let bad = match scanner.check_header()? {
        Some(bad) => Some(bad),
        None => scanner.check_frames()?,
    };
    let (offset, next_lsn) = (scanner.offset, scanner.next_lsn);
    let torn = match bad {
        None => None,
        Some(bad) if is_last => Some(classify_tail(&mut reader, path, bad)?),
        Some(bad) => return Err(WalError::corrupt(path, bad.offset, bad.reason)),
    };
    let meta = SegmentMeta {
        path: path.to_path_buf(),
        first_lsn,
        last_lsn: next_lsn - 1,
        bytes: offset.max(HEADER_LEN),
    };
    Ok(Scanned { meta, torn })
}

/// Cuts a torn tail off the segment and makes the cut durable. A torn header is rewritten.
pub(crate) fn cut_torn_tail(path: &Path, offset: u64) -> Result<(), WalError> {
    let mut file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| WalError::io("open segment to cut torn tail", path, e))?;
    let keep = if offset < HEADER_LEN { 0 } else { offset };
    file.set_len(keep)
        .map_err(|e| WalError::io("truncate torn tail", path, e))?;
    if keep == 0 {
        file.write_all(MAGIC)
            .map_err(|e| WalError::io("rewrite segment header", path, e))?;
    }
    file.sync_all()
        .map_err(|e| WalError::io("fsync truncated segment", path, e))
}

struct Scanner<'a> {
    path: &'a Path,
    file_len: u64,
    reader: &'a mut BufReader<File>,
    /// End of the valid part so far.
    offset: u64,
    next_lsn: Lsn,
}

impl Scanner<'_> {
    fn check_header(&mut self) -> Result<Option<BadSpot>, WalError> {
        if self.file_len < HEADER_LEN {
            return Ok(Some(BadSpot {
                offset: 0,
                claimed_end: self.file_len,
                successor_lsn: self.next_lsn,
                reason: format!(
                    "incomplete segment header ({} of {HEADER_LEN} bytes)",
                    self.file_len
                ),
            }));
        }
        let mut header = [0u8; HEADER_LEN as usize];
        self.read(&mut header)?;
        if &header == MAGIC {
            self.offset = HEADER_LEN;
            return Ok(None);
        }
        let reason = format!(
            "unknown segment header {:?}, expected {:?}",
            header.escape_ascii().to_string(),
            MAGIC.escape_ascii().to_string()
        );
        // A zeroed header can be a crash while the segment was being created; any other
        // header is a file we do not understand, never to be truncated.
        if header != [0; HEADER_LEN as usize] {
            return Err(WalError::corrupt(self.path, 0, reason));
        }
        Ok(Some(BadSpot {
            offset: 0,
            claimed_end: HEADER_LEN,
            successor_lsn: self.next_lsn,
            reason,
        }))
    }

    fn check_frames(&mut self) -> Result<Option<BadSpot>, WalError> {
        let mut payload = Vec::new();
        loop {
            let remaining = self.file_len - self.offset;
            if remaining == 0 {
                return Ok(None);
            }
            if remaining < FRAME_HEADER_LEN as u64 {
                return Ok(Some(self.bad_spot(
                    self.file_len,
                    format!("incomplete frame header ({remaining} of {FRAME_HEADER_LEN} bytes)"),
                )));
            }
            let mut header_bytes = [0u8; FRAME_HEADER_LEN];
            self.read(&mut header_bytes)?;
            let header = FrameHeader::decode(&header_bytes);
            if header.frame_len() > remaining {
                return Ok(Some(self.bad_spot(
                    self.file_len,
                    format!(
                        "incomplete frame: {} bytes claimed, {remaining} present",
                        header.frame_len()
                    ),
                )));
            }
            // Bounded by the file length checked above, so a damaged `len` cannot over-allocate.
            payload.resize(header.payload_len as usize, 0);
            self.read(&mut payload)?;
            if !header.checksum_matches(&payload) {
                return Ok(Some(self.bad_spot(
                    self.offset + header.frame_len(),
                    format!("checksum mismatch in frame for lsn {}", header.lsn),
                )));
            }
            if header.lsn != self.next_lsn {
                // A checksummed frame with the wrong lsn is not a torn write: refuse it anywhere.
                return Err(WalError::corrupt(
                    self.path,
                    self.offset,
                    format!(
                        "lsn jump: expected lsn {}, found lsn {}",
                        self.next_lsn, header.lsn
                    ),
                ));
            }
            self.offset += header.frame_len();
            self.next_lsn += 1;
        }
    }

    fn bad_spot(&self, claimed_end: u64, reason: String) -> BadSpot {
        BadSpot {
            offset: self.offset,
            claimed_end,
            successor_lsn: self.next_lsn + 1,
            reason,
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<(), WalError> {
        // The length was checked against the file size; a short read means the file changed.
        self.reader
            .read_exact(buf)
            .map_err(|e| WalError::io("read segment", self.path, e))
    }
}

/// Decides whether a bad spot in the last segment is a torn tail or damage to refuse.
fn classify_tail(
    reader: &mut BufReader<File>,
    path: &Path,
    bad: BadSpot,
) -> Result<TornTail, WalError> {
    // Recovery path only: the tail is at most about one segment, so reading it whole is fine.
    let tail =
        read_from(reader, bad.offset).map_err(|e| WalError::io("read segment tail", path, e))?;
    let claimed_in_tail = usize::try_from(bad.claimed_end - bad.offset).unwrap_or(usize::MAX);
    let after_frame = tail.get(claimed_in_tail..).unwrap_or_default();
    if let Some(nonzero_at) = after_frame.iter().position(|&b| b != 0) {
        return Err(WalError::corrupt(
            path,
            bad.offset,
            format!(
                "{}, followed by non-zero bytes at offset {}",
                bad.reason,
                bad.claimed_end + nonzero_at as u64
            ),
        ));
    }
    let search = tail.get(1..).unwrap_or_default();
    if let Some(found_at) = frame::find_valid_frame(search, bad.successor_lsn) {
        return Err(WalError::corrupt(
            path,
            bad.offset,
            format!(
                "{}, but a valid frame for lsn {} follows at offset {}",
                bad.reason,
                bad.successor_lsn,
                bad.offset + 1 + found_at as u64
            ),
        ));
    }
    Ok(TornTail {
        offset: bad.offset,
        reason: bad.reason,
    })
}

fn read_from(reader: &mut BufReader<File>, offset: u64) -> io::Result<Vec<u8>> {
    reader.seek(SeekFrom::Start(offset))?;
    let mut tail = Vec::new();
    reader.read_to_end(&mut tail)?;
    Ok(tail)
}
