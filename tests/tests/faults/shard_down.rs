//! One dispatcher shard down in the distributed mode: the other shard's queues keep
//! serving, requests for the down shard's queues get UNAVAILABLE naming the shard (and that
//! a retry is safe; `cascade enqueue --lines` stops at once), and once it is back its events
//! are all there. A take whose client gives
//! up while the gateway waits for a shard that hangs gives its events back. Hand-offs waiting
//! for a shard that hangs hold up none of their sender's other hand-offs. A worker's
//! completion sent while its shard restarts lands once the shard is back.

use std::time::{Duration, Instant};

use cascade_client::Client;
use cascade_core::{QueueName, shard_of};
use cascade_e2e::cluster::SHARDS;
use cascade_e2e::scenarios::{
    ack, complete, config, create, enqueue, id, item, names_on_two_shards, noop_pipeline, payload,
    seconds, stats, take_n,
};
use cascade_e2e::{Cluster, Mode};
use tonic::Code;

const WITHIN: Duration = Duration::from_secs(30);

/// The first answer to an enqueue into `queue` that is not OK.
async fn refusal(c: &Client, queue: &str) -> tonic::Status {
    let deadline = Instant::now() + WITHIN;
    loop {
        match c.ingest().enqueue(item(queue, "while down")).await {
            Err(status) => return status,
            // The shard's process may not have been seen gone yet.
            Ok(_) => assert!(Instant::now() < deadline, "{queue} kept accepting"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_shards_serve_and_the_down_one_is_named() {
    let mut cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Distributed))
        .await
        .expect("start");
    let c = cluster.client().await;
    let (up, down) = names_on_two_shards("shard-down");
    let down_shard = shard_of(&QueueName::parse(&down).expect("name"), SHARDS);
    for queue in [&up, &down] {
        create(&c, queue, config(30.0, 5)).await;
        enqueue(&c, item(queue, "before")).await;
    }
    tokio::task::block_in_place(|| cluster.kill_dispatcher(down_shard));

    let status = refusal(&c, &down).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .starts_with(&format!("shard {down_shard}: ")),
        "{}",
        status.message()
    );
    assert!(
        status.message().contains("safe to retry"),
        "{}",
        status.message()
    );
    // `cascade enqueue --lines` into the down shard's queue: the first batch, of which no
    // line reached the shard, ends the command with one error for every line.
    let lines = "x\n".repeat(1200);
    let args = ["enqueue", down.as_str(), "--lines"];
    let out = tokio::task::block_in_place(|| cascade_e2e::cli::run(&cluster, &args, Some(&lines)));
    assert!(out.stdout.contains("enqueued 0 events"), "{}", out.stdout);
    let error = cascade_e2e::cli::failed(out, &args, 1);
    assert!(
        error.contains(&format!("cannot enqueue lines 1 to 1200 of 1200 to {down}")),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "one error: {error}");

    // The other shard serves enqueues, takes and acks throughout.
    enqueue(&c, item(&up, "during")).await;
    let taken = take_n(&c, &up, 2, WITHIN).await;
    assert_eq!(taken.len(), 2);
    for event in &taken {
        assert_eq!(complete(&c, event, ack()).await.code, 0);
    }

    tokio::task::block_in_place(|| cluster.restart_dispatcher(down_shard));
    let c = cluster.client().await;
    let back = take_n(&c, &down, 1, WITHIN).await;
    assert_eq!(back.len(), 1, "the event acknowledged before the crash");
    assert_eq!(payload(&back[0]), "before");
    cluster.stop();
}

/// A distributed cluster whose gateway waits 60 s for a shard's answer: longer than any
/// wait below, so that a shard stopped with SIGSTOP hangs every request it gets.
async fn start_with_patient_bus() -> Cluster {
    tokio::task::spawn_blocking(|| {
        Cluster::start_with(
            Mode::Distributed,
            None,
            &[("CASCADE__BUS__REQUEST_TIMEOUT", "60s")],
        )
    })
    .await
    .expect("start")
}

/// A take whose carried ack goes to another shard, one that hangs (stopped with SIGSTOP):
/// the take's own events are leased at once, then the gateway waits for the other shard,
/// and the client gives up meanwhile. Its events go back to their queue at once, not when
/// their ten-minute lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_given_up_while_its_completions_wait_gives_its_events_back() {
    let cluster = start_with_patient_bus().await;
    let c = cluster.client().await;
    let (here, there) = names_on_two_shards("given-up");
    for queue in [&here, &there] {
        create(&c, queue, config(600.0, 5)).await;
    }
    for n in 0..3 {
        enqueue(&c, item(&here, &n.to_string())).await;
    }
    enqueue(&c, item(&there, "to ack")).await;
    let to_ack = take_n(&c, &there, 1, WITHIN).await.remove(0);
    let event = to_ack.event.as_ref().expect("an event");
    let ack_there = cascade_client::api::Completion {
        queue: there.clone(),
        id: event.id.clone(),
        lease_token: to_ack.lease_token.clone(),
        outcome: Some(ack()),
    };
    let there_shard = shard_of(&QueueName::parse(&there).expect("name"), SHARDS);
    let pid = cluster.dispatcher_pid(there_shard);
    crate::signal(pid, "STOP");

    let mut worker = c.worker();
    let take = worker.take(cascade_client::api::TakeRequest {
        queue: here.clone(),
        max_events: 3,
        completions: vec![ack_there],
        ..Default::default()
    });
    // Dropped unanswered: its stream is reset, as a client's deadline does.
    let given_up = tokio::time::timeout(Duration::from_secs(2), take).await;
    assert!(
        given_up.is_err(),
        "answered while the other shard hangs: {given_up:?}"
    );
    let deadline = Instant::now() + WITHIN;
    loop {
        let now = stats(&c, &here).await;
        if (now.ready, now.leased) == (3, 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not given back within {WITHIN:?}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    crate::signal(pid, "CONT");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// With shard 0 hanging (stopped with SIGSTOP), enqueues by pipeline name into a stage on
/// another shard: once the gateway's copy of the pipelines is stale, one of them refreshes
/// it, asking shard 0 first and waiting out the bus's timeout, while the others go on with
/// the stale copy instead of waiting behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_first_shard_holds_up_one_pipeline_lookup_not_every_one() {
    use cascade_client::api;

    let cluster = start_with_patient_bus().await;
    let c = cluster.client().await;
    let pipeline = (0..100)
        .map(|i| format!("hang-{i}"))
        .find(|p| {
            let stage = QueueName::parse(&format!("{p}.first")).expect("name");
            shard_of(&stage, SHARDS) != 0
        })
        .expect("a pipeline whose stage is not on shard 0");
    c.admin()
        .apply_pipeline(noop_pipeline(&pipeline, "first"))
        .await
        .expect("apply");
    let by_pipeline = |payload: &str| api::EnqueueRequest {
        pipeline: pipeline.clone(),
        payload: payload.as_bytes().to_vec().into(),
        ..Default::default()
    };
    enqueue(&c, by_pipeline("the copy is made")).await;
    let pid = cluster.dispatcher_pid(0);
    crate::signal(pid, "STOP");
    // Long enough for the copy to go stale (its lifetime is 1 s); longer changes nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let mut enqueues = tokio::task::JoinSet::new();
    for n in 0..3 {
        let (mut ingest, request) = (c.ingest(), by_pipeline(&n.to_string()));
        enqueues.spawn(async move { ingest.enqueue(request).await });
    }
    // The refresh waits 60 s for shard 0: two of the three are answered well before.
    for _ in 0..2 {
        let answered = tokio::time::timeout(WITHIN, enqueues.join_next()).await;
        let answer = answered
            .expect("answered while another refreshes")
            .expect("an enqueue")
            .expect("its task");
        answer.expect("enqueued by pipeline");
    }
    crate::signal(pid, "CONT");
    enqueues.abort_all();
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// With the shard that owns `down` hanging (stopped with SIGSTOP), advances into `down` wait
/// in the other shard's outbox, more of them than its pump reads at once (batches of 4
/// here). A delayed event enqueued after them on the sending shard still becomes ready,
/// its schedule read past them; once the shard runs again every advance arrives, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advances_to_a_hanging_shard_hold_up_no_other_hand_off() {
    const ADVANCES: usize = 40;
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::start_with(
            Mode::Distributed,
            None,
            &[("CASCADE__DISPATCHER__OUTBOX_BATCH", "4")],
        )
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    let (up, down) = names_on_two_shards("backlog");
    for queue in [&up, &down] {
        create(&c, queue, config(600.0, 5)).await;
    }
    for n in 0..ADVANCES {
        enqueue(&c, item(&up, &n.to_string())).await;
    }
    let taken = take_n(&c, &up, ADVANCES, WITHIN).await;
    assert_eq!(taken.len(), ADVANCES);
    let down_shard = shard_of(&QueueName::parse(&down).expect("name"), SHARDS);
    let pid = cluster.dispatcher_pid(down_shard);
    crate::signal(pid, "STOP");

    for event in &taken {
        let advance =
            cascade_client::api::completion::Outcome::Advance(cascade_client::api::Advance {
                to: down.clone(),
                ..Default::default()
            });
        assert_eq!(complete(&c, event, advance).await.code, 0);
    }
    let mut delayed = item(&up, "delayed");
    delayed.when = Some(cascade_client::api::enqueue_request::When::Delay(seconds(
        0.2,
    )));
    enqueue(&c, delayed).await;
    let activated = take_n(&c, &up, 1, WITHIN).await;
    assert_eq!(
        activated.len(),
        1,
        "the delayed event waited behind the advances"
    );
    assert_eq!(payload(&activated[0]), "delayed");

    crate::signal(pid, "CONT");
    let arrived = take_n(&c, &down, ADVANCES, WITHIN).await;
    let mut got: Vec<String> = arrived.iter().map(id).collect();
    let mut sent: Vec<String> = taken.iter().map(id).collect();
    got.sort();
    sent.sort();
    assert_eq!(got, sent, "every advance once");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// Waits until `done` holds, for at most `WITHIN`; `what` names it in the failure.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A worker's handler finishes while the shard of its event is down (killed): the gateway
/// answers the ack UNAVAILABLE, and the worker sends it again until the shard is back, within
/// the ten-minute lease. The event is acked once, not delivered again when its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_sent_while_its_shard_restarts_lands_once_it_is_back() {
    use std::sync::Arc;

    use cascade_worker::{Outcome, Worker, WorkerConfig, handler_fn};

    let mut cluster = tokio::task::spawn_blocking(|| {
        Cluster::start_with(Mode::Distributed, None, &crate::SHORT_REQUEST_TIMEOUT)
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    let queue = "restarting";
    let shard = shard_of(&QueueName::parse(queue).expect("name"), SHARDS);
    create(&c, queue, config(600.0, 5)).await;
    enqueue(&c, item(queue, "once")).await;

    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let finish = Arc::new(tokio::sync::Notify::new());
    let go_on = Arc::clone(&finish);
    let handler = handler_fn(move |_event, _attempt| {
        let (started_tx, go_on) = (started_tx.clone(), Arc::clone(&go_on));
        async move {
            let _ = started_tx.send(());
            go_on.notified().await;
            Ok(Outcome::Ack)
        }
    });
    let config = WorkerConfig::new(queue)
        .expect("config")
        .batch(1)
        .poll_wait(Duration::from_secs(1));
    let worker = Worker::new(&c, config, handler).expect("worker");
    let handle = worker.handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
    }));
    started.recv().await.expect("the handler started");

    tokio::task::block_in_place(|| cluster.kill_dispatcher(shard));
    finish.notify_one();
    wait_for("the ack tried again", || {
        handle.stats().complete_retries >= 1
    })
    .await;
    tokio::task::block_in_place(|| cluster.restart_dispatcher(shard));
    wait_for("the ack applied", || handle.stats().completed == 1).await;

    let now = stats(&c, queue).await;
    assert_eq!((now.ready, now.leased, now.delayed), (0, 0, 0), "{now:?}");
    let _ = stop.send(());
    running
        .await
        .expect("join")
        .expect("the worker stops cleanly");
    let counted = handle.stats();
    assert_eq!(
        (
            counted.started,
            counted.completed,
            counted.complete_failures
        ),
        (1, 1, 0),
        "{counted:?}"
    );
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
