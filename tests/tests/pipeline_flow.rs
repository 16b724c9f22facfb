//! A 3-stage pipeline of HTTP handlers served by the test, failing 20 % of calls at
//! random, with 1,000 events and no process killed: every event reaches the end, and each
//! gets exactly one successful handler call per stage (retries add calls, never a second
//! success). In both modes: standalone (in-process stage workers) and distributed (stage
//! worker processes, two dispatcher shards over NATS).

use std::time::Duration;

use cascade_e2e::flow::{EVENTS, FAIL_PERCENT, Flow, STAGES};
use cascade_e2e::{Cluster, Mode};

async fn every_event_once_per_stage(mode: Mode) {
    let mut cluster = tokio::task::spawn_blocking(move || Cluster::start(mode))
        .await
        .expect("start the cluster");
    let mut flow = Flow::start(&mut cluster, "flow", 10.0, 4).await;
    let c = cluster.client().await;
    flow.enqueue(&c).await;
    let stats = flow.wait_through(&c, Duration::from_secs(90)).await;

    let tally = flow.tally();
    for (stage, s) in STAGES.iter().zip(&stats) {
        for id in &flow.ids {
            let calls = tally.calls(id, stage);
            assert_eq!(tally.successes(id, stage), 1, "{id} at {stage}: {calls:#?}");
            // One call per delivery, numbered 1, 2, … by the shard; the success ends them.
            let attempts: Vec<u32> = calls.iter().map(|c| c.attempt).collect();
            let expected: Vec<u32> = (1..=calls.len() as u32).collect();
            assert_eq!(attempts, expected, "{id} at {stage}");
            assert!(calls.last().is_some_and(|c| c.succeeded()), "{calls:#?}");
        }
        // Each 500 was one retry; no lease ran out (nothing was delivered twice behind
        // the handler's back) and nothing was dead-lettered.
        let failures = tally.failures(stage) as u64;
        assert_eq!(
            (s.enqueued_total, s.completed_total, s.retries_total),
            (EVENTS as u64, EVENTS as u64, failures),
            "{stage}: {s:?}"
        );
        assert_eq!(
            (s.expired_leases_total, s.dead_lettered),
            (0, 0),
            "{stage}: {s:?}"
        );
        // The handler failed about the share it was told to (failures before 1,000
        // successes: 250 ± 18, so ±5 points of share is over 4 standard deviations).
        let share = 100.0 * failures as f64 / (failures as f64 + EVENTS as f64);
        assert!(
            (share - f64::from(FAIL_PERCENT)).abs() < 5.0,
            "{stage}: {share:.1} % of calls failed"
        );
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_every_event_once_per_stage() {
    every_event_once_per_stage(Mode::Standalone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_every_event_once_per_stage() {
    every_event_once_per_stage(Mode::Distributed).await;
}
