//! The decision function driving a simulated system (`sim.rs`, 1 s steps, a decision every
//! interval): backlogs drain within `target_drain` plus one interval when the budget allows,
//! a higher priority is served before a lower one gets more than its minimum, the budget
//! holds at every step, steady load does not flap, and a known delayed wave is staffed
//! before it is due. Every scenario checks the budget at every simulated second.

#[path = "../common/mod.rs"]
mod common;
mod sim;

use common::{settings, spec};
use sim::{StageModel, run};

/// `target_drain` + `interval` of the default settings: the promise, in seconds.
const DRAIN_BOUND: u64 = 60 + 5;
/// Decisions from here on count as after warm-up.
const WARM: u64 = 180;

/// `base` events/s, varied by ±20 % from second to second (deterministically).
fn noisy(base: f64) -> impl Fn(u64) -> f64 {
    move |secs| base * (0.8 + 0.4 * (secs.wrapping_mul(7_919) % 41) as f64 / 40.0)
}

#[test]
fn steady_load_settles_without_flapping() {
    let models = [StageModel::new(
        spec("p.steady", 1, 0, 20),
        5.0,
        noisy(20.0),
    )];
    let run = run(&models, &settings(), 900);
    let counts = run.counts("p.steady");
    assert!(run.changes_from("p.steady", WARM) <= 1, "{counts:?}");
    let settled = counts.last().expect("rounds").1;
    assert!((4..=6).contains(&settled), "20/s at 5/s each: {settled}");
    assert!(run.max_wait("p.steady", 0, 900) <= DRAIN_BOUND);
    assert!(
        run.max_wait("p.steady", WARM, 900) <= 5,
        "no standing backlog once settled"
    );
}

#[test]
fn a_burst_drains_within_the_target() {
    let arrivals = |secs| if secs == 300 { 3_000.0 } else { 10.0 };
    let models = [StageModel::new(spec("p.burst", 1, 0, 16), 5.0, arrivals)];
    let run = run(&models, &settings(), 900);
    let wait = run.max_wait("p.burst", 300, 301);
    assert!(
        wait <= DRAIN_BOUND,
        "the burst waited {wait}s: {:?}",
        run.counts("p.burst")
    );
    assert!(run.max_wait("p.burst", 0, 900) <= DRAIN_BOUND);
    let counts = run.counts("p.burst");
    let peak = counts.iter().map(|c| c.1).max().unwrap_or(0);
    let last = counts.last().expect("rounds").1;
    assert!(last < peak, "back down after the burst: {counts:?}");
    assert!(run.changes_from("p.burst", 600) <= 1, "{counts:?}");
}

#[test]
fn a_higher_priority_is_served_first_under_a_tight_budget() {
    let settings = cascade_resource_manager::ResourceManagerSettings {
        total_handlers: 10,
        ..settings()
    };
    let models = [
        StageModel::new(spec("p.high", 2, 0, 10), 5.0, noisy(30.0)),
        StageModel::new(spec("p.low", 1, 1, 10), 5.0, noisy(30.0)),
    ];
    let run = run(&models, &settings, 600);
    run.assert_priority_respected();
    assert!(run.max_wait("p.high", 0, 600) <= DRAIN_BOUND);
    assert!(
        run.ready_at_end("p.low") > 1_000,
        "the low stage is short of handlers"
    );
    for stage in ["p.high", "p.low"] {
        let counts = run.counts(stage);
        assert!(run.changes_from(stage, WARM) <= 1, "{stage}: {counts:?}");
        assert!(
            counts.iter().skip(1).all(|c| c.1 >= 1),
            "{stage}: {counts:?}"
        );
    }
}

#[test]
fn a_known_delayed_wave_is_staffed_before_it_is_due() {
    let mut wave = StageModel::new(spec("p.wave", 1, 0, 16), 10.0, |_| 0.0);
    wave.delayed = vec![(10, 400, 4_000)];
    let run = run(&[wave], &settings(), 900);
    let counts = run.counts("p.wave");
    assert!(
        counts.iter().filter(|c| c.0 < 340).all(|c| c.1 == 0),
        "{counts:?}"
    );
    let first = counts
        .iter()
        .find(|c| c.1 > 0)
        .expect("staffed at some point");
    assert!(
        (340..400).contains(&first.0),
        "first handler at {}s: {counts:?}",
        first.0
    );
    let before = counts.iter().find(|c| c.0 == 395).expect("a round at 395s");
    assert!(
        before.1 >= 7,
        "4,000 events at 10/s need 7 handlers to drain in 60s: {counts:?}"
    );
    assert!(run.max_wait("p.wave", 400, 401) <= DRAIN_BOUND);
    assert_eq!(
        counts.last().expect("rounds").1,
        0,
        "idle again: {counts:?}"
    );
}

#[test]
fn mixed_load_keeps_the_budget_and_the_priorities() {
    let settings = cascade_resource_manager::ResourceManagerSettings {
        total_handlers: 12,
        ..settings()
    };
    let mut report = StageModel::new(spec("p.report", 1, 0, 6), 5.0, |_| 0.0);
    report.delayed = vec![(0, 450, 1_500)];
    let models = [
        StageModel::new(spec("p.ingest", 3, 1, 8), 10.0, noisy(15.0)),
        StageModel::new(spec("p.charge", 2, 0, 10), 5.0, |secs| {
            if secs == 200 { 2_000.0 } else { 5.0 }
        }),
        StageModel::new(spec("p.email", 1, 0, 10), 4.0, noisy(20.0)),
        report,
    ];
    let run = run(&models, &settings, 900);
    run.assert_priority_respected();
    assert!(run.max_wait("p.ingest", 0, 900) <= DRAIN_BOUND);
    assert!(run.max_wait("p.charge", 0, 900) <= DRAIN_BOUND);
    for round in &run.rounds {
        let total: u32 = round.decisions.iter().map(|d| d.handlers).sum();
        assert!(total <= 12, "at {}s: {total}", round.secs);
    }
}
