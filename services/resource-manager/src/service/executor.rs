//! What applies decisions: Kubernetes (the scale of each stage's Deployment) or, in
//! `cascade standalone`, the knobs of the in-process stage workers.

use std::future::Future;

use cascade_core::QueueName;

use crate::{Current, Decision, ResourceManagerError};

/// Applies decisions and reports the handlers running now.
pub trait Executor: Send + Sync {
    /// Sets every decided stage to its `handlers` and `batch`. Called every interval with
    /// every stage, so applying a decision twice must change nothing. A stage that cannot
    /// be set must not keep the others from being set; the first failure is returned.
    fn apply(
        &self,
        decisions: &[Decision],
    ) -> impl Future<Output = Result<(), ResourceManagerError>> + Send;

    /// Handlers per stage as they run now (a stage absent runs none). The decision reads
    /// it as the count it starts from, and the history as the handlers that did the work.
    fn current(&self) -> Current;

    /// Learns, before a round decides, how many handlers `stages` run where this executor
    /// does not know yet (an executor that sets every count it reports knows already).
    fn observe(&self, stages: &[&QueueName]) -> impl Future<Output = ()> + Send {
        let _ = stages;
        std::future::ready(())
    }
}
