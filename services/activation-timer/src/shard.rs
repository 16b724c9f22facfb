//! One running timer shard: its schedule store, its request loop and its firing loop;
//! stopped in order: stop taking requests, stop firing, close the store (checkpoint).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use cascade_bus::{Bus, subject};
use cascade_service::observe::observe_commits;
use cascade_service::store::open_shard_store;
use cascade_service::{RunningShard, Settings, ShardCore, ShardError, Shutdown};
use cascade_store::{Store, Timer};
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::StoreKind;
use tokio::sync::Notify;

use crate::{firing, serve};

/// Names the timer in its shards' log events, errors and store directories.
pub(crate) const SERVICE: &str = "timer";

/// What the tasks of one timer shard share.
pub(crate) struct TimerShard {
    pub shard: u32,
    pub cluster: String,
    pub store: Store<Timer>,
    pub bus: Bus,
    /// Activations sent per request at most.
    pub batch: usize,
    pub request_timeout: Duration,
    /// When the firing loop means to wake, in µs since the epoch; `firing::AWAKE` while it
    /// looks at the schedule. A new entry due earlier wakes it through `earlier`.
    pub next_wake: AtomicU64,
    pub earlier: Notify,
    pub stopping: Shutdown,
}

impl ShardCore for TimerShard {
    type State = Timer;

    fn bus(&self) -> &Bus {
        &self.bus
    }

    fn store(&self) -> &Store<Timer> {
        &self.store
    }

    fn stopping(&self) -> &Shutdown {
        &self.stopping
    }

    fn into_store(self) -> Store<Timer> {
        self.store
    }
}

/// Opens timer shard `shard`'s schedule and starts its request loop and firing loop.
pub(crate) async fn start(
    settings: &Settings,
    shard: u32,
    bus: Bus,
    metrics: &Metrics,
    stopping: Shutdown,
) -> Result<RunningShard<TimerShard>, ShardError> {
    let ctx = open(settings, shard, bus, metrics, stopping).await?;
    let subject = subject::timer(&ctx.cluster, shard);
    RunningShard::start(SERVICE, shard, ctx, subject, |tasks, ctx, requests_in| {
        tasks.spawn_request_loop(serve::serve(Arc::clone(ctx), requests_in));
        // Fires at once what came due while the shard was down.
        tasks.spawn("firing loop", firing::fire(Arc::clone(ctx)));
    })
    .await
}

async fn open(
    settings: &Settings,
    shard: u32,
    bus: Bus,
    metrics: &Metrics,
    stopping: Shutdown,
) -> Result<Arc<TimerShard>, ShardError> {
    let horizon = settings.timer.horizon;
    let commits = observe_commits(metrics, StoreKind::Timer);
    let store = open_shard_store(settings, SERVICE, shard, Some(commits), move |kv| {
        Timer::open(kv, horizon)
    })
    .await?;
    Ok(Arc::new(TimerShard {
        shard,
        cluster: settings.cluster.name.clone(),
        store,
        bus,
        batch: usize::try_from(settings.timer.batch).unwrap_or(usize::MAX),
        request_timeout: settings.bus.request_timeout,
        next_wake: AtomicU64::new(firing::AWAKE),
        earlier: Notify::new(),
        stopping,
    }))
}
