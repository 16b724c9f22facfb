//! The dispatcher (DESIGN §1): owns the events of its shards' queues in every state, and
//! serves them over the bus on `cascade.<cluster>.dispatcher.<shard>`.
//!
//! Per shard: the store (`cascade_store::Shard` behind its write-ahead log, one writer), a
//! request loop that converts each request at the edge (`cascade_proto::convert`) and runs
//! it as one closure on the writer, an outbox pump that forwards hand-offs (schedules to
//! the activation timer, deliveries to other shards) store-and-forward, and a stats
//! publisher. The store implements the semantics; this crate validates, routes and waits.
//!
//! Failure policy: a request that fails gets a `Status` reply with its code; a shard whose
//! store fails (a failed fsync) or whose subscription ends stops every shard of the process
//! and `run` returns the error, so the process exits non-zero and recovery replays the log.

mod context;
mod error;
mod outbox;
mod requests;
mod serve;
mod shard;
mod stats;
mod take;
mod wakeups;

use std::time::Duration;

use cascade_bus::Bus;
use cascade_service::{Readiness, Settings, Shutdown, shutdown_channel};

pub use error::DispatcherError;
use shard::RunningShard;

/// How often the shards are checked for a failure.
const FAILURE_CHECK: Duration = Duration::from_millis(200);

/// Serves every shard of `settings.dispatcher_shards()` until `shutdown`, then stops them
/// gracefully (see `shard`).
pub async fn run(settings: Settings, bus: Bus, shutdown: Shutdown) -> Result<(), DispatcherError> {
    run_with_readiness(settings, bus, shutdown, Readiness::default()).await
}

/// [`run`], marking `readiness` ready once every shard serves, and not ready once they stop.
pub async fn run_with_readiness(
    settings: Settings,
    bus: Bus,
    shutdown: Shutdown,
    readiness: Readiness,
) -> Result<(), DispatcherError> {
    // The shards stop on the caller's shutdown or on the first shard's failure.
    let (stop, stopping) = shutdown_channel();
    let mut shards = Vec::new();
    for shard in settings.dispatcher_shards() {
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
        shards = ?settings.dispatcher_shards(),
        cluster = %settings.cluster.name,
        "dispatcher.ready"
    );
    let failure = tokio::select! {
        () = shutdown.wait() => None,
        failure = first_failure(&shards) => Some(failure),
    };
    readiness.set(false);
    stop.trigger();
    if let Some(e) = &failure {
        tracing::error!(error = %e, "dispatcher.failed");
    }
    let stopped = stop_all(shards).await;
    match failure {
        Some(e) => Err(e),
        None => stopped,
    }
}

async fn first_failure(shards: &[RunningShard]) -> DispatcherError {
    let mut checks = tokio::time::interval(FAILURE_CHECK);
    loop {
        checks.tick().await;
        if let Some(failure) = shards.iter().find_map(RunningShard::failure) {
            return failure;
        }
    }
}

/// Stops every shard; the first error is returned, the others logged.
async fn stop_all(shards: Vec<RunningShard>) -> Result<(), DispatcherError> {
    let mut result = Ok(());
    for shard in shards {
        if let Err(e) = shard.stop().await {
            tracing::error!(error = %e, "dispatcher.stop");
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}
