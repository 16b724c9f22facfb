//! Each round of decisions on the bus, on `cascade.<cluster>.rm.decisions`, as JSON: the
//! stream is for people and tools watching (`nats sub 'cascade.*.rm.decisions'`), nothing
//! in Cascade acts on it, and JSON needs no change to the proto contract. One message a
//! round, all stages in it, in the decision's order (priority, then name).

use serde::{Deserialize, Serialize};

use crate::Decision;

/// One round of decisions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionsMessage {
    /// When they were made, RFC 3339 UTC.
    pub at: String,
    /// `resource_manager.total_handlers`.
    pub total_handlers: u32,
    pub stages: Vec<StageDecision>,
}

/// One stage's decision, with the explanation `cascade rm explain` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageDecision {
    pub stage: String,
    pub priority: u32,
    /// Handlers running when it was made.
    pub current: u32,
    /// What the stage asked for before the budget was shared.
    pub wanted: u32,
    pub handlers: u32,
    pub batch: u32,
    pub why: String,
}

impl StageDecision {
    pub(crate) fn of(decision: &Decision) -> StageDecision {
        StageDecision {
            stage: decision.stage.to_string(),
            priority: decision.priority,
            current: decision.current,
            wanted: decision.wanted,
            handlers: decision.handlers,
            batch: decision.batch,
            why: decision.explanation.to_string(),
        }
    }
}
