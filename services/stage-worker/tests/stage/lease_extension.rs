//! A handler slower than its lease keeps the event: the worker extends the lease while the
//! handler runs, so the event is not delivered again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_worker::{Outcome, Worker, WorkerConfig, handler_fn};

use crate::harness::{Cascade, queue_config, wait_until};

#[tokio::test]
async fn a_handler_slower_than_its_lease_keeps_its_event() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("slow", queue_config(Duration::from_secs(2)))
        .await;
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&attempts);
    let handler = handler_fn(move |_event, attempt| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().expect("attempts").push(attempt);
            tokio::time::sleep(Duration::from_millis(5000)).await;
            Ok(Outcome::Ack)
        }
    });
    // Two slots: had the lease expired, the event would come back to this same worker.
    let config = WorkerConfig::new("slow")
        .expect("queue")
        .concurrency(2)
        .poll_wait(Duration::from_secs(1));
    let worker = Worker::new(&cascade.client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let id = cascade.enqueue("slow", b"x", &[]).await;

    wait_until("the handler starts", 10, || async {
        !attempts.lock().expect("attempts").is_empty()
    })
    .await;
    // Past the first lease's end: held only because it was extended.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let held = cascade.get("slow", &id).await.expect("still there");
    assert_eq!(held.state(), cascade_proto::v1::EventState::Leased);
    assert_eq!(held.attempts, 1);

    cascade.wait_for_completed("slow", 1).await;
    assert_eq!(
        *attempts.lock().expect("attempts"),
        vec![1],
        "exactly one call"
    );
    let stats = cascade.stats("slow").await;
    assert_eq!(stats.expired_leases_total, 0);
    assert_eq!(stats.completed_total, 1);
    assert!(handle.stats().extended >= 3, "{:?}", handle.stats());
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}

/// A long poll may wait longer than a lease before an event comes: the lease is counted from
/// when the event arrives, not from when the take was sent.
#[tokio::test]
async fn an_event_that_comes_late_in_a_long_poll_is_run_and_kept() {
    let cascade = Cascade::start().await;
    cascade
        .create_queue("late", queue_config(Duration::from_secs(2)))
        .await;
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&attempts);
    let handler = handler_fn(move |_event, attempt| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().expect("attempts").push(attempt);
            tokio::time::sleep(Duration::from_millis(3000)).await;
            Ok(Outcome::Ack)
        }
    });
    let config = WorkerConfig::new("late")
        .expect("queue")
        .concurrency(2)
        .poll_wait(Duration::from_secs(6));
    let worker = Worker::new(&cascade.client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    // The worker's take is waiting by now; the event comes after more than a lease.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    cascade.enqueue("late", b"x", &[]).await;

    cascade.wait_for_completed("late", 1).await;
    assert_eq!(
        *attempts.lock().expect("attempts"),
        vec![1],
        "exactly one call"
    );
    assert_eq!(cascade.stats("late").await.expired_leases_total, 0);
    assert_eq!(handle.stats().leases_lost, 0);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}
