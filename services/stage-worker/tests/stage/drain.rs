//! Shutdown drains: the worker stops taking, hands back the events it has not started,
//! lets the running handler finish, and returns; the binary does the same on SIGTERM and
//! exits 0.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use cascade_worker::{Worker, WorkerConfig};

use crate::harness::{Cascade, Gauge, queue_config, sleeping_handler, wait_until};

#[tokio::test]
async fn shutdown_releases_unstarted_events_and_finishes_the_running_one() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("drain", queue_config(Duration::from_secs(5)))
        .await;
    for n in 0..5 {
        cascade
            .enqueue("drain", format!("{n}").as_bytes(), &[])
            .await;
    }
    let gauge = Arc::new(Gauge::default());
    let config = WorkerConfig::new("drain")
        .expect("queue")
        .concurrency(1)
        .batch(10)
        .poll_wait(Duration::from_secs(1));
    let handler = sleeping_handler(Arc::clone(&gauge), Duration::from_millis(800));
    let worker = Worker::new(&cascade.client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    wait_until("one running, four waiting", 10, || async {
        gauge.now() == 1 && handle.stats().held == 5
    })
    .await;

    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("drained within 5s")
        .expect("worker task")
        .expect("a clean stop");
    assert_eq!(gauge.calls(), 1, "nothing started after the shutdown");
    let worker_stats = handle.stats();
    assert_eq!(worker_stats.released, 4);
    assert_eq!((worker_stats.running, worker_stats.held), (0, 0));
    let stats = cascade.stats("drain").await;
    assert_eq!(stats.completed_total, 1, "the running handler finished");
    assert_eq!((stats.ready, stats.leased), (4, 0), "the others are back");
    cascade.stop().await;
}

#[tokio::test]
async fn the_binary_drains_on_sigterm_and_exits_0() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("jobs", queue_config(Duration::from_secs(5)))
        .await;
    for n in 0..5 {
        cascade
            .enqueue("jobs", format!("{n}").as_bytes(), &[])
            .await;
    }
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cascade-stage-worker"))
        .args(["--gateway", &cascade.gateway(), "--queue", "jobs"])
        .args([
            "--handler",
            // Long enough that the SIGTERM below arrives while the first call runs.
            "builtin:sleep:3000",
            "--concurrency",
            "1",
            "--batch",
            "5",
        ])
        .args(["--http-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start cascade-stage-worker");
    wait_until("the binary holds all five", 15, || async {
        cascade.stats("jobs").await.leased == 5
    })
    .await;

    let pid = child.id().expect("a running child");
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits within 10s")
        .expect("wait for the child");
    assert!(status.success(), "exit status {status}");
    let stats = cascade.stats("jobs").await;
    assert_eq!(stats.completed_total, 1, "the running handler finished");
    assert_eq!((stats.ready, stats.leased), (4, 0), "the others are back");
    cascade.stop().await;
}
