//! How many handlers each pipeline stage runs, and how many it should: the resource manager
//! publishes each round of decisions as JSON on `cascade.<cluster>.rm.decisions` (it is the
//! contract there; this reads only the fields the page shows). Decisions older than a few of
//! the manager's rounds are not shown: a manager that stopped publishing says nothing about
//! the stages any more.

use std::collections::HashMap;
use std::time::Duration;

use cascade_core::Timestamp;
use serde::{Deserialize, Serialize};

/// One round, as published.
#[derive(Deserialize)]
struct Round {
    stages: Vec<StageDecision>,
}

#[derive(Deserialize)]
struct StageDecision {
    /// The stage's queue, `<pipeline>.<stage>`.
    stage: String,
    /// Handlers running when the decision was made.
    current: u32,
    /// Handlers decided.
    handlers: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Handlers {
    pub running: u32,
    pub desired: u32,
}

/// The latest round received, by stage queue.
#[derive(Debug, Default)]
pub(crate) struct Decisions {
    received_at: Option<Timestamp>,
    by_stage: HashMap<String, Handlers>,
}

impl Decisions {
    /// Keeps a published round; an unreadable one changes nothing.
    pub fn receive(&mut self, payload: &[u8], now: Timestamp) -> Result<(), serde_json::Error> {
        let round: Round = serde_json::from_slice(payload)?;
        self.by_stage = round
            .stages
            .into_iter()
            .map(|s| {
                let handlers = Handlers {
                    running: s.current,
                    desired: s.handlers,
                };
                (s.stage, handlers)
            })
            .collect();
        self.received_at = Some(now);
        Ok(())
    }

    /// The handlers of `stage_queue`, unless the latest round is older than `fresh_for`.
    pub fn of(&self, stage_queue: &str, now: Timestamp, fresh_for: Duration) -> Option<Handlers> {
        let at = self.received_at?;
        if now.duration_since(at) > fresh_for {
            return None;
        }
        self.by_stage.get(stage_queue).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUND: &str = r#"{"at":"2026-11-25T05:00:00Z","total_handlers":16,"stages":[
        {"stage":"demo.receive","priority":1,"current":1,"wanted":3,"handlers":3,"batch":10,"why":"backlog"}]}"#;

    #[test]
    fn the_latest_round_is_shown_while_it_is_fresh() {
        let mut decisions = Decisions::default();
        let at = Timestamp::from_millis(1_000_000);
        let fresh = Duration::from_secs(15);
        assert_eq!(decisions.of("demo.receive", at, fresh), None);
        decisions.receive(ROUND.as_bytes(), at).expect("a round");
        let shown = Some(Handlers {
            running: 1,
            desired: 3,
        });
        assert_eq!(decisions.of("demo.receive", at, fresh), shown);
        assert_eq!(decisions.of("demo.enrich", at, fresh), None);
        let later = Timestamp::from_millis(1_000_000 + 16_000);
        assert_eq!(decisions.of("demo.receive", later, fresh), None);
        assert!(decisions.receive(b"not json", later).is_err());
        assert_eq!(decisions.of("demo.receive", at, fresh), shown);
    }
}
