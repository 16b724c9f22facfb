//! What one shard holds at most. Each queue no template covers and each stage is read in
//! every stats round and labelled apart in the metrics, and every shard holds every
//! pipeline, so these counts are what a shard's rounds, memory and `/metrics` grow with.
//! Queues made from a template are not counted: an empty one costs nothing (it is removed),
//! and the rest are summed into their template's family.

use cascade_core::Pipeline;

use super::state::State;
use crate::codec::records::{EventRecord, QueueKind, QueueRecord};
use crate::error::StoreError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardLimits {
    /// Queues and templates written by `CreateQueue` or a pipeline's stages, per shard.
    pub max_queues: u64,
    /// Pipelines, per cluster (every shard holds them all).
    pub max_pipelines: usize,
    /// Stages per pipeline.
    pub max_stages: usize,
    /// Bytes of payload and headers ([`cascade_core::event::event_bytes`]) an update or an
    /// advance may leave an event with: what one bus message carries, less the room an event
    /// needs beside them.
    pub max_event_bytes: usize,
}

impl Default for ShardLimits {
    fn default() -> Self {
        ShardLimits {
            max_queues: 10_000,
            max_pipelines: 100,
            max_stages: 32,
            max_event_bytes: usize::MAX,
        }
    }
}

impl State {
    /// RESOURCE_EXHAUSTED, naming `field`, when a change would make event `ev` carry more
    /// payload and own headers than [`ShardLimits::max_event_bytes`]. Only growth past it is
    /// refused: an event stored larger under an earlier limit may still move on as it is.
    pub(super) fn check_event_size(
        &self,
        field: &'static str,
        ev: &EventRecord,
        payload_len: usize,
        headers: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        let (size, max) = (
            cascade_core::event::event_bytes(payload_len, headers),
            self.settings.limits.max_event_bytes,
        );
        if size <= max || size <= cascade_core::event::event_bytes(ev.payload.len(), &ev.headers) {
            return Ok(());
        }
        Err(StoreError::EventTooLarge {
            field,
            id: ev.id.to_string(),
            size,
            max,
        })
    }

    /// Whether writing a queue over `existing` adds one to the shard's count: an explicit
    /// queue or template is counted already; a queue made from a template or as a dead-letter
    /// queue is counted from when it is created explicitly.
    pub(super) fn adds_queue(existing: Option<&QueueRecord>) -> bool {
        !existing.is_some_and(|rec| matches!(rec.kind, QueueKind::Explicit | QueueKind::Template))
    }

    /// INVALID_ARGUMENT on `field` unless the shard has room for `adding` more queues.
    pub(super) fn check_queue_room(&self, field: &str, adding: u64) -> Result<(), StoreError> {
        let max = self.settings.limits.max_queues;
        if adding == 0 || self.seqs.queue_count + adding <= max {
            return Ok(());
        }
        Err(cascade_core::Error::invalid(
            field,
            format!(
                "this shard holds {} queues and templates, the most limits.max_queues ({max}) allows; \
                 delete queues, use a template (a name ending in '*') for per-user queues, which are \
                 not counted, or raise the limit",
                self.seqs.queue_count
            ),
        )
        .into())
    }
}

impl ShardLimits {
    /// INVALID_ARGUMENT unless `pipeline` fits the limits, `stored` the pipelines there are
    /// (re-applying one of them is no new pipeline). The settings check the config file's
    /// pipelines with it too.
    pub fn check_pipeline(
        &self,
        pipeline: &Pipeline,
        stored: &[Pipeline],
    ) -> Result<(), cascade_core::Error> {
        if pipeline.stages.len() > self.max_stages {
            return Err(cascade_core::Error::invalid(
                "stages",
                format!(
                    "{} stages is more than limits.max_stages ({}) allows; split the pipeline or raise the limit",
                    pipeline.stages.len(),
                    self.max_stages
                ),
            ));
        }
        let new = !stored.iter().any(|p| p.name == pipeline.name);
        if new && stored.len() >= self.max_pipelines {
            return Err(cascade_core::Error::invalid(
                "name",
                format!(
                    "{} pipelines exist, the most limits.max_pipelines ({}) allows; re-apply an existing pipeline or raise the limit",
                    stored.len(),
                    self.max_pipelines
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "limits_tests.rs"]
mod tests;
