//! A zombie worker: a stage worker stopped (SIGSTOP) while its handler holds an event, past
//! the event's lease. Another worker gets the event when the lease ends and moves it on;
//! when the first one is continued and its handler answers, its late completion is refused
//! (the lease is not current), or, if its lease extension comes first and finds the lease
//! gone, it drops the outcome; either way the next stage holds the event exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::routing::post;
use cascade_client::api;
use cascade_e2e::scenarios::{
    ack, complete, config, enqueue, id, payload, seconds, stats, take, take_n,
};
use cascade_e2e::{Cluster, Mode, StageWorkerSpec};
use tokio::sync::Notify;

use crate::signal;

const PIPELINE: &str = "zombie";
const WITHIN: Duration = Duration::from_secs(30);

/// An HTTP handler that holds its first call until told to answer, and answers the others
/// at once; every answer is 200 (advance).
struct Gate {
    calls: AtomicU32,
    first_call: Notify,
    answer_first: Notify,
}

async fn serve_gate(gate: Arc<Gate>) -> String {
    let app = axum::Router::new().route(
        "/work",
        post(move || {
            let gate = Arc::clone(&gate);
            async move {
                if gate.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    gate.first_call.notify_one();
                    gate.answer_first.notified().await;
                }
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind port 0");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve the gate") });
    format!("http://{addr}/work")
}

fn stage(name: &str, kind: api::handler_spec::Kind, lease_s: f64) -> api::Stage {
    api::Stage {
        name: name.into(),
        queue: Some(config(lease_s, 5)),
        handler: Some(api::HandlerSpec {
            kind: Some(kind),
            concurrency: 1,
            timeout: Some(seconds(60.0)),
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_workers_late_outcome_changes_nothing_and_the_event_moves_once() {
    let env = [("CASCADE__STANDALONE__STAGE_WORKERS", "false")];
    let mut cluster =
        tokio::task::spawn_blocking(move || Cluster::start_with(Mode::Standalone, None, &env))
            .await
            .expect("start");
    let c = cluster.client().await;
    let gate = Arc::new(Gate {
        calls: AtomicU32::new(0),
        first_call: Notify::new(),
        answer_first: Notify::new(),
    });
    let url = serve_gate(Arc::clone(&gate)).await;
    c.admin()
        .apply_pipeline(api::Pipeline {
            name: PIPELINE.into(),
            stages: vec![
                stage(
                    "work",
                    api::handler_spec::Kind::Http(api::HttpHandler { url: url.clone() }),
                    1.0,
                ),
                // No worker serves it: the test takes what arrives.
                stage(
                    "done",
                    api::handler_spec::Kind::Builtin("noop".into()),
                    30.0,
                ),
            ],
        })
        .await
        .expect("apply");
    let spec = StageWorkerSpec {
        pipeline: PIPELINE.into(),
        stage: "work".into(),
        last_stage: false,
        handler: url,
        concurrency: 1,
        batch: 1,
    };
    let zombie = tokio::task::block_in_place(|| cluster.start_stage_worker(&spec));
    let sent = enqueue(
        &c,
        api::EnqueueRequest {
            pipeline: PIPELINE.into(),
            payload: b"once".to_vec().into(),
            ..Default::default()
        },
    )
    .await;

    // The zombie's handler holds the event: stop the zombie, past the 1 s lease.
    tokio::time::timeout(WITHIN, gate.first_call.notified())
        .await
        .expect("the first worker called its handler");
    signal(cluster.stage_worker_pid(zombie), "STOP");
    tokio::task::block_in_place(|| cluster.start_stage_worker(&spec));
    let moved = take_n(&c, "zombie.done", 1, WITHIN).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(
        (id(&moved[0]), payload(&moved[0])),
        (sent.id.clone(), "once".to_owned())
    );

    // Continued, the zombie has its handler's answer and its overdue lease extension at
    // once, in either order: it completes too late and is refused, or its extension finds
    // the lease gone first (and the outcome is dropped).
    gate.answer_first.notify_one();
    signal(cluster.stage_worker_pid(zombie), "CONT");
    let deadline = Instant::now() + WITHIN;
    let told =
        |log: &str| log.contains("worker.complete.refused") || log.contains("worker.lease.lost");
    while !told(&cluster.stage_worker_log(zombie)) {
        assert!(
            Instant::now() < deadline,
            "the zombie was not told its lease is gone:\n{}",
            cluster.stage_worker_log(zombie)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = cluster.stage_worker_log(zombie);
    assert!(
        log.contains("is not current"),
        "refused as a stale lease:\n{log}"
    );
    // Written to a file: no colour codes, and every line of the worker names its queue.
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file:\n{log}"
    );
    let worker_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cascade_worker"))
        .collect();
    assert!(worker_lines.len() >= 2, "the worker's own lines:\n{log}");
    for line in worker_lines {
        assert!(
            line.contains("queue=zombie.work"),
            "a line without its queue: {line}"
        );
    }
    assert!(
        take(&c, "zombie.done", 10, 1.0).await.is_empty(),
        "moved twice"
    );
    let result = complete(&c, &moved[0], ack()).await;
    assert_eq!(result.code, 0, "{}", result.message);
    let work = stats(&c, "zombie.work").await;
    assert_eq!(
        (work.ready, work.delayed, work.leased),
        (0, 0, 0),
        "{work:?}"
    );
    assert_eq!(
        gate.calls.load(Ordering::SeqCst),
        2,
        "the handler ran once per lease"
    );
    cluster.stop();
}
