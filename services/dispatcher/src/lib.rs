//! The dispatcher (DESIGN §1): owns the events of its shards' queues in every state, and
//! serves them over the bus on `cascade.<cluster>.dispatcher.<shard>`.
//!
//! Per shard: the store (`cascade_store::Shard` behind its write-ahead log, one writer), a
//! request loop that converts each request at the edge (`cascade_proto::convert`) and runs
//! it as one closure on the writer, an outbox pump that forwards hand-offs (schedules to
//! the activation timer, deliveries to other shards) store-and-forward, and a stats
//! publisher. The store implements the semantics; this crate validates, routes and waits.
//! It also turns what the store reports into the process's metrics (`metrics.rs`).
//!
//! Failure policy: a request that fails gets a `Status` reply with its code; a shard whose
//! store fails (a failed fsync) or whose subscription ends stops every shard of the process
//! and `run` returns the error, so the process exits non-zero and recovery replays the log.

mod context;
mod error;
mod metrics;
mod outbox;
mod requests;
mod serve;
mod shard;
mod stats;
mod take;
mod wakeups;

use cascade_bus::Bus;
use cascade_service::{Readiness, Settings, ShardSupervisor, Shutdown};
use cascade_telemetry::Metrics;

pub use error::DispatcherError;

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
    run_with_metrics(settings, bus, shutdown, readiness, Metrics::new()).await
}

/// [`run_with_readiness`], reporting to `metrics` (the process's registry) the shards'
/// enqueues, dead letters, lease expiries, activation lateness, queue depths and group
/// commits (docs/metrics.md).
pub async fn run_with_metrics(
    settings: Settings,
    bus: Bus,
    shutdown: Shutdown,
    readiness: Readiness,
    metrics: Metrics,
) -> Result<(), DispatcherError> {
    let supervisor = ShardSupervisor {
        service: shard::SERVICE,
        cluster: &settings.cluster.name,
        shards: settings.dispatcher_shards(),
        readiness,
    };
    let served = supervisor
        .run(shutdown, |shard, stopping| {
            shard::start(&settings, shard, bus.clone(), metrics.clone(), stopping)
        })
        .await;
    served.map_err(DispatcherError::from)
}
