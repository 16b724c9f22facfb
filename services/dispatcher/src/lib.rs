//! The dispatcher: owns the events of its shards' queues in every state, and
//! serves them over the bus on `cascade.<cluster>.dispatcher.<shard>`.
//!
//! Per shard: the store (`cascade_store::Shard` behind its write-ahead log, one writer), a
//! request loop that takes the gateway's validated values as they are in one process and
//! converts every other request at the edge (`cascade_proto::convert`), and runs each as one
//! closure on the writer, an outbox pump that forwards hand-offs (schedules to
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

use cascade_service::{Deps, Settings, ShardSupervisor, Shutdown};
use cascade_telemetry::metrics::StoreKind;

pub use error::DispatcherError;

/// Serves every shard of `settings.dispatcher_shards()` until `shutdown`, then stops them
/// gracefully (see `shard`). Marks `deps.readiness` ready once every shard serves, and
/// reports to `deps.metrics` the shards' enqueues, dead letters, lease expiries, activation
/// lateness, queue depths and group commits (docs/metrics.md).
pub async fn run(
    settings: Settings,
    deps: Deps,
    shutdown: Shutdown,
) -> Result<(), DispatcherError> {
    let Deps {
        bus,
        readiness,
        metrics,
        ..
    } = deps;
    let supervisor = ShardSupervisor {
        service: shard::SERVICE,
        cluster: &settings.cluster.name,
        shards: settings.dispatcher_shards(),
        readiness,
        metrics: metrics.clone(),
        store: StoreKind::Dispatcher,
    };
    let served = supervisor
        .run(shutdown, |shard, stopping| {
            shard::start(&settings, shard, bus.clone(), metrics.clone(), stopping)
        })
        .await;
    served.map_err(DispatcherError::from)
}
