//! Time in the domain: [`Timestamp`], microseconds since the Unix epoch in a `u64`.
//!
//! Arithmetic saturates instead of panicking: `MAX` is the far future, `ZERO` the epoch.
//! Human units for durations and sizes live in [`crate::units`] and are re-exported here.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, excerpt};

pub use crate::units::{
    format_duration, format_size, parse_duration, parse_size, serde_duration, serde_size,
};

/// Microseconds since the Unix epoch.
#[derive(
    Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Timestamp(u64);

/// The first microsecond that RFC 3339 (four-digit years) cannot show: year 10000.
const RFC3339_END_MICROS: u64 = 253_402_300_800 * 1_000_000;

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp(0);
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    pub const fn from_micros(micros: u64) -> Timestamp {
        Timestamp(micros)
    }

    pub const fn from_millis(millis: u64) -> Timestamp {
        Timestamp(millis.saturating_mul(1_000))
    }

    pub const fn as_micros(self) -> u64 {
        self.0
    }

    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000
    }

    /// Saturates: times before the epoch become `ZERO`, beyond `u64` microseconds `MAX`.
    pub fn from_system_time(time: SystemTime) -> Timestamp {
        match time.duration_since(UNIX_EPOCH) {
            Ok(since) => Timestamp(u64::try_from(since.as_micros()).unwrap_or(u64::MAX)),
            Err(_) => Timestamp::ZERO,
        }
    }

    pub fn to_system_time(self) -> SystemTime {
        let since = Duration::from_micros(self.0);
        // Every supported platform holds this; the fallback (year 9999) only avoids a panic.
        UNIX_EPOCH
            .checked_add(since)
            .unwrap_or(UNIX_EPOCH + Duration::from_micros(RFC3339_END_MICROS - 1))
    }

    /// Adds whole microseconds of `duration`, saturating at `MAX`.
    pub fn saturating_add(self, duration: Duration) -> Timestamp {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(micros))
    }

    /// Subtracts whole microseconds of `duration`, saturating at `ZERO`.
    pub fn saturating_sub(self, duration: Duration) -> Timestamp {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(micros))
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }

    /// Parses an RFC 3339 UTC time (`Z` or `+00:00`), e.g. `2024-05-01T12:00:00.250Z`.
    pub fn parse_rfc3339(input: &str) -> Result<Timestamp, Error> {
        match humantime::parse_rfc3339(input) {
            Ok(time) => Ok(Timestamp::from_system_time(time)),
            Err(err) => Err(Error::invalid(
                "timestamp",
                format!(
                    "must be an RFC 3339 UTC time such as 2024-05-01T12:00:00Z ({err}), got {}",
                    excerpt(input)
                ),
            )),
        }
    }
}

/// RFC 3339 with microseconds; times past year 9999 print as a count of microseconds.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= RFC3339_END_MICROS {
            return write!(f, "{}us after the epoch", self.0);
        }
        write!(
            f,
            "{}",
            humantime::format_rfc3339_micros(self.to_system_time())
        )
    }
}

impl FromStr for Timestamp {
    type Err = Error;

    fn from_str(input: &str) -> Result<Timestamp, Error> {
        Timestamp::parse_rfc3339(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_rfc3339_micros_and_parses_back() {
        let ts = Timestamp::from_micros(1_714_564_800_250_001);
        assert_eq!(ts.to_string(), "2024-05-01T12:00:00.250001Z");
        assert_eq!(Timestamp::parse_rfc3339(&ts.to_string()), Ok(ts));
        assert_eq!(Timestamp::ZERO.to_string(), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            "2024-05-01T12:00:00+00:00".parse(),
            Ok(Timestamp::from_millis(1_714_564_800_000))
        );
    }

    #[test]
    fn far_future_displays_without_panicking() {
        assert_eq!(
            Timestamp::MAX.to_string(),
            format!("{}us after the epoch", u64::MAX)
        );
    }

    #[test]
    fn bad_rfc3339_names_the_field() {
        let err = Timestamp::parse_rfc3339("yesterday").expect_err("not a time");
        assert_eq!(err.field(), "timestamp");
        assert!(err.to_string().contains("got \"yesterday\""), "{err}");
        assert!(Timestamp::parse_rfc3339("2024-05-01T12:00:00+02:00").is_err());
    }

    #[test]
    fn arithmetic_saturates() {
        let ts = Timestamp::from_micros(5_000);
        assert_eq!(ts.as_millis(), 5);
        assert_eq!(
            ts.saturating_add(Duration::from_millis(1)),
            Timestamp::from_micros(6_000)
        );
        assert_eq!(ts.saturating_sub(Duration::from_secs(1)), Timestamp::ZERO);
        assert_eq!(
            Timestamp::MAX.saturating_add(Duration::from_secs(1)),
            Timestamp::MAX
        );
        assert_eq!(ts.saturating_add(Duration::MAX), Timestamp::MAX);
        let later = Timestamp::from_micros(7_500);
        assert_eq!(later.duration_since(ts), Duration::from_micros(2_500));
        assert_eq!(ts.duration_since(later), Duration::ZERO);
    }

    #[test]
    fn system_time_roundtrip_and_saturation() {
        let ts = Timestamp::from_micros(1_700_000_000_123_456);
        assert_eq!(Timestamp::from_system_time(ts.to_system_time()), ts);
        let before_epoch = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(Timestamp::from_system_time(before_epoch), Timestamp::ZERO);
        assert_eq!(
            Timestamp::from_system_time(Timestamp::MAX.to_system_time()),
            Timestamp::MAX
        );
    }
}
