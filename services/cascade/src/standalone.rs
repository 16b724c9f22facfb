//! `cascade standalone`: ingest, every dispatcher and activation-timer shard, a stage worker
//! per pipeline stage, the resource manager over those workers (`rm.rs`) and the admin port
//! (with the status page at `/`) in one process, over the in-process bus. One shutdown
//! signal (SIGTERM or ctrl-c) stops them all: the gateway stops accepting and finishes its
//! calls, the shards finish what they hold and checkpoint, and the process exits 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{rm, stages};
use anyhow::Context;
use cascade_bus::Bus;
use cascade_client::Client;
use cascade_service::{
    DataFlags, Deps, Readiness, ServiceFlags, Settings, Shutdown, ShutdownTrigger, serve_admin,
    shutdown_channel,
};
use tokio::task::{JoinHandle, JoinSet};

#[derive(clap::Args)]
pub struct Flags {
    #[command(flatten)]
    service: ServiceFlags,
    #[command(flatten)]
    data: DataFlags,
    /// The gRPC address (grpc.addr): over the settings file's [default: the file's, else
    /// 127.0.0.1:7700].
    #[arg(long, value_name = "ADDR")]
    grpc_addr: Option<String>,
}

pub async fn main(flags: Flags) -> anyhow::Result<()> {
    let mut overrides = [flags.service.overrides(), flags.data.overrides()].concat();
    if let Some(addr) = flags.grpc_addr {
        overrides.push(("grpc.addr", addr));
    }
    let mut settings = Settings::load(flags.service.config.as_deref(), &overrides)?;
    // Standalone is every shard over the in-process bus, whatever a shared file says.
    settings.bus.kind = cascade_service::settings::BusKind::Local;
    settings.dispatcher.shards.clear();
    settings.timer.shards.clear();
    let telemetry =
        cascade_telemetry::init(&settings.telemetry, "cascade", env!("CARGO_PKG_VERSION"))?;
    let (trigger, shutdown) = shutdown_channel();
    tokio::spawn(trigger.on_signal());
    let result = run(settings, shutdown).await;
    telemetry.shutdown().await;
    result
}

/// The addresses bound, which differ from the settings' when those ask for port 0.
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
}

pub async fn run(settings: Settings, shutdown: Shutdown) -> anyhow::Result<()> {
    run_with(settings, shutdown, |_| {}).await
}

/// `run`, calling `on_ready` with the bound addresses once everything serves.
pub async fn run_with(
    settings: Settings,
    shutdown: Shutdown,
    on_ready: impl FnOnce(Bound),
) -> anyhow::Result<()> {
    let started = Instant::now();
    let bus = Bus::local();
    // The services stop on the caller's signal or when any of them ends (a failed shard).
    let (stop, stopping) = shutdown_channel();
    let readiness = Readiness::default();
    // One registry for every service here, so that one `/metrics` shows them all.
    let metrics =
        cascade_telemetry::Metrics::with_queue_series(settings.telemetry.max_queue_series);
    cascade_service::observe::observe_bus(&bus, &metrics);
    // The manager turns standalone's stage workers: without them it has nothing to run.
    let local_rm =
        rm::Local::new(settings.resource_manager.enabled && settings.standalone.stage_workers);
    let (auth, identities) = cascade_service::auth::load(&settings.auth)?;
    if let Some(identities) = identities {
        tokio::spawn(identities.run(stopping.clone()));
    }
    let status = cascade_ingest::StatusPage::new(&settings);
    let operators = local_rm.explain_route().merge(status.router());
    let admin_routes = metrics
        .router()
        .merge(cascade_service::auth::operators_only(
            operators,
            Arc::clone(&auth),
        ));
    let (http_addr, http) = serve_admin(
        &settings.http.addr,
        readiness.clone(),
        admin_routes,
        stopping.clone(),
    )
    .await?;
    let grpc = cascade_ingest::bind(&settings).await?;
    let grpc_addr = grpc.local_addr()?;
    warn_when_open(&settings, grpc_addr);
    // Standalone's own clients (its stage workers) reach the gateway without leaving the
    // process: no TLS, no token, no socket.
    let (own_clients, in_process) = cascade_ingest::in_process();

    let mut services = JoinSet::new();
    let (dispatcher_ready, timer_ready) = (readiness.part(), readiness.part());
    // Every service on the one bus and the one registry, each with its own readiness (whose
    // conditions, a shard's disk alarm, show on the process's `/readyz`).
    let deps = |readiness: &Readiness| Deps {
        bus: bus.clone(),
        readiness: readiness.clone(),
        metrics: metrics.clone(),
        auth: Arc::clone(&auth),
    };
    services.spawn(named(
        "dispatcher",
        cascade_dispatcher::run(settings.clone(), deps(&dispatcher_ready), stopping.clone()),
    ));
    services.spawn(named(
        "activation timer",
        cascade_activation_timer::run(settings.clone(), deps(&timer_ready), stopping.clone()),
    ));
    // The gateway opens only once every shard serves, so no request meets an absent shard;
    // a shard that cannot open (a damaged store, another cluster's) ends the start here.
    let shards_ready = [&dispatcher_ready, &timer_ready];
    let mut failure = wait_for_shards(&mut services, shards_ready, &shutdown).await;
    if failure.is_none() && !shutdown.is_triggered() {
        failure = apply_settings_pipelines(&settings, &bus).await.err();
    }
    // Told to stop before it served, or unable to: the shards stop as at any other stop
    // (their last checkpoint taken), not dropped with the task set.
    if failure.is_some() || shutdown.is_triggered() {
        stop.trigger();
        while services.join_next().await.is_some() {}
        http.await?;
        return failure.map_or(Ok(()), Err);
    }
    services.spawn(named(
        "ingest",
        cascade_ingest::serve(
            cascade_ingest::Listeners {
                tcp: grpc,
                in_process: Some(in_process),
            },
            settings.clone(),
            deps(&Readiness::default()),
            stopping.clone(),
        ),
    ));
    services.spawn(named(
        "status page",
        status.run(settings.clone(), bus.clone(), stopping.clone()),
    ));
    let (stop_stages, stage_workers) = start_stage_workers(
        &settings,
        Client::in_process(own_clients.channel(), own_clients.worker()),
        bus.clone(),
        metrics.clone(),
        local_rm,
        readiness.part(),
        &mut services,
    );
    readiness.set(true);
    let bound = Bound {
        grpc: grpc_addr,
        http: http_addr,
    };
    announce(&settings, bound, started);
    on_ready(bound);

    let mut failure = None;
    tokio::select! {
        _ = shutdown.wait() => {}
        Some(ended) = services.join_next() => failure = Some(end_failure(ended)),
    }
    readiness.set(false);
    stop_stages.trigger();
    let _ = stage_workers.await;
    stop.trigger();
    while let Some(ended) = services.join_next().await {
        if let Err(e) = ended? {
            tracing::error!(error = %cascade_core::error::describe(e.as_ref()), "cascade.standalone.service_failed");
            failure.get_or_insert(e);
        }
    }
    http.await?;
    match failure {
        Some(e) => Err(e),
        None => {
            eprintln!("cascade standalone: stopped");
            Ok(())
        }
    }
}

/// The pipelines of the settings file, applied as `ApplyPipeline` would.
async fn apply_settings_pipelines(settings: &Settings, bus: &Bus) -> anyhow::Result<()> {
    for (i, pipeline) in settings.pipelines.iter().enumerate() {
        cascade_ingest::apply_pipeline(settings, bus, pipeline)
            .await
            .with_context(|| {
                format!("apply pipelines[{i}] ({}) from the settings", pipeline.name)
            })?;
    }
    Ok(())
}

/// Waits until every shard in `ready` serves, or the shutdown. A service that ends first
/// (a shard whose store would not open) is the error returned.
async fn wait_for_shards(
    services: &mut JoinSet<anyhow::Result<()>>,
    ready: [&Readiness; 2],
    shutdown: &Shutdown,
) -> Option<anyhow::Error> {
    while !ready.iter().all(|r| r.is_ready()) {
        tokio::select! {
            Some(ended) = services.join_next() => return Some(end_failure(ended)),
            _ = shutdown.wait() => return None,
            _ = tokio::time::sleep(Duration::from_millis(2)) => {}
        }
    }
    None
}

/// Why a service ended: every end before shutdown is a failure.
fn end_failure(ended: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Error {
    match ended {
        Ok(Err(e)) => e,
        Ok(Ok(())) => anyhow::anyhow!("a service stopped on its own"),
        Err(join) => anyhow::Error::new(join).context("a service panicked"),
    }
}

/// Starts the stage supervisor and, when enabled, the resource manager over its workers
/// (neither with `standalone.stage_workers = false`).
/// Stage workers are clients of the gateway, like any other worker. They stop first on
/// shutdown (the trigger returned), so that what they release and complete still reaches
/// the shards; the manager stops with them, as there is nothing left to manage.
fn start_stage_workers(
    settings: &Settings,
    gateway: Client,
    bus: Bus,
    metrics: cascade_telemetry::Metrics,
    local_rm: rm::Local,
    readiness: Readiness,
    services: &mut JoinSet<anyhow::Result<()>>,
) -> (ShutdownTrigger, JoinHandle<()>) {
    let (stop_stages, stages_stopping) = shutdown_channel();
    if !settings.standalone.stage_workers {
        return (stop_stages, tokio::spawn(async {}));
    }
    let (managed, manager) = local_rm.split(settings, bus, metrics, stages_stopping.clone());
    if let Some(manager) = manager {
        services.spawn(named("resource manager", manager));
    }
    let supervisor = tokio::spawn(stages::supervise(
        gateway,
        managed,
        readiness,
        stages_stopping,
    ));
    (stop_stages, supervisor)
}

/// Says at start when anyone who reaches the gRPC port may do anything, and that it is fine
/// on loopback.
fn warn_when_open(settings: &Settings, grpc: SocketAddr) {
    let open = cascade_ingest::warn_when_open(settings, grpc, "cascade.standalone");
    if !settings.auth.enabled && !open {
        eprintln!(
            "cascade standalone: authentication is off (auth.enabled = false): fine on loopback, where only this machine's users reach the port"
        );
    }
}

fn announce(settings: &Settings, bound: Bound, started: Instant) {
    tracing::info!(
        grpc = %bound.grpc,
        http = %bound.http,
        data = %settings.data.dir.display(),
        shards = settings.cluster.shards,
        pipelines = settings.pipelines.len(),
        resource_manager = settings.resource_manager.enabled,
        started_in = ?started.elapsed(),
        "cascade.standalone.ready"
    );
    eprintln!(
        "cascade standalone: gRPC on {}, HTTP on {}, data in {} (ready in {} ms)",
        bound.grpc,
        bound.http,
        settings.data.dir.display(),
        started.elapsed().as_millis()
    );
}

/// A service's run, its error named after it.
async fn named<E>(
    name: &'static str,
    run: impl Future<Output = Result<(), E>>,
) -> anyhow::Result<()>
where
    E: std::error::Error + Send + Sync + 'static,
{
    run.await.with_context(|| format!("{name} failed"))
}
