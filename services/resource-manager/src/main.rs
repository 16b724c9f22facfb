//! `cascade-resource-manager`: decides how many handlers each pipeline stage gets, from the
//! stats the dispatcher shards publish on NATS, and applies it through
//! `resource_manager.executor` (`kubernetes`: the scale of each stage's Deployment; `none`:
//! decide and publish only). Serves `/metrics`, `/healthz`, `/readyz` and `/rm/explain` on
//! its admin port (`http.addr`).

use std::process::ExitCode;

use anyhow::Context;
use cascade_resource_manager::{Board, ServeDeps};
use cascade_service::{Process, ServiceFlags, Settings};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade resource manager: shares the handler budget among pipeline stages by priority and backlog"
)]
struct Flags {
    #[command(flatten)]
    service: ServiceFlags,
}

#[tokio::main]
async fn main() -> ExitCode {
    cascade_service::exit_code(serve().await)
}

async fn serve() -> anyhow::Result<()> {
    let flags = Flags::parse();
    let settings = Settings::load(flags.service.config.as_deref(), &flags.service.overrides())?;
    let board = Board::new();
    let process = Process::start_with_routes(
        "cascade-resource-manager",
        env!("CARGO_PKG_VERSION"),
        &settings,
        board.router(),
    )
    .await?;
    let deps = ServeDeps {
        bus: process.bus.clone(),
        metrics: process.metrics.clone(),
        board,
        readiness: process.readiness.clone(),
    };
    let served = cascade_resource_manager::serve(settings, deps, process.shutdown.clone()).await;
    process.finish().await;
    served.context("resource manager")?;
    Ok(())
}
