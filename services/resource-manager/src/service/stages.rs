//! Which stages the manager decides, with their priorities and bounds. The list comes from
//! whoever knows the pipelines: in `cascade standalone`, the stage supervisor, which lists
//! them through the gateway anyway, feeds each list it reads; tests give a fixed one.

use std::sync::Arc;

use cascade_core::Pipeline;
use tokio::sync::watch;

use crate::StageSpec;

/// The stages to decide, as last fed. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Stages(watch::Receiver<Arc<[StageSpec]>>);

/// Feeds [`Stages`] with each new list.
#[derive(Debug)]
pub struct StagesFeed(watch::Sender<Arc<[StageSpec]>>);

impl Stages {
    /// A list that never changes.
    pub fn fixed(specs: Vec<StageSpec>) -> Stages {
        // A receiver keeps the last value after its sender is gone.
        let (_feed, stages) = watch::channel(Arc::from(specs));
        Stages(stages)
    }

    /// An empty list, and what feeds it.
    pub fn feed() -> (StagesFeed, Stages) {
        let (feed, stages) = watch::channel(Arc::from(Vec::new()));
        (StagesFeed(feed), Stages(stages))
    }

    pub fn get(&self) -> Arc<[StageSpec]> {
        Arc::clone(&self.0.borrow())
    }
}

impl StagesFeed {
    pub fn set(&self, specs: Vec<StageSpec>) {
        self.0.send_if_modified(|old| {
            let changed = **old != *specs;
            if changed {
                *old = Arc::from(specs);
            }
            changed
        });
    }

    /// Every stage of `pipelines`. A stage that cannot be managed (only an unvalidated
    /// pipeline has one) is logged and left out; the others are still managed.
    pub fn set_pipelines(&self, pipelines: &[Pipeline]) {
        let mut specs = Vec::new();
        for pipeline in pipelines {
            match crate::StageSpec::of_pipeline(pipeline) {
                Ok(stages) => specs.extend(stages),
                Err(e) => {
                    tracing::error!(pipeline = %pipeline.name, error = %e, "resource_manager.stages.skipped");
                }
            }
        }
        self.set(specs);
    }
}
