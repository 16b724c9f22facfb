//! The pipeline flow: a 3-stage pipeline whose stages call the test's HTTP
//! handler ([`HandlerServer`]), which fails 20 % of its calls; 1,000 events enqueued by
//! pipeline name; then what happened to every event, from the handler's record of calls
//! and the stages' stats.
//!
//! Standalone runs the stage workers in-process (one per stage, 16 events per take);
//! distributed gets one `cascade-stage-worker` process per stage with the same settings.

use std::collections::HashMap;
use std::time::Duration;

use cascade_client::{Client, api};
use tokio::time::Instant;

use crate::cluster::StageWorkerSpec;
use crate::handler_server::{Call, HandlerServer};
use crate::scenarios::{seconds, spread_over_shards};
use crate::{Cluster, Mode};

pub const STAGES: [&str; 3] = ["parse", "enrich", "deliver"];
pub const EVENTS: usize = 1_000;
pub const FAIL_PERCENT: u32 = 20;
/// Handlers at once per stage worker.
pub const CONCURRENCY: u32 = 8;
/// Events per take: what standalone's in-process stage workers use (the stage worker's
/// default), given to the processes too.
pub const BATCH: u32 = 16;
/// Stage workers per stage, in both modes.
pub const WORKERS_PER_STAGE: u32 = 1;

pub struct Flow {
    pub pipeline: String,
    pub server: HandlerServer,
    pub ids: Vec<String>,
    /// Distributed: the stage worker process of each stage, by stage index.
    pub workers: Vec<usize>,
}

impl Flow {
    /// Serves the handler (RNG seeded with `seed`), applies the pipeline (stage queues with
    /// `lease_s` leases, 50-200 ms backoff, unlimited attempts) with its stages spread over
    /// both shards and, distributed, starts a stage worker process per stage.
    pub async fn start(cluster: &mut Cluster, base: &str, lease_s: f64, seed: u64) -> Flow {
        let server = HandlerServer::start(FAIL_PERCENT, seed).await;
        let pipeline = spread_over_shards(base, &STAGES);
        let c = cluster.client().await;
        let applied = c
            .admin()
            .apply_pipeline(api::Pipeline {
                name: pipeline.clone(),
                stages: STAGES
                    .iter()
                    .map(|s| http_stage(s, &server.url(s), lease_s))
                    .collect(),
            })
            .await
            .unwrap_or_else(|e| panic!("apply {pipeline}: {e}"))
            .into_inner();
        let config = applied.stages[0].queue.as_ref().expect("a queue config");
        assert_eq!(config.max_attempts, 0, "unlimited attempts: {config:?}");
        let mut workers = Vec::new();
        if cluster.mode == Mode::Distributed {
            for (i, stage) in STAGES.iter().enumerate() {
                let spec = StageWorkerSpec {
                    pipeline: pipeline.clone(),
                    stage: stage.to_string(),
                    last_stage: i == STAGES.len() - 1,
                    handler: server.url(stage),
                    concurrency: CONCURRENCY,
                    batch: BATCH,
                };
                workers.push(tokio::task::block_in_place(|| {
                    cluster.start_stage_worker(&spec)
                }));
            }
        }
        Flow {
            pipeline,
            server,
            ids: Vec::new(),
            workers,
        }
    }

    pub fn queue(&self, stage: &str) -> String {
        format!("{}.{stage}", self.pipeline)
    }

    /// Enqueues [`EVENTS`] events by pipeline name, 100 per `EnqueueBatch`.
    pub async fn enqueue(&mut self, c: &Client) {
        for batch in 0..EVENTS / 100 {
            let items = (0..100)
                .map(|i| api::EnqueueRequest {
                    pipeline: self.pipeline.clone(),
                    payload: format!("event {}", batch * 100 + i).into_bytes().into(),
                    ..Default::default()
                })
                .collect();
            let results = c
                .ingest()
                .enqueue_batch(api::EnqueueBatchRequest { items })
                .await
                .unwrap_or_else(|e| panic!("enqueue a batch: {e}"))
                .into_inner()
                .results;
            for r in results {
                assert_eq!(r.code, 0, "enqueue: {}", r.message);
                let ok = r.ok.expect("an answer");
                assert_eq!(ok.queue, self.queue(STAGES[0]));
                self.ids.push(ok.id);
            }
        }
    }

    /// Stats of every stage, in order; an error (a shard still restarting) is `Err`.
    pub async fn stats(&self, c: &Client) -> Result<Vec<api::QueueStats>, tonic::Status> {
        let mut all = Vec::new();
        for stage in STAGES {
            let request = api::QueueStatsRequest {
                name: self.queue(stage),
            };
            all.push(c.admin().queue_stats(request).await?.into_inner());
        }
        Ok(all)
    }

    /// How many events each stage has under lease, asked of every stage at once so that
    /// the answers describe one moment as nearly as possible.
    pub async fn leased(&self, c: &Client) -> [u64; 3] {
        let ask = |stage: &str| {
            let mut admin = c.admin();
            let request = api::QueueStatsRequest {
                name: self.queue(stage),
            };
            async move { admin.queue_stats(request).await }
        };
        let (a, b, d) = tokio::join!(ask(STAGES[0]), ask(STAGES[1]), ask(STAGES[2]));
        [a, b, d].map(|answer| answer.expect("stats").into_inner().leased)
    }

    /// Waits until the last stage has completed every event and no stage holds one.
    pub async fn wait_through(&self, c: &Client, within: Duration) -> Vec<api::QueueStats> {
        let deadline = Instant::now() + within;
        loop {
            let seen = self.stats(c).await;
            if let Ok(all) = &seen {
                let held: u64 = all.iter().map(|s| s.ready + s.delayed + s.leased).sum();
                if all[STAGES.len() - 1].completed_total >= EVENTS as u64 && held == 0 {
                    return all.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "not through within {within:?}: {seen:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `stage`'s handler has answered 2xx `n` times.
    pub async fn wait_for_successes(&self, stage: &str, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while self.server.successes(stage) < n {
            assert!(
                Instant::now() < deadline,
                "{stage}: {} successes within {within:?}, wanted {n}",
                self.server.successes(stage)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The handler's calls by stage and event, checked to concern only enqueued events and
    /// the pipeline's stages, and to have been understood (no 4xx).
    pub fn tally(&self) -> Tally {
        let known: std::collections::HashSet<&str> = self.ids.iter().map(String::as_str).collect();
        let mut by: HashMap<(String, String), Vec<Call>> = HashMap::new();
        for call in self.server.calls() {
            assert!(
                call.status == 200 || call.status == 500,
                "a call the handler could not read: {call:?}"
            );
            assert!(known.contains(call.id.as_str()), "unknown event: {call:?}");
            assert!(STAGES.contains(&call.stage.as_str()), "{call:?}");
            by.entry((call.id.clone(), call.stage.clone()))
                .or_default()
                .push(call);
        }
        Tally { by }
    }
}

/// A stage whose handler is the test's HTTP handler at `url`.
fn http_stage(name: &str, url: &str, lease_s: f64) -> api::Stage {
    api::Stage {
        name: name.into(),
        queue: Some(api::QueueConfig {
            lease: Some(seconds(lease_s)),
            max_attempts: 0,
            backoff_initial: Some(seconds(0.05)),
            backoff_max: Some(seconds(0.2)),
            ..Default::default()
        }),
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Http(api::HttpHandler {
                url: url.into(),
            })),
            concurrency: CONCURRENCY,
            timeout: Some(seconds(10.0)),
        }),
        ..Default::default()
    }
}

/// The handler's calls of each (event id, stage), in the order they were answered.
pub struct Tally {
    by: HashMap<(String, String), Vec<Call>>,
}

impl Tally {
    pub fn calls(&self, id: &str, stage: &str) -> &[Call] {
        self.by
            .get(&(id.to_owned(), stage.to_owned()))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    pub fn successes(&self, id: &str, stage: &str) -> usize {
        self.calls(id, stage)
            .iter()
            .filter(|c| c.succeeded())
            .count()
    }

    /// 500s answered at `stage`.
    pub fn failures(&self, stage: &str) -> usize {
        self.by
            .iter()
            .filter(|((_, s), _)| s == stage)
            .flat_map(|(_, calls)| calls)
            .filter(|c| !c.succeeded())
            .count()
    }
}
