//! The shard engine's benchmark: the store actor with fsync durability, 100-byte payloads,
//! driven from tokio tasks the way the dispatcher drives it. Every figure is printed beside
//! the disk's raw `fdatasync` rate measured in the same run, so results compare across
//! machines.
//!
//! Run: `cargo bench -p cascade-store --bench engine [-- SCENARIO...]`
//! Scenarios: fsync, enqueue-1, enqueue-64, steady-single, steady-batch, fill, drain,
//! call-costs, stats-round, take-sizes, purge-steps (default: all, in that order; `drain` drains the
//! backlog `fill` left).
//! Environment: `CASCADE_BENCH_DIR` (default `bench-data/` in the working directory; keep it
//! on the disk you want to measure, not on tmpfs), `CASCADE_BENCH_SECS` (length of the short
//! scenarios, default 10), `CASCADE_BENCH_FILL_SECS` (default 60).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cascade_core::{LeaseToken, Outcome, QueueConfig, QueueName, SystemClock, Timestamp};
use cascade_store::probe::raw_fsync_rate;
use cascade_store::shard::{EnqueueCmd, LeasedEvent, PURGE_STEP};
use cascade_store::{Durability, Shard, ShardSettings, Store, StoreError, StoreOptions, durable};

const PAYLOAD_BYTES: usize = 100;
const BATCH: usize = 100;
const SUBMITTERS: usize = 64;
const CONSUMERS: usize = 4;
const DRAIN_EVENTS: u64 = 1_000_000;
/// Per-user queues (one event each) in `stats-round`.
const STATS_USERS: u64 = 200_000;
/// The takes `take-sizes` times, and how many times each.
const TAKE_SIZES: [(usize, usize); 4] = [(10, 50), (100, 20), (1_000, 10), (10_000, 3)];
/// Rounds of enqueue, take and ack `call-costs` times.
const CALL_ROUNDS: usize = 2_000;
/// Steps of `PURGE_STEP` events that `purge-steps` purges.
const PURGE_STEPS: usize = 20;
/// Events enqueued and not yet acked at most during `steady`: a steady flow, not a fill.
const STEADY_BACKLOG: u64 = 20_000;

type Shared = Arc<Store<Shard>>;

// The allocator Cascade's binaries use.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long each scenario runs.
struct Plan {
    secs: Duration,
    fill_secs: Duration,
    drain_events: u64,
    probe: Duration,
    brief: bool,
}

impl Plan {
    /// `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without
    /// it, and then every scenario only runs briefly, so the test suite proves the benchmark
    /// still works without spending minutes on it.
    fn from_args(args: &[String]) -> Plan {
        if args.iter().any(|a| a == "--bench") {
            Plan {
                secs: env_secs("CASCADE_BENCH_SECS", 10),
                fill_secs: env_secs("CASCADE_BENCH_FILL_SECS", 60),
                drain_events: DRAIN_EVENTS,
                probe: Duration::from_secs(3),
                brief: false,
            }
        } else {
            Plan {
                secs: Duration::from_millis(300),
                fill_secs: Duration::from_millis(500),
                drain_events: 1_000,
                probe: Duration::from_millis(200),
                brief: true,
            }
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = Plan::from_args(&args);
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| *w == name);
    // The brief run leaves nothing behind.
    let scratch = tempfile::tempdir()?;
    let dir = match (std::env::var_os("CASCADE_BENCH_DIR"), plan.brief) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, true) => scratch.path().to_path_buf(),
        (None, false) => PathBuf::from("bench-data"),
    };
    let (secs, fill_secs, drain_events) = (plan.secs, plan.fill_secs, plan.drain_events);
    std::fs::create_dir_all(&dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;

    let fsync_rate = raw_fsync_rate(&dir, plan.probe)?;
    println!(
        "disk: {fsync_rate:.0} fdatasync/s (raw: 100-byte append + fdatasync, one file, {:?}) in {}",
        plan.probe,
        dir.display()
    );
    let report = |name: &str, line: String| {
        println!("{name:<14} {line}   [disk {fsync_rate:.0} fdatasync/s]");
    };
    if run("enqueue-1") {
        let r = runtime.block_on(with_store(&dir, "enqueue-1", |s| {
            enqueue_single(s, 1, secs)
        }))?;
        report("enqueue-1", r);
    }
    if run("enqueue-64") {
        let r = runtime.block_on(with_store(&dir, "enqueue-64", |s| {
            enqueue_single(s, SUBMITTERS, secs)
        }))?;
        report("enqueue-64", r);
    }
    if run("steady-single") {
        let r = runtime.block_on(with_store(&dir, "steady-single", |s| steady(s, 1, secs)))?;
        report("steady-single", r);
    }
    if run("steady-batch") {
        let r = runtime.block_on(with_store(&dir, "steady-batch", |s| steady(s, BATCH, secs)))?;
        report("steady-batch", r);
    }
    if run("fill") {
        let r = runtime.block_on(with_store(&dir, "backlog", |s| fill(s, fill_secs)))?;
        report("fill", r);
    }
    if run("drain") {
        let r = runtime.block_on(with_store(&dir, "backlog", |s| drain(s, drain_events)))?;
        report("drain", r);
    }
    if run("call-costs") {
        let rounds = if plan.brief { 10 } else { CALL_ROUNDS };
        let r = runtime.block_on(with_store(&dir, "call-costs", |s| call_costs(s, rounds)))?;
        report("call-costs", r);
    }
    if run("stats-round") {
        let users = if plan.brief { 1_000 } else { STATS_USERS };
        let r = runtime.block_on(with_store(&dir, "stats-round", |s| stats_round(s, users)))?;
        report("stats-round", r);
    }
    if run("take-sizes") {
        let r = runtime.block_on(with_store(&dir, "take-sizes", take_sizes))?;
        report("take-sizes", r);
    }
    if run("purge-steps") {
        let events = (if plan.brief { 3 } else { PURGE_STEPS }) * PURGE_STEP;
        // What an interrupted run left would add to the fill.
        let leftover = dir.join("purge");
        if leftover.exists() {
            std::fs::remove_dir_all(&leftover)?;
        }
        let r = runtime.block_on(with_store(&dir, "purge", |s| fill_for_purge(s, events)))?;
        report("purge-fill", r);
        let r = runtime.block_on(with_store(&dir, "purge", purge_in_steps))?;
        report("purge-steps", r);
    }
    Ok(())
}

fn env_secs(name: &str, default: u64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

/// Opens the store `name` under `dir` (fsync durability, default options), runs `scenario`,
/// and shuts the store down cleanly. `backlog` persists between `fill` and `drain`, and
/// `purge` between its fill and its purge; every other scenario starts from an empty store.
async fn with_store<F, Fut>(dir: &Path, name: &str, scenario: F) -> Result<String, StoreError>
where
    F: FnOnce(Shared) -> Fut,
    Fut: Future<Output = Result<String, StoreError>>,
{
    let path = dir.join(name);
    if !["backlog", "purge"].contains(&name) && path.exists() {
        std::fs::remove_dir_all(&path).map_err(|e| StoreError::io("clear", &path, e))?;
    }
    let options = StoreOptions {
        durability: Durability::Fsync,
        ..StoreOptions::default()
    };
    let (kv, wal) = durable::recover(&path, &options)?;
    let shard = Shard::new(kv, ShardSettings::default())?;
    let store = Arc::new(Store::start(shard, wal, options, Arc::new(SystemClock)));
    store
        .run(
            |s, now| match s.create_queue(now, queue(), QueueConfig::default()) {
                Err(StoreError::QueueExists { .. }) => Ok(()),
                other => other.map(|_| ()),
            },
        )
        .await?;
    let result = scenario(Arc::clone(&store)).await;
    let store = Arc::into_inner(store).expect("the scenario's tasks have ended");
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("shutdown thread")?;
    result
}

fn queue() -> QueueName {
    QueueName::parse("bench").expect("a valid name")
}

fn enqueue_cmd() -> EnqueueCmd {
    EnqueueCmd {
        queue: queue(),
        id: None,
        idempotency_key: None,
        payload: vec![0xab; PAYLOAD_BYTES].into(),
        headers: BTreeMap::new(),
        activate_at: None,
    }
}

/// Enqueues `n` events in one call, as `EnqueueBatch` does.
async fn enqueue_many(store: &Store<Shard>, n: usize) -> Result<(), StoreError> {
    store
        .run(move |s, now| {
            for _ in 0..n {
                s.enqueue(now, enqueue_cmd())?;
            }
            Ok(())
        })
        .await
}

/// `submitters` tasks each enqueue one event per call, waiting for its acknowledgement.
async fn enqueue_single(
    store: Shared,
    submitters: usize,
    length: Duration,
) -> Result<String, StoreError> {
    let stop = Instant::now() + length;
    let mut tasks = Vec::new();
    for _ in 0..submitters {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < stop {
                let start = Instant::now();
                enqueue_many(&store, 1).await?;
                latencies.push(start.elapsed());
            }
            Ok::<_, StoreError>(latencies)
        }));
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await.expect("submitter")?);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    Ok(format!(
        "{:>9.0} events/s   {submitters} submitters, 1 event per call; latency p50 {:?} p99 {:?}",
        latencies.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
    ))
}

/// Takes a batch, then completes it with `ack` in a second call, as a worker's `Take` and
/// `Complete` would (the take answered before its fsync, as the dispatcher's). Returns how
/// many it acknowledged.
async fn take_and_ack(store: &Store<Shard>) -> Result<usize, StoreError> {
    let taken: Vec<LeasedEvent> = store
        .run_unsynced(|s, now| s.take(now, &queue(), BATCH, None))
        .await?;
    let n = taken.len();
    if n > 0 {
        ack_all(store, taken).await?;
    }
    Ok(n)
}

/// Acknowledges `taken` in one call, as one `Complete` of the batch would.
async fn ack_all(store: &Store<Shard>, taken: Vec<LeasedEvent>) -> Result<(), StoreError> {
    store
        .run(move |s, now| {
            for leased in taken {
                let id = leased.event.id.to_string();
                s.complete(now, &queue(), &id, leased.token, Outcome::Ack)?;
            }
            Ok(())
        })
        .await
}

/// What the submitters and consumers of a scenario have done so far.
#[derive(Default)]
struct Progress {
    enqueued: AtomicU64,
    acked: AtomicU64,
}

/// `CONSUMERS` tasks take and ack until `done` says so and the queue is empty, or until
/// `limit` events are acknowledged.
async fn consume(
    store: &Shared,
    progress: Arc<Progress>,
    done: Arc<AtomicBool>,
    limit: u64,
) -> Result<(), StoreError> {
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let (store, done, progress) = (Arc::clone(store), Arc::clone(&done), Arc::clone(&progress));
        tasks.push(tokio::spawn(async move {
            while progress.acked.load(Ordering::Relaxed) < limit {
                let n = take_and_ack(&store).await?;
                progress.acked.fetch_add(n as u64, Ordering::Relaxed);
                if n == 0 {
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            Ok::<_, StoreError>(())
        }));
    }
    for t in tasks {
        t.await.expect("consumer")?;
    }
    Ok(())
}

/// `SUBMITTERS` tasks enqueue `per_call` events per call for `length`; with `max_backlog`,
/// a submitter waits while more than that many events are enqueued and not yet acked.
async fn submit_for(
    store: &Shared,
    progress: &Arc<Progress>,
    per_call: usize,
    length: Duration,
    max_backlog: Option<u64>,
) -> Result<(), StoreError> {
    let stop = Instant::now() + length;
    let mut tasks = Vec::new();
    for _ in 0..SUBMITTERS {
        let (store, progress) = (Arc::clone(store), Arc::clone(progress));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let enqueued = progress.enqueued.load(Ordering::Relaxed);
                let backlog = enqueued.saturating_sub(progress.acked.load(Ordering::Relaxed));
                if max_backlog.is_some_and(|max| backlog > max) {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    continue;
                }
                enqueue_many(&store, per_call).await?;
                progress
                    .enqueued
                    .fetch_add(per_call as u64, Ordering::Relaxed);
            }
            Ok::<_, StoreError>(())
        }));
    }
    for t in tasks {
        t.await.expect("submitter")?;
    }
    Ok(())
}

/// Submitters enqueue `per_call` events per call for `length` while consumers take and ack
/// in batches, the backlog kept under `STEADY_BACKLOG`; the rate is what went all the way
/// through.
async fn steady(store: Shared, per_call: usize, length: Duration) -> Result<String, StoreError> {
    let progress = Arc::new(Progress::default());
    let done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let writer_before = writer_ticks();
    let consumers = {
        let (store, progress, done) =
            (Arc::clone(&store), Arc::clone(&progress), Arc::clone(&done));
        tokio::spawn(async move { consume(&store, progress, done, u64::MAX).await })
    };
    submit_for(&store, &progress, per_call, length, Some(STEADY_BACKLOG)).await?;
    done.store(true, Ordering::Relaxed);
    consumers.await.expect("consumers")?;
    let elapsed = started.elapsed().as_secs_f64();
    let acked = progress.acked.load(Ordering::Relaxed);
    let writer = writer_before
        .zip(writer_ticks())
        .map(|(before, after)| {
            let secs = after.saturating_sub(before) as f64 / TICKS_PER_SECOND;
            format!(
                "; writer {:.2} µs of CPU per event",
                secs * 1e6 / acked.max(1) as f64
            )
        })
        .unwrap_or_default();
    Ok(format!(
        "{:>9.0} events/s through ({acked} enqueued and acked in {elapsed:.1} s; {SUBMITTERS} submitters x {per_call} per call, backlog <= {STEADY_BACKLOG}, {CONSUMERS} consumers take+ack {BATCH}{writer})",
        acked as f64 / elapsed,
    ))
}

/// The kernel's clock ticks per second for `/proc` times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// The CPU time the store's writer thread has used, in clock ticks, from `/proc` (Linux;
/// elsewhere `None`). With the writer saturated, its time per event is the engine's cost,
/// steadier from run to run than the rate, which the disk moves too.
fn writer_ticks() -> Option<u64> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (name) state …`: utime and stime are the 12th and 13th fields after the name.
        let Some((name, rest)) = stat.split_once(" (").and_then(|(_, s)| s.rsplit_once(") "))
        else {
            continue;
        };
        if name != "cascade-writer" {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            *total.get_or_insert(0) += user + system;
        }
    }
    total
}

/// Enqueue only, `BATCH` per call, for `length`; prints the rate of every 10 s so a burst
/// the log absorbs cannot pass for a sustained rate.
async fn fill(store: Shared, length: Duration) -> Result<String, StoreError> {
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let ticker = {
        let progress = Arc::clone(&progress);
        tokio::spawn(async move {
            let mut last = 0;
            let mut interval = tokio::time::interval(Duration::from_secs(10));
            interval.tick().await;
            loop {
                interval.tick().await;
                let now = progress.enqueued.load(Ordering::Relaxed);
                println!("  fill: {:>7}/s in the last 10 s", (now - last) / 10);
                last = now;
            }
        })
    };
    submit_for(&store, &progress, BATCH, length, None).await?;
    ticker.abort();
    let elapsed = started.elapsed().as_secs_f64();
    let total = progress.enqueued.load(Ordering::Relaxed);
    Ok(format!(
        "{:>9.0} events/s sustained over {elapsed:.0} s ({total} events, {SUBMITTERS} submitters x {BATCH} per call)",
        total as f64 / elapsed
    ))
}

/// Drains `events` of the backlog `fill` left, from a freshly opened store.
async fn drain(store: Shared, events: u64) -> Result<String, StoreError> {
    let stats = store.run(|s, now| s.queue_stats(now, &queue())).await?;
    if stats.ready < events {
        return Ok(format!(
            "skipped: the backlog holds {} ready events, fewer than {events}; run `fill` first",
            stats.ready
        ));
    }
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    consume(
        &store,
        Arc::clone(&progress),
        Arc::new(AtomicBool::new(true)),
        events,
    )
    .await?;
    let acked = progress.acked.load(Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    Ok(format!(
        "{:>9.0} events/s ({acked} of a backlog of {} taken and acked in {elapsed:.1} s, {CONSUMERS} consumers x {BATCH})",
        acked as f64 / elapsed,
        stats.ready
    ))
}

/// A stats round of a shard holding `users` per-user queues of `inbox:*` (one event each)
/// beside the bench queue: what the dispatcher publishes each `dispatcher.stats_interval`
/// (the queues no template covers, then the families), against reading the stats of every
/// queue, which is what a round cost before the shard kept family sums.
async fn stats_round(store: Shared, users: u64) -> Result<String, StoreError> {
    let template = QueueName::parse("inbox:*").expect("a valid name");
    store
        .run(move |s, now| s.create_queue(now, template, QueueConfig::default()))
        .await?;
    for first in (0..users).step_by(1_000) {
        store
            .run(move |s, now| {
                for user in first..(first + 1_000).min(users) {
                    let queue = QueueName::parse(&format!("inbox:user-{user}")).expect("name");
                    s.enqueue(
                        now,
                        EnqueueCmd {
                            queue,
                            ..enqueue_cmd()
                        },
                    )?;
                }
                Ok(())
            })
            .await?;
    }
    let started = Instant::now();
    let (queues, families) = store
        .run(|s, now| {
            let (mut queues, mut token) = (0, String::new());
            loop {
                let page = s.list_uncovered_queues(256, &token)?;
                for name in &page.items {
                    s.queue_stats(now, name)?;
                    queues += 1;
                }
                if page.next_page_token.is_empty() {
                    return Ok((queues, s.family_stats().len()));
                }
                token = page.next_page_token;
            }
        })
        .await?;
    let round = started.elapsed();
    let started = Instant::now();
    let every = store
        .run(|s, now| {
            let (mut read, mut token) = (0u64, String::new());
            loop {
                let page = s.list_queues("", 256, &token)?;
                for queue in page.items.iter().filter(|q| !q.name.is_template()) {
                    s.queue_stats(now, &queue.name)?;
                    read += 1;
                }
                if page.next_page_token.is_empty() {
                    return Ok(read);
                }
                token = page.next_page_token;
            }
        })
        .await?;
    let per_queue = started.elapsed();
    // A template of its own sums only its queues; one within `inbox:*` sums every family.
    let mut created = Vec::new();
    for name in ["outbox:*", "inbox:vip:*"] {
        let template = QueueName::parse(name).expect("a valid name");
        let created_in = timed(&store, move |s, now| {
            s.create_queue(now, template, QueueConfig::default())
        });
        let (took, _) = created_in.await?;
        created.push(format!("{name} {took:?}"));
    }
    Ok(format!(
        "{users} per-user queues: a round reads {queues} queue(s) + {families} family in {round:?}; \
         reading every queue's stats ({every}) takes {per_queue:?}; creating a template then takes {}",
        created.join(", ")
    ))
}

/// The writer's time for one take of `n` ready events, for each size of `TAKE_SIZES` (the
/// fastest of its repetitions): a take is one transaction, so this shows what the size of a
/// transaction costs per event.
async fn take_sizes(store: Shared) -> Result<String, StoreError> {
    let mut line = String::from("writer time per taken event, by take size:");
    for (n, repeats) in TAKE_SIZES {
        let mut fastest = Duration::MAX;
        for _ in 0..repeats {
            for _ in 0..n.div_ceil(1_000) {
                enqueue_many(&store, n.min(1_000)).await?;
            }
            let (took, taken) = store
                .run_unsynced(move |s, now| {
                    let started = Instant::now();
                    let taken = s.take(now, &queue(), n, None)?;
                    Ok((started.elapsed(), taken))
                })
                .await?;
            fastest = fastest.min(took);
            ack_all(&store, taken).await?;
        }
        line += &format!(" {n}: {:.2} us;", fastest.as_secs_f64() * 1e6 / n as f64);
    }
    Ok(line)
}

/// The writer's time per event of one call of `BATCH` enqueues, one take of `BATCH` and one
/// call acknowledging them, each the median of `CALL_ROUNDS` rounds: the engine's own cost,
/// without the disk that moves the steady rates from run to run.
async fn call_costs(store: Shared, rounds: usize) -> Result<String, StoreError> {
    let mut times: [Vec<Duration>; 3] = Default::default();
    for _ in 0..rounds {
        let cmds: Vec<EnqueueCmd> = (0..BATCH).map(|_| enqueue_cmd()).collect();
        let enqueued = timed(&store, move |s, now| {
            for cmd in cmds {
                s.enqueue(now, cmd)?;
            }
            Ok(())
        });
        let (took, ()) = enqueued.await?;
        times[0].push(took);
        let (took, taken) = timed(&store, |s, now| s.take(now, &queue(), BATCH, None)).await?;
        times[1].push(took);
        let leases: Vec<(String, LeaseToken)> = taken
            .iter()
            .map(|leased| (leased.event.id.to_string(), leased.token))
            .collect();
        let acked = timed(&store, move |s, now| {
            for (id, token) in leases {
                s.complete(now, &queue(), &id, token, Outcome::Ack)?;
            }
            Ok(())
        });
        let (took, ()) = acked.await?;
        times[2].push(took);
    }
    let per_event = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2].as_secs_f64() * 1e6 / BATCH as f64
    };
    let [enqueue, take, ack] = times.map(per_event);
    Ok(format!(
        "writer time per event, calls of {BATCH} (median of {rounds}): enqueue {enqueue:.2} us, take {take:.2} us, ack {ack:.2} us; {:.2} us in all",
        enqueue + take + ack
    ))
}

/// Runs `op` on the writer; its time there and its result.
async fn timed<T, F>(store: &Store<Shard>, op: F) -> Result<(Duration, T), StoreError>
where
    T: Send + 'static,
    F: FnOnce(&mut Shard, Timestamp) -> Result<T, StoreError> + Send + 'static,
{
    store
        .run(move |s, now| {
            let started = Instant::now();
            let out = op(s, now)?;
            Ok((started.elapsed(), out))
        })
        .await
}

/// Fills the store `purge` with `events` ready events; the next scenario finds them in sled,
/// checkpointed by the clean stop in between, as a large queue someone purges would be.
async fn fill_for_purge(store: Shared, events: usize) -> Result<String, StoreError> {
    for _ in 0..events.div_ceil(1_000) {
        enqueue_many(&store, 1_000).await?;
    }
    Ok(format!(
        "{} events enqueued",
        events.div_ceil(1_000) * 1_000
    ))
}

/// Purges the queue in steps of `PURGE_STEP`, as the dispatcher does: the writer's time of
/// each step, which is how long the purge holds the shard's other queues at once.
async fn purge_in_steps(store: Shared) -> Result<String, StoreError> {
    let (mut steps, mut slowest, mut total, mut purged) = (0, Duration::ZERO, Duration::ZERO, 0);
    let mut after = String::new();
    loop {
        let (took, step) = timed(&store, move |s, _| {
            s.purge_queue(&queue(), PURGE_STEP, &after)
        })
        .await?;
        steps += 1;
        slowest = slowest.max(took);
        total += took;
        purged += step.done;
        match step.next {
            Some(next) => after = next,
            None => break,
        }
    }
    Ok(format!(
        "{purged} events in {steps} steps of {PURGE_STEP}: the writer held {:.1} ms per step on average, {:.1} ms at most",
        total.as_secs_f64() * 1e3 / f64::from(steps),
        slowest.as_secs_f64() * 1e3
    ))
}
