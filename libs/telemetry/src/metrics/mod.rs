//! Every Prometheus metric a Cascade process exports, declared once (`docs/metrics.md`
//! documents each). One `Metrics` per process: `main` creates it, hands clones to each
//! service's `run` (and to the bus) and merges `router()` into the admin port, so that
//! `cascade standalone` shows every service's metrics on one `/metrics`. It is passed
//! around rather than global so that tests get a registry of their own.
//!
//! Counter and histogram accessors return the handle (an `Arc` clone): a hot path may keep
//! it instead of looking its label set up each time. Gauges are set by the periodic
//! reporters that own them.

mod http;
mod labels;
mod queue_series;

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

pub use http::OPENMETRICS_CONTENT_TYPE;
use labels::{
    BusLabels, DeadLetterLabels, DepthLabels, EnqueueLabels, FailedMoveLabels, HandlerLabels,
    QueueLabels, RpcLabels, StageLabels, StoreLabels, StoreShardLabels,
};
pub use labels::{
    BusResult, DeadLetterReason, EnqueueResult, EnqueueRpc, FailedMove, HandlerOutcome, QueueState,
    StoreKind,
};
/// The handle types the accessors return, so that callers need no `prometheus-client`.
pub use prometheus_client::metrics::{counter::Counter, histogram::Histogram};
use queue_series::QueueSeries;
pub use queue_series::{DEFAULT_QUEUE_SERIES, OTHER_QUEUES};

/// The exposed names. Counters are registered without `_total`, which the exposition adds
/// to their samples (their `# TYPE` line names them without it).
pub const METRIC_NAMES: &[&str] = &[
    "cascade_enqueue_total",
    "cascade_enqueue_duration_seconds",
    "cascade_queue_depth",
    "cascade_dead_letter_total",
    "cascade_lease_expired_total",
    "cascade_move_failed_total",
    "cascade_disk_free_bytes",
    "cascade_disk_alarm",
    "cascade_activation_lateness_seconds",
    "cascade_commit_batch_size",
    "cascade_fsync_duration_seconds",
    "cascade_checkpoint_hold_seconds",
    "cascade_handler_duration_seconds",
    "cascade_bus_request_duration_seconds",
    "cascade_rm_desired_handlers",
    "cascade_stage_handlers",
];

/// Request-scale latencies: 0.5 ms to 30 s.
const LATENCY_BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// fdatasync: 50 µs (a write-back cache) to 1 s (a struggling network volume).
const FSYNC_BUCKETS: [f64; 14] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Lateness: the 5 ms target sits mid-range; minutes show up after an outage.
const LATENESS_BUCKETS: [f64; 17] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
];
/// Mutations per group commit: powers of two, 1 to 4096.
const BATCH_BUCKETS: [f64; 13] = [
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn fsync() -> Histogram {
    Histogram::new(FSYNC_BUCKETS)
}

fn batch() -> Histogram {
    Histogram::new(BATCH_BUCKETS)
}

/// The process's metrics; cloning is cheap and shares them.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    queue_series: Mutex<QueueSeries>,
    enqueue_total: Family<EnqueueLabels, Counter>,
    enqueue_duration: Histograms<RpcLabels>,
    queue_depth: Family<DepthLabels, Gauge>,
    dead_letter_total: Family<DeadLetterLabels, Counter>,
    lease_expired_total: Family<QueueLabels, Counter>,
    move_failed_total: Family<FailedMoveLabels, Counter>,
    disk_free_bytes: Family<StoreShardLabels, Gauge>,
    disk_alarm: Family<StoreShardLabels, Gauge>,
    activation_lateness: Histogram,
    commit_batch_size: Histograms<StoreLabels>,
    fsync_duration: Histograms<StoreLabels>,
    checkpoint_hold: Histograms<StoreLabels>,
    handler_duration: Histograms<HandlerLabels>,
    bus_request_duration: Histograms<BusLabels>,
    rm_desired_handlers: Family<StageLabels, Gauge>,
    stage_handlers: Family<StageLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// With [`DEFAULT_QUEUE_SERIES`] queue families labelled apart.
    pub fn new() -> Metrics {
        Metrics::with_queue_series(DEFAULT_QUEUE_SERIES)
    }

    /// With at most `cap` queue families labelled apart (`telemetry.max_queue_series`).
    pub fn with_queue_series(cap: usize) -> Metrics {
        let mut registry = Registry::default();
        let enqueue_total = Family::default();
        registry.register(
            "cascade_enqueue",
            "Events enqueued, by queue family and whether the event was new or a duplicate",
            enqueue_total.clone(),
        );
        let enqueue_duration = Histograms::new_with_constructor(latency as fn() -> Histogram);
        registry.register_with_unit(
            "cascade_enqueue_duration",
            "Enqueue and EnqueueBatch calls, from request to answer (durable commit included)",
            Unit::Seconds,
            enqueue_duration.clone(),
        );
        let queue_depth = Family::default();
        registry.register(
            "cascade_queue_depth",
            "Events stored, by queue family, state and dispatcher shard",
            queue_depth.clone(),
        );
        let dead_letter_total = Family::default();
        registry.register(
            "cascade_dead_letter",
            "Events moved to a dead-letter queue, by source queue family and reason",
            dead_letter_total.clone(),
        );
        let lease_expired_total = Family::default();
        registry.register(
            "cascade_lease_expired",
            "Leases that expired without an outcome, by queue family",
            lease_expired_total.clone(),
        );
        let move_failed_total = Family::default();
        registry.register(
            "cascade_move_failed",
            "Moves of an event (to its dead-letter queue, to the next queue) that failed, by queue family and step; the event was kept or dead-lettered instead",
            move_failed_total.clone(),
        );
        let disk_free_bytes = Family::default();
        registry.register_with_unit(
            "cascade_disk_free",
            "Free space of the filesystem holding a shard's data directory",
            Unit::Bytes,
            disk_free_bytes.clone(),
        );
        let disk_alarm = Family::default();
        registry.register(
            "cascade_disk_alarm",
            "1 while a shard's free disk space is below store.min_free_bytes: enqueues, updates and hand-offs are refused",
            disk_alarm.clone(),
        );
        let activation_lateness = Histogram::new(LATENESS_BUCKETS);
        registry.register_with_unit(
            "cascade_activation_lateness",
            "How long after its activation time a delayed event became ready",
            Unit::Seconds,
            activation_lateness.clone(),
        );
        let commit_batch_size = Histograms::new_with_constructor(batch as fn() -> Histogram);
        registry.register(
            "cascade_commit_batch_size",
            "Mutations made durable by one write-ahead-log group commit",
            commit_batch_size.clone(),
        );
        let fsync_duration = Histograms::new_with_constructor(fsync as fn() -> Histogram);
        registry.register_with_unit(
            "cascade_fsync_duration",
            "Time of one write-ahead-log fdatasync",
            Unit::Seconds,
            fsync_duration.clone(),
        );
        let checkpoint_hold = Histograms::new_with_constructor(latency as fn() -> Histogram);
        registry.register_with_unit(
            "cascade_checkpoint_hold",
            "Time a store's writer held new work at once for its running checkpoint to progress",
            Unit::Seconds,
            checkpoint_hold.clone(),
        );
        let handler_duration = Histograms::new_with_constructor(latency as fn() -> Histogram);
        registry.register_with_unit(
            "cascade_handler_duration",
            "Handler calls by stage workers, by stage and outcome",
            Unit::Seconds,
            handler_duration.clone(),
        );
        let bus_request_duration = Histograms::new_with_constructor(latency as fn() -> Histogram);
        registry.register_with_unit(
            "cascade_bus_request_duration",
            "Bus requests from send to reply, by operation and result",
            Unit::Seconds,
            bus_request_duration.clone(),
        );
        let rm_desired_handlers = Family::default();
        registry.register(
            "cascade_rm_desired_handlers",
            "Handlers the resource manager wants for each stage",
            rm_desired_handlers.clone(),
        );
        let stage_handlers = Family::default();
        registry.register(
            "cascade_stage_handlers",
            "Handlers running for each stage, as the resource manager last observed",
            stage_handlers.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                queue_series: Mutex::new(QueueSeries::new(cap)),
                enqueue_total,
                enqueue_duration,
                queue_depth,
                dead_letter_total,
                lease_expired_total,
                move_failed_total,
                disk_free_bytes,
                disk_alarm,
                activation_lateness,
                commit_batch_size,
                fsync_duration,
                checkpoint_hold,
                handler_duration,
                bus_request_duration,
                rm_desired_handlers,
                stage_handlers,
            }),
        }
    }

    /// The `queue` label of `queue_family` (by `cascade_core::queue_family`) in the
    /// per-queue metrics below: the family itself while fewer than the cap have series of
    /// their own, else [`OTHER_QUEUES`]. Each holder (a shard holding the family's queues)
    /// calls [`Metrics::release_queue`] with the label once the family is gone from it.
    pub fn hold_queue(&self, queue_family: &str) -> String {
        self.queue_series().hold(queue_family)
    }

    /// Lets go of a label from [`Metrics::hold_queue`]: when no holder is left, the
    /// family's counters go (its depth series go with its shard's, `forget_queue_depth`).
    pub fn release_queue(&self, label: &str) {
        if !self.queue_series().release(label) {
            return;
        }
        let inner = &self.inner;
        let queue = || label.to_owned();
        for &result in EnqueueResult::ALL {
            inner.enqueue_total.remove(&EnqueueLabels {
                queue: queue(),
                result,
            });
        }
        for &reason in DeadLetterReason::ALL {
            inner.dead_letter_total.remove(&DeadLetterLabels {
                queue: queue(),
                reason,
            });
        }
        inner
            .lease_expired_total
            .remove(&QueueLabels { queue: queue() });
        for &step in FailedMove::ALL {
            inner.move_failed_total.remove(&FailedMoveLabels {
                queue: queue(),
                step,
            });
        }
    }

    /// Whether a family summed under [`OTHER_QUEUES`] could now get series of its own
    /// (another family's were dropped): its holder then holds it again.
    pub fn queue_series_room(&self) -> bool {
        self.queue_series().has_room()
    }

    fn queue_series(&self) -> std::sync::MutexGuard<'_, QueueSeries> {
        // Each call changes the map whole: a panic elsewhere cannot leave it half-updated.
        self.inner
            .queue_series
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `cascade_enqueue_total{queue, result}`; `queue` a label from [`Metrics::hold_queue`].
    pub fn enqueue_total(&self, queue_family: &str, result: EnqueueResult) -> Counter {
        self.inner
            .enqueue_total
            .get_or_create_owned(&EnqueueLabels {
                queue: queue_family.to_owned(),
                result,
            })
    }

    /// `cascade_enqueue_duration_seconds{rpc}`.
    pub fn enqueue_duration_seconds(&self, rpc: EnqueueRpc) -> Histogram {
        self.inner
            .enqueue_duration
            .get_or_create_owned(&RpcLabels { rpc })
    }

    /// Sets `cascade_queue_depth{queue, state, shard}` for one family on one shard.
    pub fn set_queue_depth(&self, queue_family: &str, shard: u32, state: QueueState, depth: u64) {
        self.inner
            .queue_depth
            .get_or_create(&DepthLabels {
                queue: queue_family.to_owned(),
                state,
                shard,
            })
            .set(saturating_i64(depth));
    }

    /// Drops a family's depth series on a shard (its last queue was deleted), so that a
    /// stale value does not linger.
    pub fn forget_queue_depth(&self, queue_family: &str, shard: u32) {
        for &state in QueueState::ALL {
            self.inner.queue_depth.remove(&DepthLabels {
                queue: queue_family.to_owned(),
                state,
                shard,
            });
        }
    }

    /// `cascade_dead_letter_total{queue, reason}`, `queue` the source queue's family.
    pub fn dead_letter_total(&self, queue_family: &str, reason: DeadLetterReason) -> Counter {
        self.inner
            .dead_letter_total
            .get_or_create_owned(&DeadLetterLabels {
                queue: queue_family.to_owned(),
                reason,
            })
    }

    /// `cascade_lease_expired_total{queue}`.
    pub fn lease_expired_total(&self, queue_family: &str) -> Counter {
        self.inner
            .lease_expired_total
            .get_or_create_owned(&QueueLabels {
                queue: queue_family.to_owned(),
            })
    }

    /// `cascade_move_failed_total{queue, step}`, `queue` the family of the event's queue.
    pub fn move_failed_total(&self, queue_family: &str, step: FailedMove) -> Counter {
        self.inner
            .move_failed_total
            .get_or_create_owned(&FailedMoveLabels {
                queue: queue_family.to_owned(),
                step,
            })
    }

    /// Sets `cascade_disk_free_bytes{store, shard}` and `cascade_disk_alarm{store, shard}`.
    pub fn set_disk(&self, store: StoreKind, shard: u32, free_bytes: u64, alarm: bool) {
        let labels = StoreShardLabels { store, shard };
        self.inner
            .disk_free_bytes
            .get_or_create(&labels)
            .set(saturating_i64(free_bytes));
        self.inner
            .disk_alarm
            .get_or_create(&labels)
            .set(i64::from(alarm));
    }

    /// `cascade_activation_lateness_seconds`.
    pub fn activation_lateness_seconds(&self) -> Histogram {
        self.inner.activation_lateness.clone()
    }

    /// `cascade_commit_batch_size{store}`.
    pub fn commit_batch_size(&self, store: StoreKind) -> Histogram {
        self.inner
            .commit_batch_size
            .get_or_create_owned(&StoreLabels { store })
    }

    /// `cascade_fsync_duration_seconds{store}`.
    pub fn fsync_duration_seconds(&self, store: StoreKind) -> Histogram {
        self.inner
            .fsync_duration
            .get_or_create_owned(&StoreLabels { store })
    }

    /// `cascade_checkpoint_hold_seconds{store}`.
    pub fn checkpoint_hold_seconds(&self, store: StoreKind) -> Histogram {
        self.inner
            .checkpoint_hold
            .get_or_create_owned(&StoreLabels { store })
    }

    /// `cascade_handler_duration_seconds{stage, outcome}`; `stage` is the stage's queue
    /// name, `<pipeline>.<stage>`.
    pub fn handler_duration_seconds(&self, stage: &str, outcome: HandlerOutcome) -> Histogram {
        self.inner
            .handler_duration
            .get_or_create_owned(&HandlerLabels {
                stage: stage.to_owned(),
                outcome,
            })
    }

    /// `cascade_bus_request_duration_seconds{op, result}`; `op` is the operation of the
    /// subject (`enqueue`, `take`, `activate`...), a name fixed in the code.
    pub fn bus_request_duration_seconds(&self, op: &'static str, result: BusResult) -> Histogram {
        self.inner
            .bus_request_duration
            .get_or_create_owned(&BusLabels { op, result })
    }

    /// Sets `cascade_rm_desired_handlers{stage}`.
    pub fn set_rm_desired_handlers(&self, stage: &str, handlers: u64) {
        self.inner
            .rm_desired_handlers
            .get_or_create(&StageLabels {
                stage: stage.to_owned(),
            })
            .set(saturating_i64(handlers));
    }

    /// Sets `cascade_stage_handlers{stage}`.
    pub fn set_stage_handlers(&self, stage: &str, handlers: u64) {
        self.inner
            .stage_handlers
            .get_or_create(&StageLabels {
                stage: stage.to_owned(),
            })
            .set(saturating_i64(handlers));
    }

    /// Drops a removed stage's series: its resource-manager gauges and handler durations.
    pub fn forget_stage(&self, stage: &str) {
        let labels = StageLabels {
            stage: stage.to_owned(),
        };
        self.inner.rm_desired_handlers.remove(&labels);
        self.inner.stage_handlers.remove(&labels);
        for &outcome in HandlerOutcome::ALL {
            self.inner.handler_duration.remove(&HandlerLabels {
                stage: stage.to_owned(),
                outcome,
            });
        }
    }

    /// Every metric in the OpenMetrics text format (which Prometheus scrapes), `# EOF` last.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, and every label value encodes as plain text.
        if let Err(e) = encode(&mut text, &self.inner.registry) {
            tracing::error!(error = %e, "metrics.render");
        }
        text
    }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
