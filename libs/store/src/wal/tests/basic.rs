//! Appending, syncing, rolling, replay and segment removal on a healthy log.

use std::fs::{self, File};

use super::*;

#[test]
fn round_trip_across_rolls_and_reopen() -> TestResult {
    let root = tempfile::tempdir()?;
    let dir = root.path().join("shard-0").join("wal");
    let mut wal = Wal::open(&dir, opts(), 0)?;
    assert_eq!((wal.last_lsn(), wal.durable_lsn()), (0, 0));
    for lsn in 1..=20 {
        assert_eq!(wal.append(&payload(lsn))?, lsn);
        if lsn % 2 == 0 {
            assert_eq!(wal.sync()?, lsn);
        }
    }
    // Two syncs of two frames each (8 + 4 * 36 = 152 > 100) fill a segment.
    assert_eq!(segment_names(&dir), [1, 5, 9, 13, 17, 21]);
    assert_eq!(read_all(&wal, 0)?, expected(1..=20));
    assert_eq!(wal.disk_bytes(), 5 * 152 + 8);
    drop(wal);

    let mut wal = Wal::open(&dir, opts(), 0)?;
    assert_eq!((wal.last_lsn(), wal.durable_lsn()), (20, 20));
    assert_eq!(read_all(&wal, 0)?, expected(1..=20));
    assert_eq!(wal.append(&payload(21))?, 21);
    assert_eq!(wal.sync()?, 21);
    assert_eq!(segment_names(&dir), [1, 5, 9, 13, 17, 21]);
    drop(wal);

    let wal = Wal::open(&dir, opts(), 0)?;
    assert_eq!(read_all(&wal, 0)?, expected(1..=21));
    assert_eq!(wal.dir(), dir.as_path());
    Ok(())
}

#[test]
fn read_after_from_the_middle() -> TestResult {
    let dir = tempfile::tempdir()?;
    let wal = write_synced(dir.path(), 11)?;
    assert_eq!(read_all(&wal, 4)?, expected(5..=11));
    assert_eq!(read_all(&wal, 5)?, expected(6..=11));
    assert_eq!(read_all(&wal, 10)?, expected(11..=11));
    assert_eq!(read_all(&wal, 11)?, []);
    assert_eq!(read_all(&wal, 100)?, []);
    drop(wal);
    let wal = Wal::open(dir.path(), opts(), 3)?;
    assert_eq!(read_all(&wal, 3)?, expected(4..=11));
    Ok(())
}

/// A checkpoint rolls the log where it begins, so that what it covers can go whole.
#[test]
fn roll_syncs_and_starts_the_next_record_in_a_new_segment() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = write_synced(dir.path(), 2)?;
    assert_eq!(wal.append(&payload(3))?, 3);
    assert_eq!(wal.roll()?, 3, "the buffered record is durable");
    assert_eq!(segment_names(dir.path()), [1, 4]);
    assert_eq!(wal.roll()?, 3, "an empty segment is not rolled again");
    assert_eq!(segment_names(dir.path()), [1, 4]);
    assert_eq!(wal.append(&payload(4))?, 4);
    wal.sync()?;
    assert_eq!(remove_through(&mut wal, 3)?, 1);
    drop(wal);
    let wal = Wal::open(dir.path(), opts(), 3)?;
    assert_eq!(read_all(&wal, 3)?, expected(4..=4));
    Ok(())
}

#[test]
fn detach_through_keeps_current_segment_and_later_records() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = write_synced(dir.path(), 11)?;
    assert_eq!(segment_names(dir.path()), [1, 4, 7, 10]);
    assert_eq!(remove_through(&mut wal, 0)?, 0);
    assert_eq!(remove_through(&mut wal, 5)?, 1);
    assert_eq!(segment_names(dir.path()), [4, 7, 10]);
    assert_eq!(read_all(&wal, 5)?, expected(6..=11));
    assert_eq!(remove_through(&mut wal, 9)?, 2);
    assert_eq!(remove_through(&mut wal, 100)?, 0);
    assert_eq!(segment_names(dir.path()), [10]);
    assert_eq!(read_all(&wal, 9)?, expected(10..=11));
    assert_eq!(wal.disk_bytes(), 8 + 2 * 36);
    assert_eq!(wal.append(&payload(12))?, 12);
    assert_eq!(wal.sync()?, 12);
    assert_eq!(read_all(&wal, 9)?, expected(10..=12));
    Ok(())
}

#[test]
fn reopen_after_detach_through_continues_after_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = write_synced(dir.path(), 12)?;
    assert_eq!(segment_names(dir.path()), [1, 4, 7, 10, 13]);
    assert_eq!(remove_through(&mut wal, 12)?, 4);
    assert_eq!(segment_names(dir.path()), [13]);
    drop(wal);

    let mut wal = Wal::open(dir.path(), opts(), 12)?;
    assert_eq!((wal.last_lsn(), wal.durable_lsn()), (12, 12));
    assert_eq!(read_all(&wal, 12)?, []);
    assert_eq!(wal.append(&payload(13))?, 13);
    assert_eq!(wal.sync()?, 13);
    assert_eq!(read_all(&wal, 12)?, expected(13..=13));
    drop(wal);

    match Wal::open(dir.path(), opts(), 0) {
        Err(WalError::Missing {
            expected, found, ..
        }) => assert_eq!((expected, found), (1, 13)),
        other => panic!("expected Missing, got {other:?}"),
    }
    Ok(())
}

/// The store deletes detached segments on another thread: a crash before that leaves them
/// on disk, where the next open reads past them and the next checkpoint's removal takes them.
#[test]
fn segments_detached_but_left_on_disk_are_removed_after_the_next_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = write_synced(dir.path(), 11)?;
    let covered = wal.detach_through(9)?;
    assert_eq!(covered.len(), 3);
    drop((covered, wal));
    assert_eq!(segment_names(dir.path()), [1, 4, 7, 10]);

    let mut wal = Wal::open(dir.path(), opts(), 9)?;
    assert_eq!(wal.last_lsn(), 11);
    assert_eq!(read_all(&wal, 9)?, expected(10..=11));
    assert_eq!(remove_through(&mut wal, 9)?, 3);
    assert_eq!(segment_names(dir.path()), [10]);
    Ok(())
}

#[test]
fn a_covered_segment_that_cannot_be_deleted_is_an_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = write_synced(dir.path(), 11)?;
    let covered = wal.detach_through(3)?;
    // The oldest segment's name now holds a directory with a file in it.
    let oldest = segment_path(dir.path(), 1);
    fs::remove_file(&oldest)?;
    fs::create_dir(&oldest)?;
    File::create(oldest.join("in-the-way"))?;
    match covered.remove() {
        Err(WalError::Io { op, path, .. }) => {
            assert_eq!((op, path), ("remove segment", oldest));
        }
        other => panic!("expected Io, got {other:?}"),
    }
    Ok(())
}

#[test]
fn next_lsn_is_always_after_the_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    // No segment at all where the store was checkpointed: the log was removed.
    match Wal::open(dir.path(), opts(), 41) {
        Err(WalError::Gone { checkpoint_lsn, .. }) => assert_eq!(checkpoint_lsn, 41),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(crate::wal::verify(dir.path(), 41).is_err());
    drop(write_synced(dir.path(), 11)?);
    let before = segment_names(dir.path());

    // The store is ahead of the log (it checkpointed records the log lost): start after it.
    let mut wal = Wal::open(dir.path(), opts(), 50)?;
    assert_eq!(wal.last_lsn(), 50);
    assert_eq!(segment_names(dir.path()), [&before[..], &[51]].concat());
    assert_eq!(wal.append(&payload(51))?, 51);
    assert_eq!(wal.sync()?, 51);
    drop(wal);

    let wal = Wal::open(dir.path(), opts(), 50)?;
    assert_eq!(wal.last_lsn(), 51);
    assert_eq!(read_all(&wal, 50)?, expected(51..=51));
    Ok(())
}

#[test]
fn missing_when_a_needed_segment_was_deleted() -> TestResult {
    let dir = tempfile::tempdir()?;
    drop(write_synced(dir.path(), 11)?);
    fs::remove_file(segment_path(dir.path(), 4))?;
    let err = Wal::open(dir.path(), opts(), 0).expect_err("segment 4 is gone");
    assert!(
        matches!(
            err,
            WalError::Missing {
                expected: 4,
                found: 7,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("expected lsn 4, found lsn 7"),
        "{err}"
    );
    // Records 4..=6 are already in the checkpoint: the gap is harmless.
    let wal = Wal::open(dir.path(), opts(), 6)?;
    assert_eq!(read_all(&wal, 6)?, expected(7..=11));
    match wal.read_after(0) {
        Err(WalError::Missing {
            expected, found, ..
        }) => assert_eq!((expected, found), (4, 7)),
        other => panic!("expected Missing, got {other:?}"),
    }
    drop(wal);

    fs::remove_file(segment_path(dir.path(), 1))?;
    match Wal::open(dir.path(), opts(), 2) {
        Err(WalError::Missing {
            expected, found, ..
        }) => assert_eq!((expected, found), (3, 7)),
        other => panic!("expected Missing, got {other:?}"),
    }
    // `cascade data verify` says so too, where it only looked between segments.
    match crate::wal::verify(dir.path(), 2) {
        Err(WalError::Missing {
            expected, found, ..
        }) => assert_eq!((expected, found), (3, 7)),
        other => panic!("expected Missing, got {other:?}"),
    }
    assert!(crate::wal::verify(dir.path(), 6)?.is_empty());
    Ok(())
}

#[test]
fn large_and_empty_records_round_trip() -> TestResult {
    let dir = tempfile::tempdir()?;
    let big: Vec<u8> = (0..5 * 1024 * 1024).map(|i: u32| (i % 251) as u8).collect();
    let mut wal = Wal::open(dir.path(), opts(), 0)?;
    assert_eq!(wal.append(&big)?, 1);
    assert_eq!(wal.append(&[])?, 2);
    assert_eq!(wal.append(b"tail")?, 3);
    assert_eq!(wal.sync()?, 3);
    let want = vec![(1, big), (2, Vec::new()), (3, b"tail".to_vec())];
    assert_eq!(read_all(&wal, 0)?, want);
    drop(wal);

    let wal = Wal::open(dir.path(), WalOptions::default(), 0)?;
    assert_eq!(read_all(&wal, 0)?, want);
    assert_eq!(read_all(&wal, 1)?, want[1..]);
    assert_eq!(segment_names(dir.path()), [1, 4]);
    Ok(())
}

#[test]
fn write_buffered_writes_without_syncing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = Wal::open(dir.path(), opts(), 0)?;
    assert_eq!(wal.append(&payload(1))?, 1);
    assert_eq!(wal.append(&payload(2))?, 2);
    assert_eq!(wal.disk_bytes(), 8, "append only buffers");
    wal.write_buffered()?;
    assert_eq!(wal.disk_bytes(), 80);
    assert_eq!(file_len(&segment_path(dir.path(), 1)), 80);
    assert_eq!((wal.last_lsn(), wal.durable_lsn()), (2, 0));
    assert_eq!(wal.sync()?, 2);

    // Going over the segment size rolls, and rolling syncs the full segment first.
    assert_eq!(wal.append(&payload(3))?, 3);
    wal.write_buffered()?;
    assert_eq!(wal.durable_lsn(), 3);
    assert_eq!(segment_names(dir.path()), [1, 4]);
    Ok(())
}

#[test]
fn append_writes_out_a_large_buffer() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = Wal::open(dir.path(), WalOptions::default(), 0)?;
    let record = vec![7u8; 64 * 1024];
    for lsn in 1..=20 {
        assert_eq!(wal.append(&record)?, lsn);
    }
    assert!(wal.disk_bytes() > 1024 * 1024, "{}", wal.disk_bytes());
    assert_eq!(wal.durable_lsn(), 0);
    assert_eq!(wal.sync()?, 20);
    assert_eq!(wal.disk_bytes(), 8 + 20 * (16 + 64 * 1024));
    Ok(())
}

#[test]
fn failed_write_poisons_the_log() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut wal = write_synced(dir.path(), 1)?;
    // A read-only handle makes the next write fail like a full or broken disk would.
    wal.file = File::open(segment_path(dir.path(), 1))?;
    assert_eq!(wal.append(&payload(2))?, 2);
    match wal.sync() {
        Err(WalError::Io { op, path, .. }) => {
            assert_eq!(op, "write segment");
            assert_eq!(path, segment_path(dir.path(), 1));
        }
        other => panic!("expected Io, got {other:?}"),
    }
    assert!(matches!(wal.append(&payload(3)), Err(WalError::Poisoned)));
    assert!(matches!(wal.sync(), Err(WalError::Poisoned)));
    assert!(matches!(wal.write_buffered(), Err(WalError::Poisoned)));
    assert!(matches!(wal.detach_through(1), Err(WalError::Poisoned)));
    assert!(matches!(wal.read_after(0), Err(WalError::Poisoned)));
    assert_eq!(wal.durable_lsn(), 1);
    drop(wal);

    let wal = Wal::open(dir.path(), opts(), 0)?;
    assert_eq!(read_all(&wal, 0)?, expected(1..=1));
    Ok(())
}

/// Detaches the segments `lsn` covers and deletes them, as the store does after a
/// checkpoint (there on another thread); how many there were.
fn remove_through(wal: &mut Wal, lsn: u64) -> Result<usize, WalError> {
    let covered = wal.detach_through(lsn)?;
    let count = covered.len();
    covered.remove()?;
    Ok(count)
}
