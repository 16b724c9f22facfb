//! `google.protobuf.Timestamp` / `Duration` ↔ [`Timestamp`] (µs since the epoch) and
//! [`std::time::Duration`]. Negative or out-of-range values are INVALID_ARGUMENT naming the
//! field; sub-microsecond nanoseconds are dropped.

use std::time::Duration;

use cascade_core::Timestamp;

use super::{ConvertError, invalid};

/// 9999-12-31T23:59:59Z, the last second protobuf's `Timestamp` allows.
const MAX_TIMESTAMP_SECONDS: i64 = 253_402_300_799;
/// About 10,000 years, the longest protobuf's `Duration` allows.
const MAX_DURATION_SECONDS: i64 = 315_576_000_000;
const NANOS_PER_SECOND: i32 = 1_000_000_000;

/// Saturates at the end of year 9999, the last time protobuf's `Timestamp` allows: a time
/// further away (an advance delayed by thousands of years) would be refused by whoever reads
/// it, a shard receiving a hand-off included, and is never reached either way.
pub fn timestamp_to_proto(at: Timestamp) -> prost_types::Timestamp {
    let micros = at.as_micros();
    // u64::MAX µs is about 1.8e13 s: it fits in an i64.
    let seconds = i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX);
    if seconds > MAX_TIMESTAMP_SECONDS {
        return prost_types::Timestamp {
            seconds: MAX_TIMESTAMP_SECONDS,
            nanos: 999_999_000,
        };
    }
    prost_types::Timestamp {
        seconds,
        nanos: i32::try_from((micros % 1_000_000) * 1_000).unwrap_or(0),
    }
}

/// A time between the Unix epoch and the end of year 9999.
pub fn timestamp_from_proto(
    at: &prost_types::Timestamp,
    field: &str,
) -> Result<Timestamp, ConvertError> {
    if !(0..NANOS_PER_SECOND).contains(&at.nanos) {
        return Err(invalid(
            "",
            field,
            format!("nanos must be 0 to 999999999, got {}", at.nanos),
        ));
    }
    if !(0..=MAX_TIMESTAMP_SECONDS).contains(&at.seconds) {
        return Err(invalid(
            "",
            field,
            format!(
                "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got {} seconds since the epoch",
                at.seconds
            ),
        ));
    }
    // Both are non-negative and small enough that the sum cannot overflow.
    let micros = at.seconds as u64 * 1_000_000 + at.nanos as u64 / 1_000;
    Ok(Timestamp::from_micros(micros))
}

/// Saturates at protobuf's largest duration (about 10,000 years).
pub fn duration_to_proto(duration: Duration) -> prost_types::Duration {
    let seconds = i64::try_from(duration.as_secs())
        .unwrap_or(i64::MAX)
        .min(MAX_DURATION_SECONDS);
    prost_types::Duration {
        seconds,
        nanos: i32::try_from(duration.subsec_nanos()).unwrap_or(0),
    }
}

/// A non-negative duration.
pub fn duration_from_proto(
    duration: &prost_types::Duration,
    field: &str,
) -> Result<Duration, ConvertError> {
    if duration.seconds < 0 || duration.nanos < 0 {
        return Err(invalid(
            "",
            field,
            format!(
                "must not be negative, got {}s {}ns",
                duration.seconds, duration.nanos
            ),
        ));
    }
    if duration.nanos >= NANOS_PER_SECOND {
        return Err(invalid(
            "",
            field,
            format!("nanos must be 0 to 999999999, got {}", duration.nanos),
        ));
    }
    if duration.seconds > MAX_DURATION_SECONDS {
        return Err(invalid(
            "",
            field,
            format!(
                "must be at most {MAX_DURATION_SECONDS} seconds, got {}",
                duration.seconds
            ),
        ));
    }
    let micros = duration.nanos as u64 / 1_000;
    Ok(Duration::from_secs(duration.seconds as u64) + Duration::from_micros(micros))
}

/// An optional duration where unset and zero both mean "not given" (`None`).
pub fn optional_duration_from_proto(
    duration: Option<&prost_types::Duration>,
    field: &str,
) -> Result<Option<Duration>, ConvertError> {
    match duration {
        None => Ok(None),
        Some(given) => {
            let value = duration_from_proto(given, field)?;
            Ok((!value.is_zero()).then_some(value))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(seconds: i64, nanos: i32) -> prost_types::Timestamp {
        prost_types::Timestamp { seconds, nanos }
    }

    fn dur(seconds: i64, nanos: i32) -> prost_types::Duration {
        prost_types::Duration { seconds, nanos }
    }

    #[test]
    fn timestamps_round_trip_at_microsecond_precision() {
        let at = Timestamp::from_micros(1_714_564_800_250_001);
        let sent = timestamp_to_proto(at);
        assert_eq!(sent, ts(1_714_564_800, 250_001_000));
        assert_eq!(timestamp_from_proto(&sent, "activate_at"), Ok(at));
        let fine = ts(1, 999_999_999);
        assert_eq!(
            timestamp_from_proto(&fine, "t"),
            Ok(Timestamp::from_micros(1_999_999))
        );
        let end = ts(MAX_TIMESTAMP_SECONDS, 999_999_999);
        assert!(timestamp_from_proto(&end, "t").is_ok());
        let latest = timestamp_to_proto(Timestamp::MAX);
        assert_eq!(latest, ts(MAX_TIMESTAMP_SECONDS, 999_999_000));
        let read_back = timestamp_from_proto(&latest, "t").expect("the end of 9999 is readable");
        assert_eq!(timestamp_to_proto(read_back), latest);
    }

    #[test]
    fn bad_timestamps_name_the_field() {
        let before_epoch =
            timestamp_from_proto(&ts(-1, 0), "items[0].activate_at").expect_err("before the epoch");
        assert_eq!(
            before_epoch.to_string(),
            "items[0].activate_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got -1 seconds since the epoch"
        );
        let after = timestamp_from_proto(&ts(MAX_TIMESTAMP_SECONDS + 1, 0), "at");
        assert!(after.is_err());
        let nanos = timestamp_from_proto(&ts(0, -1), "at").expect_err("negative nanos");
        assert_eq!(
            nanos.to_string(),
            "at: nanos must be 0 to 999999999, got -1"
        );
        assert!(timestamp_from_proto(&ts(0, NANOS_PER_SECOND), "at").is_err());
    }

    #[test]
    fn durations_round_trip_and_reject_negatives() {
        let lease = Duration::from_millis(2_500);
        assert_eq!(duration_to_proto(lease), dur(2, 500_000_000));
        assert_eq!(
            duration_from_proto(&dur(2, 500_000_000), "lease"),
            Ok(lease)
        );
        assert_eq!(
            duration_from_proto(&dur(0, 1_999), "d"),
            Ok(Duration::from_micros(1))
        );
        let negative = duration_from_proto(&dur(-1, 0), "retry.delay").expect_err("negative");
        assert_eq!(
            negative.to_string(),
            "retry.delay: must not be negative, got -1s 0ns"
        );
        assert!(duration_from_proto(&dur(0, -5), "d").is_err());
        assert!(duration_from_proto(&dur(0, NANOS_PER_SECOND), "d").is_err());
        assert!(duration_from_proto(&dur(MAX_DURATION_SECONDS + 1, 0), "d").is_err());
        assert_eq!(
            duration_to_proto(Duration::MAX).seconds,
            MAX_DURATION_SECONDS
        );
    }

    #[test]
    fn optional_durations_treat_zero_as_unset() {
        assert_eq!(optional_duration_from_proto(None, "wait"), Ok(None));
        assert_eq!(
            optional_duration_from_proto(Some(&dur(0, 0)), "wait"),
            Ok(None)
        );
        assert_eq!(
            optional_duration_from_proto(Some(&dur(1, 0)), "wait"),
            Ok(Some(Duration::from_secs(1)))
        );
        assert!(optional_duration_from_proto(Some(&dur(-1, 0)), "wait").is_err());
    }
}
