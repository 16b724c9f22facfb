//! [`Worker`]: a handler bound to one queue of a gateway, run until shut down.

use std::future::Future;
use std::sync::Arc;

use cascade_client::Client;

use crate::handle::{Shared, WorkerHandle};
use crate::run_loop::{Ctx, run};
use crate::{Handler, WorkerConfig, WorkerError};

/// Takes events of one queue and runs `H` on them; see the crate docs.
pub struct Worker<H> {
    ctx: Ctx<H>,
}

impl<H: Handler> Worker<H> {
    /// Connects to the gateway at `gateway` (e.g. `http://127.0.0.1:7700`).
    pub async fn connect(
        gateway: &str,
        config: WorkerConfig,
        handler: H,
    ) -> Result<Worker<H>, WorkerError> {
        let client = Client::connect(gateway).await?;
        Worker::new(&client, config, handler)
    }

    /// A worker on an existing connection (for one made lazily, see
    /// [`Client::connect_lazy`]: the worker's takes are retried until the gateway answers).
    pub fn new(
        client: &Client,
        config: WorkerConfig,
        handler: H,
    ) -> Result<Worker<H>, WorkerError> {
        config.validate()?;
        let shared = Arc::new(Shared::new(&config));
        Ok(Worker {
            ctx: Ctx {
                handler: Arc::new(handler),
                client: client.worker_calls(),
                config,
                shared,
            },
        })
    }

    /// Changes the worker's knobs and shuts it down while it runs.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle(Arc::clone(&self.ctx.shared))
    }

    /// Runs until [`WorkerHandle::shutdown`], then drains and returns. Fails only if the
    /// gateway refuses to let it take from its queue (it drains first then too). Not
    /// cancel-safe: dropping the future instead of shutting down leaves the events it holds
    /// leased until their leases expire.
    pub async fn run(self) -> Result<(), WorkerError> {
        run(self.ctx).await
    }

    /// [`Worker::run`], shutting down when `signal` completes, e.g.
    /// `worker.run_until(async { tokio::signal::ctrl_c().await.ok(); })`.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), WorkerError> {
        let handle = self.handle();
        let running = self.run();
        tokio::pin!(running);
        tokio::select! {
            done = &mut running => return done,
            () = signal => handle.shutdown(),
        }
        running.await
    }
}
