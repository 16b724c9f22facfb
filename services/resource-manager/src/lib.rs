//! The resource manager's decision: how many handlers each pipeline stage gets, and how many
//! events each handler takes at once, from measured stats, the stages' priorities and bounds,
//! and one shared budget (`resource_manager.total_handlers`).
//!
//! The decision is pure: [`Planner::step`] reads a [`History`] of stats samples, the
//! [`StageSpec`]s, the [`Current`] counts, the settings and the time, and returns a
//! [`Decision`] per stage with its [`Explanation`]. Reading stats from the bus and applying
//! counts belong to the service loop, [`run`] (`service/`), which applies them through an
//! [`Executor`]: Kubernetes, or the stage workers of `cascade standalone` (its executor
//! lives in the `cascade` crate, which owns those workers). As its own process
//! (`cascade-resource-manager`), [`serve`] runs the loop with the Kubernetes executor
//! (`kubernetes.rs`) or none (`server.rs`).
//!
//! The policy, in short (details in each module):
//! - a stage needs `(ready + leased + due within target_drain + arrivals × target_drain)
//!   / (per-handler throughput × target_drain)` handlers (`propose.rs`);
//! - up at once, down only after `scale_down_after` of lower need, to `min_handlers` after
//!   `idle_after` of nothing to do (0 allowed; ready events wake it);
//! - minimums first, then priority tiers high to low, in proportion to need within a tier,
//!   never above the budget (`allocate.rs`);
//! - a batch is about one interval of one handler's work, a power of two up to `max_batch`.
//!
//! Failure policy: bad or missing stats never fail a decision. Counters that go back skip an
//! interval, missing or stale stats keep a stage's count, an unmeasured throughput assumes
//! `default_throughput` and scales up at most by doubling per interval.

mod allocate;
mod decide;
mod error;
pub mod explain;
mod history;
#[cfg(feature = "kubernetes")]
mod kubernetes;
mod measure;
mod model;
mod propose;
mod server;
mod service;
mod settings;

pub use decide::Planner;
pub use error::ResourceManagerError;
pub use history::{History, Sample};
#[cfg(feature = "kubernetes")]
pub use kubernetes::KubernetesExecutor;
pub use model::{
    Current, Decision, DueBucket, Explanation, Inputs, Reason, StageSpec, StageStats, Throughput,
    ThroughputSource,
};
pub use server::{ServeDeps, serve};
pub use service::{
    Board, DecisionsMessage, Deps, EXPLAIN_PATH, Executor, StageDecision, Stages, StagesFeed, run,
};
pub use settings::{ExecutorKind, KubernetesSettings, ResourceManagerSettings};
