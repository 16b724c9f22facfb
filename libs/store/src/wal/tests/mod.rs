//! Tests of the write-ahead log against real files in temporary directories.
//!
//! Layout used throughout: 20-byte payloads make 36-byte frames, and with `SEGMENT_BYTES` = 100
//! and a sync after every append a segment holds exactly three records (8 + 3 * 36 > 100).
//! Eleven records therefore give segments 1, 4, 7 and 10, the last holding lsns 10 and 11.

mod basic;
mod recovery;

use std::fs;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::segment::file_name;
use super::{Lsn, Salvaged, Wal, WalError, WalOptions, salvage};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const SEGMENT_BYTES: u64 = 100;

fn opts() -> WalOptions {
    WalOptions {
        segment_bytes: SEGMENT_BYTES,
    }
}

/// 20 bytes that name their lsn, so a record in the wrong place shows.
fn payload(lsn: Lsn) -> Vec<u8> {
    format!("record-{lsn:013}").into_bytes()
}

fn expected(lsns: RangeInclusive<Lsn>) -> Vec<(Lsn, Vec<u8>)> {
    lsns.map(|lsn| (lsn, payload(lsn))).collect()
}

fn read_all(wal: &Wal, after: Lsn) -> Result<Vec<(Lsn, Vec<u8>)>, WalError> {
    wal.read_after(after)?.collect()
}

/// Opens a fresh log and appends `count` records, syncing after each one.
fn write_synced(dir: &Path, count: Lsn) -> Result<Wal, WalError> {
    let mut wal = Wal::open(dir, opts(), 0)?;
    for lsn in 1..=count {
        assert_eq!(wal.append(&payload(lsn))?, lsn);
        assert_eq!(wal.sync()?, lsn);
    }
    Ok(wal)
}

fn segment_path(dir: &Path, first_lsn: Lsn) -> PathBuf {
    dir.join(file_name(first_lsn))
}

/// First LSNs of the segment files in `dir`, in order.
fn segment_names(dir: &Path) -> Vec<Lsn> {
    let mut names: Vec<Lsn> = fs::read_dir(dir)
        .expect("list test log directory")
        .map(|entry| {
            let name = entry.expect("read test directory entry").file_name();
            super::segment::parse_file_name(&name).expect("only segments in the test log directory")
        })
        .collect();
    names.sort_unstable();
    names
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).expect("stat test segment").len()
}
