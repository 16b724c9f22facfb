//! The store's and the bus's hooks wired into the process's `Metrics` (docs/metrics.md):
//! `cascade_commit_batch_size` and `cascade_fsync_duration_seconds` from a store's group
//! commits, `cascade_checkpoint_hold_seconds` from its writer's holds,
//! `cascade_bus_request_duration_seconds` from the bus's requests. Neither crate knows
//! Prometheus; each calls these once per group commit, hold or request.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::{Bus, RequestObserver, RequestResult};
use cascade_store::CommitObserver;
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::{BusResult, Histogram, StoreKind};

/// The observer of a store's group commits and holds, into the histograms of its `store` label;
/// for `store::open_shard_store`.
pub fn observe_commits(metrics: &Metrics, store: StoreKind) -> Arc<dyn CommitObserver> {
    Arc::new(CommitMetrics {
        batch_size: metrics.commit_batch_size(store),
        fsync: metrics.fsync_duration_seconds(store),
        hold: metrics.checkpoint_hold_seconds(store),
    })
}

struct CommitMetrics {
    batch_size: Histogram,
    fsync: Histogram,
    hold: Histogram,
}

impl CommitObserver for CommitMetrics {
    fn committed(&self, records: usize, fsync: Option<Duration>) {
        if records > 0 {
            self.batch_size.observe(records as f64);
        }
        if let Some(took) = fsync {
            self.fsync.observe(took.as_secs_f64());
        }
    }

    fn held_for_checkpoint(&self, took: Duration) {
        self.hold.observe(took.as_secs_f64());
    }
}

/// Observes bus requests into `cascade_bus_request_duration_seconds{op, result}`.
struct BusMetrics(Metrics);

impl RequestObserver for BusMetrics {
    fn requested(&self, op: &'static str, took: Duration, result: RequestResult) {
        let result = match result {
            RequestResult::Ok => BusResult::Ok,
            RequestResult::Error => BusResult::Error,
            RequestResult::Timeout => BusResult::Timeout,
        };
        self.0
            .bus_request_duration_seconds(op, result)
            .observe(took.as_secs_f64());
    }
}

/// Reports every request of `bus` (and its clones) to `metrics`; once per process.
pub fn observe_bus(bus: &Bus, metrics: &Metrics) {
    if !bus.observe_requests(Arc::new(BusMetrics(metrics.clone()))) {
        tracing::debug!("service.observe_bus: the bus already reports to a registry");
    }
}
