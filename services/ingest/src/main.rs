//! `cascade-ingest`: the gateway alone, reaching its dispatcher shards over NATS.
//! Flags override the config file, which overrides `CASCADE__…` environment variables.

use std::path::PathBuf;

use anyhow::Context;
use cascade_service::{Process, Settings};
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
    let process = Process::start("cascade-ingest", env!("CARGO_PKG_VERSION"), &settings).await?;
    process.readiness.set(true);
    let served = cascade_ingest::run(settings, process.bus.clone(), process.shutdown.clone()).await;
    process.finish().await;
    served.context("ingest")?;
    Ok(())
}
