//! The deadline a client gave its call (gRPC's `grpc-timeout` header). tonic drops a call
//! whose deadline has passed, so a long-poll `Take` answers before it, empty if nothing
//! came, rather than be cut off with DEADLINE_EXCEEDED while its shard poll goes on.

use std::time::Duration;

use tonic::metadata::MetadataMap;

/// Left between a long poll's answer and its client's deadline for the answer's way back:
/// a fifth of the client's timeout, at most this.
const MAX_MARGIN: Duration = Duration::from_secs(1);

/// How long a long poll may wait for its client, if the client set a deadline.
pub(crate) fn wait_within(metadata: &MetadataMap) -> Option<Duration> {
    let timeout = client_timeout(metadata)?;
    Some(timeout.saturating_sub((timeout / 5).min(MAX_MARGIN)))
}

/// `grpc-timeout`: at most eight digits, then the unit (H, M, S, m, u or n). A value out
/// of that form is no deadline, as tonic takes it.
fn client_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let count: u64 = digits.parse().ok()?;
    match unit {
        "H" => Some(Duration::from_secs(count * 3600)),
        "M" => Some(Duration::from_secs(count * 60)),
        "S" => Some(Duration::from_secs(count)),
        "m" => Some(Duration::from_millis(count)),
        "u" => Some(Duration::from_micros(count)),
        "n" => Some(Duration::from_nanos(count)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_timeout(value: &str) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        metadata.insert("grpc-timeout", value.parse().expect("an ASCII value"));
        metadata
    }

    #[test]
    fn a_long_poll_answers_a_fifth_of_the_timeout_early_at_most_a_second() {
        let wait = |value: &str| wait_within(&with_timeout(value));
        assert_eq!(wait("2S"), Some(Duration::from_millis(1600)));
        assert_eq!(wait("500m"), Some(Duration::from_millis(400)));
        assert_eq!(wait("1M"), Some(Duration::from_secs(59)));
        assert_eq!(wait("1H"), Some(Duration::from_secs(3599)));
        assert_eq!(wait("3000000u"), Some(Duration::from_millis(2400)));
        assert_eq!(wait("5n"), Some(Duration::from_nanos(4)));
        assert_eq!(wait_within(&MetadataMap::new()), None);
    }

    #[test]
    fn a_timeout_out_of_grpcs_form_is_none() {
        for value in ["", "S", "5", "5s", "123456789S", "+5S", "-5S", "5 S"] {
            assert_eq!(wait_within(&with_timeout(value)), None, "{value:?}");
        }
    }
}
