//! The service loop: reads every shard's stats from the bus, decides every
//! `resource_manager.interval`, and applies, shows and publishes each decision.
//!
//! Each round: the latest stats sample of every managed stage, with the delayed events the
//! timer shards say come due within `target_drain` (`due.rs`), goes into the [`History`]
//! with the handlers the executor reports running; [`Planner::step`] decides; each decision
//! is logged (info when a count changes, debug when kept), applied through the
//! [`Executor`], set on the gauges `cascade_rm_desired_handlers{stage}` and
//! `cascade_stage_handlers{stage}`, posted on the [`Board`] for `cascade rm explain`, and
//! published on `cascade.<cluster>.rm.decisions` (`publish.rs`).
//!
//! Failure policy: only a refused subscription (at start) or a bus that closes under the
//! loop ends it with an error. Bad stats are skipped (`inbox.rs`), a failed apply or
//! publish is logged and tried again next round (decisions are whole counts, not steps).

mod board;
mod due;
mod executor;
mod inbox;
mod publish;
mod stages;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use cascade_bus::{Bus, subject};
use cascade_core::{Clock, QueueName, Timestamp};
use cascade_telemetry::Metrics;
use tokio::time::{Instant, MissedTickBehavior};

pub use board::{Board, EXPLAIN_PATH};
pub use executor::Executor;
pub use publish::{DecisionsMessage, StageDecision};
pub use stages::{Stages, StagesFeed};

use crate::{Decision, History, Planner, ResourceManagerError, ResourceManagerSettings};
use inbox::Inbox;

/// What the loop works with besides its settings.
pub struct Deps<E> {
    pub bus: Bus,
    /// The stages to decide.
    pub stages: Stages,
    pub executor: E,
    pub metrics: Metrics,
    /// Where each round's decisions are posted for `cascade rm explain`.
    pub board: Board,
    pub clock: Arc<dyn Clock>,
    /// Timer shards (`cluster.shards`) asked each round for the delayed events due within
    /// `target_drain`; 0 asks none, and no wave is seen coming.
    pub timer_shards: u32,
}

/// Runs the resource manager of cluster `cluster` until `stop` completes. The first
/// decision comes one interval after start, once the shards have reported.
pub async fn run<E: Executor>(
    cluster: String,
    settings: ResourceManagerSettings,
    deps: Deps<E>,
    stop: impl Future<Output = ()>,
) -> Result<(), ResourceManagerError> {
    settings.validate()?;
    let stats_subject = subject::all_stats(&cluster);
    let mut subscription =
        deps.bus
            .subscribe(&stats_subject)
            .await
            .map_err(|e| ResourceManagerError::Bus {
                subject: stats_subject.clone(),
                reason: e.to_string(),
            })?;
    let mut ticks = tokio::time::interval_at(Instant::now() + settings.interval, settings.interval);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tracing::info!(
        cluster,
        interval = ?settings.interval,
        total_handlers = settings.total_handlers,
        "resource_manager.running"
    );
    let mut manager = Manager {
        decisions_subject: cascade_bus::subject::rm_decisions(&cluster),
        cluster: cluster.clone(),
        history: History::new(settings.throughput_window),
        settings,
        deps,
        inbox: Inbox::default(),
        planner: Planner::new(),
        gauged: BTreeSet::new(),
    };
    tokio::pin!(stop);
    loop {
        // Biased: stopping wins, and a flood of stats cannot starve the decisions.
        tokio::select! {
            biased;
            () = &mut stop => break,
            _ = ticks.tick() => manager.decide().await,
            message = subscription.next() => match message {
                Some(message) => manager.receive(&message),
                None => {
                    return Err(ResourceManagerError::Bus {
                        subject: stats_subject,
                        reason: "the bus closed".into(),
                    });
                }
            },
        }
    }
    tracing::info!("resource_manager.stopped");
    Ok(())
}

struct Manager<E> {
    settings: ResourceManagerSettings,
    deps: Deps<E>,
    cluster: String,
    decisions_subject: String,
    inbox: Inbox,
    history: History,
    planner: Planner,
    /// Stages with gauges set, so that a removed stage's gauges are dropped.
    gauged: BTreeSet<QueueName>,
}

impl<E: Executor> Manager<E> {
    fn receive(&mut self, message: &cascade_bus::Message) {
        let specs = self.deps.stages.get();
        // Stamped by the manager's own clock: staleness must not depend on the shard's.
        let now = self.deps.clock.now();
        self.inbox.receive(message, now, |queue| {
            specs.iter().any(|spec| spec.stage == *queue)
        });
    }

    async fn decide(&mut self) {
        let now = self.deps.clock.now();
        let specs = self.deps.stages.get();
        let managed: BTreeSet<&QueueName> = specs.iter().map(|spec| &spec.stage).collect();
        self.inbox.retain(|stage| managed.contains(stage));
        self.history.retain(|stage| managed.contains(stage));
        let stages: Vec<&QueueName> = managed.iter().copied().collect();
        self.deps.executor.observe(&stages).await;
        let (current, working) = (self.deps.executor.current(), self.deps.executor.working());
        let mut due = due::ask(
            &self.deps.bus,
            &self.cluster,
            self.deps.timer_shards,
            &stages,
            now,
            self.settings.target_drain,
        )
        .await;
        for spec in specs.iter() {
            if let Some(stats) = self.inbox.latest(&spec.stage) {
                let mut sample = stats.clone();
                sample.due = due.remove(&spec.stage).unwrap_or_default();
                // Refused (and harmless) when no newer sample came since the last round.
                self.history.record(sample, working.get(&spec.stage));
            }
        }
        let decisions = self
            .planner
            .step(&self.history, &specs, &current, &self.settings, now);
        decisions.iter().for_each(log);
        if let Err(e) = self.deps.executor.apply(&decisions).await {
            tracing::warn!(error = %e, "resource_manager.apply_failed");
        }
        self.set_gauges(&decisions);
        self.publish(&decisions, now).await;
        self.deps.board.post(now, decisions, &self.settings);
    }

    fn set_gauges(&mut self, decisions: &[Decision]) {
        let running = self.deps.executor.working();
        let decided: BTreeSet<QueueName> = decisions.iter().map(|d| d.stage.clone()).collect();
        for gone in self.gauged.difference(&decided) {
            self.deps.metrics.forget_stage(gone.as_str());
        }
        for decision in decisions {
            let stage = decision.stage.as_str();
            let metrics = &self.deps.metrics;
            metrics.set_rm_desired_handlers(stage, u64::from(decision.handlers));
            metrics.set_stage_handlers(stage, u64::from(running.get(&decision.stage)));
        }
        self.gauged = decided;
    }

    async fn publish(&self, decisions: &[Decision], at: Timestamp) {
        let message = DecisionsMessage {
            at: at.to_string(),
            total_handlers: self.settings.total_handlers,
            stages: decisions.iter().map(StageDecision::of).collect(),
        };
        let payload = match serde_json::to_vec(&message) {
            Ok(payload) => Bytes::from(payload),
            Err(e) => {
                tracing::error!(error = %e, "resource_manager.publish.encode");
                return;
            }
        };
        if let Err(e) = self
            .deps
            .bus
            .publish(&self.decisions_subject, payload)
            .await
        {
            tracing::warn!(subject = %self.decisions_subject, error = %e, "resource_manager.publish");
        }
    }
}

/// A change is news; a kept count is logged only at debug, every stage every interval.
fn log(decision: &Decision) {
    let stage = decision.stage.as_str();
    if decision.handlers != decision.current {
        tracing::info!(
            stage,
            from = decision.current,
            to = decision.handlers,
            batch = decision.batch,
            why = %decision,
            "resource_manager.decision"
        );
    } else {
        tracing::debug!(
            stage,
            handlers = decision.handlers,
            batch = decision.batch,
            why = %decision,
            "resource_manager.decision"
        );
    }
}
