//! Injected time. Production code reads a [`Clock`]; tests drive a [`SimClock`] by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::time::Timestamp;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// So that `Arc<dyn Clock>` can be passed where a `C: Clock` is expected.
impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The operating system's wall clock.
#[derive(Copy, Clone, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }
}

/// A clock that moves only when told; clones share the same time.
#[derive(Clone, Debug)]
pub struct SimClock {
    micros: Arc<AtomicU64>,
}

impl SimClock {
    pub fn new(start: Timestamp) -> SimClock {
        SimClock {
            micros: Arc::new(AtomicU64::new(start.as_micros())),
        }
    }

    /// Moves time forward, saturating at `Timestamp::MAX`.
    pub fn advance(&self, by: Duration) {
        let step = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        // fetch_update cannot fail: the closure always returns Some.
        let _ = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(step))
            });
    }

    /// Sets the time, also backwards (to test a clock that jumps).
    pub fn set(&self, to: Timestamp) {
        self.micros.store(to.as_micros(), Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_clock_moves_only_when_told_and_clones_share_it() {
        let clock = SimClock::new(Timestamp::from_micros(1_000));
        let handle = clock.clone();
        assert_eq!(clock.now(), Timestamp::from_micros(1_000));
        handle.advance(Duration::from_millis(2));
        assert_eq!(clock.now(), Timestamp::from_micros(3_000));
        handle.set(Timestamp::from_micros(10));
        assert_eq!(clock.now(), Timestamp::from_micros(10));
        clock.advance(Duration::MAX);
        assert_eq!(handle.now(), Timestamp::MAX);
    }

    #[test]
    fn system_clock_is_after_2020_and_works_behind_arc_dyn() {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        fn read<C: Clock>(clock: &C) -> Timestamp {
            clock.now()
        }
        assert!(read(&clock) > Timestamp::from_micros(1_577_836_800_000_000));
    }
}
