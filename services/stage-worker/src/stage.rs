//! Where a stage worker stands: its queue, the pipeline stage it serves (if any), and what
//! `advance` means there. Every handler kind gets the same rule: an `advance` without `to`
//! at the last stage, or on a plain queue, is an `ack`.

use cascade_core::{Event, Outcome, QueueName};
use cascade_telemetry::attr;
use cascade_worker::{BoxedHandler, Handler, HandlerError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageContext {
    pub queue: QueueName,
    /// Set for a pipeline's stage; both unset for a plain queue.
    pub pipeline: Option<String>,
    pub stage: Option<String>,
    /// Whether `advance` (without `to`) ends the event's journey: the pipeline's last
    /// stage, or a plain queue.
    pub last: bool,
}

/// A handler of any kind, with the stage's meaning of `advance` applied to its outcomes.
pub struct StageHandler {
    inner: BoxedHandler,
    last: bool,
    pipeline: Option<String>,
    stage: Option<String>,
}

impl StageHandler {
    pub fn new(inner: BoxedHandler, stage: &StageContext) -> StageHandler {
        StageHandler {
            inner,
            last: stage.last,
            pipeline: stage.pipeline.clone(),
            stage: stage.stage.clone(),
        }
    }

    /// Names the stage on the handler call's span (`worker.handle`, the current one).
    fn record_stage(&self) {
        if !cascade_telemetry::is_recording() {
            return;
        }
        let span = tracing::Span::current();
        if let Some(pipeline) = &self.pipeline {
            span.record(attr::PIPELINE, pipeline.as_str());
        }
        if let Some(stage) = &self.stage {
            span.record(attr::STAGE, stage.as_str());
        }
    }
}

impl Handler for StageHandler {
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        self.record_stage();
        let outcome = self.inner.handle(event, attempt).await?;
        Ok(resolve_advance(outcome, self.last))
    }
}

/// An advance to "the next stage" where there is none is an ack.
pub(crate) fn resolve_advance(outcome: Outcome, last: bool) -> Outcome {
    match outcome {
        Outcome::Advance { to: None, .. } if last => Outcome::Ack,
        other => other,
    }
}

/// "advance to the next stage", the outcome of a handler that succeeded.
pub(crate) fn advance() -> Outcome {
    Outcome::Advance {
        to: None,
        payload: None,
        headers: Default::default(),
        delay: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advancing_past_the_end_is_an_ack() {
        assert_eq!(resolve_advance(advance(), true), Outcome::Ack);
        assert_eq!(resolve_advance(advance(), false), advance());
        let jump = Outcome::Advance {
            to: Some("ship".into()),
            payload: None,
            headers: Default::default(),
            delay: None,
        };
        assert_eq!(resolve_advance(jump.clone(), true), jump);
        let retry = Outcome::Retry {
            delay: None,
            reason: None,
        };
        assert_eq!(resolve_advance(retry.clone(), true), retry);
    }
}
