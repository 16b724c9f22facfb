//! The stage worker: runs the worker of one pipeline stage (or plain queue)
//! with the handler its `HandlerSpec` names:
//!
//! - `http`: POSTs each event to a URL; the response's status and `cascade-*` headers say
//!   the outcome ([`http_reply`]);
//! - `grpc`: calls the user's `cascade.v1.Handler` service;
//! - `builtin`: an in-process Rust handler given in a [`Registry`] by whoever embeds the
//!   stage worker, or a built-in demo handler (`log`, `noop`, `sleep:<ms>`, `fail:<percent>`).
//!
//! The worker (`cascade_worker`) takes batches with a long poll, runs the handler with the
//! stage's concurrency, extends the leases of running handlers and completes with their
//! outcomes. At the last stage, and on a plain queue, an `advance` is an `ack`; a queue given
//! by a name that is a stage's (`--queue orders.check`) is served as that stage.
//!
//! Failure policy: a handler that fails, times out or answers something not understood
//! gets its event retried with the queue's backoff; the gateway being away is waited out
//! (takes are retried); a gateway that refuses the queue for good (NOT_FOUND, INVALID_ARGUMENT)
//! stops the worker with an error. On shutdown the worker stops taking, releases what it
//! has not started, and gives running handlers `drain_grace` to finish.

mod builtin;
mod config;
mod error;
mod grpc_handler;
mod http_handler;
pub mod http_reply;
mod registry;
mod stage;
mod timed;

use cascade_client::Client;
use cascade_service::{Readiness, Shutdown, serve_admin};
use cascade_telemetry::Metrics;
use cascade_worker::{Worker, WorkerHandle};

pub use config::{DEFAULT_GATEWAY, ENV_PREFIX, StageWorkerConfig, parse_handler_kind};
pub use error::StageWorkerError;
pub use registry::Registry;
pub use stage::{StageContext, StageHandler};

/// Runs the stage worker `config` describes until `shutdown`, then drains and returns.
pub async fn run(config: StageWorkerConfig, shutdown: Shutdown) -> Result<(), StageWorkerError> {
    StageWorker::new(config, &Registry::new(), Metrics::new())?
        .run(shutdown)
        .await
}

/// A stage worker, ready to run; its [`WorkerHandle`] turns its concurrency and batch size.
pub struct StageWorker {
    worker: Worker<StageHandler>,
    stage: StageContext,
    http_addr: Option<String>,
    /// Served at `/metrics` on the admin port, if there is one.
    metrics: Metrics,
}

impl StageWorker {
    /// Checks `config` and builds its handler (in-process ones from `registry`), timing its
    /// calls into `metrics`, the process's registry (`cascade standalone` shares one among
    /// its stage workers). Connects to the gateway lazily, so it may start first. Call it
    /// inside a Tokio runtime.
    pub fn new(
        config: StageWorkerConfig,
        registry: &Registry,
        metrics: Metrics,
    ) -> Result<StageWorker, StageWorkerError> {
        let gateway = Client::connect_lazy(&config.gateway, &config.gateway_options()?)
            .map_err(|e| StageWorkerError::setting("gateway", e.to_string()))?;
        StageWorker::on_client(config, &gateway, registry, metrics)
    }

    /// [`StageWorker::new`] on a client of one's own (`cascade standalone`'s in-process
    /// one): `config.gateway` and its credentials are not used.
    pub fn on_client(
        config: StageWorkerConfig,
        gateway: &Client,
        registry: &Registry,
        metrics: Metrics,
    ) -> Result<StageWorker, StageWorkerError> {
        let plan = config.plan()?;
        let handler = registry.build(
            &plan.handler,
            &plan.stage,
            &plan.handler_credentials,
            &metrics,
        )?;
        let worker = Worker::new(gateway, plan.worker, handler)?;
        Ok(StageWorker {
            worker,
            stage: plan.stage,
            http_addr: plan.http_addr,
            metrics,
        })
    }

    pub fn handle(&self) -> WorkerHandle {
        self.worker.handle()
    }

    pub fn stage(&self) -> &StageContext {
        &self.stage
    }

    /// Serves the admin port (if any) and runs the worker until `shutdown`, then drains.
    pub async fn run(self, shutdown: Shutdown) -> Result<(), StageWorkerError> {
        let readiness = Readiness::default();
        let admin = match &self.http_addr {
            Some(addr) => Some(
                serve_admin(
                    addr,
                    readiness.clone(),
                    self.metrics.router(),
                    shutdown.clone(),
                )
                .await?
                .1,
            ),
            None => None,
        };
        tracing::info!(
            queue = %self.stage.queue,
            pipeline = ?self.stage.pipeline,
            stage = ?self.stage.stage,
            "stage_worker.running"
        );
        readiness.set(true);
        let stopping = {
            let readiness = readiness.clone();
            async move {
                shutdown.wait().await;
                readiness.set(false);
            }
        };
        let ran = self.worker.run_until(stopping).await;
        if let Err(err) = ran {
            // The gateway refused the worker's takes for good: not ready, and the process
            // exits with the error, where waiting for a shutdown would leave it up and
            // answering its probes while it does nothing.
            readiness.set(false);
            if let Some(admin) = admin {
                admin.abort();
            }
            return Err(err.into());
        }
        if let Some(admin) = admin
            && let Err(err) = admin.await
        {
            tracing::error!(error = %err, "stage_worker.admin.died");
        }
        Ok(())
    }
}
