//! The resource manager in `cascade standalone`: a burst into a slow stage makes
//! `cascade_stage_handlers` grow above the stage's minimum, the backlog drains, and the
//! handlers shrink back to the minimum once the stage has been idle for the window. Then a
//! wave of delayed events gets handlers before any of it activates (the timer shards report
//! it as due within `target_drain`). The budget comes from
//! `CASCADE__RESOURCE_MANAGER__TOTAL_HANDLERS`; the windows are short so that the whole run
//! takes seconds.

use std::time::{Duration, Instant};

use cascade_client::api;
use cascade_client::api::enqueue_request::When;
use cascade_e2e::process::http_body;
use cascade_e2e::{Cluster, Mode};

const STAGE: &str = "burst.slow";
const EVENTS: usize = 300;
/// Delayed events, and how far ahead: more than `target_drain`, so that the manager sees
/// them coming for a while before they activate.
const WAVE: usize = 100;
const WAVE_DELAY: Duration = Duration::from_secs(6);
const MIN_HANDLERS: u64 = 1;
const BUDGET: u64 = 6;

/// One stage that takes 100 ms per event, one event at a time per handler: one handler
/// works 10 events a second, so the burst needs several to drain within `target_drain`.
const CONFIG: &str = r#"
[dispatcher]
stats_interval = "100ms"

[resource_manager]
interval = "250ms"
target_drain = "4s"
throughput_window = "1s"
scale_down_after = "1s"
idle_after = "2s"

[[pipelines]]
name = "burst"

[[pipelines.stages]]
name = "slow"
handler = { kind = { builtin = "sleep:100" }, concurrency = 1, timeout = "10s" }
queue = { lease = "30s" }
priority = 1
min_handlers = 1
max_handlers = 8
"#;

/// The value of `metric{stage="burst.slow"}` on the admin port, if it is there.
fn gauge(cluster: &Cluster, metric: &str) -> Option<u64> {
    let text = http_body(cluster.http(), "/metrics")?;
    let prefix = format!("{metric}{{stage=\"{STAGE}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
}

/// Enqueues `n` events into the pipeline, `delay` ahead (none: ready now).
async fn enqueue(c: &cascade_client::Client, n: usize, delay: Option<Duration>) {
    for first in (0..n).step_by(100) {
        let items = (first..n.min(first + 100))
            .map(|i| api::EnqueueRequest {
                pipeline: "burst".into(),
                payload: format!("event {i}").into_bytes().into(),
                when: delay.map(|d| {
                    When::Delay(prost_types::Duration {
                        seconds: d.as_secs() as i64,
                        nanos: d.subsec_nanos() as i32,
                    })
                }),
                ..Default::default()
            })
            .collect();
        let results = c
            .ingest()
            .enqueue_batch(api::EnqueueBatchRequest { items })
            .await
            .expect("enqueue a batch")
            .into_inner()
            .results;
        assert!(results.iter().all(|r| r.code == 0), "{results:?}");
    }
}

async fn stats(c: &cascade_client::Client) -> api::QueueStats {
    c.admin()
        .queue_stats(api::QueueStatsRequest { name: STAGE.into() })
        .await
        .expect("queue stats")
        .into_inner()
}

/// Polls `check` every 100 ms until it returns `Some`; panics with `what` after `within`.
async fn wait_for<T>(what: &str, within: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_and_a_known_wave_scale_a_slow_stage_up_and_back_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("cascade.toml");
    std::fs::write(&config, CONFIG).expect("write the config");
    let budget = BUDGET.to_string();
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(
            Mode::Standalone,
            Some(&config),
            &[("CASCADE__RESOURCE_MANAGER__TOTAL_HANDLERS", &budget)],
        )
    })
    .await
    .expect("start standalone");
    let c = cluster.client().await;

    wait_for(
        "the stage runs its minimum",
        Duration::from_secs(30),
        async || (gauge(&cluster, "cascade_stage_handlers") == Some(MIN_HANDLERS)).then_some(()),
    )
    .await;

    enqueue(&c, EVENTS, None).await;

    let grown = wait_for(
        "handlers above the minimum",
        Duration::from_secs(30),
        async || gauge(&cluster, "cascade_stage_handlers").filter(|&n| n > MIN_HANDLERS),
    )
    .await;
    let mut most = grown;
    let drained = wait_for("the backlog drains", Duration::from_secs(60), async || {
        if let Some(n) = gauge(&cluster, "cascade_stage_handlers") {
            most = most.max(n);
        }
        let s = stats(&c).await;
        (s.completed_total >= EVENTS as u64 && s.ready + s.leased == 0).then_some(s)
    })
    .await;
    assert_eq!(drained.enqueued_total, EVENTS as u64, "{drained:?}");
    eprintln!("handlers: grew to {grown}, at most {most}");
    assert!(
        most <= BUDGET,
        "{most} handlers, over the budget of {BUDGET}"
    );
    let explain = http_body(cluster.http(), "/rm/explain").expect("GET /rm/explain");
    assert!(explain.contains(STAGE), "{explain}");

    wait_for(
        "handlers back to the minimum after the window",
        Duration::from_secs(30),
        async || (gauge(&cluster, "cascade_stage_handlers") == Some(MIN_HANDLERS)).then_some(()),
    )
    .await;
    assert_eq!(
        gauge(&cluster, "cascade_rm_desired_handlers"),
        Some(MIN_HANDLERS)
    );

    // The wave: handlers above the minimum seen while every event of it is still delayed
    // (the stats are read after the gauge, so the gauge came first).
    enqueue(&c, WAVE, Some(WAVE_DELAY)).await;
    let ahead = wait_for(
        "handlers before the wave activates",
        WAVE_DELAY,
        async || {
            let handlers = gauge(&cluster, "cascade_stage_handlers")?;
            let s = stats(&c).await;
            assert!(
                s.delayed == WAVE as u64 && s.ready + s.leased == 0,
                "the wave activated before the stage was staffed ({handlers} handlers): {s:?}"
            );
            (handlers > MIN_HANDLERS).then_some(handlers)
        },
    )
    .await;
    eprintln!("handlers ahead of the wave: {ahead}");
    wait_for("the wave drains", Duration::from_secs(60), async || {
        let s = stats(&c).await;
        (s.completed_total >= (EVENTS + WAVE) as u64 && s.ready + s.leased + s.delayed == 0)
            .then_some(())
    })
    .await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
