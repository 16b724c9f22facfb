//! The disk's raw durable-write rate: what every benchmark prints beside its figures, so
//! that results from different machines (or from one noisy disk at different times)
//! compare as ratios.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes appended before each `fdatasync`: one small log record.
const PROBE_RECORD_BYTES: usize = 100;

/// Appends 100 bytes and `fdatasync`s, as often as the disk allows for `length`, in a
/// scratch file under `dir` (removed afterwards); returns the rate per second.
pub fn raw_fsync_rate(dir: &Path, length: Duration) -> std::io::Result<f64> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path)?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < length {
        file.write_all(&[0x5a; PROBE_RECORD_BYTES])?;
        file.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    std::fs::remove_file(&path)?;
    Ok(rate)
}
