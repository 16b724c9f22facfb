//! The pipeline benchmark: a 3-stage pipeline whose stages run the no-op handler,
//! `cascade standalone` with fsync durability, fed by producers enqueuing by pipeline name
//! with `EnqueueBatch` of 100. Prints the events per second through all three stages over a
//! steady window (after a warm-up), the latency of each stage hop (p50/p99, see `hops`),
//! and the disk's raw fdatasync rate measured in the same run.
//!
//! Scenarios: `flow` (producers as fast as the pipeline drains, at most `BACKLOG` events
//! in it: the throughput) and `paced` (a fixed offered rate, by default half of what `flow`
//! reached: the latency below saturation). Default: both.
//!
//! Run: `cargo bench -p cascade-e2e --bench pipeline [-- SCENARIO...]`. Environment:
//! `CASCADE_BENCH_DIR` (default `bench-data/` here; keep it on the disk you measure),
//! `CASCADE_BENCH_SECS` (window, default 20), `CASCADE_BENCH_WARMUP_SECS` (5),
//! `CASCADE_BENCH_PRODUCERS` (8), `CASCADE_BENCH_WORKERS`
//! (stage workers per stage, 1 as in standalone), `CASCADE_BENCH_CONCURRENCY` (handlers
//! per worker, 64), `CASCADE_BENCH_BATCH` (events per take, 256),
//! `CASCADE_BENCH_BACKLOG` (20000), `CASCADE_BENCH_RATE` (events/s offered by `paced`).
//! Cascade's own settings come from `CASCADE__…` variables as for `cascade standalone`
//! (defaults: one shard, fsync), e.g. `CASCADE__CLUSTER__SHARDS=2`.
//! Under `cargo test --all-targets` (no `--bench`) every scenario runs for about a second.

mod cpu;
mod hops;
mod load;
mod standalone;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cascade_client::{Client, api};
use cascade_proto::convert::pipeline_from_proto;
use cascade_service::Settings;
use cascade_stage_worker::Registry;

use crate::hops::{Hops, Percentiles, TimedNoop};
use crate::load::{Load, Pace};
use crate::standalone::Standalone;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

// The allocator of every Cascade binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PIPELINE: &str = "bench";
const STAGES: [&str; 3] = ["first", "second", "third"];
/// Offered by `paced` when neither `CASCADE_BENCH_RATE` nor a `flow` result says.
const FALLBACK_RATE: f64 = 10_000.0;

struct Plan {
    brief: bool,
    warmup: Duration,
    window: Duration,
    probe: Duration,
    producers: usize,
    workers: u32,
    concurrency: u32,
    batch: u32,
    backlog: u64,
    /// Offered by `paced`; `None`: half of what `flow` measured, else `FALLBACK_RATE`.
    rate: Option<f64>,
}

impl Plan {
    /// `cargo bench` passes `--bench`; without it (`cargo test --all-targets`) every
    /// scenario runs briefly, proving the benchmark works without spending minutes on it.
    fn from_args(args: &[String]) -> Plan {
        let brief = !args.iter().any(|a| a == "--bench");
        let secs = |name: &str, full: f64, short: f64| {
            Duration::from_secs_f64(if brief { short } else { env(name, full) })
        };
        Plan {
            brief,
            warmup: secs("CASCADE_BENCH_WARMUP_SECS", 5.0, 0.5),
            window: secs("CASCADE_BENCH_SECS", 20.0, 1.0),
            probe: Duration::from_secs_f64(if brief { 0.2 } else { 3.0 }),
            producers: env("CASCADE_BENCH_PRODUCERS", if brief { 2.0 } else { 8.0 }) as usize,
            workers: env("CASCADE_BENCH_WORKERS", 1.0) as u32,
            concurrency: env("CASCADE_BENCH_CONCURRENCY", 64.0) as u32,
            batch: env("CASCADE_BENCH_BATCH", 256.0) as u32,
            backlog: env("CASCADE_BENCH_BACKLOG", 20_000.0) as u64,
            rate: std::env::var("CASCADE_BENCH_RATE")
                .ok()
                .and_then(|v| v.parse().ok()),
        }
    }
}

fn env(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let plan = Plan::from_args(&args);
    let wanted: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let run = |name: &str| wanted.is_empty() || wanted.iter().any(|w| *w == name);
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .init();
    let scratch = tempfile::tempdir()?;
    let dir = match (std::env::var_os("CASCADE_BENCH_DIR"), plan.brief) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, true) => scratch.path().to_path_buf(),
        (None, false) => PathBuf::from("bench-data"),
    };
    std::fs::create_dir_all(&dir)?;
    let fsync = cascade_store::probe::raw_fsync_rate(&dir, plan.probe)?;
    println!(
        "disk: {fsync:.0} fdatasync/s (raw: 100-byte append + fdatasync, {:?}) in {}",
        plan.probe,
        dir.display()
    );
    println!(
        "standalone; {} stages of no-op, {} worker(s) each with {} handlers and {} per take; {} producers x EnqueueBatch of {}",
        STAGES.len(),
        plan.workers,
        plan.concurrency,
        plan.batch,
        plan.producers,
        load::BATCH
    );
    // Cascade's threads, as `cascade standalone` on this machine's 2 cores; the producers
    // get their own, as another process would.
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cascade")
        .enable_all()
        .build()?;
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("producers")
        .enable_all()
        .build()?;
    let mut most = None;
    if run("flow") {
        let pace = Pace::Backlog(plan.backlog);
        most = Some(scenario(
            &server,
            &client,
            &plan,
            &dir.join("flow"),
            pace,
            fsync,
        )?);
    }
    if run("paced") {
        let half = most.map(|m| m / 2.0);
        let rate = plan.rate.or(half).unwrap_or(FALLBACK_RATE);
        scenario(
            &server,
            &client,
            &plan,
            &dir.join("paced"),
            Pace::Rate(rate),
            fsync,
        )?;
    }
    Ok(())
}

/// One run on a fresh data directory: start, warm up, measure a window, stop. Returns the
/// events per second through all the stages.
fn scenario(
    server: &tokio::runtime::Runtime,
    client: &tokio::runtime::Runtime,
    plan: &Plan,
    data: &Path,
    pace: Pace,
    fsync: f64,
) -> Result<f64, BoxError> {
    if data.exists() {
        std::fs::remove_dir_all(data)?;
    }
    let settings = Settings::load(None, &[("data.dir", data.display().to_string())])?;
    println!(
        "{}: durability {:?}, {} shard(s)",
        data.display(),
        settings.store.durability,
        settings.cluster.shards
    );
    let queues = STAGES.iter().map(|s| format!("{PIPELINE}.{s}")).collect();
    let hops = Arc::new(Hops::new(queues));
    let mut cascade = server.block_on(Standalone::start(settings))?;
    let gateway = cascade.gateway.clone();
    let pipeline = client.block_on(apply_pipeline(&gateway, plan.concurrency))?;
    let mut registry = Registry::new();
    registry.register("noop", TimedNoop(Arc::clone(&hops)));
    {
        let _inside = server.enter();
        cascade.start_stage_workers(
            &pipeline,
            &registry,
            plan.workers,
            plan.concurrency,
            plan.batch,
        )?;
    }
    let measured = client.block_on(measure(&gateway, plan, pace, &hops));
    let stopped = server.block_on(cascade.stop());
    let measured = measured?;
    stopped?;
    // Nothing is read back: a run leaves no data behind.
    std::fs::remove_dir_all(data)?;
    print_report(pace, &measured, &hops.report(), fsync);
    Ok(measured.through as f64 / measured.secs)
}

async fn apply_pipeline(
    gateway: &str,
    concurrency: u32,
) -> Result<cascade_core::Pipeline, BoxError> {
    let stage = |name: &str| api::Stage {
        name: name.into(),
        queue: Some(api::QueueConfig {
            lease: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
            ..Default::default()
        }),
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
            concurrency,
            timeout: Some(prost_types::Duration {
                seconds: 10,
                nanos: 0,
            }),
        }),
        ..Default::default()
    };
    let request = api::Pipeline {
        name: PIPELINE.into(),
        stages: STAGES.iter().map(|s| stage(s)).collect(),
    };
    let client = Client::connect(gateway).await?;
    let applied = client.admin().apply_pipeline(request).await?.into_inner();
    Ok(pipeline_from_proto(&applied).map_err(|e| e.to_string())?)
}

struct Measured {
    secs: f64,
    /// Events that finished the last stage in the window, and entered the first.
    through: u64,
    entered: u64,
    /// Events in the pipeline (ready, delayed or leased, all stages) at the window's end.
    backlog: u64,
    refused: u64,
    cpu: cpu::CpuUse,
}

async fn measure(
    gateway: &str,
    plan: &Plan,
    pace: Pace,
    hops: &Arc<Hops>,
) -> Result<Measured, BoxError> {
    let client = Client::connect(gateway).await?;
    let load = Load::start(gateway, PIPELINE, plan.producers, pace, hops).await?;
    tokio::time::sleep(plan.warmup).await;
    let before = stage_stats(&client).await?;
    let started = Instant::now();
    let cpu = cpu::CpuClock::start();
    hops.measure(true);
    tokio::time::sleep(plan.window).await;
    hops.measure(false);
    let cpu = cpu.stop();
    let after = stage_stats(&client).await?;
    let secs = started.elapsed().as_secs_f64();
    let refused = load.refused.load(std::sync::atomic::Ordering::Relaxed);
    load.stop().await?;
    let last = STAGES.len() - 1;
    Ok(Measured {
        secs,
        through: after[last].completed_total - before[last].completed_total,
        entered: after[0].enqueued_total - before[0].enqueued_total,
        backlog: after.iter().map(|s| s.ready + s.delayed + s.leased).sum(),
        refused,
        cpu,
    })
}

async fn stage_stats(client: &Client) -> Result<Vec<api::QueueStats>, BoxError> {
    let mut all = Vec::new();
    for stage in STAGES {
        let name = format!("{PIPELINE}.{stage}");
        let request = api::QueueStatsRequest { name };
        all.push(client.admin().queue_stats(request).await?.into_inner());
    }
    Ok(all)
}

fn print_report(pace: Pace, m: &Measured, report: &hops::Report, fsync: f64) {
    let scenario = match pace {
        Pace::Backlog(most) => format!("flow (backlog <= {most})"),
        Pace::Rate(rate) => format!("paced ({rate:.0}/s offered)"),
    };
    println!(
        "{scenario}: {:.0} events/s through all {} stages ({} in {:.1} s); {:.0}/s entered; {} left in the pipeline; {} refused   [disk {fsync:.0} fdatasync/s]",
        m.through as f64 / m.secs,
        STAGES.len(),
        m.through,
        m.secs,
        m.entered as f64 / m.secs,
        m.backlog,
        m.refused
    );
    if let (Some(process), Some(machine), Some(cores)) = (m.cpu.process, m.cpu.machine, m.cpu.cores)
    {
        let threads: Vec<String> = m
            .cpu
            .threads
            .iter()
            .map(|(name, used)| format!("{name} {used:.2}"))
            .collect();
        println!(
            "  cpu: this process {process:.2} cores ({}), the machine {machine:.2} of {cores}",
            threads.join(", ")
        );
    }
    let line = |name: String, p: &Percentiles| {
        println!(
            "  {name:<28} p50 {:>8.2} ms   p99 {:>8.2} ms   ({} samples)",
            p.p50.as_secs_f64() * 1e3,
            p.p99.as_secs_f64() * 1e3,
            p.samples
        );
    };
    for (k, (hop, wait)) in report.hop.iter().zip(&report.ready_wait).enumerate() {
        let from = if k == 0 {
            "enqueue".to_string()
        } else {
            format!("stage {k}")
        };
        line(format!("{from} -> stage {}", k + 1), hop);
        line("  of which ready -> handler".to_string(), wait);
    }
    line("enqueue -> last stage".to_string(), &report.end_to_end);
}
