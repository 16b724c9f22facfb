//! Pipelines at the gateway: applying one to the cluster, reading them, and a short-lived
//! cache that enqueues by pipeline name and advances between stages resolve through.
//!
//! Every shard holds every pipeline. Applying sends the pipeline to every shard but 0 first,
//! then to shard 0: each stores it and puts the queues of the stages it owns in one write,
//! so once shard 0 (where reads go first) has the pipeline, every stage queue exists. A
//! failure part-way is fixed by applying again (it is idempotent).
//!
//! Reads ask shard 0, and the next shard up when one is unreachable. The cache holds the
//! whole list for [`CACHE_TTL`]: a pipeline re-applied through another gateway replica takes
//! effect here within that time (through this replica, at once). One caller refreshes while
//! the others keep reading the snapshot it replaces (they wait for its answer only when
//! there is none), so an expiry under load costs one bus request, and a shard that hangs
//! holds up that one caller, not every enqueue by pipeline and every advance.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use cascade_bus::Bus;
use cascade_core::Pipeline;
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::{pipeline_from_proto, pipeline_to_proto};
use cascade_proto::v1;
use cascade_service::Settings;

use crate::IngestError;
use crate::route::{Shards, unexpected};

/// How long the gateway trusts its copy of the pipelines.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(1);

/// Applies `pipeline` to the cluster that `settings` describe, over `bus`, as
/// `Admin.ApplyPipeline` does: validated (errors name the field, e.g.
/// `stages[1].queue.lease`), stored on every shard, each stage's queue created or its config
/// replaced (its events kept) on the shard that owns it. For pipelines from the config file
/// at start-up, once the dispatcher shards serve; UNAVAILABLE while they start is safe to
/// retry, since applying is idempotent. Each attempt is audited, as from `settings`.
pub async fn apply_pipeline(
    settings: &Settings,
    bus: &Bus,
    pipeline: &Pipeline,
) -> Result<(), IngestError> {
    pipeline.validate()?;
    let shards = Shards::new(
        bus.clone(),
        settings.cluster.name.clone(),
        settings.cluster.shards,
        settings.bus.request_timeout,
    );
    let applied = apply_on(&shards, pipeline).await.map(drop);
    let outcome = match &applied {
        Ok(()) => Ok("applied from the settings file".to_owned()),
        Err(e) => Err((e.code(), e.to_string())),
    };
    cascade_telemetry::audit::record(
        "operator",
        "settings",
        "pipeline.apply",
        &pipeline.name,
        outcome,
    );
    applied
}

/// Applies a validated pipeline on every shard, shard 0 last; returns shard 0's answer.
pub(crate) async fn apply_on(
    shards: &Shards,
    pipeline: &Pipeline,
) -> Result<v1::Pipeline, IngestError> {
    let message = pipeline_to_proto(pipeline);
    let others =
        (1..shards.count()).map(|shard| shards.call(shard, Op::ApplyPipeline(message.clone())));
    for (shard, answer) in (1u32..).zip(futures::future::join_all(others).await) {
        pipeline_reply(shard, "an apply", answer?)?;
    }
    let answer = shards.call(0, Op::ApplyPipeline(message)).await?;
    pipeline_reply(0, "an apply", answer)
}

/// `op` answered by shard 0, or by the next shard up when one is unreachable (every shard
/// holds every pipeline).
pub(crate) async fn read_any(shards: &Shards, op: Op) -> Result<(u32, Reply), IngestError> {
    let mut unreachable = None;
    for shard in 0..shards.count() {
        match shards.call(shard, op.clone()).await {
            // Not answered, or answered by a shard that is stopping: ask the next one.
            Err(err) if err.code() == tonic::Code::Unavailable => unreachable = Some(err),
            answer => return answer.map(|reply| (shard, reply)),
        }
    }
    Err(unreachable.unwrap_or(IngestError::ShuttingDown))
}

pub(crate) fn pipeline_reply(
    shard: u32,
    asked: &'static str,
    reply: Reply,
) -> Result<v1::Pipeline, IngestError> {
    match reply {
        Reply::Pipeline(pipeline) => Ok(pipeline),
        other => Err(unexpected(shard, asked, &other)),
    }
}

/// Every pipeline, by name, as one shard holds them.
async fn fetch_all(shards: &Shards) -> Result<HashMap<String, Arc<Pipeline>>, IngestError> {
    let (shard, reply) = read_any(shards, Op::ListPipelines(v1::ListPipelinesRequest {})).await?;
    let Reply::Pipelines(listed) = reply else {
        return Err(unexpected(shard, "a pipeline list", &reply));
    };
    let mut by_name = HashMap::with_capacity(listed.pipelines.len());
    for message in &listed.pipelines {
        // The shard validated it when it decoded its record: a failure here is a bug, and
        // it costs only that pipeline.
        match pipeline_from_proto(message) {
            Ok(pipeline) => {
                by_name.insert(pipeline.name.clone(), Arc::new(pipeline));
            }
            Err(err) => {
                let name = &message.name;
                tracing::warn!(shard, pipeline = %name, error = %err, "ingest.pipelines.invalid");
            }
        }
    }
    Ok(by_name)
}

struct Snapshot {
    fetched: Instant,
    by_name: HashMap<String, Arc<Pipeline>>,
}

/// The pipelines as a shard held them less than [`CACHE_TTL`] ago.
pub(crate) struct PipelineCache {
    snapshot: RwLock<Option<Snapshot>>,
    /// Held by the one caller that refreshes.
    refresh: tokio::sync::Mutex<()>,
}

impl PipelineCache {
    pub fn new() -> PipelineCache {
        PipelineCache {
            snapshot: RwLock::new(None),
            refresh: tokio::sync::Mutex::new(()),
        }
    }

    /// The pipeline `name`, or `None` when there is none. Cancel-safe: a cancelled refresh
    /// leaves the old snapshot.
    pub async fn get(
        &self,
        shards: &Shards,
        name: &str,
    ) -> Result<Option<Arc<Pipeline>>, IngestError> {
        if let Some(found) = self.fresh(name) {
            return Ok(found);
        }
        let _refreshing = match self.refresh.try_lock() {
            Ok(refreshing) => refreshing,
            // Another caller is refreshing, which takes as long as the slowest shard it
            // asks: the snapshot it replaces answers meanwhile, if there is one.
            Err(_) => match self.latest(name) {
                Some(found) => return Ok(found),
                None => self.refresh.lock().await,
            },
        };
        // Whoever held the lock before may have refreshed already.
        if let Some(found) = self.fresh(name) {
            return Ok(found);
        }
        let by_name = fetch_all(shards).await?;
        let found = by_name.get(name).cloned();
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(Snapshot {
            fetched: Instant::now(),
            by_name,
        });
        Ok(found)
    }

    /// The next lookup asks a shard: this gateway applied a pipeline.
    pub fn invalidate(&self) {
        *self
            .snapshot
            .write()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// `Some(answer)` while the snapshot is fresh.
    fn fresh(&self, name: &str) -> Option<Option<Arc<Pipeline>>> {
        self.lookup(name, |snapshot| snapshot.fetched.elapsed() < CACHE_TTL)
    }

    /// `Some(answer)` while there is a snapshot, however old (none after `invalidate`).
    fn latest(&self, name: &str) -> Option<Option<Arc<Pipeline>>> {
        self.lookup(name, |_| true)
    }

    fn lookup(
        &self,
        name: &str,
        usable: impl Fn(&Snapshot) -> bool,
    ) -> Option<Option<Arc<Pipeline>>> {
        let snapshot = self.snapshot.read().unwrap_or_else(PoisonError::into_inner);
        let snapshot = snapshot.as_ref().filter(|s| usable(s))?;
        Some(snapshot.by_name.get(name).cloned())
    }
}

/// A lookup that failed because the pipeline does not exist, as the client sees it.
pub(crate) fn no_such_pipeline(field: String, name: &str) -> IngestError {
    IngestError::NoSuchPipeline {
        field,
        name: crate::error::excerpt(name),
    }
}
