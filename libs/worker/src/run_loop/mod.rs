//! The worker's loop: one task owns every event the worker holds, so no lock is needed.
//!
//! - **Take**: when no taken event waits and a handler slot is free, one long-poll `Take`
//!   asks for up to `batch` events. It runs in its own task, so that the loop's own waits
//!   never drop it; on shutdown the loop waits for it and releases what it brought, until
//!   the drain's grace is over: a take still out then is given up, and the gateway releases
//!   what its poll brings once its client has gone.
//! - **Run**: waiting events start in take order while fewer than `concurrency` handlers
//!   run; an event whose lease may have ended meanwhile is dropped, not run. A handler is
//!   polled once on the loop itself: one that finishes at once (a no-op, a routing step)
//!   is completed without a task; only one that waits gets its own task. A handler whose
//!   first polls take long (work before its first `.await`, or none at all) would run one
//!   at a time on the loop and hold its takes and extensions back: after
//!   `SLOW_FIRST_POLLS` such polls in a row, every handler gets a task from its start.
//! - **Extend**: every held event, waiting or running, is extended half-way through its
//!   lease. A lease found gone (FAILED_PRECONDITION, NOT_FOUND) is counted and the event
//!   is let go: not started if it waited, not completed if it ran.
//! - **Complete**: the outcomes known when a take goes out go with it (one call completes a
//!   batch and takes the next); the others go to the completer task, which batches them.
//! - **Drain** (shutdown): no more takes, waiting events released, running handlers given
//!   `drain_grace`, then abandoned and their events released too.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use cascade_client::WorkerCalls;
use cascade_core::Outcome;
use cascade_proto::convert::completion_to_proto;
use cascade_proto::v1;
use cascade_telemetry::LOG_ONLY_TARGET;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

mod extend;
mod take;

use crate::call::call_handler;
use crate::complete::{Pending, run_completer};
use crate::handle::{Knobs, Shared};
use crate::stats::Counter;
use crate::{Handler, WorkerConfig, WorkerError};

/// Completions queued for the completer at most; a full queue holds the loop back.
const COMPLETION_QUEUE: usize = 4096;
/// How long the completer gets to send what is queued once the loop has ended.
const COMPLETER_FLUSH: Duration = Duration::from_secs(10);
/// Extensions in flight at most: a large batch taken at once comes due at once.
const EXTENSIONS_IN_FLIGHT: usize = 64;
/// A take's answer may come this long after its long poll ends before it counts as lost.
const TAKE_SLACK: Duration = Duration::from_secs(10);
/// A handler's first poll on the loop longer than this counts as slow.
const SLOW_FIRST_POLL: Duration = Duration::from_micros(250);
/// Slow first polls in a row after which handlers run as tasks from their start: one alone
/// may be the machine's hiccup.
const SLOW_FIRST_POLLS: u32 = 4;
/// Once handlers start as tasks, one start in this many is a first poll on the loop again.
const RECHECK_FIRST_POLL_EVERY: u32 = 256;
/// Pauses after failed takes double from the first to the last.
const TAKE_PAUSE_FIRST: Duration = Duration::from_millis(100);
const TAKE_PAUSE_MAX: Duration = Duration::from_secs(5);

/// What the loop needs, handed over by `Worker`.
pub(crate) struct Ctx<H> {
    pub(crate) handler: Arc<H>,
    pub(crate) client: WorkerCalls,
    pub(crate) config: WorkerConfig,
    pub(crate) shared: Arc<Shared>,
}

/// Runs until the drain ends; an error means the gateway refused takes for good. Every log
/// line of the worker, its tasks' included, names its queue (a log-only span).
pub(crate) async fn run<H: Handler>(ctx: Ctx<H>) -> Result<(), WorkerError> {
    // ERROR level, so that no log filter (`warn`, a filter naming other targets) turns the
    // context off while it lets the worker's lines through.
    let span = tracing::error_span!(target: LOG_ONLY_TARGET, "worker", queue = %ctx.config.queue);
    run_in_span(ctx).instrument(span).await
}

async fn run_in_span<H: Handler>(ctx: Ctx<H>) -> Result<(), WorkerError> {
    let (completions, queued) = mpsc::channel(COMPLETION_QUEUE);
    let (stop_completer, completer_stop) = oneshot::channel();
    let completer = tokio::spawn(
        run_completer(
            ctx.client.clone(),
            queued,
            ctx.config.completion_batch,
            Arc::clone(&ctx.shared.stats),
            completer_stop,
            COMPLETER_FLUSH,
        )
        .in_current_span(),
    );
    tracing::info!(worker = %ctx.config.worker_id, "worker.started");
    let mut state = State::new(ctx, completions);
    state.run().await;
    let fatal = state.fatal.take();
    let stats = Arc::clone(&state.ctx.shared.stats);
    // Dropping the state drops the last completion sender: the completer sends the rest,
    // and gives up (counting) what it has not sent by the flush's end.
    drop(state);
    let _ = stop_completer.send(());
    if let Err(err) = completer.await {
        tracing::error!(error = %err, "worker.completer.died");
    }
    stats.set_gauges(0, 0);
    tracing::info!(stats = ?stats.snapshot(), "worker.stopped");
    fatal.map_or(Ok(()), Err)
}

/// An event the worker holds under its lease.
struct Held {
    id: String,
    token: String,
    /// Until its handler starts.
    event: Option<v1::Event>,
    /// What was left of the lease when it was last granted or extended.
    lease: Duration,
    /// When the lease ends, on the worker's clock.
    deadline: Instant,
    next_extend: Instant,
    extending: bool,
    /// The lease is gone; the running handler's outcome is dropped.
    lost: bool,
}

/// A take's answer, with when it arrived on both clocks.
struct Took {
    received: Instant,
    received_wall: SystemTime,
    answer: Result<v1::TakeResponse, tonic::Status>,
}

struct Extended {
    received: Instant,
    received_wall: SystemTime,
    answer: Result<v1::ExtendLeaseResponse, tonic::Status>,
}

/// What woke the loop.
enum Wake {
    Took(Result<Took, JoinError>),
    HandlerDone(Result<(tokio::task::Id, Outcome), JoinError>),
    Extended(Result<(tokio::task::Id, Extended), JoinError>),
    ExtendDue,
    TakePauseOver,
    Knobs(bool),
    Stop,
    GraceOver,
}

struct State<H> {
    ctx: Ctx<H>,
    knobs: Knobs,
    knobs_rx: watch::Receiver<Knobs>,
    knobs_open: bool,
    stop_rx: watch::Receiver<bool>,
    held: HashMap<u64, Held>,
    waiting: VecDeque<u64>,
    next_key: u64,
    /// (due, key); stale entries are skipped when they surface.
    extend_queue: BinaryHeap<Reverse<(Instant, u64)>>,
    handlers: JoinSet<Outcome>,
    handler_keys: HashMap<tokio::task::Id, u64>,
    /// Slow first polls on the loop in a row; at `SLOW_FIRST_POLLS`, handlers start as tasks.
    slow_first_polls: u32,
    /// Handlers started as tasks since they began to.
    starts_as_tasks: u32,
    extends: JoinSet<Extended>,
    extend_keys: HashMap<tokio::task::Id, u64>,
    extend_permits: Arc<Semaphore>,
    take: Option<JoinHandle<Took>>,
    take_pause_until: Option<Instant>,
    takes_failed_in_a_row: u32,
    completions: mpsc::Sender<Pending>,
    /// Outcomes known since the loop last waited: the next take carries them if it goes out
    /// now (`maybe_take`), the completer gets them if not.
    carried: Vec<Pending>,
    /// What the take out carries, until its answer says what became of them.
    take_carried: Vec<Pending>,
    stopping: bool,
    grace_over_at: Option<Instant>,
    fatal: Option<WorkerError>,
}

impl<H: Handler> State<H> {
    fn new(ctx: Ctx<H>, completions: mpsc::Sender<Pending>) -> State<H> {
        let mut knobs_rx = ctx.shared.knobs.subscribe();
        let knobs = *knobs_rx.borrow_and_update();
        let stop_rx = ctx.shared.stop.subscribe();
        State {
            ctx,
            knobs,
            knobs_rx,
            knobs_open: true,
            stop_rx,
            held: HashMap::new(),
            waiting: VecDeque::new(),
            next_key: 0,
            extend_queue: BinaryHeap::new(),
            handlers: JoinSet::new(),
            handler_keys: HashMap::new(),
            slow_first_polls: 0,
            starts_as_tasks: 0,
            extends: JoinSet::new(),
            extend_keys: HashMap::new(),
            extend_permits: Arc::new(Semaphore::new(EXTENSIONS_IN_FLIGHT)),
            take: None,
            take_pause_until: None,
            takes_failed_in_a_row: 0,
            completions,
            carried: Vec::new(),
            take_carried: Vec::new(),
            stopping: false,
            grace_over_at: None,
            fatal: None,
        }
    }

    async fn run(&mut self) {
        loop {
            self.start_handlers().await;
            self.maybe_take();
            self.send_uncarried().await;
            self.ctx
                .shared
                .stats
                .set_gauges(self.handlers.len(), self.held.len());
            if self.stopping && self.handlers.is_empty() && self.take.is_none() {
                return;
            }
            let wake = self.wait().await;
            self.on_wake(wake).await;
        }
    }

    /// Waits for the next thing to do. Cancel-safe in every branch: joins and watches.
    async fn wait(&mut self) -> Wake {
        let extend_due = self.next_extend_due();
        let take_pause = self.take_pause_until;
        let grace_over = self.grace_over_at;
        tokio::select! {
            took = join_take(&mut self.take), if self.take.is_some() => Wake::Took(took),
            Some(done) = self.handlers.join_next_with_id() => Wake::HandlerDone(done),
            Some(done) = self.extends.join_next_with_id() => Wake::Extended(done),
            () = sleep_until(extend_due), if extend_due.is_some() => Wake::ExtendDue,
            () = sleep_until(take_pause), if take_pause.is_some() => Wake::TakePauseOver,
            changed = self.knobs_rx.changed(), if self.knobs_open => Wake::Knobs(changed.is_ok()),
            _ = self.stop_rx.wait_for(|stop| *stop), if !self.stopping => Wake::Stop,
            () = sleep_until(grace_over), if grace_over.is_some() => Wake::GraceOver,
        }
    }

    async fn on_wake(&mut self, wake: Wake) {
        match wake {
            Wake::Took(took) => {
                self.take = None;
                self.on_took(took).await;
            }
            Wake::HandlerDone(done) => self.on_handler_done(done).await,
            Wake::Extended(done) => self.on_extended(done),
            Wake::ExtendDue => self.extend_due(),
            Wake::TakePauseOver => self.take_pause_until = None,
            Wake::Knobs(open) => self.on_knobs(open).await,
            Wake::Stop => self.begin_drain().await,
            Wake::GraceOver => self.abandon_handlers(),
        }
    }

    async fn start_handlers(&mut self) {
        if self.stopping {
            return;
        }
        while self.handlers.len() < self.knobs.concurrency as usize {
            let Some(key) = self.waiting.pop_front() else {
                break;
            };
            if let Some(outcome) = self.start(key) {
                self.finish(key, outcome).await;
            }
        }
    }

    /// Starts the handler of `key`'s event; returns its outcome if it finished at once.
    fn start(&mut self, key: u64) -> Option<Outcome> {
        let held = self.held.get_mut(&key)?;
        let event = held.event.take()?;
        if Instant::now() >= held.deadline {
            // Another worker may have it by now: running it here could run it twice.
            tracing::warn!(id = %held.id, "worker.lease.ended_before_start");
            self.held.remove(&key);
            self.ctx.shared.stats.add(Counter::LeasesLost, 1);
            return None;
        }
        self.ctx.shared.stats.add(Counter::Started, 1);
        let mut call = Box::pin(call_handler(
            Arc::clone(&self.ctx.handler),
            event,
            self.ctx.config.handler_timeout,
        ));
        if self.slow_first_polls >= SLOW_FIRST_POLLS {
            self.starts_as_tasks = self.starts_as_tasks.wrapping_add(1);
            // Now and then a first poll on the loop again: the slowness may have passed.
            if !self
                .starts_as_tasks
                .is_multiple_of(RECHECK_FIRST_POLL_EVERY)
            {
                self.spawn_handler(key, call);
                return None;
            }
        }
        // The first poll runs here; the task polls again (with its own waker) only if the
        // handler waits, which every future re-registers for on each poll.
        let mut cx = Context::from_waker(Waker::noop());
        let polling = std::time::Instant::now();
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(&mut cx)));
        self.count_first_poll(polling.elapsed());
        match polled {
            Ok(Poll::Ready(outcome)) => Some(outcome),
            Ok(Poll::Pending) => {
                self.spawn_handler(key, call);
                None
            }
            Err(_) => {
                tracing::error!("worker.handler.panicked");
                Some(crate::call::retry("the handler panicked".into()))
            }
        }
    }

    /// Runs `key`'s handler call on a task of its own.
    fn spawn_handler(&mut self, key: u64, call: impl Future<Output = Outcome> + Send + 'static) {
        let task = self.handlers.spawn(call.in_current_span());
        self.handler_keys.insert(task.id(), key);
    }

    fn count_first_poll(&mut self, took: Duration) {
        if took <= SLOW_FIRST_POLL {
            if self.slow_first_polls >= SLOW_FIRST_POLLS {
                tracing::info!("worker.handler.fast_first_poll; its calls start on the loop again");
            }
            self.slow_first_polls = 0;
            self.starts_as_tasks = 0;
            return;
        }
        self.slow_first_polls = self.slow_first_polls.saturating_add(1);
        if self.slow_first_polls == SLOW_FIRST_POLLS {
            tracing::info!(
                took = ?took,
                "worker.handler.slow_first_polls; its calls run as tasks from now on, side by side up to the concurrency"
            );
        }
    }

    async fn on_handler_done(&mut self, done: Result<(tokio::task::Id, Outcome), JoinError>) {
        let (task, outcome) = match done {
            Ok(done) => done,
            Err(err) if err.is_cancelled() => (err.id(), Outcome::Release),
            Err(err) => {
                tracing::error!(error = %err, "worker.handler.panicked");
                (err.id(), crate::call::retry("the handler panicked".into()))
            }
        };
        let Some(key) = self.handler_keys.remove(&task) else {
            return;
        };
        self.finish(key, outcome).await;
    }

    /// The handler of `key`'s event ended with `outcome`: complete it unless the lease is gone.
    async fn finish(&mut self, key: u64, outcome: Outcome) {
        let Some(held) = self.held.remove(&key) else {
            return;
        };
        if held.lost {
            tracing::debug!(id = %held.id, "worker.outcome.dropped; the lease was lost");
            return;
        }
        self.complete(&held, outcome);
    }

    /// Holds the outcome for the next take, if one goes out before the loop waits again, or
    /// else for the completer (`send_uncarried`).
    fn complete(&mut self, held: &Held, outcome: Outcome) {
        let completion = completion_to_proto(
            self.ctx.config.queue.as_str(),
            &held.id,
            &held.token,
            outcome,
        );
        self.carried.push(Pending::new(completion, held.deadline));
    }

    /// Hands what no take carries to the completer, so that no outcome waits for a take.
    async fn send_uncarried(&mut self) {
        let uncarried = std::mem::take(&mut self.carried);
        self.send_to_completer(uncarried).await;
    }

    pub(super) async fn send_to_completer(&self, completions: Vec<Pending>) {
        for pending in completions {
            let id = pending.completion.id.clone();
            if self.completions.send(pending).await.is_err() {
                // Only if the completer died; the lease will expire.
                tracing::error!(id = %id, "worker.complete.unsent");
            }
        }
    }

    async fn on_knobs(&mut self, open: bool) {
        if !open {
            self.knobs_open = false;
            return;
        }
        let knobs = *self.knobs_rx.borrow_and_update();
        if knobs != self.knobs {
            tracing::info!(
                concurrency = knobs.concurrency,
                batch = knobs.batch,
                "worker.knobs.changed"
            );
        }
        self.knobs = knobs;
        if knobs.concurrency == 0 {
            self.release_waiting().await;
        }
    }

    async fn begin_drain(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.grace_over_at = Some(Instant::now() + self.ctx.config.drain_grace);
        tracing::info!(
            running = self.handlers.len(),
            waiting = self.waiting.len(),
            grace = ?self.ctx.config.drain_grace,
            "worker.draining"
        );
        self.release_waiting().await;
    }

    async fn release_waiting(&mut self) {
        while let Some(key) = self.waiting.pop_front() {
            if let Some(held) = self.held.remove(&key) {
                self.complete(&held, Outcome::Release);
            }
        }
    }

    /// The drain grace is over: running handlers are abandoned (their events released as
    /// their tasks end), and a take still waiting is given up.
    fn abandon_handlers(&mut self) {
        self.grace_over_at = None;
        tracing::warn!(
            running = self.handlers.len(),
            "worker.drain.grace_over; abandoning the running handlers"
        );
        self.handlers.abort_all();
        // A take that has already been answered is read as usual, and what it brought is
        // released; one still out is given up, and the gateway releases what its poll brings.
        if let Some(take) = self.take.take_if(|take| !take.is_finished()) {
            take.abort();
            // Its answer will not be read: what it carried goes on its own (one that did
            // apply is refused as stale).
            self.carried.append(&mut self.take_carried);
        }
    }
}

async fn join_take(take: &mut Option<JoinHandle<Took>>) -> Result<Took, JoinError> {
    match take {
        Some(handle) => handle.await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; with none, forever (a `select!` branch that never fires).
pub(crate) async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
