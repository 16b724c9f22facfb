//! Pipelines: every shard holds every pipeline (the gateway applies one to all of them), so
//! any shard can answer a get or a list; applying stores the pipeline and puts the queues of
//! the stages this shard owns, in one write (the store's `apply_pipeline`).

use cascade_proto::convert::{self, pipeline_to_proto};
use cascade_proto::v1;

use crate::DispatcherError;
use crate::context::ShardContext;

pub(super) async fn apply(
    ctx: &ShardContext,
    request: v1::Pipeline,
) -> Result<v1::Pipeline, DispatcherError> {
    let pipeline = convert::pipeline_from_proto(&request)?;
    let stored = ctx
        .store
        .run(move |shard, now| shard.apply_pipeline(now, pipeline))
        .await?;
    Ok(pipeline_to_proto(&stored))
}

pub(super) async fn get(
    ctx: &ShardContext,
    request: v1::GetPipelineRequest,
) -> Result<v1::Pipeline, DispatcherError> {
    let name = convert::get_pipeline_from_proto(&request)?;
    let pipeline = ctx
        .store
        .run(move |shard, _| shard.get_pipeline(&name))
        .await?;
    Ok(pipeline_to_proto(&pipeline))
}

/// Every pipeline; a list too large for one bus message is refused by `answer` as a whole.
pub(super) async fn list(ctx: &ShardContext) -> Result<v1::ListPipelinesResponse, DispatcherError> {
    let pipelines = ctx.store.run(|shard, _| shard.list_pipelines()).await?;
    Ok(v1::ListPipelinesResponse {
        pipelines: pipelines.iter().map(pipeline_to_proto).collect(),
    })
}
