//! A queue given by name (`--queue orders.validate`) that is a pipeline's stage: the worker
//! serves it as that stage, so that an `advance` goes on to the next stage. Served as a plain
//! queue, where an `advance` is an ack, its events would skip every later stage.

use std::time::Duration;

use cascade_client::Client;
use cascade_client::api::GetPipelineRequest;
use cascade_core::Pipeline;
use cascade_proto::convert::pipeline_from_proto;
use tonic::Code;

use crate::{StageWorkerConfig, StageWorkerError};

/// How often, and how far apart, the gateway is asked while it does not answer.
const ATTEMPTS: u32 = 15;
const PAUSE: Duration = Duration::from_secs(1);

/// `config` with its plain queue `p.s` turned into stage `s` of pipeline `p`, if the gateway
/// knows such a stage; unchanged for any other queue. Fails when the gateway cannot be asked
/// (after about 15 s of trying): serving the queue either way could be wrong.
pub(crate) async fn serve_as_stage_if_one(
    mut config: StageWorkerConfig,
    gateway: &Client,
) -> Result<StageWorkerConfig, StageWorkerError> {
    let (None, Some(queue)) = (&config.pipeline, config.queue.clone()) else {
        return Ok(config);
    };
    let Some((pipeline, stage)) = Pipeline::split_stage_queue(&queue) else {
        return Ok(config);
    };
    let Some(definition) = pipeline_named(gateway, pipeline, &queue).await? else {
        return Ok(config);
    };
    if definition.stage(stage).is_none() {
        return Ok(config);
    }
    tracing::info!(%queue, pipeline, stage, "stage_worker.queue_is_a_stage");
    config.last_stage = definition.next_stage(stage).is_none();
    config.pipeline = Some(pipeline.to_owned());
    config.stage = Some(stage.to_owned());
    config.queue = None;
    Ok(config)
}

/// Pipeline `name` as the gateway has it; `None` if there is none the worker may read.
async fn pipeline_named(
    gateway: &Client,
    name: &str,
    queue: &str,
) -> Result<Option<Pipeline>, StageWorkerError> {
    let request = GetPipelineRequest { name: name.into() };
    let mut attempt = 1;
    loop {
        let status = match gateway.admin().get_pipeline(request.clone()).await {
            Ok(found) => {
                let found = pipeline_from_proto(&found.into_inner()).map_err(|e| {
                    StageWorkerError::setting("queue", format!("pipeline {name}: {e}"))
                })?;
                return Ok(Some(found));
            }
            Err(status) => status,
        };
        match status.code() {
            Code::NotFound | Code::PermissionDenied | Code::InvalidArgument => return Ok(None),
            _ if attempt < ATTEMPTS => {
                tracing::warn!(%queue, error = %status, "stage_worker.pipeline_lookup");
                tokio::time::sleep(PAUSE).await;
                attempt += 1;
            }
            _ => {
                return Err(StageWorkerError::setting(
                    "queue",
                    format!(
                        "cannot tell whether {queue} is a stage of pipeline {name}: the gateway answered {status}; start the worker once the gateway is up"
                    ),
                ));
            }
        }
    }
}
