//! The resource manager's executor in `cascade standalone`: the stage supervisor registers
//! each stage worker it starts, and a decision turns that worker's knobs. A handler is what
//! a replica of the stage's worker would be elsewhere, `handler.concurrency` events at once,
//! so `n` handlers set the worker's concurrency to `n × handler.concurrency` and its take
//! size to `n × batch` (what `n` replicas would take together). 0 handlers pause the worker:
//! it hands back the events it holds but has not started, and takes again once woken.
//!
//! The last decision per stage is remembered, so a worker started later (a new stage, or a
//! restart after its definition changed) starts with it instead of its configured count.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cascade_core::QueueName;
use cascade_proto::convert::MAX_TAKE_EVENTS;
use cascade_resource_manager::{Current, Decision, Executor, ResourceManagerError};
use cascade_worker::{MAX_CONCURRENCY, WorkerHandle};

/// The stage workers of this process and the last decision for each stage. Cheap to clone.
#[derive(Clone, Default)]
pub struct LocalExecutor(Arc<Mutex<Workers>>);

#[derive(Default)]
struct Workers {
    running: HashMap<QueueName, Registered>,
    decided: HashMap<QueueName, Knobs>,
}

struct Registered {
    handle: WorkerHandle,
    /// `handler.concurrency`, at least 1.
    per_handler: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Knobs {
    handlers: u32,
    batch: u32,
}

impl LocalExecutor {
    pub fn new() -> LocalExecutor {
        LocalExecutor::default()
    }

    /// A stage worker about to run (or running); it gets the stage's last decision at once.
    pub fn register(&self, stage: QueueName, handle: WorkerHandle, per_handler: u32) {
        let mut workers = self.lock();
        let registered = Registered {
            handle,
            per_handler: per_handler.max(1),
        };
        if let Some(&knobs) = workers.decided.get(&stage)
            && let Err(e) = turn(&registered, knobs)
        {
            tracing::warn!(stage = %stage, error = %e, "local_executor.register");
        }
        workers.running.insert(stage, registered);
    }

    /// A stage worker stopped or stopping: it no longer counts as running.
    pub fn unregister(&self, stage: &QueueName) {
        self.lock().running.remove(stage);
    }

    /// Nothing is awaited while the lock is held and each change is one insert or knob
    /// write, so a lock poisoned by a panic elsewhere still holds whole values.
    fn lock(&self) -> MutexGuard<'_, Workers> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn apply_now(&self, decisions: &[Decision]) -> Result<(), ResourceManagerError> {
        let mut workers = self.lock();
        workers
            .decided
            .retain(|stage, _| decisions.iter().any(|d| d.stage == *stage));
        let mut first_error = None;
        for decision in decisions {
            let knobs = Knobs {
                handlers: decision.handlers,
                batch: decision.batch,
            };
            workers.decided.insert(decision.stage.clone(), knobs);
            let Some(registered) = workers.running.get(&decision.stage) else {
                continue;
            };
            if let Err(reason) = turn(registered, knobs) {
                first_error.get_or_insert(ResourceManagerError::Apply {
                    stage: decision.stage.to_string(),
                    reason,
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Sets a worker's concurrency and take size for `knobs`. A paused worker keeps its take
/// size: it takes nothing anyway.
fn turn(registered: &Registered, knobs: Knobs) -> Result<(), String> {
    let concurrency = knobs
        .handlers
        .saturating_mul(registered.per_handler)
        .min(MAX_CONCURRENCY);
    let handle = &registered.handle;
    // Every set wakes the worker's loop, and decisions come every interval, mostly unchanged.
    if handle.concurrency() != concurrency {
        handle
            .set_concurrency(concurrency)
            .map_err(|e| e.to_string())?;
    }
    let batch = knobs
        .batch
        .saturating_mul(knobs.handlers)
        .clamp(1, MAX_TAKE_EVENTS);
    if knobs.handlers > 0 && handle.batch() != batch {
        handle.set_batch(batch).map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl Executor for LocalExecutor {
    fn apply(
        &self,
        decisions: &[Decision],
    ) -> impl Future<Output = Result<(), ResourceManagerError>> + Send {
        // Turning knobs is immediate: the workers pick them up on their own.
        std::future::ready(self.apply_now(decisions))
    }

    /// Handlers per registered stage: its concurrency over `handler.concurrency`, rounded
    /// up (a count set by the manager is always a whole multiple).
    fn current(&self) -> Current {
        self.lock()
            .running
            .iter()
            .map(|(stage, registered)| {
                let concurrency = registered.handle.concurrency();
                (stage.clone(), concurrency.div_ceil(registered.per_handler))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cascade_core::{HandlerKind, HandlerSpec, Pipeline, QueueConfig, Stage};
    use cascade_resource_manager::{Explanation, Inputs, Throughput, ThroughputSource};
    use cascade_stage_worker::{Registry, StageWorker, StageWorkerConfig};

    use super::*;

    fn pipeline(per_handler: u32) -> Pipeline {
        Pipeline {
            name: "p".into(),
            stages: vec![Stage {
                name: "s".into(),
                queue: QueueConfig::default(),
                handler: HandlerSpec {
                    kind: HandlerKind::Builtin("noop".into()),
                    concurrency: per_handler,
                    timeout: Duration::from_secs(1),
                },
                priority: 0,
                min_handlers: 0,
                max_handlers: 8,
                next: None,
            }],
        }
    }

    /// A worker that is never run: its handle's knobs are all this test needs.
    fn handle(per_handler: u32) -> WorkerHandle {
        let config =
            StageWorkerConfig::for_stage(&pipeline(per_handler), "s").expect("a valid stage");
        StageWorker::new(config, &Registry::new(), cascade_telemetry::Metrics::new())
            .expect("a valid worker")
            .handle()
    }

    fn decision(handlers: u32, batch: u32) -> Decision {
        let inputs = Inputs {
            stats_at: None,
            ready: 0,
            leased: 0,
            due_soon: 0.0,
            oldest_ready_age: Duration::ZERO,
            arrivals_per_sec: 0.0,
            throughput: Throughput {
                per_handler: 1.0,
                source: ThroughputSource::Assumed,
            },
            expired_leases: 0,
            work: 0.0,
            need: 0.0,
            target_drain: Duration::from_secs(60),
        };
        Decision {
            stage: QueueName::parse("p.s").expect("valid"),
            priority: 0,
            current: 0,
            wanted: handlers,
            handlers,
            batch,
            explanation: Explanation {
                inputs,
                reasons: Vec::new(),
            },
        }
    }

    #[tokio::test]
    async fn handlers_scale_the_worker_by_its_handler_concurrency() {
        let executor = LocalExecutor::new();
        let stage = QueueName::parse("p.s").expect("valid");
        let worker = handle(4);
        executor.register(stage.clone(), worker.clone(), 4);
        assert_eq!(
            executor.current().get(&stage),
            1,
            "as configured: one handler"
        );

        executor.apply(&[decision(3, 16)]).await.expect("applied");
        assert_eq!((worker.concurrency(), worker.batch()), (12, 48));
        assert_eq!(executor.current().get(&stage), 3);

        executor.apply(&[decision(0, 16)]).await.expect("applied");
        assert_eq!(worker.concurrency(), 0, "paused");
        assert_eq!(executor.current().get(&stage), 0);

        // A worker started later (a restart) starts with the last decision.
        executor.apply(&[decision(2, 8)]).await.expect("applied");
        executor.unregister(&stage);
        assert_eq!(executor.current().get(&stage), 0);
        let restarted = handle(4);
        executor.register(stage.clone(), restarted.clone(), 4);
        assert_eq!((restarted.concurrency(), restarted.batch()), (8, 16));

        // A stage no longer decided is forgotten: a new worker keeps its configuration.
        executor.apply(&[]).await.expect("applied");
        let fresh = handle(4);
        executor.register(stage.clone(), fresh.clone(), 4);
        assert_eq!(fresh.concurrency(), 4);
    }
}
