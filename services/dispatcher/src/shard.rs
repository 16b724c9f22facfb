//! One running dispatcher shard: its store and its three tasks (request loop, outbox pump,
//! stats publisher), started in that order after the store is recovered, and stopped in the
//! order of the shutdown tree: stop taking requests and answer those in flight, stop the
//! pump and the publisher, then close the store (which checkpoints).

use std::sync::Arc;

use cascade_bus::{Bus, subject};
use cascade_service::{RunningShard, Settings, ShardCore, ShardError, Shutdown};
use cascade_store::{Shard, Store};
use cascade_telemetry::Metrics;

use crate::context::ShardContext;
use crate::{outbox, serve, stats};

/// Names the dispatcher in its shards' log events, errors and store directories.
pub(crate) const SERVICE: &str = "dispatcher";

impl ShardCore for ShardContext {
    type State = Shard;

    fn bus(&self) -> &Bus {
        &self.bus
    }

    fn store(&self) -> &Store<Shard> {
        &self.store
    }

    fn stopping(&self) -> &Shutdown {
        &self.stopping
    }

    fn into_store(self) -> Store<Shard> {
        self.store
    }
}

/// Recovers dispatcher shard `shard`'s store and starts its tasks.
pub(crate) async fn start(
    settings: &Settings,
    shard: u32,
    bus: Bus,
    metrics: Metrics,
    stopping: Shutdown,
) -> Result<RunningShard<ShardContext>, ShardError> {
    let ctx = ShardContext::open(settings, shard, bus, metrics, stopping).await?;
    let subject = subject::dispatcher(&ctx.cluster, shard);
    RunningShard::start(SERVICE, shard, ctx, subject, |tasks, ctx, requests_in| {
        tasks.spawn_request_loop(serve::serve(Arc::clone(ctx), requests_in));
        // Also re-sends what the outbox held when the shard stopped last time.
        tasks.spawn("outbox pump", outbox::pump(Arc::clone(ctx)));
        tasks.spawn("stats publisher", stats::publish(Arc::clone(ctx)));
    })
    .await
}
