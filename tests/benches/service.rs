//! The service benchmark: the real binaries on loopback, driven over
//! gRPC by this process, fsync durability (the default), 100-byte payloads, 2 dispatcher
//! shards. First `cascade standalone`, then the distributed mode (`cascade-ingest`, 2
//! `cascade-dispatcher` and 2 `cascade-activation-timer` processes over one `nats-server`);
//! every scenario prints its figure in both modes and their ratio, beside the disk's raw
//! fdatasync rate measured in the same run; `unary` and `steady` also print the cores each
//! server process and the load generator used in their window (from `/proc/<pid>/stat`).
//! `standalone-tls` is `cascade standalone` with TLS on its gRPC port (a certificate this
//! benchmark makes), every client speaking TLS: its ratio to `standalone` is the cost of TLS. The load generator shares the machine's cores
//! with the servers, as it would on a 2-core box.
//!
//! Scenarios, each on its own 16 queues (spread over both shards):
//! - `unary`: 256 clients, each on its own connection, each sending one `Enqueue` at a time;
//! - `steady`: 8 producers sending `EnqueueBatch` of 100 while 4 consumers `Take` 100, each
//!   take carrying the acks of the consumer's last batch, at most 20,000 events enqueued and
//!   not yet acked (a flow, not a fill);
//! - `fill`: the 8 producers alone for `CASCADE_BENCH_FILL_SECS`, with 10-s windows.
//!
//! Run: `cargo build --release --bins && cargo bench -p cascade-e2e --bench service
//! [-- SCENARIO... MODE...]` (modes: `standalone`, `standalone-tls`, `distributed`; default:
//! all). Environment:
//! `CASCADE_BENCH_SECS` (window of `unary` and `steady`, default 20),
//! `CASCADE_BENCH_WARMUP_SECS` (3), `CASCADE_BENCH_FILL_SECS` (60), `CASCADE_BENCH_PRODUCERS`
//! (8), `CASCADE_BENCH_CONSUMERS` (4). The servers' data lives
//! in a temporary directory (where the disk rate is measured too). Under `cargo test
//! --all-targets` (no `--bench`) every scenario runs for about a second against the debug
//! binaries.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cascade_client::{Client, ClientOptions, api};
use cascade_e2e::bench::AckingConsumer;
use cascade_e2e::pki::TestCa;
use cascade_e2e::process::{TICKS_PER_SECOND, cpu_ticks};
use cascade_e2e::{Cluster, Mode};
use tokio::task::JoinSet;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const QUEUES: usize = 16;
const UNARY_CLIENTS: usize = 256;
const BATCH: usize = 100;
const PAYLOAD_BYTES: usize = 100;
/// Events enqueued and not yet acked at most during `steady`.
const BACKLOG: u64 = 20_000;
const FILL_WINDOW: Duration = Duration::from_secs(10);
/// How long a `steady` consumer's take waits for a first event.
const TAKE_WAIT: Duration = Duration::from_millis(20);

struct Plan {
    producers: usize,
    consumers: usize,
    warmup: Duration,
    window: Duration,
    fill: Duration,
    probe: Duration,
}

impl Plan {
    /// `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) every
    /// scenario runs briefly, proving the benchmark works without spending minutes on it.
    fn from_args(args: &[String]) -> Plan {
        let brief = !args.iter().any(|a| a == "--bench");
        let secs = |name: &str, full: u64, short: f64| match brief {
            true => Duration::from_secs_f64(short),
            false => Duration::from_secs(env(name).unwrap_or(full)),
        };
        Plan {
            producers: env("CASCADE_BENCH_PRODUCERS").unwrap_or(8) as usize,
            consumers: env("CASCADE_BENCH_CONSUMERS").unwrap_or(4) as usize,
            warmup: secs("CASCADE_BENCH_WARMUP_SECS", 3, 0.2),
            window: secs("CASCADE_BENCH_SECS", 20, 1.0),
            fill: secs("CASCADE_BENCH_FILL_SECS", 60, 1.0),
            probe: secs("CASCADE_BENCH_PROBE_SECS", 3, 0.2),
        }
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = Plan::from_args(&args);
    let pick = |names: &[&'static str]| cascade_e2e::bench::picked(&args, names);
    let scenarios = pick(&["unary", "steady", "fill"]);
    let modes = pick(&["standalone", "standalone-tls", "distributed"]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let probe_dir = tempfile::tempdir()?;
    let fsync = cascade_store::probe::raw_fsync_rate(probe_dir.path(), plan.probe)?;
    println!(
        "disk: {fsync:.0} fdatasync/s (raw: 100-byte append + fdatasync, {:?}) in {}",
        plan.probe,
        std::env::temp_dir().display()
    );
    let mut results: Vec<(&str, &str, f64)> = Vec::new();
    let certificates = tempfile::tempdir()?;
    for mode in modes {
        let (cluster, gateway) = start(mode, certificates.path());
        for &scenario in &scenarios {
            let (rate, line) = runtime.block_on(run(&gateway, scenario, &plan))?;
            println!("{mode:<12} {scenario:<7} {line}   [disk {fsync:.0} fdatasync/s]");
            results.push((mode, scenario, rate));
        }
        cluster.stop();
    }
    for &scenario in &scenarios {
        let rate = |mode| results.iter().find(|r| r.0 == mode && r.1 == scenario);
        for other in ["distributed", "standalone-tls"] {
            if let (Some(standalone), Some(compared)) = (rate("standalone"), rate(other)) {
                println!(
                    "ratio        {scenario:<7} {other} / standalone = {:.2}",
                    compared.2 / standalone.2
                );
            }
        }
    }
    Ok(())
}

/// The gateway's address and what its clients need to reach it, and the cluster's
/// processes (for their CPU time).
struct Gateway {
    addr: String,
    options: ClientOptions,
    processes: Vec<(String, u32)>,
}

impl Gateway {
    async fn client(&self) -> Result<Client, BoxError> {
        Ok(Client::connect_with(&self.addr, &self.options).await?)
    }
}

/// Starts `mode`'s cluster; for `standalone-tls`, with a certificate made in `dir`.
fn start(mode: &str, dir: &std::path::Path) -> (Cluster, Gateway) {
    if mode != "standalone-tls" {
        let cluster_mode = match mode {
            "standalone" => Mode::Standalone,
            _ => Mode::Distributed,
        };
        let cluster = Cluster::start_with(cluster_mode, None, &[]);
        let gateway = Gateway {
            addr: cluster.gateway().to_owned(),
            options: ClientOptions::default(),
            processes: cluster.processes(),
        };
        return (cluster, gateway);
    }
    let ca = TestCa::new("benchmark CA");
    let (cert, key) = ca.server().write(dir, "gateway");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let cluster = Cluster::start_with(
        Mode::Standalone,
        None,
        &[
            ("CASCADE__GRPC__TLS__CERT_FILE", &cert),
            ("CASCADE__GRPC__TLS__KEY_FILE", &key),
        ],
    );
    let gateway = Gateway {
        addr: format!("https://{}", cluster.gateway()),
        options: ClientOptions {
            ca_pem: Some(ca.cert_pem().into_bytes()),
            ..ClientOptions::default()
        },
        processes: cluster.processes(),
    };
    (cluster, gateway)
}

/// Creates the scenario's queues, runs it, and returns its rate and the line to print.
async fn run(gateway: &Gateway, scenario: &str, plan: &Plan) -> Result<(f64, String), BoxError> {
    let client = gateway.client().await?;
    let queues: Vec<String> = (0..QUEUES).map(|i| format!("{scenario}-{i}")).collect();
    for name in &queues {
        let request = api::CreateQueueRequest {
            name: name.clone(),
            config: None,
        };
        client.admin().create_queue(request).await?;
    }
    match scenario {
        "unary" => unary(gateway, &queues, plan).await,
        "steady" => steady(gateway, &queues, plan).await,
        _ => fill(gateway, &queues, plan).await,
    }
}

fn item(queue: &str) -> api::EnqueueRequest {
    api::EnqueueRequest {
        queue: queue.to_owned(),
        payload: vec![0xab; PAYLOAD_BYTES].into(),
        ..api::EnqueueRequest::default()
    }
}

/// Counts what the tasks did, and tells them when to stop.
#[derive(Default)]
struct Counters {
    enqueued: AtomicU64,
    acked: AtomicU64,
    stop: AtomicBool,
}

impl Counters {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Waits out the warm-up, then counts `count` over the window: the rate per second, and the
/// cores each server process and this one (the load generator) used in it, as `cores:
/// ingest 0.43, dispatcher-0 0.33, …`.
async fn measure(plan: &Plan, gateway: &Gateway, count: impl Fn() -> u64) -> (f64, String) {
    tokio::time::sleep(plan.warmup).await;
    let mut processes = gateway.processes.clone();
    processes.push(("load generator".into(), std::process::id()));
    let ticks = || -> Vec<Option<u64>> { processes.iter().map(|p| cpu_ticks(p.1)).collect() };
    let (start, ticks_before, at) = (count(), ticks(), Instant::now());
    tokio::time::sleep(plan.window).await;
    let (end, ticks_after, seconds) = (count(), ticks(), at.elapsed().as_secs_f64());
    let cores: Vec<String> = processes
        .iter()
        .zip(ticks_before.iter().zip(&ticks_after))
        .filter_map(|((name, _), (before, after))| {
            let used = after.as_ref()?.checked_sub((*before)?)?;
            Some(format!(
                "{name} {:.2}",
                used as f64 / TICKS_PER_SECOND / seconds
            ))
        })
        .collect();
    let rate = (end - start) as f64 / seconds;
    (rate, format!("cores: {}", cores.join(", ")))
}

async fn stop_all(
    counters: &Counters,
    mut tasks: JoinSet<Result<Vec<Duration>, BoxError>>,
) -> Result<Vec<Duration>, BoxError> {
    counters.stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done??);
    }
    Ok(latencies)
}

async fn unary(
    gateway: &Gateway,
    queues: &[String],
    plan: &Plan,
) -> Result<(f64, String), BoxError> {
    let counters = Arc::new(Counters::default());
    let mut tasks = JoinSet::new();
    for n in 0..UNARY_CLIENTS {
        let client = gateway.client().await?;
        let (queue, counters) = (queues[n % QUEUES].clone(), Arc::clone(&counters));
        tasks.spawn(async move {
            let mut ingest = client.ingest();
            let mut latencies = Vec::new();
            while !counters.stopping() {
                let sent = Instant::now();
                ingest.enqueue(item(&queue)).await?;
                latencies.push(sent.elapsed());
                counters.enqueued.fetch_add(1, Ordering::Relaxed);
            }
            Ok(latencies)
        });
    }
    let (rate, cores) = measure(plan, gateway, || counters.enqueued.load(Ordering::Relaxed)).await;
    let mut latencies = stop_all(&counters, tasks).await?;
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    Ok((
        rate,
        format!(
            "{rate:>9.0} enqueues/s   {UNARY_CLIENTS} clients x unary Enqueue; latency p50 {:?} p99 {:?} (whole run); {cores}",
            pct(0.50),
            pct(0.99)
        ),
    ))
}

/// `producers` tasks sending `EnqueueBatch` of `BATCH`, round-robin over `queues`, while
/// fewer than `backlog` events are enqueued and not yet acked.
async fn produce(
    gateway: &Gateway,
    queues: &[String],
    producers: usize,
    counters: &Arc<Counters>,
    backlog: Option<u64>,
    tasks: &mut JoinSet<Result<Vec<Duration>, BoxError>>,
) -> Result<(), BoxError> {
    for n in 0..producers {
        let client = gateway.client().await?;
        let (queues, counters) = (queues.to_vec(), Arc::clone(counters));
        tasks.spawn(async move {
            let mut ingest = client.ingest();
            let mut next = n;
            while !counters.stopping() {
                let pending = || {
                    let enqueued = counters.enqueued.load(Ordering::Relaxed);
                    enqueued.saturating_sub(counters.acked.load(Ordering::Relaxed))
                };
                if backlog.is_some_and(|limit| pending() >= limit) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                let items = (0..BATCH)
                    .map(|i| item(&queues[(next + i) % QUEUES]))
                    .collect();
                next += BATCH + 1;
                let answer = ingest
                    .enqueue_batch(api::EnqueueBatchRequest { items })
                    .await?;
                let refused = answer
                    .into_inner()
                    .results
                    .iter()
                    .filter(|r| r.code != 0)
                    .count();
                if refused > 0 {
                    return Err(format!("{refused} items of a batch refused").into());
                }
                counters.enqueued.fetch_add(BATCH as u64, Ordering::Relaxed);
            }
            Ok(Vec::new())
        });
    }
    Ok(())
}

async fn steady(
    gateway: &Gateway,
    queues: &[String],
    plan: &Plan,
) -> Result<(f64, String), BoxError> {
    let counters = Arc::new(Counters::default());
    let mut tasks = JoinSet::new();
    produce(
        gateway,
        queues,
        plan.producers,
        &counters,
        Some(BACKLOG),
        &mut tasks,
    )
    .await?;
    for n in 0..plan.consumers {
        let client = gateway.client().await?;
        let mine: Vec<String> = queues
            .iter()
            .skip(n % QUEUES)
            .step_by(plan.consumers.min(QUEUES))
            .cloned()
            .collect();
        let counters = Arc::clone(&counters);
        tasks.spawn(async move {
            // The next take may be of a queue on the other shard: the gateway then sends the
            // acks it carries to their own shard first.
            let mut consumer = AckingConsumer::new(client);
            for queue in mine.iter().cycle() {
                if counters.stopping() {
                    break;
                }
                let (_, acked) = consumer.take(queue, BATCH, TAKE_WAIT).await?;
                counters.acked.fetch_add(acked as u64, Ordering::Relaxed);
            }
            let acked = consumer.finish().await?;
            counters.acked.fetch_add(acked as u64, Ordering::Relaxed);
            Ok(Vec::new())
        });
    }
    let (rate, cores) = measure(plan, gateway, || counters.acked.load(Ordering::Relaxed)).await;
    stop_all(&counters, tasks).await?;
    Ok((
        rate,
        format!(
            "{rate:>9.0} events/s through   {} producers x EnqueueBatch of {BATCH}, {} consumers x Take {BATCH} carrying the last batch's acks, backlog <= {BACKLOG}; {cores}",
            plan.producers, plan.consumers
        ),
    ))
}

async fn fill(
    gateway: &Gateway,
    queues: &[String],
    plan: &Plan,
) -> Result<(f64, String), BoxError> {
    let counters = Arc::new(Counters::default());
    let mut tasks = JoinSet::new();
    produce(gateway, queues, plan.producers, &counters, None, &mut tasks).await?;
    let started = Instant::now();
    let mut windows = Vec::new();
    let mut last = 0;
    while started.elapsed() < plan.fill {
        let window = FILL_WINDOW.min(plan.fill.saturating_sub(started.elapsed()));
        tokio::time::sleep(window).await;
        let now = counters.enqueued.load(Ordering::Relaxed);
        windows.push(format!("{:.0}", (now - last) as f64 / window.as_secs_f64()));
        last = now;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop_all(&counters, tasks).await?;
    let rate = last as f64 / elapsed;
    Ok((
        rate,
        format!(
            "{rate:>9.0} events/s sustained over {elapsed:.0} s ({last} events; {:?} windows: {})   {} producers x EnqueueBatch of {BATCH}",
            FILL_WINDOW.min(plan.fill),
            windows.join(" / "),
            plan.producers
        ),
    ))
}
