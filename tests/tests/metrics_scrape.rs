//! `/metrics` of every service shows the documented metrics with the values of what was
//! done: enqueues (and a duplicate), takes, acks, a dead letter, a lease expiry, a delayed
//! event's activation, template queues counted under their template, and a 2-stage
//! pipeline run by stage workers. Standalone shows everything on its one page; distributed,
//! each process shows what its service emits.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cascade_client::{Client, api};
use cascade_e2e::process::http_get;
use cascade_e2e::scenarios::{
    ack, complete, config, create, enqueue, item, seconds, spread_over_shards, stats, take_n,
};
use cascade_e2e::{Cluster, Mode, StageWorkerSpec};

const JOBS: &str = "scrape-jobs";
const TEMPLATE: &str = "scrape-inbox:*";
const USERS: [&str; 2] = ["scrape-inbox:alice", "scrape-inbox:bob"];
const STAGES: [&str; 2] = ["a", "b"];
const PIPELINE_EVENTS: u64 = 3;
const WITHIN: Duration = Duration::from_secs(30);

/// One sample of the text format: `name{label="value",…} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a scrape; comment lines (`# HELP`, `# TYPE`, `# EOF`) are skipped.
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().unwrap_or_else(|_| panic!("a number: {line}")),
            }
        })
        .collect()
}

/// `a="x",b="y"`; our label values hold neither quotes nor commas.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    text.split("\",")
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once("=\"").expect("label=\"value\"");
            (key.to_owned(), value.trim_end_matches('"').to_owned())
        })
        .collect()
}

/// Every process's samples, by process name.
fn scrape_all(cluster: &Cluster) -> BTreeMap<String, Vec<Sample>> {
    cluster
        .admin_addrs()
        .into_iter()
        .map(|(name, addr)| {
            let (status, text) = http_get(&addr, "/metrics").expect("an answer to GET /metrics");
            assert_eq!(status, 200, "{name} /metrics:\n{text}");
            assert!(
                text.trim_end().ends_with("# EOF"),
                "{name}: OpenMetrics text\n{text}"
            );
            (name, parse(&text))
        })
        .collect()
}

/// The metric names in the table of docs/metrics.md.
fn documented_names() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))
        .expect("docs/metrics.md");
    doc.lines()
        .filter_map(|line| line.strip_prefix("| `cascade_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("cascade_{name}"))
        .collect()
}

/// The metrics of `docs/metrics.md` and the processes that emit them (distributed), by name prefix.
const OWNERS: [(&str, &[&str]); 11] = [
    ("cascade_enqueue_total", &["dispatcher"]),
    ("cascade_enqueue_duration_seconds", &["ingest"]),
    ("cascade_queue_depth", &["dispatcher"]),
    ("cascade_dead_letter_total", &["dispatcher"]),
    ("cascade_lease_expired_total", &["dispatcher"]),
    ("cascade_activation_lateness_seconds", &["dispatcher"]),
    (
        "cascade_commit_batch_size",
        &["dispatcher", "activation-timer"],
    ),
    (
        "cascade_fsync_duration_seconds",
        &["dispatcher", "activation-timer"],
    ),
    (
        "cascade_checkpoint_hold_seconds",
        &["dispatcher", "activation-timer"],
    ),
    ("cascade_handler_duration_seconds", &["stage-worker"]),
    (
        "cascade_bus_request_duration_seconds",
        &["ingest", "dispatcher", "activation-timer"],
    ),
];

/// Every metric of [`OWNERS`] is documented, and has samples on a process of each kind
/// that emits it (a shard with no work of that kind may have none; a histogram's samples
/// are `_count`, `_sum` and `_bucket`).
fn assert_owners_emit(scraped: &BTreeMap<String, Vec<Sample>>, mode: Mode) {
    let documented = documented_names();
    let shows = |process: &str, metric: &str| {
        scraped[process].iter().any(|s| {
            s.name == metric
                || ["_count", "_sum", "_bucket"]
                    .iter()
                    .any(|suffix| s.name == format!("{metric}{suffix}"))
        })
    };
    for (metric, owners) in OWNERS {
        assert!(
            documented.iter().any(|d| d == metric),
            "{metric} is not in docs/metrics.md"
        );
        for owner in owners {
            let shown = scraped
                .keys()
                .filter(|name| mode == Mode::Standalone || name.starts_with(owner))
                .any(|process| shows(process, metric));
            assert!(shown, "no {owner} process shows {metric}");
        }
    }
}

/// The samples of the processes whose names start with `prefix` (standalone: all of them
/// are in the one process).
fn of<'a>(scraped: &'a BTreeMap<String, Vec<Sample>>, mode: Mode, prefix: &str) -> Vec<&'a Sample> {
    scraped
        .iter()
        .filter(|(name, _)| mode == Mode::Standalone || name.starts_with(prefix))
        .flat_map(|(_, samples)| samples.iter())
        .collect()
}

/// The sum of the samples named `name` whose labels include `labels`.
fn total(samples: &[&Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

/// Enqueues, takes and completes as the module doc says; returns the pipeline's name.
async fn work(cluster: &mut Cluster, c: &Client) -> String {
    // A plain queue: 4 events + 1 duplicate (by idempotency key), 1 due in 300 ms,
    // 1 due in an hour. Leases of 3 s: the completions below must come within them even on
    // a busy machine, and the lease left alone expires soon enough.
    create(c, JOBS, config(3.0, 2)).await;
    for i in 0..4 {
        let mut req = item(JOBS, &format!("job {i}"));
        req.idempotency_key = format!("job-{i}");
        assert!(!enqueue(c, req).await.duplicate);
    }
    let mut again = item(JOBS, "job 0");
    again.idempotency_key = "job-0".into();
    assert!(enqueue(c, again).await.duplicate);
    let mut soon = item(JOBS, "soon");
    soon.when = Some(api::enqueue_request::When::Delay(seconds(0.3)));
    enqueue(c, soon).await;
    let mut later = item(JOBS, "later");
    later.when = Some(api::enqueue_request::When::Delay(seconds(3600.0)));
    enqueue(c, later).await;
    // 2 acked, 1 dead-lettered by the handler, 1 left to expire (attempts 1 of 2: ready
    // again).
    let taken = take_n(c, JOBS, 4, WITHIN).await;
    assert_eq!(taken.len(), 4);
    for event in &taken[..2] {
        assert_eq!(complete(c, event, ack()).await.code, 0);
    }
    let dead = api::completion::Outcome::DeadLetter(api::DeadLetter {
        reason: "scrape test".into(),
    });
    assert_eq!(complete(c, &taken[2], dead).await.code, 0);

    // Template queues: counted under the template.
    c.admin()
        .create_queue(api::CreateQueueRequest {
            name: TEMPLATE.into(),
            config: Some(config(30.0, 0)),
        })
        .await
        .expect("create the template");
    for user in USERS {
        enqueue(c, item(user, "hello")).await;
    }

    // A 2-stage pipeline whose stages live on different shards, run by stage workers.
    let pipeline = spread_over_shards("scrape", &STAGES);
    let stage = |name: &str| api::Stage {
        name: name.into(),
        queue: Some(config(30.0, 0)),
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
            concurrency: 2,
            timeout: Some(seconds(10.0)),
        }),
        ..Default::default()
    };
    c.admin()
        .apply_pipeline(api::Pipeline {
            name: pipeline.clone(),
            stages: STAGES.iter().map(|s| stage(s)).collect(),
        })
        .await
        .expect("apply the pipeline");
    if cluster.mode == Mode::Distributed {
        for (i, name) in STAGES.iter().enumerate() {
            let spec = StageWorkerSpec {
                pipeline: pipeline.clone(),
                stage: name.to_string(),
                last_stage: i == STAGES.len() - 1,
                handler: "builtin:noop".into(),
                concurrency: 2,
                batch: 16,
            };
            tokio::task::block_in_place(|| cluster.start_stage_worker(&spec));
        }
    }
    for i in 0..PIPELINE_EVENTS {
        let request = api::EnqueueRequest {
            pipeline: pipeline.clone(),
            payload: format!("p{i}").into_bytes().into(),
            ..Default::default()
        };
        enqueue(c, request).await;
    }
    let last = format!("{pipeline}.{}", STAGES[1]);
    let deadline = Instant::now() + WITHIN;
    while stats(c, &last).await.completed_total < PIPELINE_EVENTS {
        assert!(Instant::now() < deadline, "the pipeline did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pipeline
}

/// Waits until the lease left on `JOBS` expired and the delayed event came due.
async fn wait_for_expiry_and_activation(c: &Client) -> api::QueueStats {
    let deadline = Instant::now() + WITHIN;
    loop {
        let s = stats(c, JOBS).await;
        if s.expired_leases_total == 1 && s.leased == 0 && s.delayed == 1 && s.ready == 2 {
            return s;
        }
        assert!(Instant::now() < deadline, "lease never expired: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Scrapes until the depth gauges (refreshed every `dispatcher.stats_interval`) show what
/// `QueueStats` says.
async fn scrape_settled(
    cluster: &Cluster,
    jobs: &api::QueueStats,
) -> BTreeMap<String, Vec<Sample>> {
    let deadline = Instant::now() + WITHIN;
    loop {
        let scraped = scrape_all(cluster);
        let depth = of(&scraped, cluster.mode, "dispatcher");
        let jobs_depth = |state| {
            total(
                &depth,
                "cascade_queue_depth",
                &[("queue", JOBS), ("state", state)],
            )
        };
        let inbox_ready = total(
            &depth,
            "cascade_queue_depth",
            &[("queue", TEMPLATE), ("state", "ready")],
        );
        let settled = jobs_depth("ready") == jobs.ready as f64
            && jobs_depth("delayed") == jobs.delayed as f64
            && jobs_depth("leased") == jobs.leased as f64
            && inbox_ready == USERS.len() as f64;
        if settled {
            return scraped;
        }
        assert!(Instant::now() < deadline, "depth never matched {jobs:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn scrape_shows_what_was_done(mode: Mode) {
    let mut cluster = tokio::task::spawn_blocking(move || Cluster::start(mode))
        .await
        .expect("start the cluster");
    let c = cluster.client().await;
    let pipeline = work(&mut cluster, &c).await;
    let jobs = wait_for_expiry_and_activation(&c).await;
    let scraped = scrape_settled(&cluster, &jobs).await;
    assert_owners_emit(&scraped, mode);
    let all: Vec<&Sample> = scraped.values().flatten().collect();
    assert!(
        !all.iter().any(|s| s
            .labels
            .values()
            .any(|v| v.contains("alice") || v.contains("bob"))),
        "a per-user queue became a series"
    );

    // The dispatchers: what their shards committed.
    let d = of(&scraped, mode, "dispatcher");
    let jobs_label = [("queue", JOBS)];
    let count = |name: &str, labels: &[(&str, &str)]| total(&d, name, labels);
    assert_eq!(
        count(
            "cascade_enqueue_total",
            &[("queue", JOBS), ("result", "ok")]
        ),
        6.0
    );
    assert_eq!(
        count(
            "cascade_enqueue_total",
            &[("queue", JOBS), ("result", "duplicate")]
        ),
        1.0
    );
    assert_eq!(
        count(
            "cascade_enqueue_total",
            &[("queue", TEMPLATE), ("result", "ok")]
        ),
        2.0
    );
    let (first, second) = (format!("{pipeline}.a"), format!("{pipeline}.b"));
    for stage in [&first, &second] {
        // The first stage by Enqueue, the second by the advances from the first.
        let entered = count(
            "cascade_enqueue_total",
            &[("queue", stage), ("result", "ok")],
        );
        assert_eq!(entered, PIPELINE_EVENTS as f64, "{stage}");
    }
    assert_eq!(
        count(
            "cascade_dead_letter_total",
            &[("queue", JOBS), ("reason", "requested")]
        ),
        1.0
    );
    assert_eq!(count("cascade_lease_expired_total", &jobs_label), 1.0);
    assert!(count("cascade_activation_lateness_seconds_count", &[]) >= 1.0);
    assert!(
        count(
            "cascade_commit_batch_size_count",
            &[("store", "dispatcher")]
        ) > 0.0
    );
    assert!(
        count(
            "cascade_fsync_duration_seconds_count",
            &[("store", "dispatcher")]
        ) > 0.0
    );
    // Delayed events are scheduled with the timer, and advances cross shards.
    for op in ["schedule", "deliver"] {
        let sent = count(
            "cascade_bus_request_duration_seconds_count",
            &[("op", op), ("result", "ok")],
        );
        assert!(sent > 0.0, "bus requests {op}");
    }

    // The timers: their own log, and the activations they sent.
    let t = of(&scraped, mode, "activation-timer");
    assert!(total(&t, "cascade_commit_batch_size_count", &[("store", "timer")]) > 0.0);
    assert!(
        total(
            &t,
            "cascade_fsync_duration_seconds_count",
            &[("store", "timer")]
        ) > 0.0
    );
    let activations = [("op", "activate"), ("result", "ok")];
    assert!(
        total(
            &t,
            "cascade_bus_request_duration_seconds_count",
            &activations
        ) > 0.0
    );

    // The gateway: every Enqueue call timed (7 on the plain queue, 2 on the template's,
    // and the pipeline's), and its requests to the shards.
    let front = if mode == Mode::Standalone {
        "cascade-standalone"
    } else {
        "ingest"
    };
    let g = of(&scraped, mode, front);
    let calls = total(
        &g,
        "cascade_enqueue_duration_seconds_count",
        &[("rpc", "enqueue")],
    );
    assert_eq!(calls, 9.0 + PIPELINE_EVENTS as f64);
    for op in ["enqueue", "take", "complete"] {
        let sent = total(
            &g,
            "cascade_bus_request_duration_seconds_count",
            &[("op", op)],
        );
        assert!(sent > 0.0, "bus requests {op}");
    }

    // The stage workers: every handler call, by stage and the handler's answer.
    let w = of(&scraped, mode, "stage-worker");
    for stage in [&first, &second] {
        let labels = [("stage", stage.as_str()), ("outcome", "advance")];
        let handled = total(&w, "cascade_handler_duration_seconds_count", &labels);
        assert_eq!(handled, PIPELINE_EVENTS as f64, "{stage}");
    }

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_scrape_shows_every_service() {
    scrape_shows_what_was_done(Mode::Standalone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_scrape_shows_each_service_its_own() {
    scrape_shows_what_was_done(Mode::Distributed).await;
}
