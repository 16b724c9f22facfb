//! The rules that span several decisions: the scale-down hold, a shrinking budget cutting
//! held counts, idle to zero and wake-up, a delayed wave staffed ahead, and the doubling
//! steps of a stage whose throughput is not measured yet.

mod common;

use cascade_resource_manager::{
    History, Planner, Reason, ResourceManagerSettings, ThroughputSource,
};
use common::*;

/// Handlers that were busy (7 of them at 5/s); then the backlog is gone and 10 events/s
/// arrive, which 2 handlers can take: need 2 from `from` to `to`.
fn quiet_down(history: &mut History, counters: &mut Counters, from: u64, to: u64) {
    let mut secs = from;
    while secs <= to {
        counters.stats.ready = 0;
        counters.stats.enqueued_total += 50;
        counters.stats.completed_total += 50;
        counters.record(history, secs, 7);
        secs += 5;
    }
}

#[test]
fn scale_down_waits_for_scale_down_after_of_lower_need() {
    let (mut history, mut planner, specs) = (history(), Planner::new(), [spec("p.a", 1, 0, 10)]);
    let mut counters = measured(&mut history, "p.a", 100, 7, 5.0, 1_890);
    let first = planner.step(
        &history,
        &specs,
        &current(&[("p.a", 7)]),
        &settings(),
        at(100),
    );
    assert_eq!(first[0].handlers, 7, "{}", first[0]);

    quiet_down(&mut history, &mut counters, 105, 215);
    let mut last = None;
    for secs in (105..=215).step_by(5) {
        let decisions = planner.step(
            &history_until(&history, secs),
            &specs,
            &current(&[("p.a", 7)]),
            &settings(),
            at(secs),
        );
        assert_eq!(decisions[0].handlers, 7, "at +{secs}s: {}", decisions[0]);
        last = Some(decisions[0].to_string());
    }
    let held = last.expect("decided");
    assert!(
        held.contains("scale-down to 2 held until 12:03:40"),
        "{held}"
    );

    quiet_down(&mut history, &mut counters, 220, 220);
    let down = planner.step(
        &history,
        &specs,
        &current(&[("p.a", 7)]),
        &settings(),
        at(220),
    );
    assert_eq!(down[0].handlers, 2, "{}", down[0]);
    assert!(
        down[0].to_string().contains("need stayed lower: down to 2"),
        "{}",
        down[0]
    );
    assert_eq!(
        down[0].explanation.inputs.throughput.source,
        ThroughputSource::Remembered
    );
}

/// The history as it stood at `secs` (later samples left out).
fn history_until(full: &History, secs: u64) -> History {
    let mut partial = history();
    for sample in full
        .samples(&stage("p.a"))
        .filter(|s| s.stats.at <= at(secs))
    {
        partial.record(sample.stats.clone(), sample.handlers);
    }
    partial
}

#[test]
fn a_shrinking_budget_cuts_held_counts_at_once_lowest_priority_first() {
    let mut history = history();
    let specs = [spec("p.high", 2, 0, 10), spec("p.low", 1, 0, 10)];
    let mut planner = Planner::new();
    for name in ["p.high", "p.low"] {
        measured(&mut history, name, 100, 6, 5.0, 0);
    }
    let now = current(&[("p.high", 6), ("p.low", 6)]);
    let held = planner.step(&history, &specs, &now, &settings(), at(100));
    assert_eq!(
        handlers(&held),
        [("p.high".into(), 6), ("p.low".into(), 6)],
        "held: need is lower"
    );

    let small = ResourceManagerSettings {
        total_handlers: 8,
        ..settings()
    };
    let cut = planner.step(&history, &specs, &now, &small, at(105));
    assert_eq!(handlers(&cut), [("p.high".into(), 6), ("p.low".into(), 2)]);
    assert!(matches!(
        cut[1].explanation.reasons.last(),
        Some(Reason::BudgetCut { wanted: 6, .. })
    ));
}

#[test]
fn an_idle_stage_goes_to_zero_and_ready_events_wake_it() {
    let (mut history, mut planner, specs) = (history(), Planner::new(), [spec("p.a", 1, 0, 10)]);
    let mut counters = Counters::new("p.a");
    let mut count = 3;
    let mut decided = Vec::new();
    for secs in (0..=300).step_by(5) {
        counters.record(&mut history, secs, count);
        let decision = planner.step(
            &history,
            &specs,
            &current(&[("p.a", count)]),
            &settings(),
            at(secs),
        );
        count = decision[0].handlers;
        decided.push((secs, count, decision[0].to_string()));
    }
    let at_secs = |s: u64| decided.iter().find(|d| d.0 == s).expect("decided");
    assert_eq!(at_secs(115).1, 3, "held: {}", at_secs(115).2);
    assert_eq!(at_secs(120).1, 1, "one kept until idle: {}", at_secs(120).2);
    assert!(
        at_secs(295).2.contains("1 kept until idle"),
        "{}",
        at_secs(295).2
    );
    assert_eq!(at_secs(300).1, 0, "{}", at_secs(300).2);
    assert!(
        at_secs(300).2.contains("idle since 12:00:00: to min 0"),
        "{}",
        at_secs(300).2
    );

    counters.stats.ready = 3;
    counters.stats.enqueued_total = 3;
    counters.record(&mut history, 305, 0);
    let woken = planner.step(
        &history,
        &specs,
        &current(&[("p.a", 0)]),
        &settings(),
        at(305),
    );
    assert_eq!(woken[0].handlers, 1, "{}", woken[0]);
    assert!(
        woken[0]
            .to_string()
            .contains("ready events and no handler: woken"),
        "{}",
        woken[0]
    );
}

#[test]
fn a_known_delayed_wave_gets_handlers_before_it_is_due() {
    let (mut history, mut planner, specs) = (history(), Planner::new(), [spec("p.a", 1, 0, 20)]);
    let mut counters = measured(&mut history, "p.a", 100, 2, 5.0, 0);
    planner.step(
        &history,
        &specs,
        &current(&[("p.a", 2)]),
        &settings(),
        at(100),
    );

    // 3,000 events due at +200 s: beyond target_drain at +105 s, within it at +140 s.
    counters.due(&[(195, 0), (200, 3_000)]);
    counters.record(&mut history, 105, 2);
    let early = planner.step(
        &history,
        &specs,
        &current(&[("p.a", 2)]),
        &settings(),
        at(105),
    );
    assert_eq!(early[0].explanation.inputs.due_soon, 0.0, "{}", early[0]);

    for secs in [110, 115, 120, 125, 130, 135, 140] {
        counters.record(&mut history, secs, 2);
    }
    let ahead = planner.step(
        &history,
        &specs,
        &current(&[("p.a", 2)]),
        &settings(),
        at(140),
    );
    assert_eq!(ahead[0].handlers, 10, "{}", ahead[0]);
    assert_eq!(ahead[0].explanation.inputs.ready, 0);
    assert!(
        ahead[0].to_string().contains("drain 3,000 events"),
        "{}",
        ahead[0]
    );
}

#[test]
fn an_unmeasured_stage_scales_up_by_doubling() {
    let (mut history, mut planner, specs) = (history(), Planner::new(), [spec("p.a", 1, 0, 50)]);
    let mut counters = Counters::new("p.a");
    counters.stats.ready = 3_000;
    let mut count = 0;
    let mut steps = Vec::new();
    for secs in [0, 5, 10, 15, 20] {
        // Handlers are starting: nothing completes yet, so nothing is measured.
        counters.record(&mut history, secs, count);
        let decision = planner.step(
            &history,
            &specs,
            &current(&[("p.a", count)]),
            &settings(),
            at(secs),
        );
        assert_eq!(
            decision[0].explanation.inputs.throughput.source,
            ThroughputSource::Assumed
        );
        count = decision[0].handlers;
        steps.push(count);
    }
    assert_eq!(steps, [1, 2, 4, 8, 16]);
}
