//! `cascade standalone`: ingest, every dispatcher and activation-timer shard, and the admin
//! port in one process, over the in-process bus. One shutdown signal (SIGTERM or ctrl-c)
//! stops them all: the gateway stops accepting and finishes its calls, the shards finish
//! what they hold and checkpoint, and the process exits 0.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use cascade_bus::Bus;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest, dispatcher_request};
use cascade_proto::v1::GetQueueRequest;
use cascade_service::{Readiness, Settings, Shutdown, serve_admin, shutdown_channel};

#[derive(clap::Args)]
pub struct Flags {
    /// Settings file (TOML); see deploy/config/cascade.toml.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where the shards keep their stores [default: ./cascade-data].
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The gRPC address [default: 127.0.0.1:7700].
    #[arg(long)]
    grpc_addr: Option<String>,
    /// The HTTP admin address [default: 127.0.0.1:7701].
    #[arg(long)]
    http_addr: Option<String>,
}

/// How long the shards get to answer their first request before start-up gives up.
const SHARDS_READY_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn main(flags: Flags) -> anyhow::Result<()> {
    let mut overrides = Vec::new();
    if let Some(dir) = &flags.data_dir {
        overrides.push(("data.dir", dir.display().to_string()));
    }
    if let Some(addr) = flags.grpc_addr {
        overrides.push(("grpc.addr", addr));
    }
    if let Some(addr) = flags.http_addr {
        overrides.push(("http.addr", addr));
    }
    let mut settings = Settings::load(flags.config.as_deref(), &overrides)?;
    // Standalone is every shard over the in-process bus, whatever a shared file says.
    settings.bus.kind = cascade_service::settings::BusKind::Local;
    settings.dispatcher.shards.clear();
    settings.timer.shards.clear();
    cascade_service::logging::init(&settings.log);
    let (trigger, shutdown) = shutdown_channel();
    tokio::spawn(trigger.on_signal());
    run(settings, shutdown).await
}

pub async fn run(settings: Settings, shutdown: Shutdown) -> anyhow::Result<()> {
    let started = Instant::now();
    let bus = Bus::local();
    let readiness = Readiness::default();
    let (http_addr, http) = serve_admin(
        &settings.http.addr,
        readiness.clone(),
        axum::Router::new(),
        shutdown.clone(),
    )
    .await?;
    let grpc = tokio::net::TcpListener::bind(&settings.grpc.addr)
        .await
        .with_context(|| format!("cannot listen on grpc.addr {}", settings.grpc.addr))?;
    let grpc_addr = grpc.local_addr()?;

    let dispatcher = tokio::spawn(cascade_dispatcher::run(
        settings.clone(),
        bus.clone(),
        shutdown.clone(),
    ));
    let timer = tokio::spawn(cascade_activation_timer::run(
        settings.clone(),
        bus.clone(),
        shutdown.clone(),
    ));
    wait_for_shards(&bus, &settings).await?;
    let ingest = tokio::spawn(cascade_ingest::serve(
        grpc,
        settings.clone(),
        bus.clone(),
        shutdown.clone(),
    ));
    readiness.set(true);
    tracing::info!(
        grpc = %grpc_addr,
        http = %http_addr,
        data = %settings.data.dir.display(),
        shards = settings.cluster.shards,
        started_in = ?started.elapsed(),
        "cascade.standalone.ready"
    );
    eprintln!(
        "cascade standalone: gRPC on {grpc_addr}, HTTP on {http_addr}, data in {} (ready in {} ms)",
        settings.data.dir.display(),
        started.elapsed().as_millis()
    );

    let ingest = ingest.await?;
    readiness.set(false);
    let dispatcher = dispatcher.await?;
    let timer = timer.await?;
    http.await?;
    ingest.context("ingest")?;
    dispatcher.context("dispatcher")?;
    timer.context("activation timer")?;
    eprintln!("cascade standalone: stopped");
    Ok(())
}

/// Waits until every dispatcher shard answers on the bus, so the gateway never opens to
/// requests the shards cannot take yet. A shard answers a lookup of a queue that does not
/// exist with NOT_FOUND: that it answers at all is what counts.
async fn wait_for_shards(bus: &Bus, settings: &Settings) -> anyhow::Result<()> {
    let deadline = Instant::now() + SHARDS_READY_TIMEOUT;
    let probe = DispatcherRequest {
        op: Some(dispatcher_request::Op::GetQueue(GetQueueRequest {
            name: "cascade.startup-probe".into(),
        })),
    };
    for shard in 0..settings.cluster.shards {
        let subject = cascade_bus::subject::dispatcher(&settings.cluster.name, shard);
        loop {
            let answer: Result<DispatcherReply, _> =
                bus.call(&subject, &probe, Duration::from_secs(1)).await;
            match answer {
                Ok(_) => break,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(shard, error = %e, "waiting for the shard");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => anyhow::bail!("dispatcher shard {shard} did not start: {e}"),
            }
        }
    }
    Ok(())
}
