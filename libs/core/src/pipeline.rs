//! Pipelines: a named chain (or graph) of stages; stage `s` of pipeline `p` is the queue `p.s`.
//! `advance` without `to` goes to the stage's `next`, else the following stage; the last
//! stage's `advance` is an `ack`.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::QueueConfig;
use crate::error::{Error, excerpt};
use crate::queue::QueueName;
use crate::text::{check_token, is_stage_char};
use crate::units::serde_duration;

const NAME_RULE: &str = "must be 1-100 bytes of [A-Za-z0-9_-]";
const MIN_HANDLER_TIMEOUT: Duration = Duration::from_millis(1);
const MAX_HANDLER_TIMEOUT: Duration = Duration::from_secs(86_400);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    pub name: String,
    pub stages: Vec<Stage>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub name: String,
    /// The config of the stage's queue `p.s`.
    #[serde(default)]
    pub queue: QueueConfig,
    pub handler: HandlerSpec,
    /// Higher gets handlers first when the budget is short.
    #[serde(default)]
    pub priority: u32,
    #[serde(default)]
    pub min_handlers: u32,
    #[serde(default = "one")]
    pub max_handlers: u32,
    /// The stage `advance` goes to; `None`: the following one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandlerSpec {
    pub kind: HandlerKind,
    /// Events one handler works on at once.
    #[serde(default = "one")]
    pub concurrency: u32,
    #[serde(with = "serde_duration", default = "default_timeout")]
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum HandlerKind {
    Http {
        url: String,
    },
    Grpc {
        endpoint: String,
    },
    /// An in-process Rust handler registered under this name.
    Builtin(String),
}

fn one() -> u32 {
    1
}

fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

impl Pipeline {
    /// Checks names, references and every stage's config; errors name the field, e.g. `stages[2].next`.
    pub fn validate(&self) -> Result<(), Error> {
        Pipeline::validate_name(&self.name, "name")?;
        if self.stages.is_empty() {
            return Err(Error::invalid(
                "stages",
                "must hold at least 1 stage, got 0",
            ));
        }
        let mut seen = HashSet::new();
        for (index, stage) in self.stages.iter().enumerate() {
            let field = format!("stages[{index}].name");
            Pipeline::validate_name(&stage.name, &field)?;
            if !seen.insert(stage.name.as_str()) {
                return Err(Error::invalid(
                    field,
                    format!("stage {} is defined twice", stage.name),
                ));
            }
            let queue = QueueName::parse_field(&format!("{}.{}", self.name, stage.name), &field)?;
            let prefix = format!("stages[{index}]");
            stage.queue.validate_at(&format!("{prefix}.queue"))?;
            stage
                .queue
                .dead_letter_queue_for(&queue)
                .map_err(|err| err.with_field(&field))?;
            stage.handler.validate_at(&format!("{prefix}.handler"))?;
            if stage.min_handlers > stage.max_handlers {
                return Err(Error::invalid(
                    format!("{prefix}.min_handlers"),
                    format!(
                        "must be at most max_handlers ({}), got {}",
                        stage.max_handlers, stage.min_handlers
                    ),
                ));
            }
        }
        for (index, stage) in self.stages.iter().enumerate() {
            if let Some(next) = &stage.next
                && self.stage(next).is_none()
            {
                return Err(Error::invalid(
                    format!("stages[{index}].next"),
                    format!(
                        "must name a stage of this pipeline ({}), got {}",
                        self.stage_names(),
                        excerpt(next)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks a pipeline name given in `field` (a stage name follows the same rule).
    pub fn validate_name(name: &str, field: &str) -> Result<(), Error> {
        check_token(name, field, 100, is_stage_char, NAME_RULE)
    }

    /// `(pipeline, stage)` of a queue named like a stage's queue: exactly one `.`, with a
    /// valid name on each side. Whether that pipeline exists is for the caller to find out.
    pub fn split_stage_queue(queue: &str) -> Option<(&str, &str)> {
        let (pipeline, stage) = queue.split_once('.')?;
        let valid = |name: &str| Pipeline::validate_name(name, "").is_ok();
        (valid(pipeline) && valid(stage)).then_some((pipeline, stage))
    }

    /// The stages' names in order, `, `-separated: for messages that say what is valid.
    pub fn stage_names(&self) -> String {
        let names: Vec<&str> = self.stages.iter().map(|s| s.name.as_str()).collect();
        names.join(", ")
    }

    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|stage| stage.name == name)
    }

    /// The queue `<pipeline>.<stage>`. Panics if the names are invalid: validate first.
    pub fn stage_queue(&self, stage: &str) -> QueueName {
        QueueName::parse(&Pipeline::queue_of(&self.name, stage))
            .expect("a validated pipeline's names form a valid queue name")
    }

    /// The name of stage `stage`'s queue of pipeline `pipeline`, unchecked.
    pub fn queue_of(pipeline: &str, stage: &str) -> String {
        format!("{pipeline}.{stage}")
    }

    /// The first stage's queue, where producers enqueue. Panics on an unvalidated, empty pipeline.
    pub fn first_queue(&self) -> QueueName {
        let first = self
            .stages
            .first()
            .expect("a validated pipeline has a stage");
        self.stage_queue(&first.name)
    }

    /// Where `advance` without `to` goes from `stage`: its `next`, else the following stage;
    /// `None` after the last stage (the advance is an ack) or for an unknown stage.
    pub fn next_stage(&self, stage: &str) -> Option<&Stage> {
        let index = self.stages.iter().position(|s| s.name == stage)?;
        match &self.stages[index].next {
            Some(next) => self.stage(next),
            None => self.stages.get(index + 1),
        }
    }

    /// The stage whose queue is `queue` (`<pipeline>.<stage>`), if any.
    pub fn stage_for_queue(&self, queue: &QueueName) -> Option<&Stage> {
        let rest = queue
            .as_str()
            .strip_prefix(self.name.as_str())?
            .strip_prefix('.')?;
        self.stage(rest)
    }
}

impl HandlerSpec {
    fn validate_at(&self, prefix: &str) -> Result<(), Error> {
        if self.concurrency == 0 {
            return Err(Error::invalid(
                format!("{prefix}.concurrency"),
                "must be at least 1, got 0",
            ));
        }
        if self.timeout < MIN_HANDLER_TIMEOUT || self.timeout > MAX_HANDLER_TIMEOUT {
            return Err(Error::invalid(
                format!("{prefix}.timeout"),
                format!(
                    "must be between 1ms and 24h, got {}",
                    crate::units::format_duration(self.timeout)
                ),
            ));
        }
        match &self.kind {
            HandlerKind::Http { url }
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(Error::invalid(
                    format!("{prefix}.kind.http.url"),
                    format!("must be an http:// or https:// URL, got {}", excerpt(url)),
                ))
            }
            HandlerKind::Grpc { endpoint } if endpoint.trim().is_empty() => Err(Error::invalid(
                format!("{prefix}.kind.grpc.endpoint"),
                "must be an endpoint such as http://127.0.0.1:50051, got an empty string",
            )),
            HandlerKind::Builtin(name) if name.trim().is_empty() => Err(Error::invalid(
                format!("{prefix}.kind.builtin"),
                "must name a built-in handler, got an empty string",
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
