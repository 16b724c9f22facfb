//! Builders shared by the decision's tests: names, times, specs and stats histories.
#![allow(dead_code)] // each test file uses its own part

use cascade_core::{QueueName, Timestamp};
use cascade_resource_manager::{
    Current, Decision, DueBucket, History, ResourceManagerSettings, StageSpec, StageStats,
};

/// 2024-05-01T12:00:00Z: the explanations print times of day, so tests start at a round one.
pub const START_SECS: u64 = 1_714_564_800;

pub fn at(secs: u64) -> Timestamp {
    Timestamp::from_millis((START_SECS + secs) * 1_000)
}

pub fn stage(name: &str) -> QueueName {
    QueueName::parse(name).expect("a valid queue name")
}

pub fn spec(name: &str, priority: u32, min: u32, max: u32) -> StageSpec {
    StageSpec {
        stage: stage(name),
        priority,
        min_handlers: min,
        max_handlers: max,
    }
}

pub fn settings() -> ResourceManagerSettings {
    ResourceManagerSettings::default()
}

pub fn history() -> History {
    History::new(settings().throughput_window)
}

pub fn current(pairs: &[(&str, u32)]) -> Current {
    pairs.iter().map(|&(name, n)| (stage(name), n)).collect()
}

/// A stage's counters, advanced by hand between samples.
#[derive(Clone, Debug)]
pub struct Counters {
    pub stats: StageStats,
}

impl Counters {
    pub fn new(name: &str) -> Counters {
        Counters {
            stats: StageStats::empty(stage(name), at(0)),
        }
    }

    /// Records the counters as of `secs`, worked by `handlers`; the manager receives them
    /// at once (one clock for shard and manager).
    pub fn record(&mut self, history: &mut History, secs: u64, handlers: u32) {
        self.stats.at = at(secs);
        self.stats.received = at(secs);
        assert!(
            history.record(self.stats.clone(), handlers),
            "samples in order"
        );
    }

    /// `seconds` of `handlers` working at `per_handler` events/s through the ready backlog
    /// while `arrivals` events/s come in; the backlog never runs dry if it is large enough.
    pub fn work(&mut self, seconds: u64, handlers: u32, per_handler: f64, arrivals: f64) {
        let incoming = (arrivals * seconds as f64).round() as u64;
        let capacity = (per_handler * f64::from(handlers) * seconds as f64).round() as u64;
        self.stats.enqueued_total += incoming;
        self.stats.ready += incoming;
        let done = capacity.min(self.stats.ready);
        self.stats.ready -= done;
        self.stats.completed_total += done;
    }

    pub fn due(&mut self, buckets: &[(u64, u64)]) {
        self.stats.due = buckets
            .iter()
            .map(|&(secs, count)| DueBucket {
                until: at(secs),
                count,
            })
            .collect();
    }
}

/// A history that has measured `per_handler` over three samples ending at `end` (busy
/// handlers, no arrivals), leaving `ready` events.
pub fn measured(
    history: &mut History,
    name: &str,
    end: u64,
    handlers: u32,
    per_handler: f64,
    ready: u64,
) -> Counters {
    let mut counters = Counters::new(name);
    let per_interval = (per_handler * f64::from(handlers) * 5.0).round() as u64;
    counters.stats.ready = ready + 2 * per_interval;
    counters.stats.enqueued_total = counters.stats.ready;
    counters.record(history, end - 10, handlers);
    for secs in [end - 5, end] {
        counters.work(5, handlers, per_handler, 0.0);
        counters.record(history, secs, handlers);
    }
    counters
}

pub fn by_name<'a>(decisions: &'a [Decision], name: &str) -> &'a Decision {
    decisions
        .iter()
        .find(|d| d.stage.as_str() == name)
        .unwrap_or_else(|| panic!("no decision for {name}"))
}

pub fn handlers(decisions: &[Decision]) -> Vec<(String, u32)> {
    decisions
        .iter()
        .map(|d| (d.stage.to_string(), d.handlers))
        .collect()
}
