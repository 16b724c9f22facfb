//! One running dispatcher shard: its store and its three tasks (request loop, outbox pump,
//! stats publisher), started in that order after the store is recovered, and stopped in the
//! order of the shutdown tree: stop taking requests and answer those in flight, stop the
//! pump and the publisher, then close the store (which checkpoints).

use std::sync::Arc;

use cascade_bus::{Bus, subject};
use cascade_service::{Settings, Shutdown};
use tokio::task::JoinHandle;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::{outbox, serve, stats};

pub(crate) struct RunningShard {
    ctx: Arc<ShardContext>,
    requests: JoinHandle<()>,
    pump: JoinHandle<()>,
    stats: JoinHandle<()>,
}

impl RunningShard {
    pub async fn start(
        settings: &Settings,
        shard: u32,
        bus: Bus,
        stopping: Shutdown,
    ) -> Result<RunningShard, DispatcherError> {
        let ctx = ShardContext::open(settings, shard, bus, stopping).await?;
        let subject = subject::dispatcher(&ctx.cluster, shard);
        let requests_in = match ctx.bus.subscribe(&subject).await {
            Ok(subscription) => subscription,
            Err(source) => {
                close(ctx).await?;
                return Err(DispatcherError::Subscribe {
                    shard,
                    subject,
                    source,
                });
            }
        };
        let requests = tokio::spawn(serve::serve(Arc::clone(&ctx), requests_in));
        // Also re-sends what the outbox held when the shard stopped last time.
        let pump = tokio::spawn(outbox::pump(Arc::clone(&ctx)));
        let stats = tokio::spawn(stats::publish(Arc::clone(&ctx)));
        tracing::info!(shard, %subject, "dispatcher.shard.started");
        Ok(RunningShard {
            ctx,
            requests,
            pump,
            stats,
        })
    }

    /// Why the shard cannot go on, if it cannot: its store failed, or a task ended early.
    pub fn failure(&self) -> Option<DispatcherError> {
        let shard = self.ctx.shard;
        if let Some(reason) = self.ctx.store.fatal() {
            return Some(DispatcherError::ShardFailed { shard, reason });
        }
        if self.ctx.stopping.is_triggered() {
            return None;
        }
        let ended = [
            (
                &self.requests,
                "its request loop ended (the bus subscription closed)",
            ),
            (&self.pump, "its outbox pump ended"),
            (&self.stats, "its stats publisher ended"),
        ]
        .into_iter()
        .find(|(task, _)| task.is_finished());
        ended.map(|(_, reason)| DispatcherError::ShardFailed {
            shard,
            reason: reason.into(),
        })
    }

    /// Waits for the tasks (the caller has pulled `stopping`), then closes the store.
    pub async fn stop(self) -> Result<(), DispatcherError> {
        let shard = self.ctx.shard;
        for (task, name) in [
            (self.requests, "request loop"),
            (self.pump, "outbox pump"),
            (self.stats, "stats publisher"),
        ] {
            if let Err(e) = task.await {
                tracing::error!(shard, task = name, error = %e, "dispatcher.task.panicked");
            }
        }
        close(self.ctx).await?;
        tracing::info!(shard, "dispatcher.shard.stopped");
        Ok(())
    }
}

/// Closes the store of a shard whose tasks are all done: it finishes what it holds and
/// checkpoints.
async fn close(ctx: Arc<ShardContext>) -> Result<(), DispatcherError> {
    let shard = ctx.shard;
    let Some(ctx) = Arc::into_inner(ctx) else {
        return Err(DispatcherError::ShardFailed {
            shard,
            reason: "its store is still in use at shutdown".into(),
        });
    };
    let store = ctx.store;
    match tokio::task::spawn_blocking(move || store.shutdown()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(DispatcherError::CloseStore { shard, source }),
        Err(join) => Err(DispatcherError::ShardFailed {
            shard,
            reason: format!("closing the store panicked: {join}"),
        }),
    }
}
