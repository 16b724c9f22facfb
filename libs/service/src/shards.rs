//! Running the shards of a sharded service (the dispatcher, the activation timer): start
//! each shard, mark the process ready, and stop them all, in order, on shutdown or on the
//! first shard's failure. One shard ([`RunningShard`]) is its context, which owns its store,
//! and its named tasks; it stops in the order of the shutdown tree: stop taking requests,
//! stop the other tasks, close the store (which checkpoints).
//!
//! Failure policy: a shard that cannot start stops those already started, and its error is
//! returned. A shard that fails while serving (its store failed, or one of its tasks ended)
//! stops every shard and its error is returned, so the process exits non-zero. Errors met
//! while stopping are logged; the first is returned when nothing failed before.

mod presence;
mod running;

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use cascade_core::units::about_size;
use cascade_store::durable::DiskState;
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::StoreKind;
pub use running::{RunningShard, ShardCore, ShardTasks};

use crate::{Readiness, Shutdown, shutdown_channel};

/// How often the shards are checked for a failure.
const FAILURE_CHECK: Duration = Duration::from_millis(200);

/// One started shard, as [`ShardSupervisor`] sees it.
pub trait SupervisedShard: Sized + Send {
    type Error: Display + Send;

    /// Why the shard cannot go on, if it cannot.
    fn failure(&self) -> Option<Self::Error>;

    /// The shard's number and the last sample of its disk, if it has a store.
    fn disk(&self) -> Option<(u32, DiskState)> {
        None
    }

    /// Stops the shard gracefully; the supervisor has pulled the `stopping` signal the shard
    /// was started with.
    fn stop(self) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// The shards one process serves.
pub struct ShardSupervisor<'a> {
    /// `dispatcher` or `timer`: the prefix of the log events (`<service>.ready`, …).
    pub service: &'static str,
    pub cluster: &'a str,
    pub shards: Vec<u32>,
    /// Set once every shard serves; cleared once they begin to stop. Also lists the shards
    /// whose disk is below its watermark.
    pub readiness: Readiness,
    /// Where the shards' disk gauges go, under `store`.
    pub metrics: Metrics,
    pub store: StoreKind,
}

impl ShardSupervisor<'_> {
    /// Starts each shard with `start(shard, stopping)`, serves until `shutdown` or the
    /// first shard's failure, then stops them all (see the module's failure policy).
    pub async fn run<S, Start, Started>(
        self,
        shutdown: Shutdown,
        mut start: Start,
    ) -> Result<(), S::Error>
    where
        S: SupervisedShard,
        Start: FnMut(u32, Shutdown) -> Started,
        Started: Future<Output = Result<S, S::Error>>,
    {
        // The shards stop on the caller's shutdown or on the first shard's failure.
        let (stop, stopping) = shutdown_channel();
        let mut running = Vec::with_capacity(self.shards.len());
        for &shard in &self.shards {
            match start(shard, stopping.clone()).await {
                Ok(started) => running.push(started),
                Err(e) => {
                    stop.trigger();
                    // Their errors are logged; the caller needs the reason the start failed.
                    let _ = stop_all(self.service, running).await;
                    return Err(e);
                }
            }
        }
        self.readiness.set(true);
        tracing::info!(
            shards = ?self.shards,
            cluster = %self.cluster,
            "{}.ready",
            self.service
        );
        let failure = tokio::select! {
            () = shutdown.wait() => None,
            failure = self.watch(&running) => Some(failure),
        };
        self.readiness.set(false);
        stop.trigger();
        if let Some(e) = &failure {
            tracing::error!(error = %e, "{}.failed", self.service);
        }
        let stopped = stop_all(self.service, running).await;
        match failure {
            Some(e) => Err(e),
            None => stopped,
        }
    }

    /// Reports the shards' disks until one of them fails; returns its failure.
    async fn watch<S: SupervisedShard>(&self, shards: &[S]) -> S::Error {
        let mut checks = tokio::time::interval(FAILURE_CHECK);
        loop {
            checks.tick().await;
            if let Some(failure) = shards.iter().find_map(S::failure) {
                return failure;
            }
            for (shard, disk) in shards.iter().filter_map(S::disk) {
                self.metrics
                    .set_disk(self.store, shard, disk.free, disk.alarm);
                let alarm = disk.alarm.then(|| {
                    format!(
                        "disk alarm: {} free, below store.min_free_bytes ({}) plus {} kept for the next checkpoint; enqueues, updates and hand-offs are refused",
                        about_size(disk.free),
                        about_size(disk.watermark),
                        about_size(disk.reserve)
                    )
                });
                let key = format!("{} shard {shard}", self.service);
                self.readiness.set_degraded(&key, alarm);
            }
        }
    }
}

/// Stops every shard; the first error is returned, every one logged.
async fn stop_all<S: SupervisedShard>(service: &str, shards: Vec<S>) -> Result<(), S::Error> {
    let mut result = Ok(());
    for shard in shards {
        if let Err(e) = shard.stop().await {
            tracing::error!(error = %e, "{service}.stop");
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    result
}

#[cfg(test)]
mod tests;
