//! Durations and sizes written with units (`250ms`, `5m`, `4MiB`), as config files and the
//! environment carry them, plus `serde(with = ...)` helpers that read and write them as strings,
//! and settings that are one of a few words (`one_of`).

use std::time::Duration;

use crate::error::{Error, excerpt};

/// Parses a human duration such as `250ms`, `3s`, `5m`, `1h` or `1h 30m` (`m` is minutes).
pub fn parse_duration(input: &str) -> Result<Duration, Error> {
    if input.trim().starts_with('-') {
        return Err(Error::invalid(
            "duration",
            format!(
                "must not be negative: a duration such as 250ms, 3s, 5m or 1h, got {}",
                excerpt(input)
            ),
        ));
    }
    humantime::parse_duration(input.trim()).map_err(|err| {
        Error::invalid(
            "duration",
            format!(
                "must be a duration such as 250ms, 3s, 5m or 1h ({err}), got {}",
                excerpt(input)
            ),
        )
    })
}

/// The value of a setting that is one of a few words, for a `TryFrom<String>` its
/// `serde(try_from = "String")` reads it with: the refusal lists the words, where the
/// config crate's own message names only the Rust type that has no such variant.
pub fn one_of<T: Copy>(given: &str, choices: &[(&str, T)]) -> Result<T, String> {
    if let Some((_, value)) = choices.iter().find(|(word, _)| *word == given) {
        return Ok(*value);
    }
    let words: Vec<&str> = choices.iter().map(|(word, _)| *word).collect();
    Err(format!(
        "must be one of {}, got {}",
        words.join(", "),
        excerpt(given)
    ))
}

/// Writes a duration in its largest exact unit: `250ms`, `90s`, `5m`, `24h` → `1d`.
pub fn format_duration(duration: Duration) -> String {
    const UNITS: [(&str, u128); 6] = [
        ("d", 86_400_000_000_000),
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ];
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    for (unit, size) in UNITS {
        if nanos.is_multiple_of(size) {
            return format!("{}{unit}", nanos / size);
        }
    }
    format!("{nanos}ns")
}

const SIZE_UNITS: [(&str, u64); 11] = [
    ("B", 1),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("", 1),
];

/// Parses a size in bytes: `512`, `512B`, `4KiB`, `4MiB`, `1GiB`, `10kB`, `5MB`.
pub fn parse_size(input: &str) -> Result<u64, Error> {
    let bad = |why: &str| {
        Error::invalid(
            "size",
            format!(
                "must be a size such as 512, 4KiB, 4MiB, 1GiB, 10kB or 5MB{why}, got {}",
                excerpt(input)
            ),
        )
    };
    let trimmed = input.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, rest) = trimmed.split_at(digits_end);
    if digits.is_empty() {
        return Err(bad(""));
    }
    let unit = rest.trim_start();
    let Some((_, multiplier)) = SIZE_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(bad(" (units: B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"));
    };
    let number: u64 = digits.parse().map_err(|_| bad(" (too large)"))?;
    number
        .checked_mul(*multiplier)
        .ok_or_else(|| bad(" (too large)"))
}

/// The binary units sizes are written in, largest first.
const BINARY_UNITS: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// A size for a person to read, to a tenth of its unit: `3.2MiB`, `900B`. Not exact:
/// settings are written with [`format_size`].
pub fn about_size(bytes: u64) -> String {
    for (unit, size) in BINARY_UNITS {
        let tenths = (u128::from(bytes) * 10 + u128::from(size) / 2) / u128::from(size);
        if tenths >= 10 {
            return match tenths % 10 {
                0 => format!("{}{unit}", tenths / 10),
                tenth => format!("{}.{tenth}{unit}", tenths / 10),
            };
        }
    }
    format!("{bytes}B")
}

/// Writes a size in its largest exact binary unit: `4MiB`, `1536KiB`, `100B`.
pub fn format_size(bytes: u64) -> String {
    for (unit, size) in BINARY_UNITS {
        if bytes != 0 && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

/// `#[serde(with = "cascade_core::time::serde_duration")]`: a `Duration` as a string like `5m`.
pub mod serde_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_duration(*duration))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        super::parse_duration(&text).map_err(|err| de::Error::custom(reason_of(err)))
    }

    /// The same for `Option<Duration>` (absent or null is `None`); pair with `#[serde(default)]`.
    pub mod option {
        use std::time::Duration;

        use serde::{Deserialize, Deserializer, Serializer, de};

        pub fn serialize<S: Serializer>(
            duration: &Option<Duration>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match duration {
                Some(value) => super::serialize(value, serializer),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Duration>, D::Error> {
            let text = Option::<std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            text.map(|text| super::super::parse_duration(&text))
                .transpose()
                .map_err(|err| de::Error::custom(super::reason_of(err)))
        }
    }

    /// Serde adds the key to the message, so only the reason is kept.
    pub(super) fn reason_of(err: crate::Error) -> String {
        match err {
            crate::Error::InvalidArgument { reason, .. } => reason,
            other => other.to_string(),
        }
    }
}

/// `#[serde(with = "cascade_core::time::serde_size")]`: a `u64` byte count written like `4MiB`;
/// reads a string or a plain integer.
pub mod serde_size {
    use std::fmt;

    use serde::{Deserializer, Serializer, de};

    pub fn serialize<S: Serializer>(bytes: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_size(*bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(SizeVisitor)
    }

    struct SizeVisitor;

    impl de::Visitor<'_> for SizeVisitor {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a size such as 512, 4KiB or 5MB")
        }

        fn visit_u64<E: de::Error>(self, value: u64) -> Result<u64, E> {
            Ok(value)
        }

        fn visit_i64<E: de::Error>(self, value: i64) -> Result<u64, E> {
            u64::try_from(value)
                .map_err(|_| E::custom(format!("size must not be negative, got {value}")))
        }

        fn visit_str<E: de::Error>(self, value: &str) -> Result<u64, E> {
            super::parse_size(value).map_err(|err| E::custom(super::serde_duration::reason_of(err)))
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_for_people_are_rounded_to_a_tenth_of_their_unit() {
        let cases = [
            (900, "900B"),
            (1024, "1KiB"),
            (3_355_440, "3.2MiB"),
            (36_008_292, "34.3MiB"),
            (1 << 30, "1GiB"),
            ((1 << 30) - 1, "1GiB"),
            (u64::MAX, "16777216TiB"),
        ];
        for (bytes, said) in cases {
            assert_eq!(super::about_size(bytes), said, "{bytes}");
        }
    }

    #[test]
    fn a_negative_duration_is_refused_as_negative() {
        let err = super::parse_duration("-5s").expect_err("negative");
        assert!(err.to_string().contains("must not be negative"), "{err}");
    }

    #[test]
    fn a_word_not_among_the_choices_is_refused_naming_them() {
        let choices = [("fsync", 1), ("none", 2)];
        assert_eq!(super::one_of("none", &choices), Ok(2));
        assert_eq!(
            super::one_of("fsycn", &choices),
            Err("must be one of fsync, none, got \"fsycn\"".to_owned())
        );
    }

    use super::*;
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error as DeError, StrDeserializer, U64Deserializer};

    #[test]
    fn parses_human_durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3_600)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_is_valid() {
        for input in ["", "5", "five minutes", "5 parsecs", "-1s"] {
            let err = parse_duration(input).expect_err(input);
            assert_eq!(err.field(), "duration");
            assert!(
                err.to_string().contains("such as 250ms, 3s, 5m or 1h"),
                "{err}"
            );
        }
    }

    #[test]
    fn formats_durations_in_one_exact_unit_and_parses_back() {
        let cases = [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(86_400), "1d"),
            (Duration::from_secs(30 * 3_600), "30h"),
            (Duration::from_micros(1_500), "1500us"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::ZERO, "0s"),
        ];
        for (duration, text) in cases {
            assert_eq!(format_duration(duration), text);
            assert_eq!(parse_duration(text), Ok(duration), "{text}");
        }
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4KiB"), Ok(4_096));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("10kB"), Ok(10_000));
        assert_eq!(parse_size("5MB"), Ok(5_000_000));
        assert_eq!(parse_size(" 2 MiB "), Ok(2 << 20));
    }

    #[test]
    fn bad_sizes_say_what_is_valid() {
        for input in [
            "",
            "MiB",
            "4mib",
            "1.5GiB",
            "-1",
            "99999999999999TiB",
            "99999999999999999999",
        ] {
            let err = parse_size(input).expect_err(input);
            assert_eq!(err.field(), "size");
            assert!(err.to_string().contains("such as 512, 4KiB"), "{err}");
        }
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_size(4 << 20), "4MiB");
        assert_eq!(format_size(1_536 * 1_024), "1536KiB");
        assert_eq!(format_size(100), "100B");
        assert_eq!(format_size(0), "0B");
        assert_eq!(parse_size(&format_size(3 << 40)), Ok(3 << 40));
    }

    #[test]
    fn serde_helpers_read_strings_and_numbers() {
        let text: StrDeserializer<DeError> = "5m".into_deserializer();
        assert_eq!(
            serde_duration::deserialize(text),
            Ok(Duration::from_secs(300))
        );
        let bad: StrDeserializer<DeError> = "soon".into_deserializer();
        let err = serde_duration::deserialize(bad).expect_err("not a duration");
        assert!(err.to_string().starts_with("must be a duration"), "{err}");
        let size: StrDeserializer<DeError> = "4MiB".into_deserializer();
        assert_eq!(serde_size::deserialize(size), Ok(4 << 20));
        let number: U64Deserializer<DeError> = 512u64.into_deserializer();
        assert_eq!(serde_size::deserialize(number), Ok(512));
    }
}
