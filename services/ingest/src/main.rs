//! `cascade-ingest`: the gateway alone, reaching its dispatcher shards over NATS.
//! Flags override the config file, which overrides `CASCADE__…` environment variables.

use std::path::PathBuf;

use anyhow::{Context, bail};
use cascade_bus::Bus;
use cascade_service::settings::BusKind;
use cascade_service::{Readiness, Settings, serve_admin, shutdown_channel};
use clap::Parser;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade's gRPC gateway (ingest), one process of a distributed cluster"
)]
struct Args {
    /// Settings file (TOML); see deploy/config/cascade.toml.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// gRPC address (grpc.addr).
    #[arg(long, value_name = "ADDR")]
    grpc_addr: Option<String>,
    /// HTTP admin address: /healthz, /readyz (http.addr).
    #[arg(long, value_name = "ADDR")]
    http_addr: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = Vec::new();
    if let Some(addr) = args.grpc_addr {
        overrides.push(("grpc.addr", addr));
    }
    if let Some(addr) = args.http_addr {
        overrides.push(("http.addr", addr));
    }
    let settings = Settings::load(args.config.as_deref(), &overrides).context("load settings")?;
    cascade_service::logging::init(&settings.log);
    if settings.bus.kind != BusKind::Nats {
        bail!(
            "setting bus.kind: cascade-ingest reaches its shards over NATS, so it needs bus.kind = \"nats\" \
             (CASCADE__BUS__KIND=nats) and bus.url; to run everything in one process use `cascade standalone`"
        );
    }
    let bus = Bus::connect_nats(&settings.bus.url, "cascade-ingest")
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
    .await
    .context("serve the admin port")?;

    readiness.set(true);
    let served = cascade_ingest::run(settings, bus, shutdown).await;
    readiness.set(false);
    // Run returns Ok only after the shutdown signal, which stops the admin port too.
    served.context("ingest")?;
    admin.await.context("admin port task")?;
    Ok(())
}
