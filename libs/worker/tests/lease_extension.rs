//! A running handler's lease stays extended when one extension fails in a way no answer
//! says: its task panicked. That can happen where the gateway's own code runs in the
//! worker's process (`cascade standalone` calls its `Worker` service directly), so the test
//! runs the worker against an in-process stand-in of that service, on paused time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use cascade_proto::v1::worker_server::Worker as WorkerService;
use cascade_proto::v1::{
    self, CompleteRequest, CompleteResponse, Completion, CompletionResult, ExtendLeaseRequest,
    ExtendLeaseResponse, TakeRequest, TakeResponse,
};
use cascade_worker::{Client, Event, HandlerError, Outcome, Worker, WorkerConfig, handler_fn};
use tokio::sync::{Notify, watch};
use tonic::{Request, Response, Status};

mod common;
use common::leased;

const LEASE: Duration = Duration::from_secs(4);

/// Hands out one event to the first take, panics on the first extension and extends every
/// later one, and records the completions it gets.
struct StandIn {
    handed_out: Mutex<bool>,
    extensions: AtomicU32,
    extended: Notify,
    completed: Mutex<Vec<Completion>>,
    done: watch::Sender<bool>,
}

#[tonic::async_trait]
impl WorkerService for StandIn {
    async fn take(&self, request: Request<TakeRequest>) -> Result<Response<TakeResponse>, Status> {
        let request = request.into_inner();
        let completions = request
            .completions
            .iter()
            .map(|_| CompletionResult::default())
            .collect();
        self.completed
            .lock()
            .expect("lock")
            .extend(request.completions);
        let first = !std::mem::replace(&mut *self.handed_out.lock().expect("lock"), true);
        if !first {
            // A long poll that finds nothing, until the test is over.
            let _ = self.done.subscribe().wait_for(|done| *done).await;
        }
        let events = first.then(|| leased("long")).into_iter().collect();
        Ok(Response::new(TakeResponse {
            events,
            completions,
        }))
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        let completions = request.into_inner().completions;
        let results = completions
            .iter()
            .map(|_| CompletionResult::default())
            .collect();
        self.completed.lock().expect("lock").extend(completions);
        Ok(Response::new(CompleteResponse { results }))
    }

    async fn extend_lease(
        &self,
        _: Request<ExtendLeaseRequest>,
    ) -> Result<Response<ExtendLeaseResponse>, Status> {
        let before = self.extensions.fetch_add(1, Ordering::SeqCst);
        self.extended.notify_waiters();
        assert_ne!(before, 0, "the first extension fails without an answer");
        let expires = SystemTime::now() + Duration::from_secs(60);
        Ok(Response::new(ExtendLeaseResponse {
            lease_expires_at: Some(expires.into()),
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_is_still_extended_after_an_extension_task_panicked() {
    let stand_in = Arc::new(StandIn {
        handed_out: Mutex::new(false),
        extensions: AtomicU32::new(0),
        extended: Notify::new(),
        completed: Mutex::new(Vec::new()),
        done: watch::Sender::new(false),
    });
    // Never dialled: every call the worker makes goes to the stand-in itself.
    let unused = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
    let client = Client::in_process(unused, Arc::clone(&stand_in) as Arc<dyn WorkerService>);
    let config = WorkerConfig::new("jobs")
        .expect("queue")
        .lease(LEASE)
        .poll_wait(Duration::from_secs(1))
        .drain_grace(Duration::from_secs(1));
    // The handler runs until its lease has been extended twice: once the panic, once after.
    let watched = Arc::clone(&stand_in);
    let handler = handler_fn(move |_: Event, _| {
        let stand_in = Arc::clone(&watched);
        async move {
            loop {
                let extended = stand_in.extended.notified();
                if stand_in.extensions.load(Ordering::SeqCst) >= 2 {
                    return Ok::<_, HandlerError>(Outcome::Ack);
                }
                extended.await;
            }
        }
    });
    let worker = Worker::new(&client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    // Paused time runs on whenever everything waits: ten leases' worth is plenty, and a
    // lease left unextended after the panic ends the wait long before it.
    let acked = async {
        while stand_in.completed.lock().expect("lock").is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(LEASE * 10, acked)
        .await
        .expect("the handler's event is acked");
    stand_in.done.send_replace(true);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");

    let completed = stand_in.completed.lock().expect("lock").clone();
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert!(
        matches!(completed[0].outcome, Some(v1::completion::Outcome::Ack(_))),
        "{completed:?}"
    );
    let stats = handle.stats();
    assert_eq!((stats.completed, stats.leases_lost), (1, 0));
}
