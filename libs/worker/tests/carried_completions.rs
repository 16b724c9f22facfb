//! What a take carried when its answer does not say what became of it. A worker's take
//! carries the outcomes of its last events; the gateway answers one result per outcome.
//! Two answers give no results, and then the worker must send the outcomes on their own, by
//! `Complete`, once: a gateway from before takes carried completions ignores the field and
//! answers none, and a take the worker gives up at the end of its drain is never answered.
//!
//! And what the worker sends again when the gateway refuses a request whole for the
//! advances in it that go outside the worker's grants, listing them: the others, once.
//!
//! The real gateway does none of the first two on demand, and the order in which the worker
//! sends its outcomes depends on timing, so these tests run the worker against a stand-in of
//! the gateway's `Worker` service on loopback. It hands out the events it was given to the
//! first take, records every completion a take carries or `Complete` sends, and answers a
//! take that carries any as the test asks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_proto::v1::completion::Outcome as ProtoOutcome;
use cascade_proto::v1::worker_server::{Worker as WorkerService, WorkerServer};
use cascade_proto::v1::{
    CompleteRequest, CompleteResponse, Completion, CompletionResult, ExtendLeaseRequest,
    ExtendLeaseResponse, LeasedEvent, TakeRequest, TakeResponse,
};
use cascade_worker::{Client, Event, HandlerError, Outcome, Worker, WorkerConfig, handler_fn};
use tokio::sync::{Notify, watch};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

mod common;
use common::leased;

/// How the stand-in answers a take that carries completions.
#[derive(Clone, Copy)]
enum Carrying {
    /// At once, with no events and no results, as a gateway that ignores the field does.
    AnsweredWithoutResults,
    /// Never: the take waits until the worker gives it up.
    NeverAnswered,
    /// As the gateway does, for a `Complete` too: refused whole when an advance goes to
    /// `FORBIDDEN`, listing every such advance, and otherwise applied, each with its result.
    AsTheGateway,
}

/// The queue the worker may not produce to.
const FORBIDDEN: &str = "payments";

struct StandIn {
    carrying: Carrying,
    /// What the next take hands out.
    to_hand_out: Mutex<Vec<LeasedEvent>>,
    /// Completions carried by takes, and sent by `Complete`, in the order they came.
    carried: Mutex<Vec<Completion>>,
    completed: Mutex<Vec<Completion>>,
    /// `AsTheGateway`: the completions of each request refused whole, and those applied.
    refused: Mutex<Vec<Vec<Completion>>>,
    applied: Mutex<Vec<Completion>>,
    changed: Notify,
    /// Set when the test is done: a take that found nothing waits for it, as a long poll
    /// waits for an event, so the worker does not take again and again meanwhile.
    done: watch::Sender<bool>,
}

impl StandIn {
    fn new(carrying: Carrying, events: &[&str]) -> Arc<StandIn> {
        let to_hand_out = events.iter().map(|id| leased(id)).collect();
        Arc::new(StandIn {
            carrying,
            to_hand_out: Mutex::new(to_hand_out),
            carried: Mutex::new(Vec::new()),
            completed: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
            applied: Mutex::new(Vec::new()),
            changed: Notify::new(),
            done: watch::Sender::new(false),
        })
    }

    fn carried(&self) -> Vec<Completion> {
        self.carried.lock().expect("lock").clone()
    }

    fn completed(&self) -> Vec<Completion> {
        self.completed.lock().expect("lock").clone()
    }

    fn refused(&self) -> Vec<Vec<Completion>> {
        self.refused.lock().expect("lock").clone()
    }

    fn applied(&self) -> Vec<Completion> {
        self.applied.lock().expect("lock").clone()
    }

    /// `AsTheGateway`'s answer to `completions`: their results, or the whole request refused.
    fn apply(&self, completions: Vec<Completion>) -> Result<Vec<CompletionResult>, Status> {
        let forbidden: Vec<usize> = (0..completions.len())
            .filter(|&i| advances_to(&completions[i]) == Some(FORBIDDEN))
            .collect();
        if let Some(&first) = forbidden.first() {
            self.refused.lock().expect("lock").push(completions);
            let mut status = Status::permission_denied(format!(
                "completions[{first}].advance.to: may not produce to queue '{FORBIDDEN}'"
            ));
            cascade_proto::mark_refused_whole(
                &mut status,
                cascade_proto::RefusedWhole::ForbiddenItem,
                &forbidden,
            );
            return Err(status);
        }
        let results = completions
            .iter()
            .map(|_| CompletionResult::default())
            .collect();
        self.applied.lock().expect("lock").extend(completions);
        Ok(results)
    }

    /// Waits (at most 10 s, so that a broken worker fails the test instead of hanging it)
    /// until `done` holds.
    async fn wait_for(&self, what: &str, done: impl Fn(&StandIn) -> bool) {
        let waiting = async {
            loop {
                let changed = self.changed.notified();
                if done(self) {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap_or_else(|_| panic!("waited 10 s for {what}"));
    }
}

#[tonic::async_trait]
impl WorkerService for StandIn {
    async fn take(&self, request: Request<TakeRequest>) -> Result<Response<TakeResponse>, Status> {
        let request = request.into_inner();
        let events = std::mem::take(&mut *self.to_hand_out.lock().expect("lock"));
        if request.completions.is_empty() {
            if events.is_empty() {
                // Ends before the worker's drain is over: the test sets `done` first.
                let _ = self.done.subscribe().wait_for(|done| *done).await;
            }
            return Ok(Response::new(TakeResponse {
                events,
                completions: Vec::new(),
            }));
        }
        self.carried
            .lock()
            .expect("lock")
            .extend(request.completions.iter().cloned());
        self.changed.notify_waiters();
        match self.carrying {
            Carrying::AsTheGateway => {
                let answer = self.apply(request.completions);
                self.changed.notify_waiters();
                answer.map(|completions| {
                    Response::new(TakeResponse {
                        events,
                        completions,
                    })
                })
            }
            Carrying::AnsweredWithoutResults => Ok(Response::new(TakeResponse {
                events,
                completions: Vec::new(),
            })),
            Carrying::NeverAnswered => std::future::pending().await,
        }
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        let completions = request.into_inner().completions;
        self.completed
            .lock()
            .expect("lock")
            .extend(completions.iter().cloned());
        let answer = match self.carrying {
            Carrying::AsTheGateway => self.apply(completions),
            _ => Ok(completions
                .iter()
                .map(|_| CompletionResult::default())
                .collect()),
        };
        self.changed.notify_waiters();
        answer.map(|results| Response::new(CompleteResponse { results }))
    }

    async fn extend_lease(
        &self,
        _: Request<ExtendLeaseRequest>,
    ) -> Result<Response<ExtendLeaseResponse>, Status> {
        Err(Status::unimplemented(
            "no lease here runs long enough to be extended",
        ))
    }
}

/// Where `completion` advances its event to, if it does.
fn advances_to(completion: &Completion) -> Option<&str> {
    match &completion.outcome {
        Some(ProtoOutcome::Advance(advance)) => Some(&advance.to),
        _ => None,
    }
}

/// Serves `stand_in` on a loopback port of its own and connects a client to it.
async fn serve(stand_in: &Arc<StandIn>) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(WorkerServer::from_arc(Arc::clone(stand_in)))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    Client::connect(&format!("http://{addr}"))
        .await
        .expect("connect to the stand-in")
}

/// `(id, outcome, token)` of each completion, sorted by ID.
fn summary(completions: &[Completion]) -> Vec<(String, &'static str, String)> {
    let mut summary: Vec<_> = completions
        .iter()
        .map(|c| {
            let outcome = match &c.outcome {
                Some(ProtoOutcome::Ack(_)) => "ack",
                Some(ProtoOutcome::Release(_)) => "release",
                _ => "other",
            };
            (c.id.clone(), outcome, c.lease_token.clone())
        })
        .collect();
    summary.sort();
    summary
}

fn ack_of(id: &str) -> (String, &'static str, String) {
    (id.to_owned(), "ack", format!("token-{id}"))
}

#[tokio::test]
async fn an_answer_without_results_sends_what_the_take_carried_on_its_own() {
    let stand_in = StandIn::new(Carrying::AnsweredWithoutResults, &["e1"]);
    let client = serve(&stand_in).await;
    // One handler at a time, done at once: the ack is known before the next take goes
    // out, so that take carries it.
    let config = WorkerConfig::new("jobs")
        .expect("queue")
        .concurrency(1)
        .poll_wait(Duration::from_secs(1))
        .drain_grace(Duration::from_secs(1));
    let acks = handler_fn(|_: Event, _| async { Ok::<_, HandlerError>(Outcome::Ack) });
    let worker = Worker::new(&client, config, acks).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());

    stand_in
        .wait_for("the ack sent by Complete", |s| !s.completed().is_empty())
        .await;
    stand_in.done.send_replace(true);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    assert_eq!(summary(&stand_in.carried()), [ack_of("e1")]);
    assert_eq!(summary(&stand_in.completed()), [ack_of("e1")], "once");
    let stats = handle.stats();
    assert_eq!((stats.completed, stats.complete_failures), (1, 0));
}

#[tokio::test]
async fn a_take_given_up_at_the_end_of_the_drain_sends_what_it_carried_on_its_own() {
    let stand_in = StandIn::new(Carrying::NeverAnswered, &["quick", "stuck"]);
    let client = serve(&stand_in).await;
    // Two handlers: "quick" acks at once while "stuck" never ends, so a take goes out with
    // the ack while "stuck" still runs, and the stand-in holds it.
    let config = WorkerConfig::new("jobs")
        .expect("queue")
        .concurrency(2)
        .batch(2)
        .poll_wait(Duration::from_secs(1))
        .drain_grace(Duration::from_millis(200));
    let handler = handler_fn(|event: Event, _| async move {
        if event.id.as_str() == "stuck" {
            std::future::pending::<()>().await;
        }
        Ok::<_, HandlerError>(Outcome::Ack)
    });
    let worker = Worker::new(&client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    stand_in
        .wait_for("a take carrying the ack", |s| !s.carried().is_empty())
        .await;
    assert!(
        stand_in.completed().is_empty(),
        "{:?}",
        stand_in.completed()
    );

    // The drain's grace ends with "stuck" still running and the take still out: both
    // are given up, and the worker sends the ack and the release of "stuck" itself.
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");
    assert_eq!(summary(&stand_in.carried()), [ack_of("quick")]);
    assert_eq!(
        summary(&stand_in.completed()),
        [
            ack_of("quick"),
            ("stuck".into(), "release", "token-stuck".into())
        ],
        "each once"
    );
}

/// Six events leased at once to a worker whose handler advances e2 and e5 where it may not
/// produce, the others to the next stage; `completion_batch` as given. What the gateway
/// lists fails at once and the rest goes again without it, so no outcome is in more than
/// one refused request, and each allowed advance is applied once.
async fn six_advances_two_forbidden(completion_batch: usize) {
    let events = ["e1", "e2", "e3", "e4", "e5", "e6"];
    let stand_in = StandIn::new(Carrying::AsTheGateway, &events);
    let client = serve(&stand_in).await;
    let mut config = WorkerConfig::new("jobs")
        .expect("queue")
        .concurrency(6)
        .batch(6)
        .poll_wait(Duration::from_secs(1))
        .drain_grace(Duration::from_secs(1));
    config.completion_batch = completion_batch;
    let handler = handler_fn(|event: Event, _| async move {
        let to = match event.id.as_str() {
            "e2" | "e5" => FORBIDDEN,
            _ => "jobs.next",
        };
        Ok::<_, HandlerError>(Outcome::Advance {
            to: Some(to.to_owned()),
            payload: None,
            headers: Default::default(),
            delay: None,
        })
    });
    let worker = Worker::new(&client, config, handler).expect("worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    stand_in
        .wait_for("the four allowed advances applied", |s| {
            s.applied().len() >= 4
        })
        .await;
    stand_in.done.send_replace(true);
    handle.shutdown();
    running.await.expect("worker task").expect("a clean stop");

    let mut applied: Vec<String> = stand_in.applied().iter().map(|c| c.id.clone()).collect();
    applied.sort();
    assert_eq!(
        applied,
        ["e1", "e3", "e4", "e6"],
        "each allowed advance once"
    );
    let refused: Vec<Vec<String>> = stand_in
        .refused()
        .iter()
        .map(|request| request.iter().map(|c| c.id.clone()).collect())
        .collect();
    for id in events {
        let times = refused
            .iter()
            .filter(|request| request.contains(&id.to_owned()))
            .count();
        assert!(
            times <= 1,
            "{id} was in {times} refused requests: {refused:?}"
        );
    }
    let stats = handle.stats();
    assert_eq!((stats.completed, stats.complete_failures), (4, 2));
}

/// The six outcomes are known at once, and the next take carries them all. Its refused
/// completions sent by `Complete` as they were would put every outcome in two refused
/// requests.
#[tokio::test]
async fn forbidden_advances_a_take_carried_fail_and_the_others_go_again_once() {
    six_advances_two_forbidden(256).await;
}

/// Six outcomes do not fit a take of this worker (three at most), so they go by `Complete`,
/// up to three a request. Sent again in halves, a refused request of two or three puts its
/// forbidden advance in two refused requests or more.
#[tokio::test]
async fn forbidden_advances_sent_by_complete_fail_and_the_others_go_again_once() {
    six_advances_two_forbidden(3).await;
}
