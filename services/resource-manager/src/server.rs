//! The resource manager as its own process (`cascade-resource-manager`), for a cluster on
//! NATS: the service loop ([`run`](crate::run)) over the stats the dispatcher shards
//! publish, the stages of the pipelines the shards hold (listed over the bus every
//! `resource_manager.interval`), and the executor `resource_manager.executor` names:
//! `kubernetes` (the scale of each stage's Deployment) or `none` (decide, show and publish
//! only). `local` belongs to `cascade standalone`, which owns the stage workers.
//!
//! Failure policy: a bad executor setting or Kubernetes configuration fails the start (the
//! error names the key); a pipeline list that fails is logged, and the last list is kept; a
//! shard that answers with an error is passed over for the next; a pipeline that cannot be
//! read is logged and left out, and the others are still managed. The process reports ready
//! once the first list has come: before that it manages no stage at all.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cascade_bus::{Bus, subject};
use cascade_core::{Pipeline, QueueName, SystemClock};
use cascade_proto::bus::v1::{
    DispatcherReply, DispatcherRequest, dispatcher_reply, dispatcher_request,
};
use cascade_proto::convert::pipeline_from_proto;
use cascade_proto::v1::{self, ListPipelinesRequest};
use cascade_service::{Readiness, Settings, Shutdown};
use cascade_telemetry::Metrics;

use crate::settings::ExecutorKind;
use crate::{Board, Current, Decision, Deps, Executor, ResourceManagerError, Stages, StagesFeed};

/// The longest wait for one answer of the Kubernetes API server.
#[cfg(feature = "kubernetes")]
const KUBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What [`serve`] works with besides its settings.
pub struct ServeDeps {
    pub bus: Bus,
    pub metrics: Metrics,
    /// Posted each round; the admin port serves it as `/rm/explain`.
    pub board: Board,
    /// Set once the first pipeline list has come (the loop runs by then), cleared when it
    /// stops.
    pub readiness: Readiness,
}

/// Runs the resource manager of `settings.cluster` until `shutdown`.
pub async fn serve(
    settings: Settings,
    deps: ServeDeps,
    shutdown: Shutdown,
) -> Result<(), ResourceManagerError> {
    let rm = settings.resource_manager.clone();
    rm.validate()?;
    let executor = match rm.executor {
        ExecutorKind::Local => {
            return Err(ResourceManagerError::setting(
                "executor",
                "\"local\" turns the stage workers of `cascade standalone`, which this process \
                 does not have: use \"kubernetes\" or \"none\"",
            ));
        }
        ExecutorKind::None => AnyExecutor::DryRun(DryRun::default()),
        #[cfg(feature = "kubernetes")]
        ExecutorKind::Kubernetes => {
            AnyExecutor::Kubernetes(Box::new(kubernetes_executor(&rm).await?))
        }
        #[cfg(not(feature = "kubernetes"))]
        ExecutorKind::Kubernetes => {
            return Err(ResourceManagerError::setting(
                "executor",
                "this build has no Kubernetes client (feature \"kubernetes\")",
            ));
        }
    };
    let (feed, stages) = Stages::feed();
    let follower = tokio::spawn(follow_pipelines(
        deps.bus.clone(),
        settings.clone(),
        feed,
        deps.readiness.clone(),
        shutdown.clone(),
    ));
    let loop_deps = Deps {
        bus: deps.bus,
        stages,
        executor,
        metrics: deps.metrics,
        board: deps.board,
        clock: Arc::new(SystemClock),
        timer_shards: settings.cluster.shards,
    };
    let stopping = shutdown.clone();
    let ran = crate::run(settings.cluster.name.clone(), rm, loop_deps, async move {
        stopping.wait().await
    })
    .await;
    // The follower first, and waited for: once it is gone, nothing can set ready again.
    follower.abort();
    let _cancelled = follower.await;
    deps.readiness.set(false);
    ran
}

#[cfg(feature = "kubernetes")]
async fn kubernetes_executor(
    rm: &crate::ResourceManagerSettings,
) -> Result<crate::KubernetesExecutor, ResourceManagerError> {
    // In a pod: the service account's token and namespace; elsewhere: the kubeconfig.
    let mut config = kube::Config::infer().await.map_err(|e| {
        ResourceManagerError::setting("executor", format!("no Kubernetes configuration: {e}"))
    })?;
    // A hung or unreachable API server must not hold the loop for minutes: a round's
    // apply gives up and the next round tries again.
    config.connect_timeout = Some(KUBE_TIMEOUT);
    config.read_timeout = Some(KUBE_TIMEOUT);
    config.write_timeout = Some(KUBE_TIMEOUT);
    let namespace = match rm.kubernetes.namespace.is_empty() {
        true => config.default_namespace.clone(),
        false => rm.kubernetes.namespace.clone(),
    };
    let client = kube::Client::try_from(config).map_err(|e| {
        ResourceManagerError::setting("executor", format!("Kubernetes client: {e}"))
    })?;
    tracing::info!(namespace, template = %rm.kubernetes.deployment, "resource_manager.kubernetes");
    Ok(crate::KubernetesExecutor::new(
        client,
        &namespace,
        &rm.kubernetes,
    ))
}

/// The executors this process can have.
enum AnyExecutor {
    DryRun(DryRun),
    /// Boxed: a kube client is far larger than the dry run.
    #[cfg(feature = "kubernetes")]
    Kubernetes(Box<crate::KubernetesExecutor>),
}

impl Executor for AnyExecutor {
    async fn apply(&self, decisions: &[Decision]) -> Result<(), ResourceManagerError> {
        match self {
            AnyExecutor::DryRun(dry) => dry.apply(decisions).await,
            #[cfg(feature = "kubernetes")]
            AnyExecutor::Kubernetes(kube) => kube.apply(decisions).await,
        }
    }

    fn current(&self) -> Current {
        match self {
            AnyExecutor::DryRun(dry) => dry.current(),
            #[cfg(feature = "kubernetes")]
            AnyExecutor::Kubernetes(kube) => kube.current(),
        }
    }

    async fn observe(&self, stages: &[&QueueName]) {
        match self {
            AnyExecutor::DryRun(dry) => dry.observe(stages).await,
            #[cfg(feature = "kubernetes")]
            AnyExecutor::Kubernetes(kube) => kube.observe(stages).await,
        }
    }
}

/// `executor = "none"`: changes nothing, and reports each decision as if it had been
/// applied, so that the decisions published are the ones a real executor would get.
#[derive(Clone, Debug, Default)]
pub(crate) struct DryRun(Arc<Mutex<Current>>);

impl DryRun {
    fn lock(&self) -> MutexGuard<'_, Current> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Executor for DryRun {
    async fn apply(&self, decisions: &[Decision]) -> Result<(), ResourceManagerError> {
        *self.lock() = decisions
            .iter()
            .map(|d| (d.stage.clone(), d.handlers))
            .collect();
        Ok(())
    }

    fn current(&self) -> Current {
        self.lock().clone()
    }
}

/// Feeds `feed` with the stages of the pipelines the dispatcher shards hold, every
/// `resource_manager.interval`, until `shutdown`. Sets `readiness` once a list has come:
/// until then no stage is managed, whatever the loop does.
async fn follow_pipelines(
    bus: Bus,
    settings: Settings,
    feed: StagesFeed,
    readiness: Readiness,
    shutdown: Shutdown,
) {
    let every = settings.resource_manager.interval;
    loop {
        match list_pipelines(&bus, &settings).await {
            Ok(pipelines) => {
                feed.set_pipelines(&pipelines);
                // Ready from the first list on: a later failure keeps the last list, so it
                // does not make the process less ready.
                readiness.set(true);
            }
            Err(e) => tracing::warn!(error = %e, "resource_manager.list_pipelines"),
        }
        tokio::select! {
            () = shutdown.wait() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Every pipeline the manager can read, from the first shard that lists them (each shard
/// holds every pipeline). A shard that cannot be reached or answers with an error is passed
/// over for the next.
async fn list_pipelines(bus: &Bus, settings: &Settings) -> Result<Vec<Pipeline>, String> {
    let request = DispatcherRequest {
        op: Some(dispatcher_request::Op::ListPipelines(
            ListPipelinesRequest {},
        )),
    };
    let timeout = settings.bus.request_timeout.min(Duration::from_secs(5));
    let mut last_error = String::from("no shard");
    for shard in 0..settings.cluster.shards {
        let subject = subject::dispatcher(&settings.cluster.name, shard);
        match listed_by_shard(bus, &subject, &request, timeout).await {
            Ok(listed) => return Ok(readable_pipelines(&listed)),
            Err(e) => {
                // Only the last shard's error is returned; the others would be lost.
                tracing::debug!(shard, error = %e, "resource_manager.list_pipelines.shard");
                last_error = format!("shard {shard}: {e}");
            }
        }
    }
    Err(last_error)
}

/// The pipelines, as sent, of the dispatcher shard at `subject`, or why it gave none.
async fn listed_by_shard(
    bus: &Bus,
    subject: &str,
    request: &DispatcherRequest,
    timeout: Duration,
) -> Result<Vec<v1::Pipeline>, String> {
    let reply: DispatcherReply = bus
        .call_as("list_pipelines", subject, request.clone(), timeout)
        .await
        .map_err(|e| e.to_string())?;
    match reply.result {
        Some(dispatcher_reply::Result::Pipelines(listed)) => Ok(listed.pipelines),
        Some(dispatcher_reply::Result::Error(status)) => Err(status.message),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// The pipelines of `listed` that convert. One that does not is logged and left out, so
/// that it cannot keep the others, and every pipeline applied after it, unmanaged.
fn readable_pipelines(listed: &[v1::Pipeline]) -> Vec<Pipeline> {
    listed
        .iter()
        .filter_map(|pipeline| match pipeline_from_proto(pipeline) {
            Ok(read) => Some(read),
            Err(e) => {
                tracing::warn!(pipeline = %pipeline.name, error = %e, "resource_manager.list_pipelines.skipped");
                None
            }
        })
        .collect()
}
