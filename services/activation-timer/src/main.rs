//! `cascade-activation-timer`: serves the timer shards of `timer.shards` over NATS.

use std::process::ExitCode;

use anyhow::Context;
use cascade_service::{DataFlags, Process, ServiceFlags, Settings};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade activation timer: keeps its shards' schedules and fires activations over NATS"
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
    let process = Process::start(
        "cascade-activation-timer",
        env!("CARGO_PKG_VERSION"),
        &settings,
    )
    .await?;
    let served =
        cascade_activation_timer::run(settings, process.deps(), process.shutdown.clone()).await;
    process.finish().await;
    served.context("activation timer")?;
    Ok(())
}
