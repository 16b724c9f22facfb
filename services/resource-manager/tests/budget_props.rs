//! For any stats, specs, counts and budget, over several decisions: the total never exceeds
//! the budget, no stage exceeds its max, every minimum is met when the minimums fit, and a
//! stage above its minimum never coexists with a higher-priority stage short of its wish.

mod common;

use cascade_resource_manager::{
    DueBucket, History, Planner, ResourceManagerSettings, StageSpec, StageStats,
};
use common::{at, current, stage};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Stage {
    priority: u32,
    min: u32,
    max: u32,
    current: u32,
    /// Per decision: (ready, leased, due soon, completed since the last, enqueued since).
    samples: Vec<(u64, u64, u64, u64, u64)>,
}

fn stage_strategy() -> impl Strategy<Value = Stage> {
    (
        0u32..3,
        0u32..5,
        0u32..12,
        0u32..20,
        prop::collection::vec(
            (0u64..5_000, 0u64..200, 0u64..3_000, 0u64..500, 0u64..500),
            1..6,
        ),
    )
        .prop_map(|(priority, min, extra, current, samples)| Stage {
            priority,
            min,
            max: min + extra,
            current,
            samples,
        })
}

proptest! {
    #[test]
    fn the_budget_and_the_bounds_always_hold(
        stages in prop::collection::vec(stage_strategy(), 1..6),
        budget in 1u32..30,
        tolerance in 0.0f64..0.5,
    ) {
        let settings = ResourceManagerSettings { total_handlers: budget, tolerance, ..ResourceManagerSettings::default() };
        let names: Vec<String> = (0..stages.len()).map(|i| format!("p.s{i}")).collect();
        let specs: Vec<StageSpec> = stages.iter().zip(&names).map(|(s, name)| StageSpec {
            stage: stage(name),
            priority: s.priority,
            min_handlers: s.min,
            max_handlers: s.max,
        }).collect();
        let mut counts: Vec<u32> = stages.iter().map(|s| s.current).collect();
        let mut totals = vec![(0u64, 0u64); stages.len()];
        let mut history = History::new(settings.throughput_window);
        let mut planner = Planner::new();
        let rounds = stages.iter().map(|s| s.samples.len()).max().unwrap_or(0);
        for round in 0..rounds {
            let secs = 5 * round as u64;
            for (i, s) in stages.iter().enumerate() {
                let (ready, leased, due, completed, enqueued) = s.samples[round % s.samples.len()];
                totals[i].0 += completed;
                totals[i].1 += enqueued;
                let mut stats = StageStats::empty(stage(&names[i]), at(secs));
                stats.ready = ready;
                stats.leased = leased;
                stats.due = vec![DueBucket { until: at(secs + 30), count: due }];
                stats.completed_total = totals[i].0;
                stats.enqueued_total = totals[i].1;
                history.record(stats, counts[i]);
            }
            let pairs: Vec<(&str, u32)> = names.iter().map(String::as_str).zip(counts.iter().copied()).collect();
            let decisions = planner.step(&history, &specs, &current(&pairs), &settings, at(secs));
            prop_assert_eq!(decisions.len(), stages.len());
            let total: u32 = decisions.iter().map(|d| d.handlers).sum();
            prop_assert!(total <= budget, "total {} over budget {}", total, budget);
            let mins: u32 = stages.iter().map(|s| s.min).sum();
            for d in &decisions {
                let i = names.iter().position(|n| n == d.stage.as_str()).expect("known stage");
                prop_assert!(d.handlers <= stages[i].max, "{}: {} > max", d.stage, d.handlers);
                prop_assert!(d.handlers <= d.wanted, "{}: more than wanted", d.stage);
                prop_assert!(d.batch >= 1 && d.batch <= settings.max_batch);
                if mins <= budget {
                    prop_assert!(d.handlers >= stages[i].min, "{}: {} < min", d.stage, d.handlers);
                }
                if d.handlers > stages[i].min {
                    for high in decisions.iter().filter(|h| h.priority > d.priority) {
                        prop_assert_eq!(high.handlers, high.wanted, "{} short while {} above min", high.stage, d.stage);
                    }
                }
                counts[i] = d.handlers;
            }
            prop_assert!(total >= budget.min(mins), "minimums first: {} < {}", total, budget.min(mins));
        }
    }
}
