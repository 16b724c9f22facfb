//! `cascade standalone` runs a stage worker for every stage of every pipeline, including
//! pipelines applied while it runs: it lists the pipelines through its own gateway every
//! `PIPELINE_POLL`, starts a worker for each new stage, restarts one whose definition
//! changed (its handler, concurrency, place in the chain), and stops those whose stage is
//! gone. Each worker drains gracefully (finishes or releases what it holds) on stop.
//!
//! For the resource manager, each list read feeds its [`StagesFeed`], and each worker is
//! registered with the [`LocalExecutor`] from start to stop, which turns its concurrency
//! and take size.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cascade_client::{Client, api};
use cascade_core::{Pipeline, QueueName};
use cascade_proto::convert::pipeline_from_proto;
use cascade_resource_manager::StagesFeed;
use cascade_service::{Readiness, Shutdown, ShutdownTrigger, shutdown_channel};
use cascade_stage_worker::{Registry, StageWorker, StageWorkerConfig};
use cascade_telemetry::Metrics;
use tokio::task::JoinHandle;

use crate::local_executor::LocalExecutor;

/// How soon a pipeline applied at run time gets its workers.
const PIPELINE_POLL: Duration = Duration::from_secs(1);

struct Running {
    /// The stage's definition as it was started; a change restarts the worker.
    definition: String,
    stop: ShutdownTrigger,
    task: JoinHandle<()>,
    /// Why the worker stopped, if it stopped with an error: the supervisor, the one writer of
    /// the stages' conditions, raises it when it finds the task ended.
    failed: Arc<Mutex<Option<String>>>,
}

impl Running {
    fn failure(&self) -> Option<String> {
        self.failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the supervisor reports to the resource manager.
pub struct Managed {
    /// The stages of the pipelines listed.
    pub stages: StagesFeed,
    /// The workers started.
    pub executor: LocalExecutor,
    /// The process's registry, which the workers time their handler calls into.
    pub metrics: Metrics,
}

/// Supervises the stage workers until `shutdown`, then stops them all and waits for them.
/// A stage whose worker cannot be built (a handler no one knows, say), or whose worker
/// ended with an error, is a condition on `readiness` until a worker of it has run through
/// a poll, or the stage is gone: the process serves every other queue, and `/readyz` says
/// which stage waits and why.
pub async fn supervise(
    gateway: Client,
    managed: Managed,
    readiness: Readiness,
    shutdown: Shutdown,
) {
    let mut running: HashMap<QueueName, Running> = HashMap::new();
    let mut conditions = Conditions {
        readiness,
        stages: HashSet::new(),
    };
    loop {
        match list_pipelines(&gateway).await {
            Ok(pipelines) => {
                managed.stages.set_pipelines(&pipelines);
                reconcile(
                    &gateway,
                    &pipelines,
                    &mut running,
                    &mut conditions,
                    &managed,
                );
            }
            Err(e) => tracing::warn!(error = %e, "stages.list_pipelines"),
        }
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(PIPELINE_POLL) => {}
        }
    }
    // All told first, then awaited: each may be in a long-poll take, and one at a time the
    // stop would take the sum of their polls.
    let mut tasks = Vec::with_capacity(running.len());
    for (queue, worker) in running.drain() {
        managed.executor.unregister(&queue);
        worker.stop.trigger();
        tasks.push(worker.task);
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn list_pipelines(client: &Client) -> Result<Vec<Pipeline>, tonic::Status> {
    let listed = client
        .admin()
        .list_pipelines(api::ListPipelinesRequest {})
        .await?
        .into_inner();
    listed
        .pipelines
        .iter()
        .map(|p| pipeline_from_proto(p).map_err(|e| e.to_tonic()))
        .collect()
}

/// The stages with a condition on the process's readiness: a worker that could not be built,
/// or that ended with an error.
struct Conditions {
    readiness: Readiness,
    stages: HashSet<QueueName>,
}

impl Conditions {
    fn raise(&mut self, stage: &QueueName, what: String) {
        self.readiness.set_degraded(&key(stage), Some(what));
        self.stages.insert(stage.clone());
    }

    fn clear(&mut self, stage: &QueueName) {
        if self.stages.remove(stage) {
            self.readiness.set_degraded(&key(stage), None);
        }
    }

    /// Clears the condition of every stage that is not `wanted` any more.
    fn forget_unless(&mut self, wanted: impl Fn(&QueueName) -> bool) {
        let gone: Vec<QueueName> = self.stages.iter().filter(|s| !wanted(s)).cloned().collect();
        for stage in gone {
            self.clear(&stage);
        }
    }
}

/// The name of a stage's condition on `/readyz`.
fn key(stage: &QueueName) -> String {
    format!("stage {stage}")
}

fn reconcile(
    gateway: &Client,
    pipelines: &[Pipeline],
    running: &mut HashMap<QueueName, Running>,
    conditions: &mut Conditions,
    managed: &Managed,
) {
    let executor = &managed.executor;
    let (mut present, mut wanted) = (HashSet::new(), HashMap::new());
    for pipeline in pipelines {
        for stage in &pipeline.stages {
            let queue = pipeline.stage_queue(&stage.name);
            present.insert(queue.clone());
            match StageWorkerConfig::for_stage(pipeline, &stage.name) {
                Ok(config) => {
                    let definition = format!("{config:?}");
                    wanted.insert(queue, (definition, config, stage.handler.concurrency));
                }
                Err(e) => {
                    tracing::error!(queue = %queue, error = %e, "stages.config");
                    conditions.raise(&queue, format!("its stage worker cannot start: {e}"));
                }
            }
        }
    }
    running.retain(|queue, worker| {
        // A worker that ended by itself (it logged why) is started again.
        let ended = worker.task.is_finished();
        let keep = !ended
            && wanted
                .get(queue)
                .is_some_and(|(definition, _, _)| *definition == worker.definition);
        match (keep, ended.then(|| worker.failure()).flatten()) {
            // It has run through a poll since it started: whatever it ended with before is
            // over.
            (true, _) => conditions.clear(queue),
            (false, failure) => {
                if let Some(why) = failure {
                    conditions.raise(queue, format!("its stage worker stopped: {why}"));
                }
                tracing::info!(queue = %queue, "stages.stop");
                executor.unregister(queue);
                worker.stop.trigger();
            }
        }
        keep
    });
    for (queue, (definition, config, per_handler)) in wanted {
        if running.contains_key(&queue) {
            continue;
        }
        // A worker that cannot be built is tried again at the next poll.
        let built =
            StageWorker::on_client(config, gateway, &Registry::new(), managed.metrics.clone());
        let worker = match built {
            Ok(worker) => worker,
            Err(e) => {
                tracing::error!(queue = %queue, error = %e, "stages.worker_failed");
                conditions.raise(&queue, format!("its stage worker cannot start: {e}"));
                continue;
            }
        };
        tracing::info!(queue = %queue, "stages.start");
        // Registered before it runs, so that it starts with the manager's last decision.
        executor.register(queue.clone(), worker.handle(), per_handler);
        let (stop, stopped) = shutdown_channel();
        let (name, failed) = (queue.clone(), Arc::new(Mutex::new(None)));
        let failure = Arc::clone(&failed);
        let task = tokio::spawn(async move {
            if let Err(e) = worker.run(stopped).await {
                tracing::error!(queue = %name, error = %e, "stages.worker_failed");
                *failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
            }
        });
        running.insert(
            queue,
            Running {
                definition,
                stop,
                task,
                failed,
            },
        );
    }
    conditions.forget_unless(|stage| present.contains(stage));
}
