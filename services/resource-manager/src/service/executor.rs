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

    /// Handlers per stage as set now (a stage absent runs none): the count a decision
    /// starts from.
    fn current(&self) -> Current;

    /// Handlers per stage up and doing the work now: fewer than `current` while new ones
    /// start (a Deployment's pods not ready yet). The history counts these as the handlers
    /// that did an interval's work. By default every handler set works at once.
    fn working(&self) -> Current {
        self.current()
    }

    /// Learns, before a round decides, how many handlers `stages` run where this executor
    /// does not know yet, or not for sure (an executor that sets every count it reports,
    /// and whose handlers work at once, knows already).
    fn observe(&self, stages: &[&QueueName]) -> impl Future<Output = ()> + Send {
        let _ = stages;
        std::future::ready(())
    }
}
