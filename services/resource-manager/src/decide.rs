//! The decision: from the stats history, the stages' specs, the current counts, the settings
//! and the time, how many handlers each stage gets and how many events each takes at once.
//!
//! Each stage first says what it wants on its own (`propose.rs`: need, bounds,
//! tolerance, scale-down hold, idleness); then the budget is shared by priority
//! (`allocate.rs`). A hold never raises a stage above the budget: when the budget
//! shrinks, counts are cut at once, lowest priority first.
//!
//! [`Planner`] carries what one decision leaves for the next (last activity, last measured
//! throughput, recent needs); given the same planner state and inputs, [`Planner::step`]
//! always returns the same decisions. It does no I/O and reads no clock.

use std::collections::{BTreeMap, BTreeSet};

use cascade_core::{QueueName, Timestamp};

use crate::allocate::{Claim, allocate};
use crate::history::History;
use crate::model::{Current, Decision, Explanation, Reason, StageSpec};
use crate::propose::{Memory, Proposal, propose};
use crate::settings::ResourceManagerSettings;

/// The decision function with its memory between steps.
#[derive(Clone, Debug, Default)]
pub struct Planner {
    memory: BTreeMap<QueueName, Memory>,
}

impl Planner {
    pub fn new() -> Planner {
        Planner::default()
    }

    /// Decides every stage of `specs`, higher priority first, then by name. A stage named
    /// twice is decided once, by its first spec. Stages no longer in `specs` are forgotten.
    pub fn step(
        &mut self,
        history: &History,
        specs: &[StageSpec],
        current: &Current,
        settings: &ResourceManagerSettings,
        now: Timestamp,
    ) -> Vec<Decision> {
        let specs = ordered(specs);
        let names: BTreeSet<&QueueName> = specs.iter().map(|spec| &spec.stage).collect();
        self.memory.retain(|stage, _| names.contains(stage));

        let proposals: Vec<Proposal> = specs
            .iter()
            .map(|spec| {
                let memory = self
                    .memory
                    .entry(spec.stage.clone())
                    .or_insert_with(|| Memory::new(now));
                propose(
                    memory,
                    history,
                    spec,
                    current.get(&spec.stage),
                    settings,
                    now,
                )
            })
            .collect();
        let claims: Vec<Claim<'_>> = specs
            .iter()
            .zip(&proposals)
            .map(|(spec, proposal)| Claim {
                stage: &spec.stage,
                priority: spec.priority,
                min: spec.min_handlers,
                want: proposal.wanted,
                need: proposal.need,
                woken: proposal.woken,
            })
            .collect();
        let handlers = allocate(settings.total_handlers, &claims);

        specs
            .iter()
            .zip(proposals)
            .zip(&handlers)
            .map(|((spec, proposal), &got)| {
                let mut reasons = proposal.reasons;
                if got < proposal.wanted {
                    let higher = specs
                        .iter()
                        .zip(&handlers)
                        .filter(|(other, _)| other.priority > spec.priority)
                        .map(|(_, &h)| h)
                        .sum();
                    reasons.push(Reason::BudgetCut {
                        wanted: proposal.wanted,
                        total: settings.total_handlers,
                        higher,
                    });
                }
                Decision {
                    stage: spec.stage.clone(),
                    priority: spec.priority,
                    current: current.get(&spec.stage),
                    wanted: proposal.wanted,
                    handlers: got,
                    batch: proposal.batch,
                    explanation: Explanation {
                        inputs: proposal.inputs,
                        reasons,
                    },
                }
            })
            .collect()
    }
}

/// The specs by priority (higher first), then name, without repeats.
fn ordered(specs: &[StageSpec]) -> Vec<&StageSpec> {
    let mut seen = BTreeSet::new();
    let mut unique: Vec<&StageSpec> = Vec::with_capacity(specs.len());
    for spec in specs {
        if seen.insert(&spec.stage) {
            unique.push(spec);
        } else {
            tracing::warn!(stage = %spec.stage.as_str(), "resource_manager.decide: stage given twice, the first spec is used");
        }
    }
    unique.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then_with(|| a.stage.cmp(&b.stage))
    });
    unique
}
