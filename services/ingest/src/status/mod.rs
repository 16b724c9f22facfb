//! The status page on the HTTP admin port: `/` draws every pipeline as its chain of stages
//! with their counts, rates, lateness, handlers and charts of the last minutes, the shards' health, and
//! the other queues in a table (a template as one row summing its queues); `/status.json` is
//! what the page (and `cascade top`) polls; `/dead-letters.json` lists a dead-letter queue's
//! first events for the page's links. One self-contained HTML file (`page.html`), no external
//! assets.
//!
//! Data: the stats every dispatcher shard publishes on the bus (`aggregate`), the resource
//! manager's published decisions (`handlers`), and the pipelines read from a shard every
//! [`SAMPLE_EVERY`], when the stages' counts are also sampled into a bounded history
//! (`history`). Failure policy: nothing here fails the
//! gateway; an undecodable message is logged and skipped, a failed pipeline read keeps the
//! last list and shows a warning on the page, and a shard gone quiet is flagged as stale.

mod aggregate;
mod dead_letters;
mod handlers;
mod history;
mod view;

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cascade_bus::{Bus, Message, Subscription};
use cascade_core::{Clock, Pipeline, QueueName, SystemClock};
use cascade_proto::bus::v1::ShardStats;
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::pipeline_from_proto;
use cascade_proto::v1::ListPipelinesRequest;
use cascade_service::{Settings, Shutdown};

use crate::IngestError;
use crate::pipelines::read_any;
use crate::route::{Shards, unexpected};
use aggregate::{Aggregator, Counts};
use handlers::Decisions;
use history::{History, SAMPLE_EVERY, Sample};

const PAGE: &str = include_str!("page.html");
/// Where the page's first data goes, so that it draws without waiting for a request.
const INITIAL_DATA: &str = "\"__STATUS_JSON__\"";
/// How often the sampler looks while it has nothing to sample.
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A shard silent for this many stats intervals is flagged as stale.
const STALE_INTERVALS: u32 = 5;
/// The resource manager's decisions are shown for this many of its rounds.
const DECISION_ROUNDS: u32 = 3;

/// The page's state, shared by the HTTP handlers and the task that fills it ([`StatusPage::run`]).
#[derive(Clone)]
pub struct StatusPage {
    state: Arc<Mutex<State>>,
    /// Set by [`StatusPage::run`]: how `/dead-letters.json` asks the shards.
    shards: Arc<OnceLock<Shards>>,
    stale_after: Duration,
    decisions_fresh_for: Duration,
    shard_count: u32,
}

#[derive(serde::Deserialize)]
struct DeadLettersQuery {
    queue: String,
}

#[derive(Default)]
struct State {
    aggregator: Aggregator,
    history: History,
    decisions: Decisions,
    /// By name.
    pipelines: Vec<Arc<Pipeline>>,
    /// Why the pipelines could not be read last time, if they could not.
    pipelines_error: Option<String>,
}

impl StatusPage {
    pub fn new(settings: &Settings) -> StatusPage {
        StatusPage {
            state: Arc::default(),
            shards: Arc::default(),
            stale_after: settings.dispatcher.stats_interval * STALE_INTERVALS,
            decisions_fresh_for: settings.resource_manager.interval * DECISION_ROUNDS,
            shard_count: settings.cluster.shards,
        }
    }

    /// `/`, `/status.json` and `/dead-letters.json`, for the admin port's router.
    pub fn router(&self) -> Router {
        let json = self.clone();
        let page = self.clone();
        let dead = self.clone();
        Router::new()
            .route(
                "/dead-letters.json",
                get(move |Query(query): Query<DeadLettersQuery>| async move {
                    dead.dead_letters(query.queue).await
                }),
            )
            .route(
                "/status.json",
                get(move || {
                    let body = json.json();
                    async move {
                        (
                            [
                                (header::CONTENT_TYPE, "application/json"),
                                (header::CACHE_CONTROL, "no-store"),
                            ],
                            body,
                        )
                            .into_response()
                    }
                }),
            )
            .route(
                "/",
                get(move || {
                    let body = page.html();
                    async move {
                        (
                            [
                                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                                (header::CACHE_CONTROL, "no-store"),
                            ],
                            body,
                        )
                            .into_response()
                    }
                }),
            )
    }

    /// Follows the shards' stats and the resource manager's decisions, and samples the
    /// stages, until `shutdown`. Fails only when it cannot subscribe.
    pub async fn run(
        self,
        settings: Settings,
        bus: Bus,
        shutdown: Shutdown,
    ) -> Result<(), IngestError> {
        let shards = self.shards.get_or_init(|| {
            Shards::new(
                bus.clone(),
                settings.cluster.name.clone(),
                settings.cluster.shards,
                settings.bus.request_timeout,
            )
        });
        let stats = subscribe(
            &bus,
            cascade_bus::subject::all_stats(&settings.cluster.name),
        );
        let decisions = subscribe(
            &bus,
            cascade_bus::subject::rm_decisions(&settings.cluster.name),
        );
        let (stats, decisions) = (stats.await?, decisions.await?);
        tokio::join!(
            self.receive(stats, &shutdown, |page, m| page.add(m)),
            self.receive(decisions, &shutdown, |page, m| page.add_decisions(m)),
            self.sample(shards, &shutdown)
        );
        Ok(())
    }

    async fn receive(
        &self,
        mut subscription: Subscription,
        shutdown: &Shutdown,
        add: impl Fn(&StatusPage, &Message),
    ) {
        loop {
            let message = tokio::select! {
                message = subscription.next() => message,
                () = shutdown.wait() => return,
            };
            let Some(message) = message else { return };
            add(self, &message);
        }
    }

    fn add_decisions(&self, message: &Message) {
        let now = SystemClock.now();
        if let Err(e) = self.lock().decisions.receive(&message.payload(), now) {
            tracing::warn!(subject = %message.subject, error = %e, "ingest.status.undecodable");
        }
    }

    fn add(&self, message: &Message) {
        let stats: ShardStats = match message.decode() {
            Ok(stats) => stats,
            Err(e) => {
                tracing::warn!(subject = %message.subject, error = %e, "ingest.status.undecodable");
                return;
            }
        };
        if let Err(e) = self.lock().aggregator.receive(&stats) {
            tracing::warn!(shard = stats.shard, error = %e, "ingest.status.bad_stats");
        }
    }

    /// Every [`SAMPLE_EVERY`]; until the shards' first stats arrive, every [`RETRY_EVERY`],
    /// so that a new server has a first point at once.
    async fn sample(&self, shards: &Shards, shutdown: &Shutdown) {
        let mut ticks = tokio::time::interval(RETRY_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next = tokio::time::Instant::now();
        loop {
            let tick = tokio::select! {
                tick = ticks.tick() => tick,
                () = shutdown.wait() => return,
            };
            if tick < next {
                continue;
            }
            // Dropping the read on shutdown is safe: it changes nothing.
            let read = tokio::select! {
                read = read_pipelines(shards) => read,
                () = shutdown.wait() => return,
            };
            if self.record(read) {
                next = tick + SAMPLE_EVERY;
            }
        }
    }

    /// Keeps the pipelines read (or why they could not be) and adds a point to each stage's
    /// history; false when there is nothing to sample yet (no shard has reported).
    fn record(&self, read: Result<Vec<Arc<Pipeline>>, IngestError>) -> bool {
        let now = SystemClock.now();
        let mut state = self.lock();
        match read {
            Ok(pipelines) => {
                state.pipelines = pipelines;
                state.pipelines_error = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "ingest.status.pipelines");
                state.pipelines_error = Some(e.to_string());
            }
        }
        let merged = state.aggregator.merged(now, self.stale_after);
        if merged.reporting == 0 {
            return false;
        }
        let lateness = state.aggregator.take_lateness();
        let stages: Vec<(QueueName, Counts)> = state
            .pipelines
            .iter()
            .flat_map(|p| p.stages.iter().map(|s| p.stage_queue(&s.name)))
            .map(|queue| {
                let counts = merged.families.get(queue.as_str()).map(|f| f.counts);
                (queue, counts.unwrap_or_default())
            })
            .collect();
        let samples = stages.iter().map(|(queue, counts)| Sample {
            queue: queue.as_str(),
            counts: *counts,
            lateness: lateness.get(queue.as_str()).copied(),
        });
        state.history.record(now, samples);
        true
    }

    fn view(&self) -> view::StatusView {
        let now = SystemClock.now();
        let state = self.lock();
        let merged = state.aggregator.merged(now, self.stale_after);
        let mut warnings = Vec::new();
        if let Some(e) = &state.pipelines_error {
            warnings.push(format!("cannot read the pipelines: {e}"));
        }
        if merged.reporting == 0 {
            warnings.push("no stats from the shards yet".to_owned());
        } else if merged.reporting < self.shard_count as usize {
            warnings.push(format!(
                "only {} of {} shards have published stats: the counts are partial",
                merged.reporting, self.shard_count
            ));
        }
        view::build(view::Inputs {
            now,
            shards: self.shard_count,
            pipelines: &state.pipelines,
            merged,
            history: &state.history,
            handlers: &|stage| state.decisions.of(stage, now, self.decisions_fresh_for),
            warnings,
        })
    }

    /// `/dead-letters.json`: 400 for a name that is not a dead-letter queue, 503 while the
    /// shards cannot answer; a dead-letter queue nothing was sent to yet is empty.
    async fn dead_letters(&self, queue: String) -> Response {
        let Some(shards) = self.shards.get() else {
            return (StatusCode::SERVICE_UNAVAILABLE, "starting").into_response();
        };
        let pipelines = self.lock().pipelines.clone();
        match dead_letters::first_page(shards, &pipelines, queue).await {
            Ok(page) => (
                [
                    (header::CONTENT_TYPE, "application/json"),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                serde_json::to_string(&page).expect("dead letters serialize"),
            )
                .into_response(),
            Err(e) => {
                let status = match e.code() {
                    tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                    tonic::Code::NotFound => StatusCode::NOT_FOUND,
                    _ => StatusCode::SERVICE_UNAVAILABLE,
                };
                (status, e.to_string()).into_response()
            }
        }
    }

    fn json(&self) -> String {
        serde_json::to_string(&self.view()).expect("the status view serializes")
    }

    /// The page with the current data in it. `<` is escaped so the data cannot end the
    /// script element it sits in.
    fn html(&self) -> String {
        let data = self.json().replace('<', "\\u003c");
        PAGE.replacen(INITIAL_DATA, &data, 1)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn subscribe(bus: &Bus, subject: String) -> Result<Subscription, IngestError> {
    bus.subscribe(&subject)
        .await
        .map_err(|source| IngestError::Subscribe { subject, source })
}

/// Every pipeline, by name.
async fn read_pipelines(shards: &Shards) -> Result<Vec<Arc<Pipeline>>, IngestError> {
    let (shard, reply) = read_any(shards, Op::ListPipelines(ListPipelinesRequest {})).await?;
    let Reply::Pipelines(listed) = reply else {
        return Err(unexpected(shard, "a pipeline list", &reply));
    };
    let mut pipelines = Vec::with_capacity(listed.pipelines.len());
    for message in &listed.pipelines {
        match pipeline_from_proto(message) {
            Ok(pipeline) => pipelines.push(Arc::new(pipeline)),
            Err(e) => {
                tracing::warn!(shard, pipeline = %message.name, error = %e, "ingest.status.bad_pipeline");
            }
        }
    }
    pipelines.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(pipelines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_carries_its_first_data() {
        assert_eq!(PAGE.matches(INITIAL_DATA).count(), 1);
        let settings = Settings::default();
        let page = StatusPage::new(&settings).html();
        assert!(!page.contains(INITIAL_DATA));
        assert!(page.contains("\"sample_every_secs\":5"));
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no external assets"
        );
    }
}
