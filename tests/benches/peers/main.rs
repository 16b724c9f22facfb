//! The peer comparison: the same scenarios against Cascade and against the systems a user
//! would pick instead, each started on loopback by this benchmark from Debian's packages and
//! driven by its own client from this process, in one run on one machine: Redis with its
//! append-only file fsynced on every write, PostgreSQL with a `SKIP LOCKED` job table and
//! `synchronous_commit = on`, NATS JetStream with file storage (no per-message fsync in the
//! Debian server), and `cascade standalone` with its defaults (one shard, fsync). 100-byte
//! payloads (unless told otherwise), 16 queues.
//!
//! Scenarios: `enqueue` (unary, 1, 16 and 256 producers, one connection each; for Cascade
//! also from a stock tonic client, and the same load of calls that do nothing, the gRPC
//! floor: see `floor.rs`), `shared` (16 and 256 producers sharing one client, as the tasks
//! of one service would: Cascade's batching enqueuer, Redis's multiplexed connection,
//! NATS's connection, one PostgreSQL connection; for Cascade also unary calls on one
//! shared channel), `take` (take and ack in batches of 100 from a backlog, 1 and 16
//! consumers), `delayed` (50,000 events due evenly over 10 s, taken as they come due, by a
//! long poll where the system has one: their lateness). Each prints its rate, the median
//! call, and the CPU time per operation of the server and of the clients (this process),
//! from `/proc`; the last table gives Cascade's ratio to each system, and the disk's raw
//! fdatasync rate and median of the same run. `scale` (Cascade alone, run only when named:
//! it takes minutes) loads a million per-user queues and a million pending timers and
//! measures what they cost: see `scale.rs`.
//!
//! Run: `cargo build --release --bins && cargo bench -p cascade-e2e --bench peers
//! [-- SCENARIO... SYSTEM...]` (systems: `cascade`, `redis`, `postgres`, `nats`; default:
//! all). Environment: `CASCADE_BENCH_SECS` (window, default 10), `CASCADE_BENCH_WARMUP_SECS`
//! (2), `CASCADE_BENCH_BACKLOG` (500,000), `CASCADE_BENCH_STORED` and
//! `CASCADE_BENCH_PENDING` (the scale scenario's per-user queues and timers, 1,000,000
//! each), `CASCADE_BENCH_PAYLOAD_BYTES` (every event's payload, 100; at least 16),
//! `CASCADE_BENCH_POLL=1` (Cascade's delayed consumers poll as Redis's and
//! PostgreSQL's must, instead of waiting in a long-poll `Take`). Under `cargo test
//! --all-targets` (no `--bench`) every scenario runs briefly against every system, proving
//! the harness works.

mod floor;
mod nats;
mod postgres;
mod redis;
mod scale;
mod scenarios;
mod servers;
mod systems;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cascade_e2e::{Cluster, Mode};
use cascade_store::probe::{FsyncProbe, raw_fsync};

use crate::Producers::{Apart, Sharing};
use crate::floor::{GrpcFloor, OneChannel, StockTonic};
use crate::scenarios::{Lateness, Measured};
use crate::systems::{Cascade, OneClient, Peer, Producing};

pub use cascade_e2e::bench::BoxError;

pub struct Plan {
    warmup: Duration,
    window: Duration,
    probe: Duration,
    producers: Vec<usize>,
    consumers: Vec<usize>,
    backlog: usize,
    delayed: usize,
    spread: Duration,
    lead: Duration,
    /// The scale scenario: per-user queues of one event each, timers pending, and the
    /// pause before each reading of memory and disk.
    stored: usize,
    pending: usize,
    settle: Duration,
    /// Whether Cascade's delayed consumers wait in a long poll (else they poll as the others
    /// must).
    cascade_long_polls: bool,
}

impl Plan {
    /// `cargo bench` passes `--bench`; without it every scenario runs briefly.
    fn from_args(args: &[String]) -> Plan {
        let brief = !args.iter().any(|a| a == "--bench");
        let env = |name: &str, full: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(full)
        };
        let cascade_long_polls = env("CASCADE_BENCH_POLL", 0) != 1;
        match brief {
            true => Plan {
                warmup: Duration::from_millis(200),
                window: Duration::from_millis(700),
                probe: Duration::from_millis(200),
                producers: vec![1, 16, 256],
                consumers: vec![1, 16],
                backlog: 2_000,
                delayed: 500,
                spread: Duration::from_secs(1),
                lead: Duration::from_secs(1),
                stored: 2_000,
                pending: 2_000,
                settle: Duration::ZERO,
                cascade_long_polls,
            },
            false => Plan {
                warmup: Duration::from_secs(env("CASCADE_BENCH_WARMUP_SECS", 2)),
                window: Duration::from_secs(env("CASCADE_BENCH_SECS", 10)),
                probe: Duration::from_secs(3),
                producers: vec![1, 16, 256],
                consumers: vec![1, 16],
                backlog: env("CASCADE_BENCH_BACKLOG", 500_000) as usize,
                delayed: 50_000,
                spread: Duration::from_secs(10),
                lead: Duration::from_secs(3),
                stored: env("CASCADE_BENCH_STORED", 1_000_000) as usize,
                pending: env("CASCADE_BENCH_PENDING", 1_000_000) as usize,
                settle: Duration::from_secs(5),
                cascade_long_polls,
            },
        }
    }

    /// Cascade at `addr`, driven as this plan says.
    fn cascade(&self, addr: &str) -> Cascade {
        Cascade {
            addr: addr.to_owned(),
            long_polls: self.cascade_long_polls,
        }
    }
}

/// What one scenario measured of one system.
enum Figure {
    Rate(Measured),
    Lateness(Lateness),
}

struct Row {
    scenario: String,
    system: &'static str,
    figure: Figure,
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = Plan::from_args(&args);
    let pick = |names: &[&'static str]| cascade_e2e::bench::picked(&args, names);
    let mut scenarios = pick(&["enqueue", "shared", "take", "delayed", "scale"]);
    // The scale scenario takes minutes: a full run has it only when named.
    let scale = scenarios.contains(&"scale")
        && (args.iter().all(|a| a != "--bench") || args.iter().any(|a| a == "scale"));
    scenarios.retain(|&s| s != "scale");
    let systems = pick(&["cascade", "redis", "postgres", "nats"]);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let disk = raw_fsync(dir.path(), plan.probe)?;
    println!("{}", disk_line(&disk, dir.path()));
    println!("payloads: {} bytes", systems::payload_bytes());
    let mut rows = Vec::new();
    for &system in systems.iter().filter(|_| !scenarios.is_empty()) {
        let scratch = tempfile::tempdir_in(dir.path())?;
        match system {
            "cascade" => {
                let cluster = Cluster::start_with(
                    Mode::Standalone,
                    None,
                    &[("CASCADE__CLUSTER__SHARDS", "1")],
                );
                let pid = cluster.front_pid();
                let server = move || {
                    cascade_e2e::process::cpu_ticks(pid)
                        .map(|t| (pid, t))
                        .into_iter()
                        .collect()
                };
                let addr = cluster.gateway().to_owned();
                let peer = Arc::new(plan.cascade(&addr));
                runtime.block_on(run(&peer, &server, &scenarios, &plan, &mut rows))?;
                if scenarios.contains(&"enqueue") {
                    let queues = scenarios::queues("enqueue");
                    let stock = Arc::new(StockTonic { addr: addr.clone() });
                    let floor = Arc::new(GrpcFloor { addr: addr.clone() });
                    runtime.block_on(async {
                        enqueues(&stock, &server, &queues, Apart, &plan, &mut rows).await?;
                        enqueues(&floor, &server, &queues, Apart, &plan, &mut rows).await
                    })?;
                }
                if scenarios.contains(&"shared") {
                    let queues = scenarios::queues("shared");
                    runtime.block_on(async {
                        let channel = Arc::new(OneChannel::connect(&addr).await?);
                        enqueues(&channel, &server, &queues, Sharing, &plan, &mut rows).await
                    })?;
                }
                cluster.stop();
            }
            "redis" => {
                let server = servers::start_redis(scratch.path())?;
                let url = format!("redis://127.0.0.1:{}/", server.port);
                let peer = Arc::new(redis::Redis { url });
                runtime.block_on(run_on(server, &peer, &scenarios, &plan, &mut rows))?;
            }
            "postgres" => {
                let server = servers::start_postgres(scratch.path())?;
                let peer = Arc::new(postgres::Postgres { port: server.port });
                runtime.block_on(run_on(server, &peer, &scenarios, &plan, &mut rows))?;
            }
            _ => {
                let server = servers::start_nats_jetstream(scratch.path())?;
                let url = format!("nats://127.0.0.1:{}", server.port);
                let peer = Arc::new(nats::Nats { url });
                runtime.block_on(run_on(server, &peer, &scenarios, &plan, &mut rows))?;
            }
        }
    }
    if scale && systems.contains(&"cascade") {
        println!();
        scale::run(&runtime, &plan)?;
    }
    println!();
    print_ratios(&rows);
    println!("{}", disk_line(&disk, dir.path()));
    Ok(())
}

fn disk_line(disk: &FsyncProbe, dir: &Path) -> String {
    format!(
        "disk: {:.0} fdatasync/s, p50 {:?} (raw: 100-byte append + fdatasync) in {}",
        disk.rate,
        disk.p50,
        dir.display()
    )
}

/// [`run`] on a peer's own server, stopped afterwards.
async fn run_on<P: Peer>(
    mut server: servers::Server,
    peer: &Arc<P>,
    scenarios: &[&str],
    plan: &Plan,
    rows: &mut Vec<Row>,
) -> Result<(), BoxError> {
    let ran = run(peer, &|| server.cpu_ticks(), scenarios, plan, rows).await;
    server.process.terminate(Duration::from_secs(30));
    ran
}

/// Runs every scenario of `scenarios` against `peer`, printing each result as it comes.
async fn run<P: Peer>(
    peer: &Arc<P>,
    server: scenarios::ServerTicks<'_>,
    scenarios: &[&str],
    plan: &Plan,
    rows: &mut Vec<Row>,
) -> Result<(), BoxError> {
    for &scenario in scenarios {
        let queues = scenarios::queues(scenario);
        peer.setup(&queues).await?;
        let results: Vec<(String, Figure)> = match scenario {
            "enqueue" => {
                enqueues(peer, server, &queues, Apart, plan, rows).await?;
                Vec::new()
            }
            "shared" => {
                let one = Arc::new(OneClient::<P> {
                    shared: peer.shared().await?,
                });
                enqueues(&one, server, &queues, Sharing, plan, rows).await?;
                Vec::new()
            }
            "take" => {
                let mut out = Vec::new();
                for &consumers in &plan.consumers {
                    let queues = scenarios::queues(&format!("take{consumers}"));
                    peer.setup(&queues).await?;
                    let measured = scenarios::take(peer, server, &queues, consumers, plan).await?;
                    out.push((
                        format!("take+ack of 100, {consumers} consumers"),
                        Figure::Rate(measured),
                    ));
                }
                out
            }
            _ if !P::DELAYS => Vec::new(),
            _ => {
                let late = scenarios::delayed(peer, &queues, plan).await?;
                vec![(
                    format!("{} delayed over {:?}: lateness", plan.delayed, plan.spread),
                    Figure::Lateness(late),
                )]
            }
        };
        for (name, result) in results {
            record(rows, P::NAME, name, result);
        }
    }
    Ok(())
}

/// How the producers of an enqueue scenario reach the system.
#[derive(Clone, Copy)]
enum Producers {
    /// Each on a connection of its own (the `enqueue` scenario).
    Apart,
    /// All through one client (the `shared` scenario).
    Sharing,
}

impl Producers {
    /// The plan's numbers of producers; sharing, all but one (which shares nothing).
    fn counts(self, plan: &Plan) -> Vec<usize> {
        let shares = |&p: &usize| matches!(self, Apart) || p > 1;
        plan.producers.iter().copied().filter(shares).collect()
    }

    /// What the rows' names add to `enqueue, N producers`.
    fn suffix(self) -> &'static str {
        match self {
            Apart => "",
            Sharing => ", one client",
        }
    }
}

/// The enqueue scenario with each number of producers of the plan, reaching `peer` so.
async fn enqueues<P: Producing>(
    peer: &Arc<P>,
    server: scenarios::ServerTicks<'_>,
    queues: &[String],
    how: Producers,
    plan: &Plan,
    rows: &mut Vec<Row>,
) -> Result<(), BoxError> {
    for producers in how.counts(plan) {
        let measured = scenarios::enqueue(peer, server, queues, producers, plan).await?;
        let name = format!("enqueue, {producers} producers{}", how.suffix());
        record(rows, P::NAME, name, Figure::Rate(measured));
    }
    Ok(())
}

/// Prints a result as it comes and keeps it for the table of ratios.
fn record(rows: &mut Vec<Row>, system: &'static str, scenario: String, figure: Figure) {
    println!("{system:<28} {scenario:<34} {}", describe(&figure));
    rows.push(Row {
        scenario,
        system,
        figure,
    });
}

fn describe(result: &Figure) -> String {
    match result {
        Figure::Rate(m) => format!(
            "{:>9.0}/s{}  server {:.1} µs/op, clients {:.1} µs/op",
            m.rate,
            m.p50
                .map(|p| format!(" (p50 {:.2} ms)", p.as_secs_f64() * 1e3))
                .unwrap_or_default(),
            m.server_us,
            m.client_us
        ),
        Figure::Lateness(l) => format!(
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms{}",
            l.p50.as_secs_f64() * 1e3,
            l.p99.as_secs_f64() * 1e3,
            l.max.as_secs_f64() * 1e3,
            match l.early {
                0 => String::new(),
                n => format!(", {n} EARLY"),
            }
        ),
    }
}

/// The table of every scenario: each system's figure and Cascade's ratio to it (rates:
/// Cascade / peer; lateness: p99 of the peer / Cascade's, so above 1 is Cascade ahead).
fn print_ratios(rows: &[Row]) {
    let mut names: Vec<&str> = Vec::new();
    for row in rows {
        if !names.contains(&row.scenario.as_str()) {
            names.push(&row.scenario);
        }
    }
    for name in names {
        let of = |system: &str| {
            rows.iter()
                .find(|r| r.scenario == name && r.system == system)
        };
        let Some(cascade) = of("Cascade") else {
            continue;
        };
        let mut line = format!("{name:<34} Cascade {}", short(&cascade.figure));
        for peer in ["Redis", "PostgreSQL", "NATS JetStream"] {
            if let Some(row) = of(peer) {
                line.push_str(&format!(
                    "  | {peer} {} (x{:.2})",
                    short(&row.figure),
                    ratio(&cascade.figure, &row.figure)
                ));
            }
        }
        println!("{line}");
    }
}

fn short(result: &Figure) -> String {
    match result {
        Figure::Rate(m) => format!("{:.0}/s", m.rate),
        Figure::Lateness(l) => format!("p99 {:.1} ms", l.p99.as_secs_f64() * 1e3),
    }
}

fn ratio(cascade: &Figure, peer: &Figure) -> f64 {
    match (cascade, peer) {
        (Figure::Rate(c), Figure::Rate(p)) => c.rate / p.rate.max(f64::MIN_POSITIVE),
        (Figure::Lateness(c), Figure::Lateness(p)) => {
            p.p99.as_secs_f64() / c.p99.as_secs_f64().max(1e-9)
        }
        _ => f64::NAN,
    }
}
