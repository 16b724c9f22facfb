//! Retry delays: exponential backoff with "equal jitter" (half fixed, half random), so that
//! retries of a burst spread out while each still waits at least half its step.

use std::time::Duration;

use crate::config::QueueConfig;

/// The un-jittered delay before retry number `attempts` (1-based; 0 counts as 1):
/// `backoff_initial * 2^(attempts-1)`, capped at `backoff_max`.
pub fn retry_delay_base(cfg: &QueueConfig, attempts: u32) -> Duration {
    let doublings = attempts.saturating_sub(1).min(64);
    let cap = cfg.backoff_max.as_nanos();
    // Saturating: an unvalidated config may hold a huge initial delay.
    let uncapped = cfg
        .backoff_initial
        .as_nanos()
        .saturating_mul(1u128 << doublings);
    nanos(uncapped.min(cap))
}

/// The jittered delay: in `[d/2, d]` for `d = retry_delay_base(..)`, placed by
/// `unit_random` in `[0, 1)` (values outside are clamped).
pub fn retry_delay(cfg: &QueueConfig, attempts: u32, unit_random: f64) -> Duration {
    let base = retry_delay_base(cfg, attempts).as_nanos();
    let half = base / 2;
    let unit = if unit_random.is_nan() {
        0.0
    } else {
        unit_random.clamp(0.0, 1.0)
    };
    let jitter = ((base - half) as f64 * unit) as u128;
    nanos(half + jitter.min(base - half))
}

fn nanos(value: u128) -> Duration {
    Duration::from_nanos(u64::try_from(value).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(initial_ms: u64, max_ms: u64) -> QueueConfig {
        QueueConfig {
            backoff_initial: Duration::from_millis(initial_ms),
            backoff_max: Duration::from_millis(max_ms),
            ..QueueConfig::default()
        }
    }

    #[test]
    fn doubles_then_caps() {
        let cfg = config(1_000, 300_000);
        let bases: Vec<u64> = (0..12)
            .map(|n| retry_delay_base(&cfg, n).as_secs())
            .collect();
        assert_eq!(bases, [1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_delay_base(&cfg, u32::MAX), Duration::from_secs(300));
        assert_eq!(retry_delay(&cfg, 3, 0.0), Duration::from_secs(2));
        assert_eq!(retry_delay(&cfg, 3, 0.5), Duration::from_secs(3));
        assert_eq!(retry_delay(&cfg, 3, f64::NAN), Duration::from_secs(2));
        assert_eq!(retry_delay(&cfg, 3, 7.0), Duration::from_secs(4));
    }

    proptest! {
        #[test]
        fn jittered_delay_stays_within_bounds(
            initial_ms in 1u64..=3_600_000,
            max_ms in 1u64..=604_800_000,
            attempts in any::<u32>(),
            unit in 0.0f64..1.0,
        ) {
            let cfg = config(initial_ms, max_ms);
            let base = retry_delay_base(&cfg, attempts);
            let delay = retry_delay(&cfg, attempts, unit);
            prop_assert!(delay <= cfg.backoff_max);
            prop_assert!(delay <= base);
            prop_assert!(delay >= base / 2);
        }

        #[test]
        fn base_delay_never_decreases_with_attempts(
            initial_ms in 1u64..=3_600_000,
            max_ms in 1u64..=604_800_000,
            attempts in 0u32..200,
        ) {
            let cfg = config(initial_ms, max_ms);
            prop_assert!(retry_delay_base(&cfg, attempts) <= retry_delay_base(&cfg, attempts + 1));
        }
    }
}
