//! `cascade-dispatcher`: serves the dispatcher shards of `dispatcher.shards` over NATS.

use std::process::ExitCode;

use anyhow::Context;
use cascade_service::{DataFlags, Process, ServiceFlags, Settings};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade dispatcher: serves its shards' queues over NATS"
)]
struct Flags {
    #[command(flatten)]
    service: ServiceFlags,
    #[command(flatten)]
    data: DataFlags,
}

#[tokio::main]
async fn main() -> ExitCode {
    cascade_service::exit_code(serve().await)
}

async fn serve() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let overrides = [flags.service.overrides(), flags.data.overrides()].concat();
    let settings = Settings::load(flags.service.config.as_deref(), &overrides)?;
    let process =
        Process::start("cascade-dispatcher", env!("CARGO_PKG_VERSION"), &settings).await?;
    let served = cascade_dispatcher::run(settings, process.deps(), process.shutdown.clone()).await;
    process.finish().await;
    served.context("dispatcher")?;
    Ok(())
}
