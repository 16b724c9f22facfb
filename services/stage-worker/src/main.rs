//! `cascade-stage-worker`: runs the worker of one stage (or queue) with its handler until
//! SIGTERM or ctrl-c, then drains within `drain_grace` and exits 0.

use std::process::ExitCode;

use std::path::PathBuf;

use anyhow::Context;
use cascade_service::shutdown_channel;
use cascade_stage_worker::StageWorkerConfig;
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade stage worker: runs a handler on the events of one stage or queue"
)]
struct Flags {
    /// Settings file (TOML); the environment (CASCADE__STAGE_WORKER__<KEY>) and flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The gateway's gRPC address [default: http://127.0.0.1:7700].
    #[arg(long)]
    gateway: Option<String>,
    /// The queue to work on (or set pipeline and stage in the config file).
    #[arg(long)]
    queue: Option<String>,
    /// http://host/path, grpc://host:port, grpcs://host:port (TLS) or builtin:<name> (log, noop, sleep:<ms>, fail:<percent>).
    #[arg(long)]
    handler: Option<String>,
    /// Handlers at once [default: the handler's concurrency, 1].
    #[arg(long)]
    concurrency: Option<u32>,
    /// Events per take [default: 16].
    #[arg(long)]
    batch: Option<u32>,
    /// The HTTP admin address (/healthz, /readyz, /metrics) [default: none].
    #[arg(long)]
    http_addr: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    cascade_service::exit_code(serve().await)
}

async fn serve() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let mut overrides = Vec::new();
    let given = [
        ("gateway", flags.gateway),
        ("queue", flags.queue),
        ("handler", flags.handler),
        ("concurrency", flags.concurrency.map(|n| n.to_string())),
        ("batch", flags.batch.map(|n| n.to_string())),
        ("http_addr", flags.http_addr),
    ];
    for (key, value) in given {
        if let Some(value) = value {
            overrides.push((key, value));
        }
    }
    let config = StageWorkerConfig::load(flags.config.as_deref(), &overrides)?;
    let telemetry = cascade_telemetry::init(
        &config.telemetry,
        "cascade-stage-worker",
        env!("CARGO_PKG_VERSION"),
    )?;
    let (trigger, shutdown) = shutdown_channel();
    tokio::spawn(trigger.on_signal());
    let served = cascade_stage_worker::run(config, shutdown).await;
    telemetry.shutdown().await;
    served.context("stage worker")?;
    Ok(())
}
