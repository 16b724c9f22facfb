//! What `/status.json` answers (and what the page is first drawn from): each pipeline's
//! stages with their counts and history, then the other queues, by family. Bounded: at most
//! [`MAX_PIPELINES`] pipelines and [`MAX_QUEUE_ROWS`] rows, with how many more there are.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use cascade_core::{Pipeline, Timestamp};
use serde::Serialize;

use super::aggregate::{Counts, Family, MAX_FAMILIES, Merged};
use super::handlers::Handlers;
use super::history::{HISTORY_POINTS, History, Point, SAMPLE_EVERY};

pub(crate) const MAX_PIPELINES: usize = 50;
pub(crate) const MAX_QUEUE_ROWS: usize = 200;
/// How far back a stage's lateness looks: long enough to see a stage whose retries come
/// due now and then, short enough to see a slow timer recover.
pub(crate) const LATENESS_WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Serialize)]
pub(crate) struct StatusView {
    pub generated_at_ms: u64,
    pub sample_every_secs: u64,
    pub history_points: usize,
    pub pipelines: Vec<PipelineView>,
    pub pipelines_more: usize,
    pub queues: Vec<QueueView>,
    /// Rows left out of `queues` (those with the smallest backlogs).
    pub queues_more: usize,
    /// Every dispatcher shard of the cluster, with how recent its stats are.
    pub shards: Vec<ShardView>,
    /// Why the numbers may be incomplete or old.
    pub warnings: Vec<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct PipelineView {
    pub name: String,
    pub stages: Vec<StageView>,
}

#[derive(Debug, Serialize)]
pub(crate) struct StageView {
    pub name: String,
    pub queue: String,
    /// The stage `advance` goes to; `None` after the last.
    pub next: Option<String>,
    /// Where its events go when their attempts run out (`/dead-letters.json` lists them).
    pub dead_letter_queue: Option<String>,
    pub priority: u32,
    #[serde(flatten)]
    pub counts: Counts,
    /// Running and decided by the resource manager; `None` when it has published nothing
    /// lately (not running, or not over this stage).
    pub handlers: Option<Handlers>,
    /// The largest activation lateness of its delayed events (retries, scheduled events)
    /// activated in the last [`LATENESS_WINDOW`], in µs; `None`: none was.
    pub lateness_us: Option<u64>,
    pub history: Vec<Point>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ShardView {
    pub shard: u32,
    /// How old its latest complete round of stats is; `None`: none has come.
    pub stats_age_ms: Option<u64>,
    /// Silent for longer than a few stats intervals: down, or cut off from this gateway.
    pub stale: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct QueueView {
    pub name: String,
    /// A template: the row sums its `queues` queues.
    pub template: bool,
    pub queues: u64,
    #[serde(flatten)]
    pub counts: Counts,
}

/// The inputs of a view, as the status task keeps them.
pub(crate) struct Inputs<'a> {
    pub now: Timestamp,
    /// `cluster.shards`.
    pub shards: u32,
    pub pipelines: &'a [Arc<Pipeline>],
    pub merged: Merged,
    pub history: &'a History,
    /// The handlers of a stage, by its queue.
    pub handlers: &'a dyn Fn(&str) -> Option<Handlers>,
    pub warnings: Vec<String>,
}

pub(crate) fn build(inputs: Inputs<'_>) -> StatusView {
    let Inputs {
        now,
        shards,
        pipelines,
        merged,
        history,
        handlers,
        mut warnings,
    } = inputs;
    let stage_queues: HashSet<String> = pipelines
        .iter()
        .flat_map(|p| p.stages.iter().map(|s| p.stage_queue(&s.name).to_string()))
        .collect();
    let shown = pipelines
        .iter()
        .take(MAX_PIPELINES)
        .map(|pipeline| pipeline_view(pipeline, now, &merged, history, handlers))
        .collect();
    let mut rows: Vec<QueueView> = merged
        .families
        .iter()
        .filter(|(name, _)| !stage_queues.contains(name.as_str()))
        .map(|(name, family)| queue_view(name, family))
        .collect();
    let queues_more = cap_rows(&mut rows);
    if merged.overflow.queues > 0 {
        warnings.push(format!(
            "{} queues past the first {MAX_FAMILIES} of a shard are not itemised; they hold {} ready, {} delayed, {} leased",
            merged.overflow.queues,
            merged.overflow.counts.ready,
            merged.overflow.counts.delayed,
            merged.overflow.counts.leased
        ));
    }
    for (shard, age) in &merged.stale {
        warnings.push(format!(
            "shard {shard} has published no stats for {}s: its numbers are old",
            age.as_secs()
        ));
    }
    let stale: HashSet<u32> = merged.stale.iter().map(|(shard, _)| *shard).collect();
    let shards = (0..shards)
        .map(|shard| ShardView {
            shard,
            stats_age_ms: merged
                .ages
                .get(&shard)
                .copied()
                .flatten()
                .map(|age| u64::try_from(age.as_millis()).unwrap_or(u64::MAX)),
            stale: stale.contains(&shard),
        })
        .collect();
    StatusView {
        generated_at_ms: now.as_millis(),
        sample_every_secs: SAMPLE_EVERY.as_secs(),
        history_points: HISTORY_POINTS,
        pipelines: shown,
        pipelines_more: pipelines.len().saturating_sub(MAX_PIPELINES),
        queues: rows,
        queues_more,
        shards,
        warnings,
    }
}

fn pipeline_view(
    pipeline: &Pipeline,
    now: Timestamp,
    merged: &Merged,
    history: &History,
    handlers: &dyn Fn(&str) -> Option<Handlers>,
) -> PipelineView {
    let stages = pipeline
        .stages
        .iter()
        .map(|stage| {
            let name = pipeline.stage_queue(&stage.name);
            let dead_letter_queue = stage.queue.dead_letter_queue_for(&name).ok();
            let queue = name.to_string();
            let counts = merged
                .families
                .get(&queue)
                .map(|family| family.counts)
                .unwrap_or_default();
            let history = history.of(&queue);
            StageView {
                name: stage.name.clone(),
                next: pipeline.next_stage(&stage.name).map(|s| s.name.clone()),
                dead_letter_queue: dead_letter_queue.map(|q| q.to_string()),
                priority: stage.priority,
                counts,
                handlers: handlers(&queue),
                lateness_us: lateness(&history, now),
                history,
                queue,
            }
        })
        .collect();
    PipelineView {
        name: pipeline.name.clone(),
        stages,
    }
}

/// The largest lateness of the samples in the last [`LATENESS_WINDOW`].
fn lateness(history: &[Point], now: Timestamp) -> Option<u64> {
    let since = now.saturating_sub(LATENESS_WINDOW).as_millis();
    history
        .iter()
        .rev()
        .take_while(|point| point.at_ms() > since)
        .filter_map(Point::lateness)
        .max()
}

fn queue_view(name: &str, family: &Family) -> QueueView {
    QueueView {
        name: name.to_owned(),
        template: family.template,
        queues: family.queues,
        counts: family.counts,
    }
}

/// Keeps the [`MAX_QUEUE_ROWS`] rows with the largest backlogs, in name order; returns how
/// many were left out.
fn cap_rows(rows: &mut Vec<QueueView>) -> usize {
    let more = rows.len().saturating_sub(MAX_QUEUE_ROWS);
    if more > 0 {
        let backlog = |row: &QueueView| row.counts.ready + row.counts.delayed + row.counts.leased;
        rows.sort_by(|a, b| {
            backlog(b)
                .cmp(&backlog(a))
                .then_with(|| a.name.cmp(&b.name))
        });
        rows.truncate(MAX_QUEUE_ROWS);
        rows.sort_by(|a, b| a.name.cmp(&b.name));
    }
    more
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, ready: u64) -> QueueView {
        QueueView {
            name: name.to_owned(),
            template: false,
            queues: 1,
            counts: Counts {
                ready,
                ..Counts::default()
            },
        }
    }

    #[test]
    fn the_table_keeps_the_largest_backlogs_in_name_order() {
        let mut rows: Vec<QueueView> = (0..MAX_QUEUE_ROWS + 3)
            .map(|i| row(&format!("q{i:04}"), i as u64))
            .collect();
        assert_eq!(cap_rows(&mut rows), 3);
        assert_eq!(rows.len(), MAX_QUEUE_ROWS);
        assert_eq!(rows[0].name, "q0003");
        assert!(rows.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn a_stage_s_lateness_is_the_largest_of_the_last_minute() {
        let point = |at_s: u64, late_us| Point(at_s * 1000, 0, 0, 0, 0, 0, 0, 0, late_us);
        let now = Timestamp::from_millis(100_000);
        let history = [
            point(30, Some(90_000)),
            point(45, Some(2_000)),
            point(50, None),
            point(95, Some(700)),
        ];
        assert_eq!(
            lateness(&history, now),
            Some(2_000),
            "the sample at 30 s is too old"
        );
        assert_eq!(lateness(&history[..1], now), None);
        assert_eq!(lateness(&[], now), None);
    }
}
