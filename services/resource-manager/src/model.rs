//! The decision's inputs and outputs as plain data: what the dispatchers report about a
//! stage ([`StageStats`]), what the pipeline says about it ([`StageSpec`]), how many handlers
//! run now ([`Current`]), and what the manager decides, with why ([`Decision`]).

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::{Pipeline, QueueName, Timestamp};

use crate::ResourceManagerError;

/// One stage's counters at one moment, as its dispatcher shard reports them.
///
/// Counters ending in `_total` only grow (a decrease is read as a restart of the reporting
/// shard, and that interval is skipped); rates come from differences between samples.
#[derive(Clone, Debug, PartialEq)]
pub struct StageStats {
    /// The stage's queue, `<pipeline>.<stage>`.
    pub stage: QueueName,
    /// When the shard took it, by the shard's clock: rates come from differences of these.
    pub at: Timestamp,
    /// When the manager received it, by the manager's clock: staleness is judged by this,
    /// since the shard's clock may be off from the manager's by any amount.
    pub received: Timestamp,
    pub ready: u64,
    /// Taken by a handler and not yet completed: work in flight.
    pub leased: u64,
    /// Delayed events by due time, at least `target_drain` ahead; see [`DueBucket`].
    pub due: Vec<DueBucket>,
    /// Events that entered the queue (enqueued or advanced into it), delayed or not.
    pub enqueued_total: u64,
    /// Events that left by ack or advance (the dispatcher's count; retries, releases and
    /// dead letters are not in it, so handlers busy with those read as slower).
    pub completed_total: u64,
    pub oldest_ready_age: Duration,
    pub expired_leases_total: u64,
}

/// Delayed events due after the previous bucket's `until` (for the first bucket: at any time
/// up to `until`, including overdue ones the timer has not fired yet) and at or before
/// `until`. Within a bucket, due times are taken as evenly spread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DueBucket {
    pub until: Timestamp,
    pub count: u64,
}

impl StageStats {
    /// A sample with every count at zero, received when it was taken (one clock).
    pub fn empty(stage: QueueName, at: Timestamp) -> StageStats {
        StageStats {
            stage,
            at,
            received: at,
            ready: 0,
            leased: 0,
            due: Vec::new(),
            enqueued_total: 0,
            completed_total: 0,
            oldest_ready_age: Duration::ZERO,
            expired_leases_total: 0,
        }
    }

    /// Delayed events due at or before `by`, overdue ones included, interpolating inside the
    /// bucket that `by` falls in. Assumes the buckets are sorted (the history sorts them).
    pub fn due_by(&self, by: Timestamp) -> f64 {
        let mut total = 0.0;
        let mut start = self.at;
        for bucket in &self.due {
            let from = start.min(bucket.until);
            if bucket.until <= by {
                total += bucket.count as f64;
            } else {
                if by > from {
                    let span = bucket.until.duration_since(from).as_secs_f64();
                    let part = by.duration_since(from).as_secs_f64();
                    total += bucket.count as f64 * part / span;
                }
                break;
            }
            start = bucket.until;
        }
        total
    }
}

/// What the pipeline says about a stage: its place in the priority order and its bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageSpec {
    pub stage: QueueName,
    /// Higher gets handlers first when the budget is short.
    pub priority: u32,
    pub min_handlers: u32,
    /// Below `min_handlers` it is read as `min_handlers`.
    pub max_handlers: u32,
}

impl StageSpec {
    /// The specs of every stage of `pipeline`.
    pub fn of_pipeline(pipeline: &Pipeline) -> Result<Vec<StageSpec>, ResourceManagerError> {
        pipeline
            .stages
            .iter()
            .map(|stage| {
                let name = format!("{}.{}", pipeline.name, stage.name);
                let queue = QueueName::parse(&name).map_err(|err| ResourceManagerError::Stage {
                    stage: name.clone(),
                    reason: err.to_string(),
                })?;
                Ok(StageSpec {
                    stage: queue,
                    priority: stage.priority,
                    min_handlers: stage.min_handlers,
                    max_handlers: stage.max_handlers,
                })
            })
            .collect()
    }

    pub(crate) fn max(&self) -> u32 {
        self.max_handlers.max(self.min_handlers)
    }
}

/// Handlers running now per stage, as the executor reports them; absent means 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Current {
    handlers: BTreeMap<QueueName, u32>,
}

impl Current {
    pub fn new() -> Current {
        Current::default()
    }

    pub fn set(&mut self, stage: QueueName, handlers: u32) {
        self.handlers.insert(stage, handlers);
    }

    pub fn get(&self, stage: &QueueName) -> u32 {
        self.handlers.get(stage).copied().unwrap_or(0)
    }
}

impl FromIterator<(QueueName, u32)> for Current {
    fn from_iter<I: IntoIterator<Item = (QueueName, u32)>>(iter: I) -> Current {
        Current {
            handlers: iter.into_iter().collect(),
        }
    }
}

/// What one stage gets, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub stage: QueueName,
    pub priority: u32,
    /// Handlers running when the decision was made.
    pub current: u32,
    /// What the stage asked for before the budget was shared (after its own rules: need,
    /// bounds, tolerance, scale-down hold, idleness).
    pub wanted: u32,
    /// Handlers to run: `wanted`, or less when the budget is short.
    pub handlers: u32,
    /// Events each handler should ask for per take.
    pub batch: u32,
    pub explanation: Explanation,
}

/// The inputs a decision used and the rules that shaped it, in the order applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Explanation {
    pub inputs: Inputs,
    pub reasons: Vec<Reason>,
}

/// The figures behind a decision, as the explain table shows them.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    /// When the stats used were taken; `None` when the stage has reported nothing yet.
    pub stats_at: Option<Timestamp>,
    pub ready: u64,
    pub leased: u64,
    /// Delayed events due within `target_drain` of now.
    pub due_soon: f64,
    pub oldest_ready_age: Duration,
    /// Events per second arriving that the due buckets did not announce (enqueued without a
    /// delay, or with one shorter than an interval): expected to go on for `target_drain`.
    pub arrivals_per_sec: f64,
    pub throughput: Throughput,
    /// Leases that expired within the throughput window: handlers too slow or dying.
    pub expired_leases: u64,
    /// Events to work off within `target_drain`: ready + leased + due soon + expected arrivals.
    pub work: f64,
    /// Handlers that work needs: `work / (throughput × target_drain)`.
    pub need: f64,
    pub target_drain: Duration,
}

/// Events per second one handler finishes, and how that figure was obtained.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Throughput {
    pub per_handler: f64,
    pub source: ThroughputSource,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ThroughputSource {
    /// Measured in the window while handlers never ran out of ready events.
    Measured,
    /// The last such measurement; handlers have not been busy since.
    Remembered,
    /// Completions per handler-second while handlers also waited for work: the true figure
    /// is at least this.
    LowerBound,
    /// Never measured: `resource_manager.default_throughput`.
    Assumed,
}

impl ThroughputSource {
    /// Whether the figure comes from handlers that were kept busy; if not, a scale-up is
    /// taken in steps.
    pub fn is_measured(self) -> bool {
        matches!(
            self,
            ThroughputSource::Measured | ThroughputSource::Remembered
        )
    }
}

/// One rule that shaped a decision.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// The stage has reported no stats: its count is kept.
    NoStats,
    /// The latest stats are older than three intervals: its count is kept.
    StaleStats {
        since: Timestamp,
    },
    /// `need` rounded up.
    Need {
        handlers: u32,
    },
    RaisedToMin {
        min: u32,
    },
    CappedByMax {
        max: u32,
    },
    /// Ready events at a stage with no handlers.
    Woken,
    /// No need, but not idle long enough to go below one handler.
    KeptWarm,
    /// The need is above the current count by no more than `resource_manager.tolerance`.
    WithinTolerance {
        current: u32,
    },
    /// Throughput not measured yet: a scale-up at most doubles per interval.
    UnmeasuredStep {
        to: u32,
    },
    /// The need is lower, but not for `scale_down_after` yet.
    ScaleDownHeld {
        to: u32,
        until: Timestamp,
    },
    /// The need stayed lower for `scale_down_after`: down to the highest need in that time.
    ScaledDown {
        to: u32,
    },
    /// Nothing to do since `since`, for `idle_after` or more: to the stage's minimum.
    Idle {
        since: Timestamp,
        min: u32,
    },
    /// The budget ran short.
    BudgetCut {
        wanted: u32,
        /// Handlers of the whole budget.
        total: u32,
        /// Handlers that went to stages of higher priority.
        higher: u32,
    },
}
