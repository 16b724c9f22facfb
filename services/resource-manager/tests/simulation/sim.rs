//! A discrete-time model of stages worked by handlers, driven by the decision function.
//!
//! Each simulated second, per stage: last second's leased events complete; delayed events
//! are enqueued and those due become ready; immediate arrivals become ready; handlers take
//! up to `handlers × per_handler` ready events (oldest first) and hold them for a second.
//! Every `interval` the stage's stats are recorded and the planner decides; its counts apply
//! at once (an executor with no start-up time).

use std::collections::{BTreeMap, VecDeque};

use cascade_resource_manager::{
    Current, Decision, DueBucket, History, Planner, ResourceManagerSettings, StageSpec, StageStats,
};

use crate::common::at;

/// Events per second arriving without a delay, by simulated second.
pub type Rate = Box<dyn Fn(u64) -> f64>;

pub struct StageModel {
    pub spec: StageSpec,
    pub arrivals: Rate,
    /// `(enqueued at, due at, count)`: delayed events, announced from their enqueue on.
    pub delayed: Vec<(u64, u64, u64)>,
    /// Events one handler finishes per second.
    pub per_handler: f64,
}

impl StageModel {
    pub fn new(spec: StageSpec, per_handler: f64, arrivals: impl Fn(u64) -> f64 + 'static) -> Self {
        StageModel {
            spec,
            arrivals: Box::new(arrivals),
            delayed: Vec::new(),
            per_handler,
        }
    }
}

#[derive(Default)]
struct StageState {
    /// `(ready since, count)`, oldest first.
    ready: VecDeque<(u64, u64)>,
    ready_count: u64,
    leased: u64,
    pending: BTreeMap<u64, u64>,
    enqueued_total: u64,
    completed_total: u64,
    handlers: u32,
    arrival_carry: f64,
    capacity_carry: f64,
    /// The longest wait from ready to taken, by the second the events became ready.
    waits: BTreeMap<u64, u64>,
}

/// One decision round.
pub struct Round {
    pub secs: u64,
    pub decisions: Vec<Decision>,
}

pub struct Run {
    pub rounds: Vec<Round>,
    names: Vec<String>,
    mins: Vec<u32>,
    states: Vec<StageState>,
}

pub fn run(models: &[StageModel], settings: &ResourceManagerSettings, seconds: u64) -> Run {
    let specs: Vec<StageSpec> = models.iter().map(|m| m.spec.clone()).collect();
    let mut states: Vec<StageState> = models.iter().map(|_| StageState::default()).collect();
    let mut history = History::new(settings.throughput_window);
    let mut planner = Planner::new();
    let mut rounds = Vec::new();
    let interval = settings.interval.as_secs();
    for secs in 0..seconds {
        for (model, state) in models.iter().zip(&mut states) {
            tick(model, state, secs);
        }
        let total: u32 = states.iter().map(|s| s.handlers).sum();
        assert!(
            total <= settings.total_handlers,
            "{total} handlers at {secs}s"
        );
        if secs % interval != 0 {
            continue;
        }
        let mut current = Current::new();
        for (model, state) in models.iter().zip(&states) {
            let horizon = secs + 2 * settings.target_drain.as_secs();
            history.record(stats(model, state, secs, horizon, interval), state.handlers);
            current.set(model.spec.stage.clone(), state.handlers);
        }
        let decisions = planner.step(&history, &specs, &current, settings, at(secs));
        for decision in &decisions {
            let index = specs
                .iter()
                .position(|s| s.stage == decision.stage)
                .expect("a decision per spec");
            states[index].handlers = decision.handlers;
        }
        rounds.push(Round { secs, decisions });
    }
    Run {
        rounds,
        names: specs.iter().map(|s| s.stage.to_string()).collect(),
        mins: specs.iter().map(|s| s.min_handlers).collect(),
        states,
    }
}

fn tick(model: &StageModel, state: &mut StageState, secs: u64) {
    state.completed_total += state.leased;
    state.leased = 0;
    for &(_, due, count) in model.delayed.iter().filter(|d| d.0 == secs) {
        *state.pending.entry(due).or_default() += count;
        state.enqueued_total += count;
    }
    let due_now: Vec<u64> = state.pending.range(..=secs).map(|(&due, _)| due).collect();
    for due in due_now {
        let count = state.pending.remove(&due).unwrap_or(0);
        make_ready(state, due, count);
    }
    state.arrival_carry += (model.arrivals)(secs).max(0.0);
    let arrived = state.arrival_carry.floor();
    state.arrival_carry -= arrived;
    state.enqueued_total += arrived as u64;
    make_ready(state, secs, arrived as u64);

    state.capacity_carry += f64::from(state.handlers) * model.per_handler;
    let mut take = (state.capacity_carry.floor() as u64).min(state.ready_count);
    state.capacity_carry -= take as f64;
    // Capacity left idle is lost, not banked for later.
    state.capacity_carry = state.capacity_carry.min(1.0);
    state.ready_count -= take;
    state.leased = take;
    while take > 0 {
        let Some(front) = state.ready.front_mut() else {
            break;
        };
        let from_front = take.min(front.1);
        let wait = state.waits.entry(front.0).or_default();
        *wait = (*wait).max(secs - front.0);
        front.1 -= from_front;
        take -= from_front;
        if front.1 == 0 {
            state.ready.pop_front();
        }
    }
}

fn make_ready(state: &mut StageState, since: u64, count: u64) {
    if count > 0 {
        state.ready.push_back((since, count));
        state.ready_count += count;
    }
}

fn stats(
    model: &StageModel,
    state: &StageState,
    secs: u64,
    horizon: u64,
    interval: u64,
) -> StageStats {
    let mut stats = StageStats::empty(model.spec.stage.clone(), at(secs));
    stats.ready = state.ready_count;
    stats.leased = state.leased;
    stats.enqueued_total = state.enqueued_total;
    stats.completed_total = state.completed_total;
    stats.oldest_ready_age =
        std::time::Duration::from_secs(state.ready.front().map_or(0, |&(since, _)| secs - since));
    // Buckets of one interval each, as a dispatcher would report them: an empty bucket
    // says that nothing is due in it.
    let mut until = secs;
    while until < horizon {
        let from = until;
        until += interval;
        let count = state.pending.range(from + 1..=until).map(|(_, &n)| n).sum();
        stats.due.push(DueBucket {
            until: at(until),
            count,
        });
    }
    stats
}

impl Run {
    fn index(&self, stage: &str) -> usize {
        self.names
            .iter()
            .position(|n| n == stage)
            .unwrap_or_else(|| panic!("no stage {stage}"))
    }

    /// The longest any event that became ready in `[from, to)` waited to be taken; events
    /// still waiting at the end count with their wait so far.
    pub fn max_wait(&self, stage: &str, from: u64, to: u64) -> u64 {
        let state = &self.states[self.index(stage)];
        let end = self.rounds.last().map_or(0, |r| r.secs);
        let taken = state.waits.range(from..to).map(|(_, &w)| w);
        let waiting = state
            .ready
            .iter()
            .filter(|(since, _)| (from..to).contains(since))
            .map(|(since, _)| end.saturating_sub(*since));
        taken.chain(waiting).max().unwrap_or(0)
    }

    pub fn ready_at_end(&self, stage: &str) -> u64 {
        self.states[self.index(stage)].ready_count
    }

    /// `(second, handlers)` of each round for `stage`.
    pub fn counts(&self, stage: &str) -> Vec<(u64, u32)> {
        self.rounds
            .iter()
            .map(|round| (round.secs, self.decision(round, stage).handlers))
            .collect()
    }

    pub fn decision<'a>(&self, round: &'a Round, stage: &str) -> &'a Decision {
        round
            .decisions
            .iter()
            .find(|d| d.stage.as_str() == stage)
            .unwrap_or_else(|| panic!("no decision for {stage}"))
    }

    /// How many times `stage`'s count changed in the rounds from `from` on.
    pub fn changes_from(&self, stage: &str, from: u64) -> usize {
        let counts: Vec<u32> = self
            .counts(stage)
            .into_iter()
            .filter(|&(secs, _)| secs >= from)
            .map(|(_, n)| n)
            .collect();
        counts.windows(2).filter(|pair| pair[0] != pair[1]).count()
    }

    /// Fails if, in any round, a stage got more than its minimum while a stage of higher
    /// priority got less than it asked for.
    pub fn assert_priority_respected(&self) {
        for round in &self.rounds {
            for low in &round.decisions {
                let low_min = self.min_of(low);
                if low.handlers <= low_min {
                    continue;
                }
                for high in round.decisions.iter().filter(|d| d.priority > low.priority) {
                    assert_eq!(
                        high.handlers, high.wanted,
                        "at {}s {} got {} (> min {low_min}) while {} got {} of {}: {high}",
                        round.secs, low.stage, low.handlers, high.stage, high.handlers, high.wanted
                    );
                }
            }
        }
    }

    fn min_of(&self, decision: &Decision) -> u32 {
        self.mins[self.index(decision.stage.as_str())]
    }
}
