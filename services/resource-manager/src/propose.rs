//! What one stage asks for before the budget is shared, and the bookkeeping that needs
//! memory across decisions (when it was last busy, its last measured throughput, its recent
//! needs).
//!
//! - **Need**: `work / (throughput × target_drain)`, where work is ready + leased + delayed
//!   events due within `target_drain` + unannounced arrivals expected in that time (the
//!   arrival rate × `target_drain`: without it, steady load could only be served by keeping
//!   a standing backlog, and the count would swing around it). Rounded up, within
//!   `[min_handlers, max_handlers]`.
//! - **Up at once**, unless the need exceeds the current count by no more than `tolerance`,
//!   or the throughput was never measured with busy handlers (then at most doubling per
//!   interval, since the assumed figure may be far off).
//! - **Down after `scale_down_after`** of lower need, to the highest need seen in that time.
//!   Meanwhile the current count is held. Above `max_handlers` it is cut at once.
//! - **Idle**: nothing ready, leased, due soon or arriving for `idle_after` → `min_handlers`
//!   (0 allowed). Short of that, a stage with handlers keeps at least one, so idleness — not
//!   the shorter scale-down window — decides when a stage goes to zero. Ready events at a
//!   stage with no handler ask for one at once.
//! - Stats missing or received more than three intervals ago: the current count is kept
//!   (clamped to the bounds): no decision on data that may no longer be true. The age is
//!   from when the manager received the stats, by its own clock, not from the shard's `at`:
//!   a shard whose clock is off would otherwise make its stages stale for good.

use std::collections::VecDeque;
use std::time::Duration;

use cascade_core::Timestamp;

use crate::history::History;
use crate::measure::{self, Rates};
use crate::model::{Inputs, Reason, StageSpec, Throughput, ThroughputSource};
use crate::settings::ResourceManagerSettings;

/// Stats received longer ago than this many intervals are stale.
const STALE_AFTER_INTERVALS: u32 = 3;

/// A stage's request before the budget.
#[derive(Clone, Debug)]
pub(crate) struct Proposal {
    pub(crate) wanted: u32,
    pub(crate) need: f64,
    pub(crate) woken: bool,
    pub(crate) batch: u32,
    pub(crate) inputs: Inputs,
    pub(crate) reasons: Vec<Reason>,
}

/// What the planner remembers of one stage.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Memory {
    first_seen: Timestamp,
    last_active: Timestamp,
    /// The last throughput measured with busy handlers.
    throughput: Option<f64>,
    /// `(when, rounded need)` of the decisions within `scale_down_after`, oldest first.
    recent: VecDeque<(Timestamp, u32)>,
}

impl Memory {
    /// A stage first seen `now` counts as active now: a restarted manager waits a full
    /// `idle_after` and `scale_down_after` before taking handlers away.
    pub(crate) fn new(now: Timestamp) -> Memory {
        Memory {
            first_seen: now,
            last_active: now,
            throughput: None,
            recent: VecDeque::new(),
        }
    }

    fn remember(&mut self, now: Timestamp, rounded: u32, window: Duration) {
        self.recent.push_back((now, rounded));
        while self
            .recent
            .front()
            .is_some_and(|&(at, _)| at.saturating_add(window) <= now)
        {
            self.recent.pop_front();
        }
    }

    /// Whether `ceiling` handlers may go down to what the recent needs ask for, and when not
    /// until when they are held. The need must have been lower for the whole window.
    fn scale_down(&self, now: Timestamp, ceiling: u32, rounded: u32, window: Duration) -> Step {
        let highest = self.recent.iter().map(|&(_, n)| n).fold(rounded, u32::max);
        let last_high = self
            .recent
            .iter()
            .rev()
            .find(|&&(_, n)| n >= ceiling)
            .map(|&(at, _)| at.saturating_add(window));
        let watched_from = self.first_seen.saturating_add(window);
        let until = last_high.map_or(watched_from, |at| at.max(watched_from));
        if until > now || highest >= ceiling {
            Step::Held { until }
        } else {
            Step::Down { to: highest }
        }
    }

    /// Busy handlers' figure when the window has one; else the larger of the remembered one
    /// and the lower bound (handlers got faster); else the lower bound if it beats the
    /// default; else the default.
    fn throughput(&mut self, rates: &Rates, settings: &ResourceManagerSettings) -> Throughput {
        if let Some(busy) = rates.busy_throughput {
            self.throughput = Some(busy);
            return Throughput {
                per_handler: busy,
                source: ThroughputSource::Measured,
            };
        }
        let lower = rates.any_throughput.unwrap_or(0.0);
        match self.throughput {
            Some(remembered) if remembered >= lower => Throughput {
                per_handler: remembered,
                source: ThroughputSource::Remembered,
            },
            _ if lower > settings.default_throughput || self.throughput.is_some() => Throughput {
                per_handler: lower,
                source: ThroughputSource::LowerBound,
            },
            _ => Throughput {
                per_handler: settings.default_throughput,
                source: ThroughputSource::Assumed,
            },
        }
    }
}

enum Step {
    Held { until: Timestamp },
    Down { to: u32 },
}

pub(crate) fn propose(
    memory: &mut Memory,
    history: &History,
    spec: &StageSpec,
    current: u32,
    settings: &ResourceManagerSettings,
    now: Timestamp,
) -> Proposal {
    let (min, max) = (spec.min_handlers, spec.max());
    let Some(latest) = history.latest(&spec.stage) else {
        return kept(memory, spec, current, settings, Reason::NoStats);
    };
    let stats = &latest.stats;
    let stale_after = settings.interval.saturating_mul(STALE_AFTER_INTERVALS);
    if now.duration_since(stats.received) > stale_after {
        let reason = Reason::StaleStats {
            since: stats.received,
        };
        return kept(memory, spec, current, settings, reason);
    }
    let rates = measure::rates(history.samples(&spec.stage));
    let throughput = memory.throughput(&rates, settings);
    let drain = settings.target_drain.as_secs_f64();
    let due_soon = stats.due_by(now.saturating_add(settings.target_drain));
    let work = stats.ready as f64 + stats.leased as f64 + due_soon + rates.arrivals_per_sec * drain;
    let need = work / (throughput.per_handler * drain);
    let inputs = Inputs {
        stats_at: Some(stats.at),
        ready: stats.ready,
        leased: stats.leased,
        due_soon,
        oldest_ready_age: stats.oldest_ready_age,
        arrivals_per_sec: rates.arrivals_per_sec,
        throughput,
        expired_leases: rates.expired_leases,
        work,
        need,
        target_drain: settings.target_drain,
    };
    let active = stats.ready > 0 || stats.leased > 0 || due_soon > 0.0 || rates.arrived_lately;
    if active {
        memory.last_active = now;
    }

    let rounded = round_up(need);
    let mut reasons = vec![Reason::Need { handlers: rounded }];
    let woken = current == 0 && stats.ready > 0;
    let mut target = rounded;
    if woken {
        reasons.push(Reason::Woken);
    } else if target == 0 && current > 0 {
        target = 1;
        reasons.push(Reason::KeptWarm);
    }
    if target < min {
        target = min;
        reasons.push(Reason::RaisedToMin { min });
    }
    if target > max || current > max {
        target = target.min(max);
        reasons.push(Reason::CappedByMax { max });
    }
    memory.remember(now, target, settings.scale_down_after);

    let idle_since = memory.last_active;
    let wanted = if !active && now.duration_since(idle_since) >= settings.idle_after {
        reasons = vec![Reason::Idle {
            since: idle_since,
            min,
        }];
        min
    } else {
        let wish = Wish {
            ceiling: current.min(max),
            target,
            need,
            min,
            measured: throughput.source.is_measured(),
        };
        settle(memory, &wish, settings, now, &mut reasons)
    };
    Proposal {
        wanted,
        need,
        woken,
        batch: batch_size(throughput.per_handler, settings),
        inputs,
        reasons,
    }
}

/// A stage's target against what it runs now.
struct Wish {
    /// The current count, cut to the maximum.
    ceiling: u32,
    /// The rounded need within the bounds.
    target: u32,
    need: f64,
    min: u32,
    /// Whether the throughput comes from busy handlers.
    measured: bool,
}

/// The count: up at once (within tolerance and steps), down only after the hold.
fn settle(
    memory: &Memory,
    wish: &Wish,
    settings: &ResourceManagerSettings,
    now: Timestamp,
    reasons: &mut Vec<Reason>,
) -> u32 {
    let Wish {
        ceiling, target, ..
    } = *wish;
    if target > ceiling {
        // Below the minimum nothing is tolerated or stepped: the minimum is a promise.
        let above_min = ceiling >= wish.min && ceiling > 0;
        if above_min && wish.need <= f64::from(ceiling) * (1.0 + settings.tolerance) {
            reasons.push(Reason::WithinTolerance { current: ceiling });
            return ceiling;
        }
        let step = ceiling.saturating_mul(2).max(1).max(wish.min);
        if !wish.measured && target > step {
            reasons.push(Reason::UnmeasuredStep { to: step });
            return step;
        }
        return target;
    }
    if target == ceiling {
        return target;
    }
    match memory.scale_down(now, ceiling, target, settings.scale_down_after) {
        Step::Held { until } => {
            reasons.push(Reason::ScaleDownHeld { to: target, until });
            ceiling
        }
        Step::Down { to } => {
            reasons.push(Reason::ScaledDown { to });
            to
        }
    }
}

/// No usable stats: the current count within the bounds.
fn kept(
    memory: &Memory,
    spec: &StageSpec,
    current: u32,
    settings: &ResourceManagerSettings,
    reason: Reason,
) -> Proposal {
    let per_handler = memory.throughput.unwrap_or(settings.default_throughput);
    let source = match memory.throughput {
        Some(_) => ThroughputSource::Remembered,
        None => ThroughputSource::Assumed,
    };
    let throughput = Throughput {
        per_handler,
        source,
    };
    Proposal {
        wanted: current.clamp(spec.min_handlers, spec.max()),
        need: 0.0,
        woken: false,
        batch: batch_size(per_handler, settings),
        inputs: Inputs {
            stats_at: None,
            ready: 0,
            leased: 0,
            due_soon: 0.0,
            oldest_ready_age: Duration::ZERO,
            arrivals_per_sec: 0.0,
            throughput,
            expired_leases: 0,
            work: 0.0,
            need: 0.0,
            target_drain: settings.target_drain,
        },
        reasons: vec![reason],
    }
}

/// `need` rounded up; a need beyond counting (huge or not a number) saturates.
fn round_up(need: f64) -> u32 {
    let up = need.ceil();
    if up.is_nan() || up <= 0.0 {
        0
    } else if up >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        up as u32
    }
}

/// The largest power of two not above one interval of one handler's work, or `max_batch`
/// when that is less: a handler holds about an interval of work under lease at most, and
/// the batch changes only when the throughput halves or doubles, not with every sample.
pub(crate) fn batch_size(per_handler: f64, settings: &ResourceManagerSettings) -> u32 {
    let per_interval = per_handler * settings.interval.as_secs_f64();
    if per_interval >= f64::from(settings.max_batch) {
        return settings.max_batch;
    }
    let mut batch = 1u32;
    while f64::from(batch) * 2.0 <= per_interval {
        batch *= 2;
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_is_a_power_of_two_of_one_interval_of_work() {
        let settings = ResourceManagerSettings::default();
        assert_eq!(batch_size(0.0, &settings), 1);
        assert_eq!(batch_size(1.0, &settings), 4);
        assert_eq!(batch_size(5.0, &settings), 16);
        assert_eq!(batch_size(19.9, &settings), 64);
        assert_eq!(batch_size(20.0, &settings), 100);
        assert_eq!(batch_size(f64::INFINITY, &settings), 100);
    }

    #[test]
    fn staleness_is_judged_by_when_the_manager_received_the_stats() {
        let settings = ResourceManagerSettings::default();
        let stage = cascade_core::QueueName::parse("p.s").expect("valid name");
        let spec = StageSpec {
            stage: stage.clone(),
            priority: 1,
            min_handlers: 0,
            max_handlers: 4,
        };
        let now = Timestamp::from_millis(1_714_564_800_000);
        // The shard's clock is an hour behind; the manager received the sample just now.
        let hour = Duration::from_secs(3_600);
        let mut stats = crate::model::StageStats::empty(stage, now.saturating_sub(hour));
        stats.received = now;
        stats.ready = 10;
        let mut history = History::new(settings.throughput_window);
        assert!(history.record(stats, 1));
        let fresh = propose(&mut Memory::new(now), &history, &spec, 1, &settings, now);
        assert!(
            !fresh
                .reasons
                .iter()
                .any(|reason| matches!(reason, Reason::StaleStats { .. })),
            "{:?}",
            fresh.reasons
        );
        // Nothing received for more than three intervals: stale, whatever the shard says.
        let later = now.saturating_add(settings.interval * (STALE_AFTER_INTERVALS + 1));
        let stale = propose(&mut Memory::new(now), &history, &spec, 1, &settings, later);
        assert_eq!(stale.reasons, vec![Reason::StaleStats { since: now }]);
    }

    #[test]
    fn round_up_saturates() {
        assert_eq!(round_up(0.0), 0);
        assert_eq!(round_up(f64::NAN), 0);
        assert_eq!(round_up(2.01), 3);
        assert_eq!(round_up(f64::INFINITY), u32::MAX);
    }
}
