//! Where an `advance` goes, resolved here before anything reaches a shard: the
//! shard always gets an explicit target queue, and its outbox hands the event over exactly
//! once, whichever shard owns the target.
//!
//! On the queue `p.s` of a stage (pipeline `p` exists and has a stage `s`):
//! - no `to`: the stage's `next`, else the following stage; after the last stage, an ack;
//! - `to` naming a stage of `p`: its queue `p.<to>` (any stage: graphs are allowed);
//! - any other `to`: the queue of that name if it exists (a template's queues count), else
//!   INVALID_ARGUMENT listing the stages, or PERMISSION_DENIED when the caller may not
//!   enqueue there, as for a queue that exists: the answer does not tell a caller whether a
//!   queue it has no grant on exists. A stage name wins over a queue of the same name.
//!
//! The target says which of these it is: a stage of the event's pipeline, or a queue outside
//! it (where the caller must be allowed to enqueue).
//!
//! On any other queue, `to` is the target queue as given, and no `to` is an ack: a queue
//! that is no stage has no next one, as after a pipeline's last stage. So a worker need not
//! know whether its queue is a stage (a pipeline applied or changed while it runs decides).

use cascade_core::{Pipeline, QueueName};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::GetQueueRequest;
use cascade_security::{Caller, Permission};

use crate::IngestError;
use crate::authorize::allowed;
use crate::error::excerpt;
use crate::gateway::Gateway;
use crate::route::unexpected;

/// A resolved advance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Into this queue, a stage of the event's own pipeline: moving events along their
    /// pipeline is what its consumers do.
    Stage(String),
    /// Into this queue, outside the event's pipeline: for the caller, an enqueue there.
    Queue(String),
    /// Past the last stage: the advance is an ack.
    Ack,
}

/// What the pipeline alone says about an advance.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Known(Target),
    /// `to` is no stage of the pipeline: a target only if a queue of that name exists.
    IfQueueExists(String),
}

impl Gateway {
    /// The target of an advance from `queue` with `to` (`None`: the next stage); errors name
    /// `field` (`advance.to`).
    pub(crate) async fn advance_target(
        &self,
        caller: &Caller,
        queue: &QueueName,
        to: Option<&str>,
        field: &str,
    ) -> Result<Target, IngestError> {
        let stage = match Pipeline::split_stage_queue(queue.as_str()) {
            Some((pipeline, stage)) => self
                .pipelines
                .get(&self.shards, pipeline)
                .await?
                .filter(|found| found.stage(stage).is_some())
                .map(|found| (found, stage)),
            None => None,
        };
        let decision = decide(stage.as_ref().map(|(p, s)| (p.as_ref(), *s)), to);
        match (decision, &stage) {
            (Decision::Known(target), _) => Ok(target),
            (Decision::IfQueueExists(name), Some((pipeline, _))) => {
                self.existing_queue(caller, name, pipeline, field).await
            }
            // Only a stage leaves `to` open; elsewhere it is the queue as given.
            (Decision::IfQueueExists(name), None) => Ok(Target::Queue(name)),
        }
    }

    /// `name` if a queue of that name exists (its owner can say what config it has).
    async fn existing_queue(
        &self,
        caller: &Caller,
        name: String,
        pipeline: &Pipeline,
        field: &str,
    ) -> Result<Target, IngestError> {
        let queue = QueueName::parse_field(&name, field)?;
        let owner = self.shards.owner(&queue);
        let asked = Op::GetQueue(GetQueueRequest { name: name.clone() });
        match self.shards.call(owner, asked).await {
            Ok(Reply::Queue(_)) => Ok(Target::Queue(name)),
            Ok(other) => Err(unexpected(owner, "a get", &other)),
            Err(err) if err.code() == tonic::Code::NotFound => {
                allowed(caller, Permission::Produce, &name, field)?;
                Err(IngestError::invalid(
                    field,
                    format!(
                        "must name a stage of pipeline '{}' ({}) or an existing queue, got {}",
                        pipeline.name,
                        pipeline.stage_names(),
                        excerpt(&name)
                    ),
                ))
            }
            Err(err) => Err(err),
        }
    }
}

/// The advance from a queue given the pipeline stage it is (`None`: not a stage).
fn decide(stage: Option<(&Pipeline, &str)>, to: Option<&str>) -> Decision {
    let Some((pipeline, stage)) = stage else {
        return Decision::Known(match to {
            Some(to) => Target::Queue(to.to_owned()),
            None => Target::Ack,
        });
    };
    let stage_queue = |name: &str| Target::Stage(pipeline.stage_queue(name).into());
    match to {
        None => match pipeline.next_stage(stage) {
            Some(next) => Decision::Known(stage_queue(&next.name)),
            None => Decision::Known(Target::Ack),
        },
        Some(to) if pipeline.stage(to).is_some() => Decision::Known(stage_queue(to)),
        Some(to) => Decision::IfQueueExists(to.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cascade_core::{HandlerKind, HandlerSpec, QueueConfig, Stage};

    use super::*;

    fn orders() -> Pipeline {
        let stage = |name: &str, next: Option<&str>| Stage {
            name: name.into(),
            queue: QueueConfig::default(),
            handler: HandlerSpec {
                kind: HandlerKind::Builtin("noop".into()),
                concurrency: 1,
                timeout: Duration::from_secs(30),
            },
            priority: 0,
            min_handlers: 0,
            max_handlers: 1,
            next: next.map(str::to_owned),
        };
        Pipeline {
            name: "orders".into(),
            stages: vec![
                stage("validate", None),
                stage("charge", Some("validate")),
                stage("ship", None),
            ],
        }
    }

    fn from(stage: &str, to: Option<&str>) -> Decision {
        let pipeline = orders();
        decide(Some((&pipeline, stage)), to)
    }

    fn stage(name: &str) -> Decision {
        Decision::Known(Target::Stage(name.into()))
    }

    fn queue(name: &str) -> Decision {
        Decision::Known(Target::Queue(name.into()))
    }

    #[test]
    fn a_stage_advances_along_the_pipeline() {
        assert_eq!(from("validate", None), stage("orders.charge"));
        assert_eq!(
            from("charge", None),
            stage("orders.validate"),
            "next wins over the order"
        );
        assert_eq!(from("ship", None), Decision::Known(Target::Ack));
        assert_eq!(from("validate", Some("ship")), stage("orders.ship"));
        assert_eq!(from("ship", Some("validate")), stage("orders.validate"));
        assert_eq!(
            from("validate", Some("archive")),
            Decision::IfQueueExists("archive".into())
        );
    }

    #[test]
    fn a_plain_queue_goes_to_its_target_or_is_done() {
        assert_eq!(decide(None, Some("done")), queue("done"));
        assert_eq!(decide(None, None), Decision::Known(Target::Ack));
    }
}
