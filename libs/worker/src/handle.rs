//! [`WorkerHandle`]: the live knobs of a running worker (concurrency and batch size, which a
//! resource manager turns), its shutdown, and its counters.

use std::sync::Arc;

use tokio::sync::watch;

use crate::WorkerError;
use crate::config::{WorkerConfig, check_batch, check_concurrency};
use crate::stats::{Stats, WorkerStats};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Knobs {
    pub(crate) concurrency: u32,
    pub(crate) batch: u32,
}

/// What the worker's loop and its handles share.
pub(crate) struct Shared {
    pub(crate) knobs: watch::Sender<Knobs>,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) stats: Arc<Stats>,
}

impl Shared {
    pub(crate) fn new(config: &WorkerConfig) -> Shared {
        let knobs = Knobs {
            concurrency: config.concurrency,
            batch: config.batch,
        };
        Shared {
            knobs: watch::channel(knobs).0,
            stop: watch::channel(false).0,
            stats: Arc::new(Stats::default()),
        }
    }
}

/// Controls a worker while it runs. Cheap to clone; outliving the worker is harmless.
#[derive(Clone)]
pub struct WorkerHandle(pub(crate) Arc<Shared>);

impl WorkerHandle {
    /// Handlers at once at most, from now on. Lowering it lets running handlers finish and
    /// starts no new one until fewer run; 0 pauses the worker: it stops taking and hands
    /// back the events it holds but has not started.
    pub fn set_concurrency(&self, concurrency: u32) -> Result<(), WorkerError> {
        check_concurrency(concurrency)?;
        self.0
            .knobs
            .send_modify(|knobs| knobs.concurrency = concurrency);
        Ok(())
    }

    pub fn concurrency(&self) -> u32 {
        self.0.knobs.borrow().concurrency
    }

    /// Events per `Take` at most (1 to 10,000), from the next take on.
    pub fn set_batch(&self, batch: u32) -> Result<(), WorkerError> {
        check_batch(batch)?;
        self.0.knobs.send_modify(|knobs| knobs.batch = batch);
        Ok(())
    }

    pub fn batch(&self) -> u32 {
        self.0.knobs.borrow().batch
    }

    /// Starts the drain: no more takes, unstarted events released, running handlers
    /// given the drain grace to finish. The worker's `run` returns when it is done.
    pub fn shutdown(&self) {
        self.0.stop.send_replace(true);
    }

    pub fn stats(&self) -> WorkerStats {
        self.0.stats.snapshot()
    }
}
