//! Concurrency: never more handlers at once than the limit, and the limit can be turned
//! up, down and to zero while the worker runs.

use std::sync::Arc;
use std::time::Duration;

use cascade_stage_worker::Registry;
use cascade_worker::{Worker, WorkerConfig};

use crate::harness::{
    Cascade, Gauge, RunningStage, queue_config, sleeping_handler, stage_config, wait_until,
};

#[tokio::test]
async fn no_more_handlers_run_at_once_than_the_stages_concurrency() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("busy", queue_config(Duration::from_secs(5)))
        .await;
    for n in 0..12 {
        cascade
            .enqueue("busy", format!("{n}").as_bytes(), &[])
            .await;
    }
    let gauge = Arc::new(Gauge::default());
    let mut registry = Registry::new();
    registry.register(
        "track",
        sleeping_handler(Arc::clone(&gauge), Duration::from_millis(250)),
    );
    let mut config = stage_config(&cascade, "busy", "builtin:track");
    config.concurrency = Some(3);
    let stage = RunningStage::start(config, &registry);

    cascade.wait_for_completed("busy", 12).await;
    assert_eq!(gauge.calls(), 12);
    assert_eq!(gauge.max(), 3);
    assert_eq!(stage.handle.stats().started, 12);
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}

/// A handler that does its work without ever waiting (here it blocks its thread, as long
/// synchronous work does) still runs up to the concurrency at once, on the runtime's threads,
/// not one call after the other on the worker's loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handlers_that_never_wait_still_run_side_by_side() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("cpu", queue_config(Duration::from_secs(30)))
        .await;
    for n in 0..16 {
        cascade.enqueue("cpu", format!("{n}").as_bytes(), &[]).await;
    }
    let gauge = Arc::new(Gauge::default());
    let counted = Arc::clone(&gauge);
    let handler = cascade_worker::handler_fn(move |_event, _attempt| {
        let gauge = Arc::clone(&counted);
        async move {
            gauge.enter();
            std::thread::sleep(Duration::from_millis(50));
            gauge.exit();
            Ok(cascade_worker::Outcome::Ack)
        }
    });
    let config = WorkerConfig::new("cpu")
        .expect("queue")
        .concurrency(3)
        .batch(16)
        .poll_wait(Duration::from_secs(1));
    let worker = Worker::new(&cascade.client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    cascade.wait_for_completed("cpu", 16).await;
    assert!(gauge.max() >= 2, "at most {} at once", gauge.max());
    assert!(gauge.max() <= 3, "{} at once", gauge.max());
    handle.shutdown();
    running.await.expect("join").expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn concurrency_turns_up_down_and_to_zero_at_run_time() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("knob", queue_config(Duration::from_secs(5)))
        .await;
    for n in 0..60 {
        cascade
            .enqueue("knob", format!("{n}").as_bytes(), &[])
            .await;
    }
    let gauge = Arc::new(Gauge::default());
    let config = WorkerConfig::new("knob")
        .expect("queue")
        .concurrency(1)
        .batch(8)
        .poll_wait(Duration::from_secs(1));
    let handler = sleeping_handler(Arc::clone(&gauge), Duration::from_millis(100));
    let worker = Worker::new(&cascade.client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    wait_until("3 calls", 10, || async { gauge.calls() >= 3 }).await;
    assert_eq!(gauge.max(), 1);

    handle.set_concurrency(4).expect("valid");
    wait_until("4 handlers at once", 10, || async { gauge.now() == 4 }).await;

    handle.set_concurrency(2).expect("valid");
    wait_until("at most 2 handlers", 10, || async { gauge.now() <= 2 }).await;
    gauge.reset_max();
    let calls = gauge.calls();
    wait_until("6 more calls", 10, || async { gauge.calls() >= calls + 6 }).await;
    assert!(
        gauge.max() <= 2,
        "{} at once after lowering to 2",
        gauge.max()
    );
    assert_eq!(
        handle.stats().released,
        0,
        "lowering lets running handlers finish"
    );

    handle.set_concurrency(0).expect("valid");
    wait_until("the worker pauses", 10, || async {
        gauge.now() == 0 && handle.stats().held == 0
    })
    .await;
    let paused_at = gauge.calls();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(gauge.calls(), paused_at, "no handler starts while paused");

    handle.set_concurrency(8).expect("valid");
    cascade.wait_for_completed("knob", 60).await;
    assert!(gauge.max() <= 8);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}
