//! The pipeline flow of `pipeline_flow.rs` with processes killed by SIGKILL mid-way (once
//! 300 events have passed the first stage) and started again on the same data: nothing is
//! lost (all 1,000 events reach the end, each stage completes each event exactly once in the
//! store), and the handler's extra successful calls are only redeliveries of what was in
//! flight at the kill: a lease that ran out, or a take the killed shard had answered before
//! it was logged (then the event comes back with the same attempt number).
//!
//! Standalone: the whole process is killed (the shards and the in-process stage workers).
//! Distributed: the second stage's worker process and the dispatcher process of the first
//! and last stages' shard.

use std::collections::HashSet;
use std::time::Duration;

use cascade_core::{QueueName, shard_of};
use cascade_e2e::cluster::SHARDS;
use cascade_e2e::flow::{BATCH, CONCURRENCY, EVENTS, Flow, STAGES, WORKERS_PER_STAGE};
use cascade_e2e::handler_server::Call;
use cascade_e2e::{Cluster, Mode};
use tokio::time::Instant;

/// Short, so that the leases of what the killed processes held run out soon, yet over
/// twice `REQUEST_TIMEOUT` (see below).
const LEASE_S: f64 = 6.0;
/// A gateway sends one request at a time per shard; a request lost with a killed
/// dispatcher holds that shard's enqueues and completions back for `bus.request_timeout`
/// (default 10 s). Shorter here, so that completions held back stay within their leases
/// (a finished handler's lease is no longer extended) and are not delivered again.
const REQUEST_TIMEOUT: &str = "1s";

async fn survives_a_crash(mode: Mode) {
    let env = [("CASCADE__BUS__REQUEST_TIMEOUT", REQUEST_TIMEOUT)];
    let mut cluster = tokio::task::spawn_blocking(move || Cluster::start_with(mode, None, &env))
        .await
        .expect("start the cluster");
    let mut flow = Flow::start(&mut cluster, "crash", LEASE_S, 7).await;
    let c = cluster.client().await;
    flow.enqueue(&c).await;
    flow.wait_for_successes(STAGES[0], 300, Duration::from_secs(60))
        .await;

    // The first and last stages' shard (stages alternate between the two shards).
    let first = QueueName::parse(&flow.queue(STAGES[0])).expect("a queue name");
    let shard = shard_of(&first, SHARDS);
    // What each stage had in flight (under lease), counted right before the kills: the
    // count and the kills run back to back on this thread.
    let killed_at = Instant::now();
    let runtime = tokio::runtime::Handle::current();
    let in_flight = tokio::task::block_in_place(|| {
        let in_flight = runtime.block_on(flow.leased(&c));
        match mode {
            Mode::Standalone => cluster.crash_and_restart_dispatcher(0),
            Mode::Distributed => {
                cluster.kill_stage_worker(flow.workers[1]);
                cluster.kill_dispatcher(shard);
                cluster.restart_dispatcher(shard);
                cluster.restart_stage_worker(flow.workers[1]);
            }
        }
        in_flight
    });
    let restarted_at = Instant::now();
    eprintln!("killed and restarted in {:?}", restarted_at - killed_at);
    let c = cluster.client().await;
    let stats = flow.wait_through(&c, Duration::from_secs(90)).await;

    let tally = flow.tally();
    for ((stage, s), held) in STAGES.iter().zip(&stats).zip(in_flight) {
        let queue = QueueName::parse(&flow.queue(stage)).expect("a queue name");
        let shard_killed = mode == Mode::Standalone || shard_of(&queue, SHARDS) == shard;
        let (mut extra, mut lost_takes) = (0, 0);
        for id in &flow.ids {
            let calls = tally.calls(id, stage);
            let successes = tally.successes(id, stage);
            assert!(successes >= 1, "{id} lost before {stage}");
            lost_takes += lost_takes_of(calls);
            if successes > 1 {
                extra += successes - 1;
                // A success is repeated only if its outcome died with a process.
                let first = calls.iter().find(|c| c.succeeded());
                assert!(
                    first.is_some_and(|c| c.at < restarted_at),
                    "{id} at {stage}: repeated after the restart: {calls:#?}"
                );
            }
        }
        // The store applied exactly one outcome per event and stage: no event was
        // delivered twice into a stage, none completed twice.
        assert_eq!(
            (s.enqueued_total, s.completed_total, s.dead_lettered),
            (EVENTS as u64, EVENTS as u64, 0),
            "{stage}: {s:?}"
        );
        // An event whose success was lost comes back only when its lease runs out or when
        // the shard that answered its take died before logging it, and either happens only
        // to what was taken before a kill: the leases counted just before it, plus what the
        // workers could take between the count and the kill (a full hand each:
        // `CONCURRENCY` running and `BATCH` waiting).
        let expired = s.expired_leases_total;
        let bound = held + u64::from(WORKERS_PER_STAGE * (CONCURRENCY + BATCH));
        eprintln!(
            "{stage}: {extra} repeated successes, {expired} expired leases, \
             {lost_takes} takes lost, {held} leased at the kill"
        );
        assert!(
            extra as u64 <= expired + lost_takes,
            "{stage}: {extra} > {expired} + {lost_takes}"
        );
        assert!(
            expired <= bound,
            "{stage}: {expired} leases expired > {bound}"
        );
        assert!(
            lost_takes <= bound,
            "{stage}: {lost_takes} takes lost > {bound}"
        );
        if !shard_killed {
            assert_eq!(lost_takes, 0, "{stage}: its shard was not killed");
        }
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop the cluster");
}

/// How often the handler was called again with an attempt number it had seen for this
/// event: each take counts an attempt, so only a take that was lost (answered by a shard
/// killed before it logged the take) hands the same number out twice.
fn lost_takes_of(calls: &[Call]) -> u64 {
    let attempts: HashSet<u32> = calls.iter().map(|c| c.attempt).collect();
    (calls.len() - attempts.len()) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_killed_mid_way_loses_nothing() {
    survives_a_crash(Mode::Standalone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_killed_mid_way_loses_nothing() {
    survives_a_crash(Mode::Distributed).await;
}
