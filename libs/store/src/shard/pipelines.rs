//! Pipelines: every shard stores every pipeline (so any shard can answer for one), and
//! creates or updates the queues of the stages it owns in the same write. Applying again is
//! how a pipeline changes: the stage queues keep their events.

use cascade_core::{Pipeline, Timestamp};

use super::Shard;
use super::families::{Families, stage_queues};
use super::state::State;
use crate::codec::keys;
use crate::codec::records;
use crate::error::StoreError;
use crate::kv::Flow;

impl Shard {
    /// Stores `pipeline` (replacing one of that name) and puts the queue `p.s` of each stage
    /// this shard owns with the stage's config ([`Shard::put_queue`]), in one write. A stage
    /// left out of a new version keeps its queue and events, as an ordinary queue.
    pub fn apply_pipeline(
        &mut self,
        now: Timestamp,
        pipeline: Pipeline,
    ) -> Result<Pipeline, StoreError> {
        pipeline.validate()?;
        let mut pipelines = self.list_pipelines()?;
        self.st
            .settings
            .limits
            .check_pipeline(&pipeline, &pipelines)?;
        let mut txn = self.st.begin(&self.kv);
        let mut writes = Vec::new();
        for stage in &pipeline.stages {
            let queue = pipeline.stage_queue(&stage.name);
            if !(self.st.settings.router)(&queue) {
                continue;
            }
            let existing = self.st.stored_queue(&txn, &queue)?;
            if State::needs_write(existing.as_ref(), &stage.queue) {
                writes.push((queue, &stage.queue, existing));
            }
        }
        let adding = writes
            .iter()
            .map(|(_, _, existing)| u64::from(State::adds_queue(existing.as_ref())))
            .sum();
        self.st.check_queue_room("stages", adding)?;
        for (queue, config, existing) in writes {
            // Stage names hold no `*`: never a template, so no in-memory list to update.
            self.st.write_queue(&mut txn, now, &queue, config, existing);
        }
        txn.put(
            keys::pipeline(&pipeline.name),
            records::encode_pipeline(&pipeline),
        );
        // A stage's queue leaves its template's family (and a stage left out of the new
        // version joins it again): sum the families again, before anything is written.
        pipelines.retain(|p| p.name != pipeline.name);
        pipelines.push(pipeline.clone());
        let stages = stage_queues(&pipelines);
        let families = (stages != self.st.stages)
            .then(|| Families::load(&self.kv, &self.st.templates, &stages))
            .transpose()?;
        let count = self.st.seqs.queue_count + adding;
        self.st.seqs.set_queue_count(count);
        let batch = match families {
            Some(families) => self.st.seal_rebuilt(txn, families),
            None => self.st.seal(txn),
        };
        self.st.commit(&mut self.kv, batch);
        self.st.stages = stages;
        Ok(pipeline)
    }

    /// The stored pipeline `name`, else `PipelineNotFound`.
    pub fn get_pipeline(&self, name: &str) -> Result<Pipeline, StoreError> {
        match self.kv.get(&keys::pipeline(name))? {
            Some(v) => records::decode_pipeline(&v).map_err(|e| State::corrupt(&self.kv, e)),
            None => Err(StoreError::PipelineNotFound {
                name: name.to_owned(),
            }),
        }
    }

    /// Every stored pipeline, by name. Pipelines are few (one per workflow), so no paging.
    pub fn list_pipelines(&self) -> Result<Vec<Pipeline>, StoreError> {
        let (start, end) = keys::pipeline_space();
        let mut pipelines = Vec::new();
        self.kv.scan(&start, &end, |_, v| {
            pipelines.push(records::decode_pipeline(v).map_err(|e| State::corrupt(&self.kv, e))?);
            Ok(Flow::Continue)
        })?;
        Ok(pipelines)
    }
}

#[cfg(test)]
#[path = "pipelines_tests.rs"]
mod tests;
