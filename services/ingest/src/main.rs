//! `cascade-ingest`: the gateway alone, reaching its dispatcher shards over NATS.
//! Flags override `CASCADE__…` environment variables, which override the config file.

use anyhow::Context;
use cascade_service::{Process, ServiceFlags, Settings};
use clap::Parser;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade's gRPC gateway (ingest), one process of a distributed cluster"
)]
struct Args {
    #[command(flatten)]
    service: ServiceFlags,
    /// gRPC address (grpc.addr) [default: 127.0.0.1:7700].
    #[arg(long, value_name = "ADDR")]
    grpc_addr: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = args.service.overrides();
    if let Some(addr) = args.grpc_addr {
        overrides.push(("grpc.addr", addr));
    }
    let settings =
        Settings::load(args.service.config.as_deref(), &overrides).context("load settings")?;
    let process = Process::start("cascade-ingest", env!("CARGO_PKG_VERSION"), &settings).await?;
    process.readiness.set(true);
    let served = cascade_ingest::run(settings, process.bus.clone(), process.shutdown.clone()).await;
    process.finish().await;
    served.context("ingest")?;
    Ok(())
}
