//! The store actor: three threads with one job each, so that the state machine never waits
//! for the disk.
//! - **writer**: owns the state machine. Takes every operation waiting in the inbox, runs them
//!   in order against the in-memory state, and passes their log records and replies on as one
//!   group. It also runs periodic maintenance and starts checkpoints. Before the first
//!   operation it lets the state begin its run (`Maintenance::begin_run`) and waits until
//!   what that wrote is synced.
//! - **syncer**: owns the log. Appends every group waiting, `fdatasync`s once, then answers
//!   them all (group commit). A failed write or sync is fatal: every pending and later
//!   operation gets `Stopped`, nothing more is acknowledged, and recovery replays the log.
//!   An operation whose loss in a crash is harmless (`Store::run_unsynced`: a take, whose
//!   events simply come back) is answered by the writer once applied; its records still go
//!   to the log in order, so whatever is made durable after it makes it durable too.
//! - **checkpointer** (one at a time): writes a frozen layer into sled once the log holds
//!   every record it contains, fsyncs sled, and lets the log drop the segments it covers.
//!   It goes at a gentle pace (`checkpoint::Pace`) until the in-memory layers reach
//!   `checkpoint_bytes` or something waits for it. While it runs, the writer lets new work
//!   into memory as fast as sled takes the checkpoint, past a first share (`backpressure`).
//!
//! What a checkpoint leaves behind, its layer in memory and the log segments it covers, is
//! freed and deleted on threads of their own: at millions of keys, freeing the layer took the
//! writer 140-190 ms and deleting the segments held the syncer 50-120 ms, pauses that every
//! request would have waited through.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cascade_core::{Clock, Timestamp};

use super::backpressure::active_allowance;
use super::disk::{self, DiskWatch};
use super::{Durability, StoreOptions};
use cascade_core::error::describe;

use crate::error::StoreError;
use crate::kv::checkpoint::{self, Progress};
use crate::kv::{Kv, Layer};
use crate::observe::CommitObserver;
use crate::wal::{CoveredSegments, Lsn, Wal};

/// What the actor needs from a state machine.
pub trait Maintenance: Send + 'static {
    fn kv(&self) -> &Kv;
    fn kv_mut(&mut self) -> &mut Kv;
    /// The log records (`Batch::encode`) of the batches committed since the last call, in
    /// commit order.
    fn take_unlogged(&mut self) -> Vec<Vec<u8>>;
    /// Periodic work on the writer thread, e.g. expiring leases.
    fn tick(&mut self, now: Timestamp) -> Result<(), StoreError>;
    /// Called once on the writer thread before any operation, e.g. to move what answers
    /// given before their fsync (`Store::run_unsynced`) may have handed out in a run that
    /// crashed out of reach. What it commits is durable before the first operation runs.
    fn begin_run(&mut self) {}
}

/// Called once the operation's records are durable (`None`) or will never be (`Some`).
type Reply = Box<dyn FnOnce(Option<&StoreError>) + Send>;
type Job<S> = Box<dyn FnOnce(&mut S, Timestamp) -> Settle + Send>;

/// When an applied operation is answered.
enum Settle {
    /// Once its records are durable.
    Synced(Reply),
    /// At once: its loss in a crash is harmless.
    Applied(Reply),
}

/// Operations gathered into one group at most.
const MAX_GROUP: usize = 4096;
/// Groups queued for the syncer at most: the writer waits beyond, which bounds memory.
const SYNC_QUEUE: usize = 64;

enum ToSyncer {
    Group {
        records: Vec<Vec<u8>>,
        replies: Vec<Reply>,
    },
    /// Make everything appended so far durable, whatever the durability mode.
    Barrier,
    /// A checkpoint of everything appended so far begins: as `Barrier`, and later records go
    /// to a new segment (`Wal::roll`).
    Roll,
    RemoveThrough(Lsn),
}

/// Shared between threads: the last synced LSN and the first fatal error.
struct Shared {
    synced: Mutex<Lsn>,
    synced_changed: Condvar,
    fatal: Mutex<Option<String>>,
}

impl Shared {
    fn set_fatal(&self, reason: String) {
        tracing::error!(%reason, "store.fatal");
        self.fatal.lock().expect("fatal lock").get_or_insert(reason);
        // A waiter checks `fatal` and then waits, both under the `synced` lock: taking it
        // here means each has either yet to check or is already waiting, so none misses
        // this and sleeps on with the store stopped.
        drop(self.synced.lock().expect("synced lock"));
        self.synced_changed.notify_all();
    }

    fn fatal(&self) -> Option<String> {
        self.fatal.lock().expect("fatal lock").clone()
    }

    /// What an operation the store will not carry out is told: the failure's cause, if one
    /// stopped the store, else `otherwise`.
    fn stopped(&self, otherwise: &str) -> StoreError {
        StoreError::Stopped {
            reason: self.fatal().unwrap_or_else(|| otherwise.into()),
        }
    }

    /// Blocks until the log is synced through `lsn`; false if the store failed first.
    fn wait_synced(&self, lsn: Lsn) -> bool {
        let mut synced = self.synced.lock().expect("synced lock");
        while *synced < lsn {
            if self.fatal().is_some() {
                return false;
            }
            synced = self.synced_changed.wait(synced).expect("synced lock");
        }
        true
    }
}

/// Handle to a running store. Operations are closures run on the writer thread.
pub struct Store<S> {
    inbox: SyncSender<Job<S>>,
    shared: Arc<Shared>,
    disk: Arc<DiskWatch>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<S: Maintenance> Store<S> {
    pub fn start(state: S, wal: Wal, options: StoreOptions, clock: Arc<dyn Clock>) -> Store<S> {
        let (inbox, jobs) = mpsc::sync_channel(options.inbox_capacity);
        let (to_syncer, syncer_rx) = mpsc::sync_channel(SYNC_QUEUE);
        let disk = Arc::new(DiskWatch::new(state.kv().dir(), options.min_free));
        let shared = Arc::new(Shared {
            synced: Mutex::new(wal.durable_lsn()),
            synced_changed: Condvar::new(),
            fatal: Mutex::new(None),
        });
        let writer = Writer {
            next_lsn: wal.last_lsn() + 1,
            state,
            options: options.clone(),
            clock,
            to_syncer,
            shared: Arc::clone(&shared),
            checkpoint: None,
            last_checkpoint: Instant::now(),
            sled_written: 0,
            closing: false,
            disk: Arc::clone(&disk),
        };
        let syncer = Syncer {
            wal,
            durability: options.durability,
            shared: Arc::clone(&shared),
            last_sync: Instant::now(),
            observer: options.commit_observer.clone(),
            removing: None,
        };
        let threads = vec![
            spawn("cascade-writer", &shared, move || writer.run(jobs)),
            spawn("cascade-syncer", &shared, move || syncer.run(syncer_rx)),
        ];
        Store {
            inbox,
            shared,
            disk,
            threads: Mutex::new(threads),
        }
    }

    /// Runs `op` on the writer thread; answers once what it wrote is durable.
    /// Cancel-safe: dropping the future abandons the answer, not the operation.
    pub async fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut S, Timestamp) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(op, Settle::Synced).await
    }

    /// Runs `op` on the writer thread and answers once it is applied, before what it wrote
    /// is durable: only for an operation whose loss in a crash is harmless and whose answer
    /// promises nothing that a crash would break (a take: its events come back, and lease
    /// tokens are never reused across restarts). Anything made durable after it, e.g. the
    /// completion of what it took, makes it durable too.
    pub async fn run_unsynced<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut S, Timestamp) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(op, Settle::Applied).await
    }

    async fn submit<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut S, Timestamp) -> Result<T, StoreError> + Send + 'static,
        settle: fn(Reply) -> Settle,
    ) -> Result<T, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job<S> = Box::new(move |state, now| {
            let result = op(state, now);
            settle(Box::new(move |failure: Option<&StoreError>| {
                let answer = match failure {
                    None => result,
                    // Already the writer's "stopped" answer: passed on, not wrapped again.
                    Some(StoreError::Stopped { reason }) => Err(StoreError::Stopped {
                        reason: reason.clone(),
                    }),
                    Some(e) => Err(StoreError::Stopped {
                        reason: describe(e),
                    }),
                };
                // The caller may have given up waiting; the operation stands.
                let _ = tx.send(answer);
            }))
        });
        self.inbox.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => StoreError::Busy {
                what: "the shard's inbox is full".into(),
            },
            TrySendError::Disconnected(_) => self.stopped(),
        })?;
        rx.await.map_err(|_| self.stopped())?
    }

    /// The free space of the store's filesystem against `StoreOptions::min_free`.
    pub fn disk(&self) -> &DiskWatch {
        &self.disk
    }

    /// The reason the store stopped, if a write, sync or checkpoint failed.
    pub fn fatal(&self) -> Option<String> {
        self.shared.fatal()
    }

    fn stopped(&self) -> StoreError {
        self.shared.stopped("the store is shut down")
    }

    /// Stops taking operations, finishes those queued, checkpoints, and joins the threads.
    /// Blocks; call from a blocking context.
    pub fn shutdown(self) -> Result<(), StoreError> {
        let Store {
            inbox,
            shared,
            threads,
            ..
        } = self;
        drop(inbox);
        for t in threads.into_inner().expect("threads lock") {
            // A panic there was caught and made the store's fatal error (`spawn`).
            let _ = t.join();
        }
        match shared.fatal() {
            Some(reason) => Err(StoreError::Stopped { reason }),
            None => Ok(()),
        }
    }
}

/// Runs `f` on a thread named `name`. A panic there (a bug) stops the store like a failed
/// write, with the panic's message as the reason: the service sees the failure and exits,
/// instead of answering "stopped" to every call while it looks healthy.
fn spawn(name: &str, shared: &Arc<Shared>, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    let thread = name.to_owned();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                shared.set_fatal(format!("the {thread} thread panicked: {message}"));
            }
        })
        .expect("spawn a store thread")
}

/// Drops a checkpointed layer on a thread of its own (the checkpoint's thread has ended, so
/// this is the last reference). If no thread can be started, it is dropped here.
fn free_in_background(layer: Arc<Layer>) {
    let _ = std::thread::Builder::new()
        .name("cascade-free".into())
        .spawn(move || drop(layer));
}

struct Running {
    lsn: Lsn,
    /// What it writes, for the log line that says how fast sled took it.
    keys: usize,
    bytes: usize,
    started: Instant,
    /// Hurries it; how far it got.
    progress: Progress,
    /// How long the writer held new work for it (`backpressure`) in all, and at most at once.
    writer_waited: Duration,
    longest_hold: Duration,
    /// Its result: how long making sled durable took once the keys were in.
    done: Receiver<Result<Duration, StoreError>>,
    thread: JoinHandle<()>,
}

/// How often a writer held back by a checkpoint looks at its progress again.
const PROGRESS_POLL: Duration = Duration::from_millis(1);

struct Writer<S> {
    next_lsn: Lsn,
    state: S,
    options: StoreOptions,
    clock: Arc<dyn Clock>,
    to_syncer: SyncSender<ToSyncer>,
    shared: Arc<Shared>,
    checkpoint: Option<Running>,
    last_checkpoint: Instant,
    /// What checkpoints wrote into sled since it was last opened (their in-memory bytes).
    sled_written: usize,
    /// The inbox has closed: the last checkpoints run, sled is not reopened.
    closing: bool,
    disk: Arc<DiskWatch>,
}

impl<S: Maintenance> Writer<S> {
    fn run(mut self, jobs: Receiver<Job<S>>) {
        if self.begin_run() {
            self.serve(&jobs);
        }
        // A checkpoint left running (the store failed) ends as soon as it can.
        if let Some(running) = &self.checkpoint {
            running.progress.hurry();
        }
        // Answer whatever is still queued: this store takes nothing more. After a failure the
        // answer carries its cause, so every caller learns why, whichever it hears first.
        let stopped = self.shared.stopped("the store is shutting down");
        while let Ok(job) = jobs.try_recv() {
            let (Settle::Synced(reply) | Settle::Applied(reply)) =
                job(&mut self.state, self.clock.now());
            reply(Some(&stopped));
        }
        if self.shared.fatal().is_some() {
            // After a failed write sled blocks forever flushing as it is dropped; what it
            // holds is not trusted anyway (recovery replays the log), so it is let go.
            std::mem::forget(self.state);
        }
    }

    /// Lets the state begin its run and makes what that committed durable before any
    /// operation is applied; false if the log failed (the store is stopped).
    fn begin_run(&mut self) -> bool {
        self.state.begin_run();
        let records = self.state.take_unlogged();
        if records.is_empty() {
            return true;
        }
        self.next_lsn += records.len() as u64;
        let through = self.next_lsn - 1;
        let group = ToSyncer::Group {
            records,
            replies: Vec::new(),
        };
        // The barrier syncs whatever the durability mode.
        self.to_syncer.send(group).is_ok()
            && self.to_syncer.send(ToSyncer::Barrier).is_ok()
            && self.shared.wait_synced(through)
    }

    /// Applies operations until the inbox closes or the store fails.
    fn serve(&mut self, jobs: &Receiver<Job<S>>) {
        let mut last_tick = Instant::now();
        let mut last_disk_sample = Instant::now();
        let mut group: Vec<Job<S>> = Vec::new();
        loop {
            let open = match jobs.recv_timeout(self.options.tick) {
                Ok(job) => {
                    group.push(job);
                    true
                }
                Err(RecvTimeoutError::Timeout) => true,
                Err(RecvTimeoutError::Disconnected) => false,
            };
            while group.len() < MAX_GROUP {
                match jobs.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
            let now = self.clock.now();
            let mut replies: Vec<Reply> = Vec::with_capacity(group.len());
            // After a failed write nothing is answered as done, not even what need not wait.
            let stopped = self
                .shared
                .fatal()
                .map(|reason| StoreError::Stopped { reason });
            for job in group.drain(..) {
                match job(&mut self.state, now) {
                    Settle::Synced(reply) => replies.push(reply),
                    Settle::Applied(reply) => reply(stopped.as_ref()),
                }
            }
            if last_disk_sample.elapsed() >= disk::SAMPLE_EVERY {
                last_disk_sample = Instant::now();
                self.disk.sample(self.state.kv().dirty_bytes() as u64);
            }
            if last_tick.elapsed() >= self.options.tick {
                last_tick = Instant::now();
                if let Err(e) = self.state.tick(now) {
                    tracing::error!(error = %e, "store.tick");
                }
            }
            let records: Vec<Vec<u8>> = self.state.take_unlogged();
            self.next_lsn += records.len() as u64;
            self.disk
                .wrote(records.iter().map(|r| r.len() as u64).sum());
            if !(records.is_empty() && replies.is_empty()) {
                let sent = self.to_syncer.send(ToSyncer::Group {
                    records,
                    replies: std::mem::take(&mut replies),
                });
                if sent.is_err() {
                    break;
                }
            }
            if self.shared.fatal().is_some() {
                break;
            }
            self.poll_checkpoint(false);
            if self.shared.fatal().is_some() {
                break;
            }
            if !open {
                // Shut down: the last checkpoint makes the next start replay nothing, and
                // reopening sled would only delay the exit.
                self.closing = true;
                self.poll_checkpoint(true);
                if self.state.kv().dirty_bytes() > 0 {
                    self.start_checkpoint();
                    self.poll_checkpoint(true);
                }
                break;
            }
            if self.checkpoint_due() {
                self.start_checkpoint();
            } else {
                self.hold_for_checkpoint();
            }
            self.hurry_checkpoint_when_pressed();
        }
    }

    /// A checkpoint goes flat out once the layers in memory, its own included, reach
    /// `checkpoint_bytes` (one started because that much changed does from the start, and
    /// one started by `checkpoint_interval` does when writes pick up before it ends), and
    /// while the disk is short of space, which only its end gives back (the log it covers).
    fn hurry_checkpoint_when_pressed(&self) {
        if let Some(running) = &self.checkpoint
            && (self.state.kv().memory_bytes() >= self.options.checkpoint_bytes
                || self.disk.state().alarm)
        {
            running.progress.hurry();
        }
    }

    /// Holds new work while the active layer is past what the running checkpoint's progress
    /// allows it (`backpressure`), hurrying the checkpoint meanwhile.
    fn hold_for_checkpoint(&mut self) {
        let holding = Instant::now();
        if self.hold_until_allowed(holding)
            && let Some(observer) = &self.options.commit_observer
        {
            observer.held_for_checkpoint(holding.elapsed());
        }
    }

    /// The loop of `hold_for_checkpoint`; whether it held at all.
    fn hold_until_allowed(&mut self, holding: Instant) -> bool {
        let limit = 2 * self.options.checkpoint_bytes;
        let mut held = false;
        while let Some(running) = &mut self.checkpoint {
            let allowed = active_allowance(
                limit,
                running.bytes,
                running.progress.written(),
                running.keys,
            );
            if self.state.kv().dirty_bytes() <= allowed {
                break;
            }
            held = true;
            running.progress.hurry();
            let waiting = Instant::now();
            let outcome = running.done.recv_timeout(PROGRESS_POLL);
            running.writer_waited += waiting.elapsed();
            running.longest_hold = running.longest_hold.max(holding.elapsed());
            match outcome {
                Ok(result) => self.land_checkpoint(result),
                Err(RecvTimeoutError::Timeout) => {}
                // Its thread ended without a word: it panicked, which stopped the store.
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        held
    }

    fn checkpoint_due(&self) -> bool {
        let dirty = self.state.kv().dirty_bytes();
        self.checkpoint.is_none()
            && (dirty >= self.options.checkpoint_bytes
                || (dirty > 0
                    && self.last_checkpoint.elapsed() >= self.options.checkpoint_interval))
    }

    fn start_checkpoint(&mut self) {
        let bytes = self.state.kv().dirty_bytes();
        let layer = self.state.kv_mut().freeze();
        let keys = layer.len();
        let lsn = self.next_lsn - 1;
        if self.to_syncer.send(ToSyncer::Roll).is_err() {
            return;
        }
        let db = self.state.kv().db().clone();
        let dir = self.state.kv().dir().to_path_buf();
        let shared = Arc::clone(&self.shared);
        let progress = Progress::default();
        let paced_by = progress.clone();
        let (done_tx, done) = mpsc::sync_channel(1);
        let thread = spawn("cascade-checkpoint", &self.shared, move || {
            // sled must never get ahead of the log: its position would skip records.
            let result = if shared.wait_synced(lsn) {
                let mut pace = paced_by.pace();
                checkpoint::write_paced(&db, &dir, &layer, lsn, &mut pace)
            } else {
                Err(StoreError::Stopped {
                    reason: "the log failed before the checkpoint".into(),
                })
            };
            let _ = done_tx.send(result);
        });
        self.checkpoint = Some(Running {
            lsn,
            keys,
            bytes,
            started: Instant::now(),
            progress,
            writer_waited: Duration::ZERO,
            longest_hold: Duration::ZERO,
            done,
            thread,
        });
    }

    /// Finishes a completed checkpoint; with `wait`, waits for a running one.
    fn poll_checkpoint(&mut self, wait: bool) {
        let Some(running) = &self.checkpoint else {
            return;
        };
        let result = if wait {
            running.progress.hurry();
            running.done.recv().ok()
        } else {
            running.done.try_recv().ok()
        };
        if let Some(result) = result {
            self.land_checkpoint(result);
        }
    }

    /// Ends the running checkpoint with its thread's result.
    fn land_checkpoint(&mut self, result: Result<Duration, StoreError>) {
        let running = self.checkpoint.take().expect("a checkpoint is running");
        let _ = running.thread.join();
        match result {
            Ok(landing) => {
                if let Some(layer) = self.state.kv_mut().finish_checkpoint() {
                    free_in_background(layer);
                }
                self.last_checkpoint = Instant::now();
                let _ = self.to_syncer.send(ToSyncer::RemoveThrough(running.lsn));
                tracing::debug!(
                    lsn = running.lsn,
                    keys = running.keys,
                    bytes = running.bytes,
                    elapsed_ms = running.started.elapsed().as_millis() as u64,
                    landing_ms = landing.as_millis() as u64,
                    writer_waited_ms = running.writer_waited.as_millis() as u64,
                    longest_hold_ms = running.longest_hold.as_millis() as u64,
                    "store.checkpoint"
                );
                self.reopen_sled_when_due(running.bytes);
            }
            Err(e) => self
                .shared
                .set_fatal(format!("checkpoint failed: {}", describe(&e))),
        }
    }

    /// Counts what a checkpoint wrote into sled and reopens sled once that reaches
    /// `reopen_bytes`: a restart's open of sled reads sled's log since sled was last opened,
    /// and this bounds it. The writer answers nothing meanwhile (`Kv::reopen_sled`).
    fn reopen_sled_when_due(&mut self, written: usize) {
        let due = self.options.reopen_bytes;
        if due == 0 {
            return;
        }
        self.sled_written += written;
        if self.sled_written < due || self.closing {
            return;
        }
        self.sled_written = 0;
        let reopening = Instant::now();
        match self.state.kv_mut().reopen_sled() {
            // Operators see the pause it was.
            Ok(()) => tracing::info!(
                elapsed_ms = reopening.elapsed().as_millis() as u64,
                "store.sled.reopened"
            ),
            Err(e) => self
                .shared
                .set_fatal(format!("reopening the store failed: {}", describe(&e))),
        }
    }
}

struct Syncer {
    wal: Wal,
    durability: Durability,
    shared: Arc<Shared>,
    last_sync: Instant,
    observer: Option<Arc<dyn CommitObserver>>,
    /// The thread deleting the segments the last checkpoint covered, if one was started.
    removing: Option<JoinHandle<()>>,
}

/// Once the syncer ends, by the writer's exit or a panic, it waits for the last segments'
/// deletion, so that a store opened again in the same directory finds none of them half gone.
impl Drop for Syncer {
    fn drop(&mut self) {
        if let Some(removing) = self.removing.take() {
            let _ = removing.join();
        }
    }
}

impl Syncer {
    fn run(mut self, rx: Receiver<ToSyncer>) {
        let idle = match self.durability {
            Durability::Interval(every) => every,
            _ => std::time::Duration::from_secs(3600),
        };
        loop {
            let first = match rx.recv_timeout(idle) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut msgs: Vec<ToSyncer> = first.into_iter().collect();
            while let Ok(msg) = rx.try_recv() {
                msgs.push(msg);
            }
            if let Err(e) = self.handle(&mut msgs) {
                self.shared.set_fatal(describe(&e));
                fail_all(msgs, &e);
                // Nothing more is acknowledged; answer what arrives until the writer stops.
                while let Ok(msg) = rx.recv() {
                    fail_all(vec![msg], &e);
                }
                return;
            }
        }
    }

    /// Appends and syncs per the durability mode, then answers. On error, `msgs` still holds
    /// every message whose replies were not sent.
    fn handle(&mut self, msgs: &mut Vec<ToSyncer>) -> Result<(), StoreError> {
        let mut barrier = false;
        let mut remove = None;
        let mut appended = 0;
        for msg in msgs.iter() {
            match msg {
                ToSyncer::Group { records, .. } => {
                    for r in records {
                        self.wal.append(r)?;
                    }
                    appended += records.len();
                }
                ToSyncer::Barrier => barrier = true,
                ToSyncer::Roll => {
                    self.wal.roll()?;
                    barrier = true;
                }
                ToSyncer::RemoveThrough(lsn) => remove = Some(*lsn),
            }
        }
        let sync = barrier
            || match self.durability {
                Durability::Fsync => true,
                Durability::Interval(every) => self.last_sync.elapsed() >= every,
                Durability::None => false,
            };
        let fsync = if sync {
            let started = Instant::now();
            let synced = self.wal.sync()?;
            self.last_sync = Instant::now();
            *self.shared.synced.lock().expect("synced lock") = synced;
            self.shared.synced_changed.notify_all();
            Some(self.last_sync.duration_since(started))
        } else {
            self.wal.write_buffered()?;
            None
        };
        if let Some(observer) = &self.observer
            && (appended > 0 || fsync.is_some())
        {
            observer.committed(appended, fsync);
        }
        for msg in msgs.drain(..) {
            if let ToSyncer::Group { replies, .. } = msg {
                for reply in replies {
                    reply(None);
                }
            }
        }
        if let Some(lsn) = remove {
            let covered = self.wal.detach_through(lsn)?;
            if !covered.is_empty() {
                self.remove_in_background(covered);
            }
        }
        Ok(())
    }

    /// Deletes covered segments on a thread of their own, one deletion at a time. A failure
    /// stops the store, as a failed write of the log would: the disk is not healthy.
    fn remove_in_background(&mut self, covered: CoveredSegments) {
        if let Some(previous) = self.removing.take() {
            let _ = previous.join();
        }
        let shared = Arc::clone(&self.shared);
        self.removing = Some(spawn("cascade-wal-remove", &self.shared, move || {
            if let Err(e) = covered.remove() {
                shared.set_fatal(format!(
                    "deleting log segments a checkpoint covers failed: {}",
                    describe(&e)
                ));
            }
        }));
    }
}

fn fail_all(msgs: Vec<ToSyncer>, e: &StoreError) {
    for msg in msgs {
        if let ToSyncer::Group { replies, .. } = msg {
            for reply in replies {
                reply(Some(e));
            }
        }
    }
}

#[cfg(test)]
#[path = "actor_tests.rs"]
mod tests;
