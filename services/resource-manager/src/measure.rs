//! Rates read from a stage's history: per-handler throughput and the arrivals nobody
//! announced.
//!
//! Throughput is completions per handler-second, counted only over intervals in which ready
//! events never ran out (ready at both ends): otherwise handlers waited for work, and the
//! figure says how much work came, not how fast they are. Those other intervals still give a
//! lower bound.
//!
//! Arrivals: what entered the ready and leased sets in an interval (completions plus the
//! growth of ready + leased), minus the delayed events the previous sample's buckets said
//! would become due in it, since those are counted ahead as "due soon". The rate used is
//! the lower median of the last three intervals, so a one-interval burst (already counted
//! as backlog) is not also extrapolated as a lasting rate.

use crate::history::Sample;
use crate::settings::RATE_INTERVALS;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Rates {
    /// Completions per handler-second while handlers were kept busy; `None` if never.
    pub(crate) busy_throughput: Option<f64>,
    /// Completions per handler-second over every interval with handlers.
    pub(crate) any_throughput: Option<f64>,
    /// Unannounced arrivals per second.
    pub(crate) arrivals_per_sec: f64,
    /// Whether anything entered the queue in the last interval.
    pub(crate) arrived_lately: bool,
    /// Leases that expired within the history.
    pub(crate) expired_leases: u64,
}

/// One interval between consecutive samples whose counters did not go back.
struct Interval {
    handler_seconds: f64,
    completed: u64,
    busy: bool,
    arrivals_per_sec: f64,
    enqueued: u64,
    expired: u64,
}

pub(crate) fn rates<'a>(samples: impl IntoIterator<Item = &'a Sample>) -> Rates {
    let samples: Vec<&Sample> = samples.into_iter().collect();
    let intervals: Vec<Interval> = samples
        .windows(2)
        .filter_map(|pair| interval(pair[0], pair[1]))
        .collect();
    let busy = intervals.iter().filter(|i| i.busy);
    let recent: Vec<f64> = intervals
        .iter()
        .rev()
        .take(RATE_INTERVALS as usize)
        .map(|i| i.arrivals_per_sec)
        .collect();
    Rates {
        busy_throughput: per_handler_second(busy),
        any_throughput: per_handler_second(intervals.iter()),
        arrivals_per_sec: lower_median(recent),
        arrived_lately: intervals.last().is_some_and(|i| i.enqueued > 0),
        expired_leases: intervals.iter().map(|i| i.expired).sum(),
    }
}

fn interval(from: &Sample, to: &Sample) -> Option<Interval> {
    let (a, b) = (&from.stats, &to.stats);
    // A counter that went back means the reporting shard restarted: the difference is
    // meaningless, so the interval is left out.
    let completed = b.completed_total.checked_sub(a.completed_total)?;
    let enqueued = b.enqueued_total.checked_sub(a.enqueued_total)?;
    let expired = b.expired_leases_total.checked_sub(a.expired_leases_total)?;
    let seconds = b.at.duration_since(a.at).as_secs_f64();
    if seconds <= 0.0 {
        return None;
    }
    let active_before = a.ready.saturating_add(a.leased) as f64;
    let active_after = b.ready.saturating_add(b.leased) as f64;
    let entered = completed as f64 + active_after - active_before;
    let announced = a.due_by(b.at);
    Some(Interval {
        // The handlers recorded with the later sample are the ones that ran in between.
        handler_seconds: f64::from(to.handlers) * seconds,
        completed,
        busy: to.handlers > 0 && a.ready > 0 && b.ready > 0,
        arrivals_per_sec: (entered - announced).max(0.0) / seconds,
        enqueued,
        expired,
    })
}

/// Completions per handler-second; `None` without handler time or without any completion
/// (zero would mean infinite need: better to fall back to an older figure).
fn per_handler_second<'a>(intervals: impl Iterator<Item = &'a Interval>) -> Option<f64> {
    let (completed, handler_seconds) = intervals.fold((0u64, 0.0), |(c, h), i| {
        (c.saturating_add(i.completed), h + i.handler_seconds)
    });
    (handler_seconds > 0.0 && completed > 0).then(|| completed as f64 / handler_seconds)
}

/// The lower middle value: the median of three, the smaller of two.
fn lower_median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use cascade_core::{QueueName, Timestamp};

    use super::*;
    use crate::model::{DueBucket, StageStats};

    fn sample(secs: u64, ready: u64, completed: u64, handlers: u32) -> Sample {
        let stage = QueueName::parse("p.s").expect("valid name");
        let mut stats = StageStats::empty(stage, Timestamp::from_millis(secs * 1_000));
        stats.ready = ready;
        stats.completed_total = completed;
        Sample { stats, handlers }
    }

    #[test]
    fn throughput_counts_only_busy_intervals() {
        // 0-10 s: 2 handlers with a backlog finish 100 (5/s each); 10-20 s: the backlog is
        // gone and they finish only 20.
        let samples = [
            sample(0, 500, 0, 2),
            sample(10, 400, 100, 2),
            sample(20, 0, 120, 2),
        ];
        let rates = rates(&samples);
        assert_eq!(rates.busy_throughput, Some(5.0));
        assert_eq!(rates.any_throughput, Some(3.0));
    }

    #[test]
    fn a_counter_that_goes_back_skips_the_interval() {
        let samples = [
            sample(0, 10, 1_000, 1),
            sample(10, 10, 5, 1),
            sample(20, 10, 55, 1),
        ];
        assert_eq!(rates(&samples).busy_throughput, Some(5.0));
    }

    #[test]
    fn announced_due_events_are_not_counted_as_arrivals() {
        let mut before = sample(0, 0, 0, 1);
        before.stats.due = vec![DueBucket {
            until: Timestamp::from_millis(5_000),
            count: 50,
        }];
        // 50 became due and 20 more arrived unannounced; 30 were completed.
        let after = sample(10, 40, 30, 1);
        assert_eq!(rates(&[before, after]).arrivals_per_sec, 2.0);
    }

    #[test]
    fn a_single_burst_is_not_read_as_a_rate() {
        let ready = [0, 10, 20, 1_030, 1_040];
        let samples: Vec<Sample> = ready
            .iter()
            .enumerate()
            .map(|(i, &r)| sample(i as u64, r, 0, 0))
            .collect();
        assert_eq!(rates(&samples).arrivals_per_sec, 10.0);
    }
}
