//! Lease arithmetic on the worker's side. A lease's deadline is the gateway's; the worker
//! turns it into a point on its own monotonic clock when the answer arrives (a long poll may
//! have waited a while before the lease was granted), and extends half-way from there.

use std::time::{Duration, SystemTime};

use cascade_core::{QueueConfig, Timestamp};
use cascade_proto::convert::timestamp_from_proto;

/// What is left of a lease whose answer arrived at `now_wall`: the gateway's deadline less
/// our wall clock, and never more than the lease asked for. Where the clocks disagree so
/// much that the deadline looks past, the asked lease is trusted; with no asked lease, the
/// shortest is assumed and the lease extended early. Set the worker's `lease` where clocks
/// may disagree.
pub(crate) fn remaining_lease(
    asked: Option<Duration>,
    expires_at: Option<&prost_types::Timestamp>,
    now_wall: SystemTime,
) -> Duration {
    let now = Timestamp::from_system_time(now_wall);
    let by_clock = expires_at
        .and_then(|at| timestamp_from_proto(at, "lease_expires_at").ok())
        .map(|deadline| deadline.duration_since(now))
        .filter(|left| !left.is_zero());
    match (asked, by_clock) {
        (Some(asked), Some(left)) => left.min(asked),
        (Some(asked), None) => asked,
        (None, Some(left)) => left.min(QueueConfig::MAX_LEASE),
        (None, None) => QueueConfig::MIN_LEASE,
    }
}

/// When to extend a lease that had `left` to run at `granted`: half-way.
pub(crate) fn extend_at(granted: tokio::time::Instant, left: Duration) -> tokio::time::Instant {
    granted + left / 2
}

/// How long to wait before trying again an extension that failed in transit: often enough
/// to get several tries within the lease.
pub(crate) fn extend_retry_pause(lease: Duration) -> Duration {
    (lease / 8).max(Duration::from_millis(20))
}

#[cfg(test)]
mod tests {
    use cascade_proto::convert::timestamp_to_proto;

    use super::*;

    #[test]
    fn what_is_left_comes_from_the_deadline_capped_by_the_asked_lease() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let in_30s = timestamp_to_proto(Timestamp::from_micros(1_030_000_000));
        let in_1s = timestamp_to_proto(Timestamp::from_micros(1_001_000_000));
        let past = timestamp_to_proto(Timestamp::from_micros(999_000_000));
        let secs = Duration::from_secs;
        assert_eq!(remaining_lease(Some(secs(2)), Some(&in_1s), now), secs(1));
        assert_eq!(remaining_lease(Some(secs(2)), Some(&in_30s), now), secs(2));
        assert_eq!(remaining_lease(Some(secs(2)), Some(&past), now), secs(2));
        assert_eq!(remaining_lease(Some(secs(2)), None, now), secs(2));
        assert_eq!(remaining_lease(None, Some(&in_30s), now), secs(30));
        assert_eq!(
            remaining_lease(None, Some(&past), now),
            QueueConfig::MIN_LEASE
        );
        assert_eq!(remaining_lease(None, None, now), QueueConfig::MIN_LEASE);
    }

    #[test]
    fn extensions_come_half_way() {
        let now = tokio::time::Instant::now();
        assert_eq!(
            extend_at(now, Duration::from_secs(1)),
            now + Duration::from_millis(500)
        );
        assert_eq!(
            extend_retry_pause(Duration::from_secs(1)),
            Duration::from_millis(125)
        );
        assert_eq!(
            extend_retry_pause(Duration::from_millis(100)),
            Duration::from_millis(20)
        );
    }
}
