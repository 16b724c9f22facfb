//! The resource manager in `cascade standalone`, in process with the real stage supervisor:
//! a burst into a slow stage (`sleep:200`, 5 events/s a handler) makes the stage's handlers
//! grow, the backlog drains, the handlers shrink after `scale_down_after` and reach 0 after
//! `idle_after` (the worker pauses), and new events wake the stage again. `/rm/explain`
//! and `/metrics` show it on the admin port.

use std::time::Duration;

use cascade_client::{Client, api};
use cascade_core::{HandlerKind, HandlerSpec, Pipeline, Stage};
use cascade_service::{Settings, shutdown_channel};
use tokio::sync::oneshot;

use crate::rm_client::http_get;
use crate::standalone::{Bound, run_with};

const STAGE: &str = "rmtest.slow";
const BURST: u64 = 40;
const DEADLINE: Duration = Duration::from_secs(30);

fn settings(dir: &std::path::Path) -> Settings {
    let mut settings = Settings::default();
    settings.data.dir = dir.to_path_buf();
    settings.grpc.addr = "127.0.0.1:0".into();
    settings.http.addr = "127.0.0.1:0".into();
    settings.store.durability = cascade_service::settings::DurabilityKind::None;
    settings.dispatcher.stats_interval = Duration::from_millis(100);
    let rm = &mut settings.resource_manager;
    rm.interval = Duration::from_millis(200);
    rm.target_drain = Duration::from_secs(1);
    rm.throughput_window = Duration::from_secs(1);
    rm.scale_down_after = Duration::from_secs(1);
    rm.idle_after = Duration::from_secs(2);
    settings.pipelines = vec![Pipeline {
        name: "rmtest".into(),
        stages: vec![Stage {
            name: "slow".into(),
            queue: cascade_core::QueueConfig::default(),
            handler: HandlerSpec {
                kind: HandlerKind::Builtin("sleep:200".into()),
                concurrency: 1,
                timeout: Duration::from_secs(10),
            },
            priority: 1,
            min_handlers: 0,
            max_handlers: 8,
            next: None,
        }],
    }];
    settings.validate().expect("valid test settings");
    settings
}

/// `cascade_stage_handlers{stage="rmtest.slow"}` from `/metrics`; `None` before it is set.
async fn handlers(http: &str) -> Option<u64> {
    let (status, text) = http_get(http, "/metrics", None)
        .await
        .expect("GET /metrics");
    assert_eq!(status, 200, "{text}");
    let prefix = format!("cascade_stage_handlers{{stage=\"{STAGE}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|n| n.parse().expect("a count"))
}

/// `(ready + leased, completed_total)` of the stage's queue.
async fn progress(client: &Client) -> (u64, u64) {
    let stats = client
        .admin()
        .queue_stats(api::QueueStatsRequest { name: STAGE.into() })
        .await
        .expect("queue stats")
        .into_inner();
    (stats.ready + stats.leased, stats.completed_total)
}

async fn enqueue(client: &Client, count: u64) {
    let mut ingest = client.ingest();
    for i in 0..count {
        ingest
            .enqueue(api::EnqueueRequest {
                pipeline: "rmtest".into(),
                payload: format!("event {i}").into_bytes().into(),
                ..api::EnqueueRequest::default()
            })
            .await
            .expect("enqueue");
    }
}

/// Polls `check` until it says yes; panics after [`DEADLINE`] with `what` and the last value.
async fn wait_until<T: std::fmt::Debug, F: Future<Output = T>>(
    what: &str,
    mut sample: impl FnMut() -> F,
    done: impl Fn(&T) -> bool,
) -> T {
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        let value = sample().await;
        if done(&value) {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "timed out: {what}; last {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_grows_the_stage_then_it_shrinks_to_zero_and_wakes_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (stop, shutdown) = shutdown_channel();
    let (ready, bound) = oneshot::channel::<Bound>();
    let server = tokio::spawn(run_with(settings(dir.path()), shutdown, move |bound| {
        let _ = ready.send(bound);
    }));
    let bound = tokio::time::timeout(DEADLINE, bound)
        .await
        .expect("standalone starts in time")
        .expect("standalone starts");
    let http = bound.http.to_string();
    let client = Client::connect(&format!("http://{}", bound.grpc))
        .await
        .expect("connect");
    // The stage worker runs with its configured handler before the first decision.
    wait_until(
        "the stage worker is managed",
        || handlers(&http),
        |n| *n == Some(1),
    )
    .await;

    enqueue(&client, BURST).await;
    let grown = wait_until("the handlers grow", || handlers(&http), |n| *n >= Some(3)).await;
    let (_, done) = wait_until(
        "the burst drains",
        || progress(&client),
        |&(open, done)| open == 0 && done >= BURST,
    )
    .await;
    assert_eq!(done, BURST);
    let (status, table) = http_get(&http, "/rm/explain", None)
        .await
        .expect("GET /rm/explain");
    assert_eq!(status, 200, "{table}");
    assert!(table.contains(STAGE) && table.contains("WHY"), "{table}");

    // Down to 1 after scale_down_after, to 0 (paused) after idle_after.
    wait_until("the handlers shrink", || handlers(&http), |n| *n <= Some(1)).await;
    wait_until(
        "the stage goes to zero",
        || handlers(&http),
        |n| *n == Some(0),
    )
    .await;
    let (_, table) = http_get(&http, "/rm/explain", None)
        .await
        .expect("GET /rm/explain");
    assert!(table.contains("idle since"), "{table}");

    enqueue(&client, 3).await;
    wait_until(
        "ready events wake the stage",
        || handlers(&http),
        |n| *n >= Some(1),
    )
    .await;
    wait_until(
        "the new events are worked off",
        || progress(&client),
        |&(open, done)| open == 0 && done >= BURST + 3,
    )
    .await;

    stop.trigger();
    let ended = tokio::time::timeout(DEADLINE, server)
        .await
        .expect("standalone stops in time")
        .expect("standalone does not panic");
    assert!(ended.is_ok(), "{ended:?}");
    assert!(grown >= Some(3));
}
