//! The activation timer (DESIGN §1): the only component that waits on clocks for
//! activation. Per shard it keeps a durable schedule of `(activate_at, queue, event id,
//! version)` (`cascade_store::Timer`: the near future in memory, the rest on disk), takes
//! `schedule` and `cancel` batches on `cascade.<cluster>.timer.<shard>` from the dispatcher
//! shard of the same number, and fires `activate` back to it when entries come due.
//!
//! Failure policy: an entry stays in the schedule until the dispatcher acknowledges its
//! activation (a firing is re-sent after a failure or a restart; activation is idempotent).
//! A shard whose store fails, or whose subscription ends, stops every shard of the process
//! and `run` returns the error, so the process exits non-zero.

mod error;
mod firing;
mod serve;
mod shard;

use std::time::Duration;

use cascade_bus::Bus;
use cascade_service::{Readiness, Settings, Shutdown, shutdown_channel};

pub use error::TimerError;
use shard::RunningShard;

/// How often the shards are checked for a failure.
const FAILURE_CHECK: Duration = Duration::from_millis(200);

/// Serves every shard of `settings.timer_shards()` until `shutdown`, then stops them
/// gracefully: no more requests, no more firing, stores closed (checkpointed).
pub async fn run(settings: Settings, bus: Bus, shutdown: Shutdown) -> Result<(), TimerError> {
    run_with_readiness(settings, bus, shutdown, Readiness::default()).await
}

/// [`run`], marking `readiness` ready once every shard serves, and not ready once they stop.
pub async fn run_with_readiness(
    settings: Settings,
    bus: Bus,
    shutdown: Shutdown,
    readiness: Readiness,
) -> Result<(), TimerError> {
    // The shards stop on the caller's shutdown or on the first shard's failure.
    let (stop, stopping) = shutdown_channel();
    let mut shards = Vec::new();
    for shard in settings.timer_shards() {
        match RunningShard::start(&settings, shard, bus.clone(), stopping.clone()).await {
            Ok(running) => shards.push(running),
            Err(e) => {
                stop.trigger();
                // Their errors are logged; the caller needs the reason the start failed.
                let _ = stop_all(shards).await;
                return Err(e);
            }
        }
    }
    readiness.set(true);
    tracing::info!(
        shards = ?settings.timer_shards(),
        cluster = %settings.cluster.name,
        "timer.ready"
    );
    let failure = tokio::select! {
        () = shutdown.wait() => None,
        failure = first_failure(&shards) => Some(failure),
    };
    readiness.set(false);
    stop.trigger();
    if let Some(e) = &failure {
        tracing::error!(error = %e, "timer.failed");
    }
    let stopped = stop_all(shards).await;
    match failure {
        Some(e) => Err(e),
        None => stopped,
    }
}

async fn first_failure(shards: &[RunningShard]) -> TimerError {
    let mut checks = tokio::time::interval(FAILURE_CHECK);
    loop {
        checks.tick().await;
        if let Some(failure) = shards.iter().find_map(RunningShard::failure) {
            return failure;
        }
    }
}

async fn stop_all(shards: Vec<RunningShard>) -> Result<(), TimerError> {
    let mut result = Ok(());
    for shard in shards {
        if let Err(e) = shard.stop().await {
            tracing::error!(error = %e, "timer.stop");
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}
