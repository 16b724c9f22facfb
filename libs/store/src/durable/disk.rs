//! The free-space alarm of a store's filesystem. Below the watermark a shard refuses what
//! makes its store grow (enqueues, updates, hand-offs from others) and keeps serving what
//! lets consumers drain it (takes, acks, deletes, purges), the way a message broker blocks
//! publishers on a disk alarm. Nothing is ever written half: a refused operation changes
//! nothing, and the alarm clears by itself once space comes back.
//!
//! The watch samples `statvfs` (space an unprivileged process may use) when it is made and
//! then whenever the store's writer thread asks (every `SAMPLE_EVERY`), so a store that
//! opens on a full disk starts in the alarm. A write that still fails (another process filled the disk
//! between samples) stays fatal: the log's state is unknown after it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cascade_core::units::{about_size, format_size, parse_size};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// How often the writer samples the free space.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Bytes a checkpoint may need in sled per byte it moves there (sled appends before it
/// reclaims): that much of the data not yet checkpointed is kept free on top of the watermark.
/// Measured on a fresh store: sled grew by 1.4 bytes per byte of 100-byte events, 2.1 of
/// 10 KB ones and 3.6–3.8 of 200 KB to 1.3 MB ones (sled keeps a large value in a blob of
/// its own, and writes a leaf's values again as it splits and consolidates it).
const CHECKPOINT_COST: u64 = 5;
/// `auto`: 5 % of the filesystem, at most this.
const AUTO_CAP: u64 = 1 << 30;
const AUTO_PERCENT: u64 = 5;

/// `store.min_free_bytes`: a size such as `2GiB`, `0` for no watermark, or `auto` (5 % of the
/// filesystem, at most 1 GiB).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SizeOrWord", into = "String")]
pub enum Watermark {
    #[default]
    Auto,
    Bytes(u64),
}

impl Watermark {
    /// The free bytes below which the alarm is raised, on a filesystem of `total` bytes.
    pub fn bytes(self, total: u64) -> u64 {
        match self {
            Watermark::Auto => (total / 100 * AUTO_PERCENT).min(AUTO_CAP),
            Watermark::Bytes(bytes) => bytes,
        }
    }
}

impl FromStr for Watermark {
    type Err = cascade_core::Error;

    fn from_str(input: &str) -> Result<Watermark, Self::Err> {
        match input.trim() {
            "auto" => Ok(Watermark::Auto),
            size => parse_size(size).map(Watermark::Bytes).map_err(|_| {
                cascade_core::Error::invalid(
                    "store.min_free_bytes",
                    format!(
                        "must be \"auto\" (5% of the filesystem, at most 1GiB), a size such as 2GiB, or 0 for no watermark, got {}",
                        cascade_core::error::excerpt(input)
                    ),
                )
            }),
        }
    }
}

impl fmt::Display for Watermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Watermark::Auto => f.write_str("auto"),
            Watermark::Bytes(bytes) => f.write_str(&format_size(*bytes)),
        }
    }
}

impl From<Watermark> for String {
    fn from(watermark: Watermark) -> String {
        watermark.to_string()
    }
}

/// What a config file may hold: `"auto"`, `"2GiB"`, or a plain number of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeOrWord {
    Number(u64),
    Text(String),
}

impl TryFrom<SizeOrWord> for Watermark {
    type Error = cascade_core::Error;

    fn try_from(given: SizeOrWord) -> Result<Watermark, Self::Error> {
        match given {
            SizeOrWord::Number(bytes) => Ok(Watermark::Bytes(bytes)),
            SizeOrWord::Text(text) => text.parse(),
        }
    }
}

/// The free space of one store's filesystem against its watermark.
pub struct DiskWatch {
    dir: PathBuf,
    watermark: Watermark,
    free: AtomicU64,
    limit: AtomicU64,
    alarm: AtomicBool,
    /// What the writes since the last sample will take (their log records, and their share
    /// of the next checkpoint): a burst between two samples counts at once.
    written: AtomicU64,
    /// Kept free for the next checkpoint, as of the last sample.
    reserve: AtomicU64,
}

/// One sample: free bytes, the watermark in bytes, what is kept free for the next
/// checkpoint on top of it, and whether free is below the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskState {
    pub free: u64,
    pub watermark: u64,
    pub reserve: u64,
    pub alarm: bool,
}

impl DiskWatch {
    /// Watches the filesystem of `dir`, sampling it now.
    pub fn new(dir: &Path, watermark: Watermark) -> DiskWatch {
        let watch = DiskWatch {
            dir: dir.to_path_buf(),
            watermark,
            free: AtomicU64::new(u64::MAX),
            limit: AtomicU64::new(0),
            alarm: AtomicBool::new(false),
            written: AtomicU64::new(0),
            reserve: AtomicU64::new(0),
        };
        watch.sample(0);
        watch
    }

    /// Samples the free space, with `pending` bytes not checkpointed yet; logs when the
    /// alarm is raised or cleared. A filesystem that cannot be asked (never seen on Linux for
    /// a directory the store holds open) keeps the last state, and says so.
    pub fn sample(&self, pending: u64) -> DiskState {
        let stat = match rustix::fs::statvfs(&self.dir) {
            Ok(stat) => stat,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "store.disk.statvfs");
                return self.state();
            }
        };
        self.written.store(0, Ordering::Relaxed);
        let free = stat.f_bavail.saturating_mul(stat.f_frsize);
        let total = stat.f_blocks.saturating_mul(stat.f_frsize);
        let watermark = self.watermark.bytes(total);
        let reserve = pending.saturating_mul(CHECKPOINT_COST);
        let alarm = free < watermark.saturating_add(reserve);
        self.free.store(free, Ordering::Relaxed);
        self.limit.store(watermark, Ordering::Relaxed);
        self.reserve.store(reserve, Ordering::Relaxed);
        self.set_alarm(alarm, free, watermark);
        self.state()
    }

    /// `bytes` more went to the log; raises the alarm at once if that takes the free space
    /// below the watermark (the next sample tells the truth, checkpoints and deletes included).
    pub fn wrote(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let cost = bytes.saturating_mul(1 + CHECKPOINT_COST);
        self.written.fetch_add(cost, Ordering::Relaxed);
        let state = self.state();
        if !state.alarm && state.free < state.watermark.saturating_add(state.reserve) {
            self.set_alarm(true, state.free, state.watermark);
        }
    }

    /// Raises or clears the alarm; logs when it changes.
    fn set_alarm(&self, alarm: bool, free: u64, watermark: u64) {
        if self.alarm.swap(alarm, Ordering::Relaxed) == alarm {
            return;
        }
        let (dir, free, watermark) = (self.dir.display(), about_size(free), about_size(watermark));
        match alarm {
            true => tracing::warn!(
                %dir, %free, %watermark,
                "store.disk.alarm: enqueues, updates and hand-offs are refused until space is freed"
            ),
            false => tracing::info!(%dir, %free, %watermark, "store.disk.alarm_cleared"),
        }
    }

    /// The last sample, less what was written since.
    pub fn state(&self) -> DiskState {
        let written = self.written.load(Ordering::Relaxed);
        DiskState {
            free: self.free.load(Ordering::Relaxed).saturating_sub(written),
            watermark: self.limit.load(Ordering::Relaxed),
            reserve: self.reserve.load(Ordering::Relaxed),
            alarm: self.alarm.load(Ordering::Relaxed),
        }
    }

    /// `DiskFull` while the alarm is raised: for operations that make the store grow.
    pub fn check_space(&self) -> Result<(), StoreError> {
        let state = self.state();
        match state.alarm {
            false => Ok(()),
            true => Err(StoreError::DiskFull {
                free: state.free,
                watermark: state.watermark,
                reserve: state.reserve,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_parse_and_auto_is_five_percent_at_most_a_gibibyte() {
        assert_eq!("auto".parse(), Ok(Watermark::Auto));
        assert_eq!("2GiB".parse(), Ok(Watermark::Bytes(2 << 30)));
        assert_eq!("0".parse(), Ok(Watermark::Bytes(0)));
        let err = "lots".parse::<Watermark>().expect_err("not a size");
        assert!(
            err.to_string()
                .starts_with("store.min_free_bytes: must be \"auto\""),
            "{err}"
        );
        assert_eq!(Watermark::Auto.bytes(1 << 30), (1 << 30) / 100 * 5);
        assert_eq!(Watermark::Auto.bytes(1 << 40), 1 << 30);
        assert_eq!(Watermark::Bytes(7).bytes(1 << 40), 7);
        assert_eq!(Watermark::Auto.to_string(), "auto");
        assert_eq!(Watermark::Bytes(3 << 20).to_string(), "3MiB");
    }

    #[test]
    fn the_alarm_follows_the_watermark_and_names_free_space() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = DiskWatch::new(dir.path(), Watermark::Bytes(0));
        assert!(open.check_space().is_ok());
        let full = DiskWatch::new(dir.path(), Watermark::Bytes(u64::MAX));
        let state = full.state();
        assert!(state.alarm && state.free < u64::MAX);
        let err = full.check_space().expect_err("alarm");
        assert_eq!(err.code(), cascade_core::Code::ResourceExhausted);
        assert!(err.to_string().contains("store.min_free_bytes"), "{err}");
    }

    /// Large payloads made sled grow by 3.6–3.8 bytes per byte checkpointed: a quarter of
    /// the free space not yet checkpointed is already too much, an eighth is not.
    #[test]
    fn five_times_what_is_not_checkpointed_is_kept_free_without_a_watermark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = DiskWatch::new(dir.path(), Watermark::Bytes(0));
        let free = watch.state().free;
        let state = watch.sample(free / 4);
        assert!(state.alarm, "{state:?}");
        assert!(watch.check_space().is_err());
        let state = watch.sample(free / 8);
        assert!(!state.alarm, "{state:?}");
        assert!(watch.check_space().is_ok());
    }
}
