//! `cascade-ingest`: the gateway alone, reaching its dispatcher shards over NATS.
//! Flags override `CASCADE__…` environment variables, which override the config file.

use std::process::ExitCode;

use anyhow::Context;
use cascade_service::{Process, ServiceFlags, Settings};
use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Cascade's gRPC gateway (ingest), one process of a distributed cluster"
)]
struct Args {
    #[command(flatten)]
    service: ServiceFlags,
    /// The gRPC address (grpc.addr): over the settings file's [default: the file's, else
    /// 127.0.0.1:7700].
    #[arg(long, value_name = "ADDR")]
    grpc_addr: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    cascade_service::exit_code(serve().await)
}

async fn serve() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut overrides = args.service.overrides();
    if let Some(addr) = args.grpc_addr {
        overrides.push(("grpc.addr", addr));
    }
    let settings =
        Settings::load(args.service.config.as_deref(), &overrides).context("load settings")?;
    let status = cascade_ingest::StatusPage::new(&settings);
    let process = Process::start_with_routes(
        "cascade-ingest",
        env!("CARGO_PKG_VERSION"),
        &settings,
        status.router(),
    )
    .await?;
    let status_task = tokio::spawn(status.run(
        settings.clone(),
        process.bus.clone(),
        process.shutdown.clone(),
    ));
    // Ready once the gRPC port is bound (`serve` says so), not before: a client told
    // "ready" must connect.
    let served = cascade_ingest::run(settings, process.deps(), process.shutdown.clone()).await;
    // The status page stops with the gateway (which may have ended without a signal); it
    // never fails the process.
    if !process.shutdown.is_triggered() {
        status_task.abort();
    }
    match status_task.await {
        Ok(Err(e)) => tracing::error!(error = %e, "ingest.status.failed"),
        Err(e) if e.is_panic() => tracing::error!(error = %e, "ingest.status.panicked"),
        _ => {}
    }
    process.finish().await;
    served.context("ingest")?;
    Ok(())
}
