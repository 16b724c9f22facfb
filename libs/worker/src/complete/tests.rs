//! The completer against a stand-in of the gateway's `Worker` service, in process and on
//! paused time: the gateway and its shards fail on demand here, and pauses pass at once.

use std::sync::atomic::{AtomicU32, Ordering};

use cascade_proto::RefusedWhole;
use cascade_proto::v1::worker_server::Worker;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

use super::*;
use crate::stats::WorkerStats;

/// How the stand-in gateway answers a `Complete`.
#[derive(Clone, Copy)]
enum Answer {
    /// Never, as over a connection gone silent.
    Silent,
    /// UNAVAILABLE for the whole request, as while the gateway restarts.
    Unavailable,
    /// Refused whole for holding more than the gateway's limits allow, changing nothing.
    TooMany,
    /// OK, with UNAVAILABLE for each completion, as while its shard restarts.
    ItemsUnavailable,
    /// OK, each completion applied.
    Applied,
}

/// A gateway's `Worker` service that answers its `n`th `Complete` with `answers(n)`; a
/// completion whose ID starts with `stuck` is answered UNAVAILABLE whenever its request is
/// answered: its shard stays away.
struct StandIn {
    answers: fn(u32) -> Answer,
    calls: AtomicU32,
    /// When the last `Complete` came.
    last_call: std::sync::Mutex<Option<Instant>>,
}

impl StandIn {
    fn client(answers: fn(u32) -> Answer) -> (Arc<StandIn>, WorkerCalls) {
        let gateway = Arc::new(StandIn {
            answers,
            calls: AtomicU32::new(0),
            last_call: std::sync::Mutex::new(None),
        });
        let client = WorkerCalls::InProcess(Arc::clone(&gateway) as Arc<dyn Worker>);
        (gateway, client)
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    fn last_call(&self) -> Instant {
        self.last_call.lock().expect("lock").expect("called")
    }
}

#[tonic::async_trait]
impl Worker for StandIn {
    async fn take(
        &self,
        _: Request<v1::TakeRequest>,
    ) -> Result<Response<v1::TakeResponse>, Status> {
        Err(Status::unimplemented("not used here"))
    }

    async fn complete(
        &self,
        request: Request<v1::CompleteRequest>,
    ) -> Result<Response<v1::CompleteResponse>, Status> {
        *self.last_call.lock().expect("lock") = Some(Instant::now());
        let code = match (self.answers)(self.calls.fetch_add(1, Ordering::Relaxed)) {
            Answer::Silent => std::future::pending().await,
            Answer::Unavailable => return Err(Status::unavailable("restarting")),
            Answer::TooMany => {
                let mut status = Status::resource_exhausted("completions: too many");
                cascade_proto::mark_refused_whole(&mut status, RefusedWhole::TooLarge, &[]);
                return Err(status);
            }
            Answer::ItemsUnavailable => tonic::Code::Unavailable,
            Answer::Applied => tonic::Code::Ok,
        };
        let results = request
            .into_inner()
            .completions
            .iter()
            .map(|completion| {
                let stuck = completion.id.starts_with("stuck");
                let code = if stuck {
                    tonic::Code::Unavailable
                } else {
                    code
                };
                v1::CompletionResult {
                    code: code as i32,
                    ..v1::CompletionResult::default()
                }
            })
            .collect();
        Ok(Response::new(v1::CompleteResponse { results }))
    }

    async fn extend_lease(
        &self,
        _: Request<v1::ExtendLeaseRequest>,
    ) -> Result<Response<v1::ExtendLeaseResponse>, Status> {
        Err(Status::unimplemented("not used here"))
    }
}

/// A completer of its own, with the sender of its queue; [`Running::stop`] stops it as the
/// worker does.
struct Running {
    queue: mpsc::Sender<Pending>,
    stop: oneshot::Sender<()>,
    completer: JoinHandle<()>,
}

fn start(client: WorkerCalls) -> (Running, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    let (queue, queued) = mpsc::channel(16);
    let (stop, stop_rx) = oneshot::channel();
    let flush = Duration::from_secs(10);
    let completer = tokio::spawn(run_completer(
        client,
        queued,
        64,
        Arc::clone(&stats),
        stop_rx,
        flush,
    ));
    (
        Running {
            queue,
            stop,
            completer,
        },
        stats,
    )
}

impl Running {
    async fn send(&self, pending: Pending) {
        self.queue.send(pending).await.expect("sent");
    }

    /// Stops as the worker does: its queue closes, then it says so. Waits for it
    /// to end, bounded by an hour so that one that never ends fails the test instead of
    /// hanging it.
    async fn stop(self) {
        drop(self.queue);
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(3600), self.completer)
            .await
            .expect("ended within an hour")
            .expect("the completer");
    }
}

/// Completes one ack whose lease lasts `lease`, and stops once it is applied or given up
/// (not before: a stop's flush would cut its retries short).
async fn send_ack(client: WorkerCalls, lease: Duration) -> Arc<Stats> {
    let (running, stats) = start(client);
    running.send(ack("a", lease)).await;
    let settled = |s: WorkerStats| s.completed + s.complete_failures > 0;
    while !settled(stats.snapshot()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.stop().await;
    stats
}

fn ack(id: &str, lease: Duration) -> Pending {
    let ack = v1::completion::Outcome::Ack(v1::Ack {});
    Pending::new(completion(id, ack), Instant::now() + lease)
}

#[tokio::test(start_paused = true)]
async fn a_complete_left_unanswered_is_tried_again_after_its_timeout() {
    let (gateway, client) = StandIn::client(|n| match n {
        0 => Answer::Silent,
        _ => Answer::Applied,
    });
    let stats = send_ack(client, Duration::from_secs(600)).await.snapshot();
    assert_eq!(gateway.calls(), 2, "tried again");
    assert_eq!((stats.completed, stats.complete_failures), (1, 0));
    assert_eq!(stats.complete_retries, 1);
}

/// Twenty seconds of a gateway, then of a shard, that cannot answer: more than a few
/// quick tries, less than the lease.
#[tokio::test(start_paused = true)]
async fn a_completion_is_tried_again_while_its_lease_lasts() {
    let (gateway, client) = StandIn::client(|n| match n {
        0..6 => Answer::Unavailable,
        6..12 => Answer::ItemsUnavailable,
        _ => Answer::Applied,
    });
    let started = Instant::now();
    let stats = send_ack(client, Duration::from_secs(60)).await.snapshot();
    assert_eq!(gateway.calls(), 13);
    assert_eq!((stats.completed, stats.complete_failures), (1, 0));
    assert_eq!(stats.complete_retries, 12);
    // Pauses of 0.1, 0.2, 0.4, 0.8, 1.6, then 2 s.
    assert_eq!(
        gateway.last_call() - started,
        Duration::from_millis(3100 + 7 * 2000)
    );
}

/// Completions that cannot be sent for long hold no request's place: another one goes at
/// once, and is applied while they wait for their next tries.
#[tokio::test(start_paused = true)]
async fn completions_waiting_for_a_retry_hold_up_no_other() {
    let (gateway, client) = StandIn::client(|_| Answer::Applied);
    let (running, stats) = start(client);
    let lease = Duration::from_secs(600);
    // One request each, as many as may be out at once.
    for id in ["stuck-1", "stuck-2"] {
        running.send(ack(id, lease)).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.send(ack("fine", lease)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let now = stats.snapshot();
    assert_eq!((now.completed, now.complete_failures), (1, 0), "{now:?}");
    assert!(
        gateway.calls() > 3,
        "the stuck ones were tried again meanwhile"
    );
    // Stopped: the stuck ones are given up within the flush, not at their leases' end.
    let closed = Instant::now();
    running.stop().await;
    assert!(
        closed.elapsed() <= Duration::from_secs(10),
        "{:?}",
        closed.elapsed()
    );
    let end = stats.snapshot();
    assert_eq!((end.completed, end.complete_failures), (1, 2), "{end:?}");
}

/// Stopped while every request's place is taken by one the gateway never answers: the
/// completer ends at the flush's end, counting what is out and what waits as failed.
#[tokio::test(start_paused = true)]
async fn a_stop_gives_up_what_is_left_at_the_flush_end() {
    let (gateway, client) = StandIn::client(|_| Answer::Silent);
    let (running, stats) = start(client);
    let lease = Duration::from_secs(600);
    for id in ["out-1", "out-2", "queued"] {
        running.send(ack(id, lease)).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(gateway.calls(), 2, "both places taken");
    let stopping = Instant::now();
    running.stop().await;
    assert!(
        stopping.elapsed() <= Duration::from_secs(10),
        "{:?}",
        stopping.elapsed()
    );
    let end = stats.snapshot();
    assert_eq!((end.completed, end.complete_failures), (0, 3), "{end:?}");
}

/// Stopped while a request refused whole goes again in halves: the half applied counts as
/// completed, only the half still out when the flush ends as failed.
#[tokio::test(start_paused = true)]
async fn a_stop_counts_only_what_a_request_cut_off_had_not_settled() {
    let (gateway, client) = StandIn::client(|n| match n {
        0 => Answer::TooMany,
        1 => Answer::Applied,
        _ => Answer::Silent,
    });
    let (running, stats) = start(client);
    let lease = Duration::from_secs(600);
    // Queued before the completer first runs, so that they go in one request.
    running.send(ack("a", lease)).await;
    running.send(ack("b", lease)).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(gateway.calls(), 3, "whole, then each half");
    running.stop().await;
    let end = stats.snapshot();
    assert_eq!((end.completed, end.complete_failures), (1, 1), "{end:?}");
}

/// A completion a take's answer gave back (its shard away) waits for its pause, then goes.
#[tokio::test(start_paused = true)]
async fn a_completion_given_back_by_a_take_is_tried_again_after_its_pause() {
    let (gateway, client) = StandIn::client(|_| Answer::Applied);
    let (running, stats) = start(client);
    let started = Instant::now();
    running
        .send(ack("a", Duration::from_secs(60)).again())
        .await;
    running.stop().await;
    assert_eq!(started.elapsed(), FIRST_RETRY_PAUSE);
    assert_eq!(gateway.calls(), 1);
    let stats = stats.snapshot();
    assert_eq!((stats.completed, stats.complete_retries), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_completion_is_given_up_once_its_lease_has_ended() {
    let (gateway, client) = StandIn::client(|_| Answer::ItemsUnavailable);
    let started = Instant::now();
    let stats = send_ack(client, Duration::from_secs(10)).await.snapshot();
    assert_eq!((stats.completed, stats.complete_failures), (0, 1));
    // The last try is the last whose pause ends within the lease.
    let last = gateway.last_call() - started;
    assert!(last < Duration::from_secs(10), "{last:?}");
    assert_eq!(gateway.calls(), stats.complete_retries as u32 + 1);
}

fn completion(id: &str, outcome: v1::completion::Outcome) -> v1::Completion {
    v1::Completion {
        queue: "jobs".into(),
        id: id.into(),
        lease_token: format!("token-{id}"),
        outcome: Some(outcome),
    }
}

fn pending(completion: v1::Completion, until: Instant) -> Pending {
    Pending::new(completion, until)
}

#[test]
fn only_accepted_releases_count_as_released_and_a_missing_result_as_a_failure() {
    let release = || v1::completion::Outcome::Release(v1::Release {});
    let ack = v1::completion::Outcome::Ack(v1::Ack {});
    let until = Instant::now();
    let completions = vec![
        pending(completion("a", release()), until),
        pending(completion("b", release()), until),
        pending(completion("c", ack.clone()), until),
        pending(completion("d", ack), until),
    ];
    let stale = v1::CompletionResult {
        code: tonic::Code::FailedPrecondition as i32,
        message: "lease of b is not current".into(),
        ..v1::CompletionResult::default()
    };
    let unavailable = v1::CompletionResult {
        code: tonic::Code::Unavailable as i32,
        message: "shard 1: no responders".into(),
        ..v1::CompletionResult::default()
    };
    // "d" has no result: the answer is one short.
    let results = [v1::CompletionResult::default(), stale, unavailable];
    let stats = Stats::default();
    let again = record_results(completions, &results, &stats);
    let counted = stats.snapshot();
    assert_eq!(
        (
            counted.completed,
            counted.released,
            counted.complete_failures
        ),
        (1, 1, 2)
    );
    let again: Vec<_> = again.iter().map(|p| p.completion.id.as_str()).collect();
    assert_eq!(again, ["c"], "to be sent again");
}

#[test]
fn an_advance_refused_for_what_it_is_goes_again_as_a_retry_saying_why() {
    let advance = v1::completion::Outcome::Advance(v1::Advance {
        to: "nowhere".into(),
        ..v1::Advance::default()
    });
    let ack = v1::completion::Outcome::Ack(v1::Ack {});
    let until = Instant::now();
    let completions = vec![
        pending(completion("a", advance.clone()), until),
        pending(completion("b", ack), until),
        pending(completion("c", advance), until),
    ];
    let invalid = v1::CompletionResult {
        code: tonic::Code::InvalidArgument as i32,
        message: "advance.to: must name a stage".into(),
        ..v1::CompletionResult::default()
    };
    let stale = v1::CompletionResult {
        code: tonic::Code::FailedPrecondition as i32,
        message: "lease of c is not current".into(),
        ..v1::CompletionResult::default()
    };
    let retry = v1::completion::Outcome::Retry(v1::Retry::default());
    let completions = [completions, vec![pending(completion("d", retry), until)]].concat();
    let stats = Stats::default();
    let results = [invalid.clone(), invalid.clone(), stale, invalid];
    let again = record_results(completions, &results, &stats);
    // The ack refused alike has nothing else to say; a stale lease is no one's to retry; a
    // retry refused is not sent again in any form.
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].completion.id, "a");
    assert_eq!(again[0].completion.lease_token, "token-a");
    assert_eq!(again[0].tries, 1);
    let Some(v1::completion::Outcome::Retry(retry)) = &again[0].completion.outcome else {
        panic!("a retry: {:?}", again[0].completion.outcome);
    };
    assert_eq!(
        retry.reason,
        "the gateway refused the handler's advance: advance.to: must name a stage"
    );
    assert_eq!(stats.snapshot().complete_failures, 4);
}
