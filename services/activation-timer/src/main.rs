//! `cascade-activation-timer`: serves the timer shards of `timer.shards` over NATS.

use std::path::PathBuf;

use anyhow::Context;
use cascade_service::{Process, Settings};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade activation timer: keeps its shards' schedules and fires activations over NATS"
)]
struct Flags {
    /// Settings file (TOML); see deploy/config/cascade.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the shards keep their stores [default: ./cascade-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The HTTP admin address (/healthz, /readyz) [default: 127.0.0.1:7701].
    #[arg(long)]
    http_addr: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let mut overrides = Vec::new();
    if let Some(dir) = &flags.data_dir {
        overrides.push(("data.dir", dir.display().to_string()));
    }
    if let Some(addr) = flags.http_addr {
        overrides.push(("http.addr", addr));
    }
    let settings = Settings::load(flags.config.as_deref(), &overrides)?;
    let process = Process::start(
        "cascade-activation-timer",
        env!("CARGO_PKG_VERSION"),
        &settings,
    )
    .await?;
    let served = cascade_activation_timer::run_with_readiness(
        settings,
        process.bus.clone(),
        process.shutdown.clone(),
        process.readiness.clone(),
    )
    .await;
    process.finish().await;
    served.context("activation timer")?;
    Ok(())
}
