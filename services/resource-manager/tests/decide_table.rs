//! One decision, rule by rule: need, bounds, tolerance, budget by priority, shares within a
//! tier, ties, ordering, missing or stale stats, and batch sizes. The rules that span several
//! decisions are in `decide_over_time.rs`.

mod common;

use cascade_resource_manager::{Planner, ResourceManagerSettings, StageSpec};
use common::*;

/// One stage of a table case: its spec, handlers now, and the ready backlog left after
/// busy handlers measured 5 events/s each (so one handler drains 300 events in 60 s).
struct Given {
    spec: StageSpec,
    current: u32,
    ready: u64,
}

fn given(name: &str, priority: u32, min: u32, max: u32, current: u32, ready: u64) -> Given {
    Given {
        spec: spec(name, priority, min, max),
        current,
        ready,
    }
}

struct Case {
    name: &'static str,
    budget: u32,
    stages: Vec<Given>,
    want: Vec<(&'static str, u32)>,
    /// Words each named stage's explanation must contain.
    why: Vec<(&'static str, &'static str)>,
}

fn table() -> Vec<Case> {
    vec![
        Case {
            name: "scale up at once to the rounded-up need",
            budget: 16,
            stages: vec![given("p.a", 1, 0, 10, 1, 1_900)],
            want: vec![("p.a", 7)],
            why: vec![(
                "p.a",
                "needs 6.3 handlers to drain 1,900 events in 1m at 5.0/s per handler",
            )],
        },
        Case {
            name: "capped by max",
            budget: 16,
            stages: vec![given("p.a", 1, 0, 4, 1, 1_900)],
            want: vec![("p.a", 4)],
            why: vec![("p.a", "capped by max 4")],
        },
        Case {
            name: "raised to min",
            budget: 16,
            stages: vec![given("p.a", 1, 3, 10, 3, 100)],
            want: vec![("p.a", 3)],
            why: vec![("p.a", "raised to min 3")],
        },
        Case {
            name: "a need within tolerance of the current count keeps it",
            budget: 16,
            stages: vec![given("p.a", 1, 0, 10, 6, 1_890)],
            want: vec![("p.a", 6)],
            why: vec![("p.a", "within tolerance of 6: kept")],
        },
        Case {
            name: "higher priority first; the lower one keeps only its min",
            budget: 8,
            stages: vec![
                given("p.high", 2, 0, 10, 4, 3_000),
                given("p.low", 1, 1, 10, 4, 3_000),
            ],
            want: vec![("p.high", 7), ("p.low", 1)],
            why: vec![(
                "p.low",
                "budget short: wanted 10 of 8, 7 taken by higher priorities",
            )],
        },
        Case {
            name: "minimums of higher tiers first when the minimums exceed the budget",
            budget: 4,
            stages: vec![
                given("p.high", 2, 3, 10, 3, 0),
                given("p.low", 1, 3, 10, 3, 0),
            ],
            want: vec![("p.high", 3), ("p.low", 1)],
            why: vec![("p.low", "wanted 3 of 4, 3 taken by higher priorities")],
        },
        Case {
            name: "a min above the budget gets the budget",
            budget: 4,
            stages: vec![given("p.a", 1, 6, 10, 6, 0)],
            want: vec![("p.a", 4)],
            why: vec![("p.a", "budget short: wanted 6 of 4, 0 taken")],
        },
        Case {
            name: "within a tier in proportion to need",
            budget: 6,
            stages: vec![
                given("p.a", 1, 0, 10, 1, 1_800),
                given("p.b", 1, 0, 10, 1, 900),
            ],
            want: vec![("p.a", 4), ("p.b", 2)],
            why: vec![],
        },
        Case {
            name: "equal needs: the extra handler goes by name",
            budget: 5,
            stages: vec![
                given("p.b", 1, 0, 10, 1, 1_500),
                given("p.a", 1, 0, 10, 1, 1_500),
            ],
            want: vec![("p.a", 3), ("p.b", 2)],
            why: vec![],
        },
        Case {
            name: "what a capped stage cannot use goes to its tier",
            budget: 8,
            stages: vec![
                given("p.a", 1, 0, 2, 1, 3_000),
                given("p.b", 1, 0, 10, 1, 3_000),
            ],
            want: vec![("p.a", 2), ("p.b", 6)],
            why: vec![],
        },
        Case {
            name: "what a tier cannot use goes to the next",
            budget: 8,
            stages: vec![
                given("p.high", 2, 0, 2, 1, 3_000),
                given("p.low", 1, 0, 10, 1, 3_000),
            ],
            want: vec![("p.high", 2), ("p.low", 6)],
            why: vec![],
        },
    ]
}

#[test]
fn single_decisions_follow_the_rules() {
    for case in table() {
        let mut history = history();
        for stage in &case.stages {
            let name = stage.spec.stage.as_str();
            measured(
                &mut history,
                name,
                100,
                stage.current.max(1),
                5.0,
                stage.ready,
            );
        }
        let specs: Vec<StageSpec> = case.stages.iter().map(|s| s.spec.clone()).collect();
        let now: Vec<(&str, u32)> = case
            .stages
            .iter()
            .map(|s| (s.spec.stage.as_str(), s.current))
            .collect();
        let settings = ResourceManagerSettings {
            total_handlers: case.budget,
            ..settings()
        };
        let decisions = Planner::new().step(&history, &specs, &current(&now), &settings, at(100));
        for (name, count) in &case.want {
            let decision = by_name(&decisions, name);
            assert_eq!(
                decision.handlers, *count,
                "{}: {name}: {decision}",
                case.name
            );
        }
        for (name, words) in &case.why {
            let text = by_name(&decisions, name).to_string();
            assert!(text.contains(words), "{}: {name}: {text}", case.name);
        }
        let total: u32 = decisions.iter().map(|d| d.handlers).sum();
        assert!(
            total <= case.budget,
            "{}: {total} > {}",
            case.name,
            case.budget
        );
    }
}

#[test]
fn decisions_are_ordered_by_priority_then_name_and_repeatable() {
    let mut history = history();
    for name in ["p.b", "p.a", "p.c"] {
        measured(&mut history, name, 100, 1, 5.0, 600);
    }
    let specs = [
        spec("p.b", 1, 0, 9),
        spec("p.c", 2, 0, 9),
        spec("p.a", 1, 0, 9),
        spec("p.a", 7, 0, 9),
    ];
    let now = current(&[("p.a", 1), ("p.b", 1), ("p.c", 1)]);
    let mut planner = Planner::new();
    let mut twin = planner.clone();
    let first = planner.step(&history, &specs, &now, &settings(), at(100));
    let names: Vec<&str> = first.iter().map(|d| d.stage.as_str()).collect();
    assert_eq!(
        names,
        ["p.c", "p.a", "p.b"],
        "the repeated p.a is decided once, by its first spec"
    );
    assert_eq!(
        first,
        twin.step(&history, &specs, &now, &settings(), at(100))
    );
}

#[test]
fn missing_or_stale_stats_keep_the_count_within_bounds() {
    let mut history = history();
    measured(&mut history, "p.old", 100, 1, 5.0, 600);
    let specs = [spec("p.new", 1, 1, 3), spec("p.old", 1, 0, 10)];
    let now = current(&[("p.new", 5), ("p.old", 4)]);
    let decisions = Planner::new().step(&history, &specs, &now, &settings(), at(200));
    assert_eq!(
        handlers(&decisions),
        [("p.new".into(), 3), ("p.old".into(), 4)]
    );
    assert!(
        by_name(&decisions, "p.new")
            .to_string()
            .contains("no stats yet: kept")
    );
    assert!(
        by_name(&decisions, "p.old")
            .to_string()
            .contains("no stats since 12:01:40: kept")
    );
}

#[test]
fn batch_is_one_interval_of_one_handlers_work() {
    let cases = [
        (5.0, 100, 16),
        (5.0, 10, 10),
        (50.0, 100, 100),
        (0.3, 100, 1),
    ];
    for (per_handler, max_batch, batch) in cases {
        let mut history = history();
        measured(&mut history, "p.a", 100, 2, per_handler, 3_000);
        let settings = ResourceManagerSettings {
            max_batch,
            ..settings()
        };
        let decisions = Planner::new().step(
            &history,
            &[spec("p.a", 1, 0, 10)],
            &current(&[("p.a", 2)]),
            &settings,
            at(100),
        );
        assert_eq!(
            decisions[0].batch, batch,
            "{per_handler}/s, max {max_batch}"
        );
    }
    let fresh = Planner::new().step(
        &history(),
        &[spec("p.a", 1, 0, 10)],
        &current(&[]),
        &settings(),
        at(0),
    );
    assert_eq!(fresh[0].batch, 4, "assumed 1/s × 5s");
}
