//! `cascade-dispatcher`: serves the dispatcher shards of `dispatcher.shards` over NATS.

use std::path::PathBuf;

use anyhow::{Context, bail};
use cascade_bus::Bus;
use cascade_service::settings::BusKind;
use cascade_service::{Readiness, Settings, serve_admin, shutdown_channel};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade dispatcher: serves its shards' queues over NATS"
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
    cascade_service::logging::init(&settings.log);
    if settings.bus.kind == BusKind::Local {
        bail!(
            "bus.kind is \"local\": a dispatcher process alone has no one to talk to; set bus.kind = \"nats\" (CASCADE__BUS__KIND=nats), or run `cascade standalone` for every service in one process"
        );
    }
    let bus = Bus::connect_nats(&settings.bus.url, "cascade-dispatcher")
        .await
        .with_context(|| format!("connect to NATS at bus.url {}", settings.bus.url))?;
    let (trigger, shutdown) = shutdown_channel();
    tokio::spawn(trigger.on_signal());
    let readiness = Readiness::default();
    let (_, admin) = serve_admin(
        &settings.http.addr,
        readiness.clone(),
        axum::Router::new(),
        shutdown.clone(),
    )
    .await?;
    cascade_dispatcher::run_with_readiness(settings, bus, shutdown, readiness)
        .await
        .context("dispatcher")?;
    admin.await.context("admin port")?;
    Ok(())
}
