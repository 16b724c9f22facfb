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
    raw_fsync(dir, length).map(|probe| probe.rate)
}

/// What [`raw_fsync`] measured.
#[derive(Clone, Copy, Debug)]
pub struct FsyncProbe {
    /// Appends with their `fdatasync` per second.
    pub rate: f64,
    /// The median time of one append and its `fdatasync`.
    pub p50: Duration,
}

/// [`raw_fsync_rate`], with the median time of one durable append.
pub fn raw_fsync(dir: &Path, length: Duration) -> std::io::Result<FsyncProbe> {
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path)?;
    let start = Instant::now();
    let mut times = Vec::new();
    while start.elapsed() < length {
        let began = Instant::now();
        file.write_all(&[0x5a; PROBE_RECORD_BYTES])?;
        file.sync_data()?;
        times.push(began.elapsed());
    }
    let rate = times.len() as f64 / start.elapsed().as_secs_f64();
    std::fs::remove_file(&path)?;
    times.sort_unstable();
    let p50 = times.get(times.len() / 2).copied().unwrap_or_default();
    Ok(FsyncProbe { rate, p50 })
}
