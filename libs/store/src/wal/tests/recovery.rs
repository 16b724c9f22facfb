//! Opening after a crash: torn tails are cut, everything else that is damaged is refused.
//!
//! Each test starts from eleven synced records (segments 1, 4, 7, 10; see `mod.rs`). In the
//! last segment the frame of lsn 10 is at offset 8 and the frame of lsn 11 at offset 44.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use super::super::frame;
use super::*;

const LAST_FRAME: u64 = 44;
const LAST_SEGMENT_LEN: u64 = 80;

fn eleven_records() -> Result<tempfile::TempDir, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    drop(write_synced(dir.path(), 11)?);
    Ok(dir)
}

fn flip_byte(path: &Path, offset: u64) -> TestResult {
    let mut bytes = fs::read(path)?;
    let index = usize::try_from(offset)?;
    bytes[index] ^= 0x40;
    fs::write(path, bytes)?;
    Ok(())
}

fn append_bytes(path: &Path, bytes: &[u8]) -> TestResult {
    OpenOptions::new()
        .append(true)
        .open(path)?
        .write_all(bytes)?;
    Ok(())
}

fn cut(path: &Path, len: u64) -> TestResult {
    OpenOptions::new().write(true).open(path)?.set_len(len)?;
    Ok(())
}

/// Opens the damaged log and checks that exactly lsns 1..=`last` survive, that the tail was
/// cut at `cut_at`, and that appends continue in the same segment and survive a reopen.
fn assert_recovers(dir: &Path, last: Lsn, segment: Lsn, cut_at: u64) -> TestResult {
    let segments_before = segment_names(dir);
    let mut wal = Wal::open(dir, opts(), 0)?;
    assert_eq!((wal.last_lsn(), wal.durable_lsn()), (last, last));
    assert_eq!(read_all(&wal, 0)?, expected(1..=last));
    assert_eq!(file_len(&segment_path(dir, segment)), cut_at);
    assert_eq!(wal.append(&payload(last + 1))?, last + 1);
    assert_eq!(wal.sync()?, last + 1);
    drop(wal);

    let wal = Wal::open(dir, opts(), 0)?;
    assert_eq!(read_all(&wal, 0)?, expected(1..=last + 1));
    assert_eq!(read_all(&wal, last)?, expected(last + 1..=last + 1));
    let mut segments_after = segment_names(dir);
    if segments_after.len() > segments_before.len() {
        // The new record may have filled the segment; the roll then added exactly one.
        assert_eq!(segments_after.pop(), Some(last + 2));
    }
    assert_eq!(segments_after, segments_before);
    Ok(())
}

/// Opens the log, expects `Corrupt` at `path`/`offset`, and checks that nothing was cut.
fn assert_corrupt(
    dir: &Path,
    path: &Path,
    offset: u64,
) -> Result<String, Box<dyn std::error::Error>> {
    let len_before = file_len(path);
    let err = Wal::open(dir, opts(), 0).expect_err("damage must be refused");
    let WalError::Corrupt {
        path: bad_path,
        offset: bad_offset,
        reason,
    } = &err
    else {
        panic!("expected Corrupt, got {err:?}");
    };
    assert_eq!((bad_path.as_path(), *bad_offset), (path, offset), "{err}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("byte offset {offset}")),
        "{message}"
    );
    assert!(message.contains("cascade data verify"), "{message}");
    assert_eq!(
        file_len(path),
        len_before,
        "a refused segment must not be truncated"
    );
    Ok(reason.clone())
}

#[test]
fn torn_tail_cut_mid_header() -> TestResult {
    let dir = eleven_records()?;
    cut(&segment_path(dir.path(), 10), LAST_FRAME + 7)?;
    assert_recovers(dir.path(), 10, 10, LAST_FRAME)
}

#[test]
fn torn_tail_cut_mid_payload() -> TestResult {
    let dir = eleven_records()?;
    cut(&segment_path(dir.path(), 10), LAST_FRAME + 16 + 5)?;
    assert_recovers(dir.path(), 10, 10, LAST_FRAME)
}

#[test]
fn torn_tail_flipped_byte_in_last_frame() -> TestResult {
    for offset in [
        LAST_FRAME + 2,
        LAST_FRAME + 5,
        LAST_FRAME + 9,
        LAST_FRAME + 16 + 3,
    ] {
        let dir = eleven_records()?;
        flip_byte(&segment_path(dir.path(), 10), offset)?;
        assert_recovers(dir.path(), 10, 10, LAST_FRAME)?;
    }
    Ok(())
}

#[test]
fn torn_tail_zeros_appended() -> TestResult {
    let dir = eleven_records()?;
    append_bytes(&segment_path(dir.path(), 10), &[0; 4096])?;
    assert_recovers(dir.path(), 11, 10, LAST_SEGMENT_LEN)
}

#[test]
fn torn_tail_cut_then_zeros() -> TestResult {
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 10);
    cut(&path, LAST_FRAME + 20)?;
    append_bytes(&path, &[0; 100])?;
    assert_recovers(dir.path(), 10, 10, LAST_FRAME)
}

#[test]
fn torn_header_of_a_new_segment_is_rewritten() -> TestResult {
    for torn in [&b"CSC"[..], &[], &[0; 8], &[0; 300]] {
        let dir = eleven_records()?;
        fs::write(segment_path(dir.path(), 12), torn)?;
        assert_recovers(dir.path(), 11, 12, 8)?;
    }
    Ok(())
}

#[test]
fn flipped_byte_in_a_middle_frame_is_corrupt() -> TestResult {
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 10);
    flip_byte(&path, 8 + 16 + 2)?;
    let reason = assert_corrupt(dir.path(), &path, 8)?;
    assert!(reason.contains("checksum mismatch"), "{reason}");
    Ok(())
}

#[test]
fn damaged_length_in_a_middle_frame_is_not_a_torn_tail() -> TestResult {
    // The flipped length makes the frame of lsn 10 claim to run past the end of the file.
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 10);
    flip_byte(&path, 8 + 2)?;
    let reason = assert_corrupt(dir.path(), &path, 8)?;
    assert!(
        reason.contains("valid frame for lsn 11 follows at offset 44"),
        "{reason}"
    );
    Ok(())
}

#[test]
fn damage_in_a_non_last_segment_is_corrupt() -> TestResult {
    // The final frame of a non-last segment (lsn 6 at offset 80) gets no torn-tail leniency.
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 4);
    flip_byte(&path, 80 + 16 + 1)?;
    assert_corrupt(dir.path(), &path, 80)?;

    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 4);
    cut(&path, 100)?;
    assert_corrupt(dir.path(), &path, 80)?;
    Ok(())
}

#[test]
fn bytes_after_zeros_are_corrupt() -> TestResult {
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 10);
    append_bytes(&path, &[0; 100])?;
    append_bytes(&path, b"x")?;
    let reason = assert_corrupt(dir.path(), &path, LAST_SEGMENT_LEN)?;
    assert!(reason.contains("non-zero bytes at offset 180"), "{reason}");
    Ok(())
}

#[test]
fn bad_header_is_refused() -> TestResult {
    for segment in [1, 10] {
        let dir = eleven_records()?;
        let path = segment_path(dir.path(), segment);
        let mut bytes = fs::read(&path)?;
        bytes[..8].copy_from_slice(b"CSCWAL99");
        fs::write(&path, bytes)?;
        assert_corrupt(dir.path(), &path, 0)?;
    }
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 12);
    fs::write(&path, b"NOTAWAL!")?;
    assert_corrupt(dir.path(), &path, 0)?;
    Ok(())
}

#[test]
fn checksummed_frame_with_wrong_lsn_is_corrupt() -> TestResult {
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 10);
    let mut frame_bytes = Vec::new();
    frame::encode_into(&mut frame_bytes, 13, b"skipped ahead", 13);
    append_bytes(&path, &frame_bytes)?;
    let reason = assert_corrupt(dir.path(), &path, LAST_SEGMENT_LEN)?;
    assert!(reason.contains("expected lsn 12, found lsn 13"), "{reason}");
    Ok(())
}

#[test]
fn overlapping_segments_are_corrupt() -> TestResult {
    let dir = eleven_records()?;
    // Segment 4 holds lsns 4..=6, so a segment named 5 repeats lsns.
    let path = segment_path(dir.path(), 5);
    fs::write(&path, b"CSCWAL01")?;
    let reason = assert_corrupt(dir.path(), &path, 0)?;
    assert!(
        reason.contains("previous segment ends at lsn 6"),
        "{reason}"
    );
    Ok(())
}

type Records = Vec<(Lsn, Vec<u8>)>;

/// Every record a salvage read keeps, and where it stopped.
fn salvage_all(dir: &Path, after: Lsn) -> Result<(Records, Salvaged), WalError> {
    let mut kept = Vec::new();
    let salvaged = salvage(dir, after, |lsn, bytes| {
        kept.push((lsn, bytes));
        Ok(())
    })?;
    Ok((kept, salvaged))
}

#[test]
fn salvage_reads_a_whole_log_and_one_with_a_torn_tail_to_the_end() -> TestResult {
    let dir = eleven_records()?;
    let (kept, salvaged) = salvage_all(dir.path(), 0)?;
    assert_eq!(kept, expected(1..=11));
    assert_eq!(salvaged.stopped, None);
    let (kept, _) = salvage_all(dir.path(), 5)?;
    assert_eq!(kept, expected(6..=11), "from after the checkpoint");
    cut(&segment_path(dir.path(), 10), LAST_FRAME + 3)?;
    let (kept, salvaged) = salvage_all(dir.path(), 0)?;
    assert_eq!(kept, expected(1..=10));
    assert_eq!(salvaged.stopped, None, "a torn tail was never acknowledged");
    Ok(())
}

#[test]
fn salvage_stops_at_damage_or_a_missing_segment_and_changes_nothing() -> TestResult {
    let dir = eleven_records()?;
    let path = segment_path(dir.path(), 4);
    flip_byte(&path, 80 + 16 + 1)?;
    let before = fs::read(&path)?;
    let (kept, salvaged) = salvage_all(dir.path(), 0)?;
    assert_eq!(kept, expected(1..=5));
    let stopped = salvaged.stopped.unwrap_or_default();
    assert!(stopped.contains("checksum mismatch"), "{stopped}");
    assert_eq!(fs::read(&path)?, before);

    let dir = eleven_records()?;
    fs::remove_file(segment_path(dir.path(), 7))?;
    let (kept, salvaged) = salvage_all(dir.path(), 0)?;
    assert_eq!(kept, expected(1..=6));
    let stopped = salvaged.stopped.unwrap_or_default();
    assert!(stopped.contains("records 7 to 9 are missing"), "{stopped}");

    // A damaged length (outside the checksum) claiming about 1 GiB stops the read: it does
    // not size an allocation.
    let dir = eleven_records()?;
    flip_byte(&segment_path(dir.path(), 4), 44 + 3)?;
    let (kept, salvaged) = salvage_all(dir.path(), 0)?;
    assert_eq!(kept, expected(1..=4));
    let stopped = salvaged.stopped.unwrap_or_default();
    assert!(
        stopped.contains("the frame of lsn 5 claims 1073741860 bytes, the segment has 72 left"),
        "{stopped}"
    );

    // A record the caller refuses ends the read there.
    let dir = eleven_records()?;
    let salvaged = salvage(dir.path(), 0, |lsn, _| match lsn {
        3 => Err("not a batch".into()),
        _ => Ok(()),
    })?;
    assert_eq!(salvaged.records, 2);
    assert!(
        salvaged
            .stopped
            .unwrap_or_default()
            .contains("record 3: not a batch")
    );
    Ok(())
}
