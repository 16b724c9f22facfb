//! The activation timer: the only component that waits on clocks for
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

use cascade_service::{Deps, Settings, ShardSupervisor, Shutdown};
use cascade_telemetry::metrics::StoreKind;

pub use error::TimerError;

/// Serves every shard of `settings.timer_shards()` until `shutdown`, then stops them
/// gracefully: no more requests, no more firing, stores closed (checkpointed). Marks
/// `deps.readiness` ready once every shard serves, and reports the schedule stores' group
/// commits and fsyncs (`store="timer"`) to `deps.metrics`.
pub async fn run(settings: Settings, deps: Deps, shutdown: Shutdown) -> Result<(), TimerError> {
    let Deps {
        bus,
        readiness,
        metrics,
        ..
    } = deps;
    let supervisor = ShardSupervisor {
        service: shard::SERVICE,
        cluster: &settings.cluster.name,
        shards: settings.timer_shards(),
        readiness,
        metrics: metrics.clone(),
        store: StoreKind::Timer,
    };
    let served = supervisor
        .run(shutdown, |shard, stopping| {
            shard::start(&settings, shard, bus.clone(), &metrics, stopping)
        })
        .await;
    served.map_err(TimerError::from)
}
