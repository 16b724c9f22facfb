//! What every task of one dispatcher shard shares: its store, its bus, the wake-up signals
//! between them, and the settings they read.

use std::sync::Arc;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_core::event::EVENT_ROOM;
use cascade_core::{Clock, QueueName, SystemClock, shard_of};
use cascade_service::observe::observe_commits;
use cascade_service::store::open_shard_store;
use cascade_service::{Settings, ShardError, Shutdown};
use cascade_store::{Shard, ShardLimits, ShardSettings, Store};
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::StoreKind;
use tokio::sync::Notify;

use crate::DispatcherError;
use crate::metrics::ShardMetrics;
use crate::shard::SERVICE;
use crate::take::TakeLimits;
use crate::wakeups::Wakeups;

/// Bytes of a bus message kept free for the reply's envelope and the bus's own headers.
const REPLY_HEADROOM: usize = 4096;

pub(crate) struct ShardContext {
    pub shard: u32,
    pub cluster: String,
    /// `cluster.shards`: the count queues are spread over.
    pub shards: u32,
    pub store: Store<Shard>,
    pub bus: Bus,
    /// Long-poll takes waiting for their queue.
    pub wakeups: Wakeups,
    /// Wakes the outbox pump after a write that may have added hand-offs.
    pub outbox_ready: Notify,
    pub takes: TakeLimits,
    pub max_take_wait: Duration,
    pub outbox_batch: usize,
    pub outbox_retry: Duration,
    pub stats_interval: Duration,
    pub request_timeout: Duration,
    /// Set when the shard stops: the request loop ends, long polls answer at once.
    pub stopping: Shutdown,
    /// The shard's per-family series; the stats publisher sets the depth gauges with it.
    pub metrics: Arc<ShardMetrics>,
}

impl ShardContext {
    /// Opens shard `shard`'s store (recovering it) and starts its writer.
    pub async fn open(
        settings: &Settings,
        shard: u32,
        bus: Bus,
        metrics: Metrics,
        stopping: Shutdown,
    ) -> Result<Arc<ShardContext>, ShardError> {
        let shards = settings.cluster.shards;
        let shard_metrics = Arc::new(ShardMetrics::new(shard, &metrics));
        let shard_settings = ShardSettings {
            dedup_max_entries: settings.store.dedup_max_entries,
            // Differs between runs and shards; reproducibility matters only in the store's tests.
            jitter_seed: u64::from(shard) ^ SystemClock.now().as_micros(),
            router: Arc::new(move |queue: &QueueName| shard_of(queue, shards) == shard),
            observer: shard_metrics.clone(),
            limits: ShardLimits {
                // What a take's answer or a hand-off carries, less the room an event needs
                // beside its payload and headers: an update or an advance that would leave an
                // event larger is refused, so that it can always be taken and handed on.
                max_event_bytes: bus
                    .max_payload()
                    .saturating_sub(REPLY_HEADROOM + EVENT_ROOM),
                ..settings.limits.shard()
            },
        };
        let commits = observe_commits(&metrics, StoreKind::Dispatcher);
        let store = open_shard_store(settings, SERVICE, shard, Some(commits), move |kv| {
            Shard::new(kv, shard_settings)
        })
        .await?;
        let dispatcher = &settings.dispatcher;
        Ok(Arc::new(ShardContext {
            shard,
            cluster: settings.cluster.name.clone(),
            shards,
            store,
            takes: TakeLimits::new(bus.max_payload().saturating_sub(REPLY_HEADROOM)),
            bus,
            wakeups: Wakeups::default(),
            outbox_ready: Notify::new(),
            max_take_wait: dispatcher.max_take_wait,
            outbox_batch: usize::try_from(dispatcher.outbox_batch).unwrap_or(usize::MAX),
            outbox_retry: dispatcher.outbox_retry,
            stats_interval: dispatcher.stats_interval,
            request_timeout: settings.bus.request_timeout,
            stopping,
            metrics: shard_metrics,
        }))
    }

    /// The shard that owns `queue`.
    pub fn owner_of(&self, queue: &QueueName) -> u32 {
        shard_of(queue, self.shards)
    }

    /// FAILED_PRECONDITION for a queue of another shard: a request routed by a service with
    /// another `cluster.shards` must not create events here that no one would find.
    pub fn check_owned(&self, queue: &QueueName) -> Result<(), DispatcherError> {
        let owner = self.owner_of(queue);
        if owner == self.shard {
            return Ok(());
        }
        Err(DispatcherError::WrongShard {
            queue: queue.to_string(),
            owner,
            shard: self.shard,
        })
    }

    /// RESOURCE_EXHAUSTED while the shard's disk is below `store.min_free_bytes`: asked by
    /// what makes the store grow (enqueues, updates, hand-offs from other shards), not by
    /// what lets consumers drain it.
    pub fn check_space(&self) -> Result<(), DispatcherError> {
        Ok(self.store.disk().check_space()?)
    }

    /// The largest reply this shard may send.
    pub fn reply_budget(&self) -> usize {
        self.takes.budget()
    }

    /// Something may have added hand-offs to the outbox.
    pub fn wake_outbox(&self) {
        self.outbox_ready.notify_one();
    }
}
