//! `cascade standalone` composed in the benchmark's process, as `services/cascade` composes
//! it: the dispatcher and activation-timer shards and the gateway over the in-process bus,
//! and one stage worker per stage, reaching the gateway from inside the process as
//! standalone's do (the producers use loopback gRPC). The stage workers get the benchmark's
//! registry, so that `builtin:noop` is the timing no-op.

use std::time::Duration;

use cascade_bus::Bus;
use cascade_client::Client;
use cascade_core::Pipeline;
use cascade_service::{Deps, Readiness, Settings, Shutdown, ShutdownTrigger, shutdown_channel};
use cascade_stage_worker::{Registry, StageWorker, StageWorkerConfig};
use tokio::task::JoinHandle;

use crate::BoxError;

/// How long the shards get to report ready.
const READY_WITHIN: Duration = Duration::from_secs(60);

type Service = JoinHandle<Result<(), String>>;

pub struct Standalone {
    pub gateway: String,
    /// The stage workers' client, inside the process.
    own_client: Client,
    services: Vec<Service>,
    stop_services: ShutdownTrigger,
    workers: Vec<Service>,
    stop_workers: ShutdownTrigger,
    workers_stopping: Shutdown,
}

impl Standalone {
    /// Starts the shards, waits until they serve, then opens the gateway on a loopback port.
    pub async fn start(settings: Settings) -> Result<Standalone, BoxError> {
        let bus = Bus::local();
        let (stop_services, stopping) = shutdown_channel();
        let (dispatcher_ready, timer_ready) = (Readiness::default(), Readiness::default());
        let mut services: Vec<Service> = Vec::new();
        let deps = |readiness: &Readiness| Deps {
            readiness: readiness.clone(),
            ..Deps::new(bus.clone())
        };
        let (s, p, d) = (settings.clone(), deps(&dispatcher_ready), stopping.clone());
        services.push(tokio::spawn(async move {
            let ran = cascade_dispatcher::run(s, p, d).await;
            ran.map_err(|e| format!("dispatcher: {e}"))
        }));
        let (s, p, d) = (settings.clone(), deps(&timer_ready), stopping.clone());
        services.push(tokio::spawn(async move {
            let ran = cascade_activation_timer::run(s, p, d).await;
            ran.map_err(|e| format!("activation timer: {e}"))
        }));
        let started = tokio::time::Instant::now();
        while !(dispatcher_ready.is_ready() && timer_ready.is_ready()) {
            if let Some(ended) = services.iter().position(|s| s.is_finished()) {
                let outcome = services.swap_remove(ended).await?;
                return Err(format!("a shard stopped while starting: {outcome:?}").into());
            }
            if started.elapsed() > READY_WITHIN {
                return Err("the shards did not report ready".into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let gateway = format!("http://{}", listener.local_addr()?);
        let (own_clients, in_process) = cascade_ingest::in_process();
        let listeners = cascade_ingest::Listeners {
            tcp: listener,
            in_process: Some(in_process),
        };
        services.push(tokio::spawn(async move {
            let served = cascade_ingest::serve(listeners, settings, Deps::new(bus), stopping).await;
            served.map_err(|e| format!("ingest: {e}"))
        }));
        let (stop_workers, workers_stopping) = shutdown_channel();
        Ok(Standalone {
            gateway,
            own_client: Client::in_process(own_clients.channel(), own_clients.worker()),
            services,
            stop_services,
            workers: Vec::new(),
            stop_workers,
            workers_stopping,
        })
    }

    /// Starts `workers` workers for every stage of `pipeline` (standalone starts one), with
    /// `concurrency` handlers at once and `batch` events per take each.
    pub fn start_stage_workers(
        &mut self,
        pipeline: &Pipeline,
        registry: &Registry,
        workers: u32,
        concurrency: u32,
        batch: u32,
    ) -> Result<(), BoxError> {
        let stages = pipeline.stages.iter();
        for stage in stages.flat_map(|s| std::iter::repeat_n(s, workers as usize)) {
            let mut config = StageWorkerConfig::for_stage(pipeline, &stage.name)?;
            config.concurrency = Some(concurrency);
            config.batch = batch;
            config.poll_wait = Duration::from_secs(1);
            let metrics = cascade_telemetry::Metrics::new();
            let worker = StageWorker::on_client(config, &self.own_client, registry, metrics)?;
            let stopping = self.workers_stopping.clone();
            self.workers.push(tokio::spawn(async move {
                let ran = worker.run(stopping).await;
                ran.map_err(|e| format!("stage worker: {e}"))
            }));
        }
        Ok(())
    }

    /// Stops the stage workers (they drain), then the gateway and the shards (they
    /// checkpoint), as standalone's shutdown does; the first failure of any is the error.
    pub async fn stop(self) -> Result<(), BoxError> {
        self.stop_workers.trigger();
        let mut failure = None;
        for task in self.workers {
            failure = failure.or(task.await?.err());
        }
        self.stop_services.trigger();
        for task in self.services {
            failure = failure.or(task.await?.err());
        }
        failure.map_or(Ok(()), |f| Err(f.into()))
    }
}
