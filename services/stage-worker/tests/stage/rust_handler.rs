//! In-process Rust handlers: through the SDK's `Worker` directly, and registered by name
//! in a stage worker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_client::{Client, ClientOptions};
use cascade_core::QueueConfig;
use cascade_security::token_sha256;
use cascade_stage_worker::Registry;
use cascade_worker::{
    Handler, Outcome, Worker, WorkerConfig, WorkerError, WorkerHandle, handler_fn,
};
use tokio::task::JoinHandle;

use crate::harness::{Auth, Cascade, RunningStage, stage_config, wait_until};

fn quick_retries() -> QueueConfig {
    QueueConfig {
        lease: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(100),
        backoff_max: Duration::from_millis(100),
        ..QueueConfig::default()
    }
}

/// An SDK worker of `queue` on `cascade` with 1 s long polls, running until shut down.
async fn sdk_worker<H: Handler>(
    cascade: &Cascade,
    queue: &str,
    handler: H,
) -> (WorkerHandle, JoinHandle<Result<(), WorkerError>>) {
    let config = WorkerConfig::new(queue)
        .expect("queue")
        .poll_wait(Duration::from_secs(1));
    let worker = Worker::connect(&cascade.gateway(), config, handler)
        .await
        .expect("connect");
    (worker.handle(), tokio::spawn(worker.run()))
}

#[tokio::test]
async fn an_sdk_handler_error_is_retried_then_its_advance_applied() {
    let cascade = Cascade::start().await;
    cascade.create_queue("resize", quick_retries()).await;
    cascade.create_queue("thumbnails", quick_retries()).await;
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&attempts);
    let handler = handler_fn(move |event, attempt| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().expect("attempts").push(attempt);
            if attempt == 1 {
                return Err("the image store is not up yet".into());
            }
            let mut resized = event.payload.to_vec();
            resized.extend_from_slice(b" (small)");
            Ok(Outcome::Advance {
                to: Some("thumbnails".into()),
                payload: Some(resized.into()),
                headers: Default::default(),
                delay: None,
            })
        }
    });
    let (handle, running) = sdk_worker(&cascade, "resize", handler).await;
    let id = cascade.enqueue("resize", b"cat.png", &[]).await;

    cascade.wait_for_completed("resize", 1).await;
    assert_eq!(*attempts.lock().expect("attempts"), vec![1, 2]);
    let moved = cascade.get("thumbnails", &id).await.expect("advanced");
    assert_eq!(moved.payload, &b"cat.png (small)"[..]);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}

/// A take that carries an outcome its caller may not apply (an advance into a queue it may not
/// produce to) is refused whole. The worker sends that outcome on its own (refused too, and
/// counted), takes again without it, and goes on with the next events instead of stopping.
#[tokio::test]
async fn a_take_refused_for_the_outcome_it_carries_does_not_stop_the_worker() {
    const ADMIN: &str = "admin-token-0c41";
    const RESIZER: &str = "resizer-token-9d27";
    let identity = |name: &str, token: &str, grants: &str| {
        let hash = token_sha256(token);
        format!(
            "[[identities]]\nname = \"{name}\"\ntoken_sha256 = \"{hash}\"\ngrants = [{grants}]\n"
        )
    };
    let identities = [
        identity(
            "ops",
            ADMIN,
            r#"{ role = "admin", queues = ["*"] }, { role = "producer", queues = ["*"] }"#,
        ),
        identity(
            "resizer",
            RESIZER,
            r#"{ role = "consumer", queues = ["resize"] }"#,
        ),
    ]
    .concat();
    let cascade = Cascade::start_with_auth(Auth {
        identities: &identities,
        token: ADMIN,
    })
    .await;
    cascade.create_queue("resize", quick_retries()).await;
    cascade.create_queue("archive", quick_retries()).await;
    let handler = handler_fn(|event, _attempt| async move {
        Ok(match &event.payload[..] {
            b"forbidden" => Outcome::Advance {
                to: Some("archive".into()),
                payload: None,
                headers: Default::default(),
                delay: None,
            },
            _ => Outcome::Ack,
        })
    });
    let options = ClientOptions {
        token: Some(RESIZER.to_owned()),
        ..ClientOptions::default()
    };
    let client = Client::connect_with(&cascade.gateway(), &options)
        .await
        .expect("connect");
    // One event at a time: the forbidden advance is known when the next take goes out.
    let config = WorkerConfig::new("resize")
        .expect("queue")
        .batch(1)
        .concurrency(1)
        .poll_wait(Duration::from_secs(1));
    let worker = Worker::new(&client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    cascade.enqueue("resize", b"forbidden", &[]).await;
    wait_until("the take carrying the advance refused", 30, || {
        let stats = handle.stats();
        async move { stats.take_failures >= 1 && stats.complete_failures >= 1 }
    })
    .await;
    cascade.enqueue("resize", b"fine", &[]).await;
    // The forbidden one stays leased (and comes back when its lease ends): only the next
    // event is completed, and the worker learns so with its next take's answer.
    wait_until("the next event completed", 30, || async {
        cascade.stats("resize").await.completed_total == 1 && handle.stats().completed == 1
    })
    .await;
    assert!(!running.is_finished(), "the worker stopped");
    assert_eq!(cascade.stats("archive").await.ready, 0, "nothing advanced");
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn a_registered_handler_runs_by_name_and_advance_on_a_plain_queue_is_an_ack() {
    let cascade = Cascade::start().await;
    cascade.create_queue("emails", quick_retries()).await;
    let sent = Arc::new(Mutex::new(Vec::new()));
    let outbox = Arc::clone(&sent);
    let mut registry = Registry::new();
    registry.register(
        "send-email",
        handler_fn(move |event, _attempt| {
            let outbox = Arc::clone(&outbox);
            async move {
                outbox.lock().expect("outbox").push(event.payload.clone());
                Ok(Outcome::Advance {
                    to: None,
                    payload: None,
                    headers: Default::default(),
                    delay: None,
                })
            }
        }),
    );
    let stage = RunningStage::start(
        stage_config(&cascade, "emails", "builtin:send-email"),
        &registry,
    );
    let id = cascade.enqueue("emails", b"hello", &[]).await;

    cascade.wait_for_completed("emails", 1).await;
    assert_eq!(*sent.lock().expect("outbox"), vec![b"hello".to_vec()]);
    let gone = cascade.get("emails", &id).await.expect_err("acked");
    assert_eq!(gone.code(), tonic::Code::NotFound);
    stage.stop().await.expect("a clean stop");
    cascade.stop().await;
}

#[tokio::test]
async fn a_handler_that_panics_is_retried_and_the_worker_goes_on() {
    let cascade = Cascade::start().await;
    cascade.create_queue("fragile", quick_retries()).await;
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&attempts);
    // The SDK polls a handler once on its loop and gives it a task only if it waits: the
    // first attempt panics in that first poll, the second after waiting, in its task.
    let handler = handler_fn(move |_event, attempt| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().expect("attempts").push(attempt);
            match attempt {
                1 => panic!("fails before it waits"),
                2 => {
                    tokio::task::yield_now().await;
                    panic!("fails after it waited")
                }
                _ => Ok(Outcome::Ack),
            }
        }
    });
    let (handle, running) = sdk_worker(&cascade, "fragile", handler).await;
    cascade.enqueue("fragile", b"x", &[]).await;

    cascade.wait_for_completed("fragile", 1).await;
    assert_eq!(*attempts.lock().expect("attempts"), vec![1, 2, 3]);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}

/// A stage worker whose takes the gateway refuses for good (here: its queue does not
/// exist) stops with the error, admin port and all, so that its process exits and is seen
/// to: it does not stay up answering its probes while it does nothing.
#[tokio::test]
async fn a_stage_worker_refused_for_good_stops_with_its_admin_port() {
    let cascade = Cascade::start().await;
    let config = cascade_stage_worker::StageWorkerConfig {
        http_addr: Some("127.0.0.1:0".into()),
        ..stage_config(&cascade, "no-such-queue", "builtin:noop")
    };
    let stage = RunningStage::start(config, &Registry::new());
    let err = stage
        .stops_by_itself()
        .await
        .expect_err("stopped with the gateway's refusal");
    assert!(err.to_string().contains("no-such-queue"), "{err}");
    cascade.stop().await;
}

/// A handler's error becomes the retry's reason, cut to the 4 KiB the gateway takes: a long
/// one (a stack trace) still retries with the queue's backoff and is recorded as the
/// event's last failure, where the gateway refused it and the event waited out its lease.
#[tokio::test]
async fn a_handler_error_longer_than_a_reason_may_be_still_retries_and_is_recorded() {
    let cascade = Cascade::start().await;
    cascade.create_queue("resize", quick_retries()).await;
    let trace = format!("the image store failed: {}", "at frame\n".repeat(700));
    let last_failures = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&last_failures);
    let error = trace.clone();
    let handler = handler_fn(move |event: cascade_worker::Event, attempt| {
        let (seen, error) = (Arc::clone(&seen), error.clone());
        async move {
            if attempt == 1 {
                return Err(error.into());
            }
            let last = event.headers.get("cascade-last-failure").cloned();
            seen.lock().expect("last failures").push(last);
            Ok(Outcome::Ack)
        }
    });
    let (handle, running) = sdk_worker(&cascade, "resize", handler).await;
    cascade.enqueue("resize", b"cat.png", &[]).await;

    cascade.wait_for_completed("resize", 1).await;
    let last = last_failures.lock().expect("last failures").clone();
    let [Some(last)] = last.as_slice() else {
        panic!("the second attempt saw no last failure: {last:?}");
    };
    assert!(trace.starts_with(last.as_str()), "{last}");
    assert_eq!(handle.stats().complete_failures, 0);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    cascade.stop().await;
}

/// A handler's advance the gateway refuses for what it is (to no stage of the pipeline and
/// no queue) is retried instead, with the refusal as its reason: the event comes back after
/// the queue's backoff and, its attempts used up, is dead-lettered saying why, not for leases
/// that ran out.
#[tokio::test]
async fn an_advance_refused_for_what_it_is_is_retried_then_dead_lettered_saying_why() {
    let cascade = Cascade::start().await;
    let config = QueueConfig {
        lease: Duration::from_secs(60),
        max_attempts: 2,
        ..quick_retries()
    };
    cascade
        .apply_pipeline(
            "route",
            &[("first", Some(config.clone())), ("second", Some(config))],
        )
        .await;
    let handler = handler_fn(|_event, _attempt| async move {
        Ok(Outcome::Advance {
            to: Some("nowhere".into()),
            payload: None,
            headers: Default::default(),
            delay: None,
        })
    });
    let (handle, running) = sdk_worker(&cascade, "route.first", handler).await;
    cascade.enqueue("route.first", b"lost?", &[]).await;

    wait_until("dead-lettered", 30, || async {
        !cascade.dead_letters("route.first.dlq").await.is_empty()
    })
    .await;
    let dead = cascade.dead_letters("route.first.dlq").await.remove(0);
    let reason = &dead.headers[cascade_core::event::DEAD_LETTER_REASON];
    assert!(
        reason.contains("the gateway refused the handler's advance")
            && reason.contains("must name a stage of pipeline 'route'"),
        "{reason}"
    );
    assert_eq!(handle.stats().started, 2, "once per attempt");
    handle.shutdown();
    running.await.expect("join").expect("a clean stop");
    cascade.stop().await;
}
