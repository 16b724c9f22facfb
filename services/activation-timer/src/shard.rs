//! One running timer shard: its schedule store, its request loop and its firing loop;
//! stopped in order: stop taking requests, stop firing, close the store (checkpoint).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use cascade_bus::{Bus, subject};
use cascade_core::SystemClock;
use cascade_service::{Settings, Shutdown};
use cascade_store::{Store, Timer, durable};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::TimerError;
use crate::{firing, serve};

/// What the tasks of one timer shard share.
pub(crate) struct TimerShard {
    pub shard: u32,
    pub cluster: String,
    pub store: Store<Timer>,
    pub bus: Bus,
    pub horizon: Duration,
    /// Activations sent per request at most.
    pub batch: usize,
    pub request_timeout: Duration,
    /// When the firing loop means to wake, in µs since the epoch; `firing::AWAKE` while it
    /// looks at the schedule. A new entry due earlier wakes it through `earlier`.
    pub next_wake: AtomicU64,
    pub earlier: Notify,
    pub stopping: Shutdown,
}

pub(crate) struct RunningShard {
    ctx: Arc<TimerShard>,
    requests: JoinHandle<()>,
    firing: JoinHandle<()>,
}

impl RunningShard {
    pub async fn start(
        settings: &Settings,
        shard: u32,
        bus: Bus,
        stopping: Shutdown,
    ) -> Result<RunningShard, TimerError> {
        let ctx = open(settings, shard, bus, stopping).await?;
        let subject = subject::timer(&ctx.cluster, shard);
        let requests_in = match ctx.bus.subscribe(&subject).await {
            Ok(subscription) => subscription,
            Err(source) => {
                close(ctx).await?;
                return Err(TimerError::Subscribe {
                    shard,
                    subject,
                    source,
                });
            }
        };
        let requests = tokio::spawn(serve::serve(Arc::clone(&ctx), requests_in));
        // Fires at once what came due while the shard was down.
        let firing = tokio::spawn(firing::fire(Arc::clone(&ctx)));
        tracing::info!(shard, %subject, "timer.shard.started");
        Ok(RunningShard {
            ctx,
            requests,
            firing,
        })
    }

    /// Why the shard cannot go on, if it cannot.
    pub fn failure(&self) -> Option<TimerError> {
        let shard = self.ctx.shard;
        if let Some(reason) = self.ctx.store.fatal() {
            return Some(TimerError::ShardFailed { shard, reason });
        }
        if self.ctx.stopping.is_triggered() {
            return None;
        }
        if self.requests.is_finished() {
            return Some(TimerError::ShardFailed {
                shard,
                reason: "its request loop ended (the bus subscription closed)".into(),
            });
        }
        if self.firing.is_finished() {
            return Some(TimerError::ShardFailed {
                shard,
                reason: "its firing loop ended".into(),
            });
        }
        None
    }

    /// Waits for the tasks (the caller has pulled `stopping`), then closes the store.
    pub async fn stop(self) -> Result<(), TimerError> {
        let shard = self.ctx.shard;
        for (task, name) in [
            (self.requests, "request loop"),
            (self.firing, "firing loop"),
        ] {
            if let Err(e) = task.await {
                tracing::error!(shard, task = name, error = %e, "timer.task.panicked");
            }
        }
        close(self.ctx).await?;
        tracing::info!(shard, "timer.shard.stopped");
        Ok(())
    }
}

async fn open(
    settings: &Settings,
    shard: u32,
    bus: Bus,
    stopping: Shutdown,
) -> Result<Arc<TimerShard>, TimerError> {
    let dir = cascade_service::store::shard_dir(settings, "timer", shard);
    let options = cascade_service::store::options(settings);
    let horizon = settings.timer.horizon;
    let open_dir = dir.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let (kv, wal) = durable::recover(&open_dir, &options)?;
        let state = Timer::new(kv, horizon);
        Ok::<_, cascade_store::StoreError>(Store::start(state, wal, options, Arc::new(SystemClock)))
    })
    .await;
    let store = match opened {
        Ok(Ok(store)) => store,
        Ok(Err(source)) => return Err(TimerError::OpenStore { shard, dir, source }),
        Err(join) => {
            return Err(TimerError::ShardFailed {
                shard,
                reason: format!("opening the store panicked: {join}"),
            });
        }
    };
    Ok(Arc::new(TimerShard {
        shard,
        cluster: settings.cluster.name.clone(),
        store,
        bus,
        horizon,
        batch: usize::try_from(settings.timer.batch).unwrap_or(usize::MAX),
        request_timeout: settings.bus.request_timeout,
        next_wake: AtomicU64::new(firing::AWAKE),
        earlier: Notify::new(),
        stopping,
    }))
}

async fn close(ctx: Arc<TimerShard>) -> Result<(), TimerError> {
    let shard = ctx.shard;
    let Some(ctx) = Arc::into_inner(ctx) else {
        return Err(TimerError::ShardFailed {
            shard,
            reason: "its store is still in use at shutdown".into(),
        });
    };
    let store = ctx.store;
    match tokio::task::spawn_blocking(move || store.shutdown()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(TimerError::CloseStore { shard, source }),
        Err(join) => Err(TimerError::ShardFailed {
            shard,
            reason: format!("closing the store panicked: {join}"),
        }),
    }
}
