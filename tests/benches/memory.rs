//! What a pipeline stage, a queue and a per-user queue cost in memory: `cascade standalone`
//! (release build, 1 shard, stage workers on, default settings but raised limits) is given,
//! phase by phase, pipelines of `limits.max_stages` (32) no-op stages, plain queues holding
//! one 100-byte event each, and per-user queues of one template holding one event each. After
//! each phase (and a pause for the stats round, the resource manager and the allocator to
//! settle) it prints the process's resident memory (`VmRSS`), the growth per item, and the
//! size of `/metrics`.
//!
//! Run: `cargo build --release --bins && cargo bench -p cascade-e2e --bench memory`.
//! Environment: `CASCADE_BENCH_PIPELINES` (default 10), `CASCADE_BENCH_QUEUES` (10,000),
//! `CASCADE_BENCH_USERS` (200,000). Under `cargo test --all-targets` (no `--bench`) it runs
//! with a few of each against the debug binary, as a smoke test.

use std::time::Duration;

use cascade_client::{Client, api};
use cascade_e2e::bench::{BoxError, fill_per_user_queues, in_parallel};
use cascade_e2e::process::{http_get, rss_bytes};
use cascade_e2e::scenarios::{config, seconds};
use cascade_e2e::{Cluster, Mode};

const STAGES: usize = 32;
const PAYLOAD: [u8; 100] = [b'x'; 100];
/// Requests in flight while filling.
const CONCURRENCY: usize = 64;
const BATCH: usize = 1000;

struct Plan {
    pipelines: usize,
    queues: usize,
    users: usize,
    settle: Duration,
}

impl Plan {
    fn from_env(bench: bool) -> Plan {
        let count = |name: &str, full: usize, smoke: usize| match bench {
            true => std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(full),
            false => smoke,
        };
        Plan {
            pipelines: count("CASCADE_BENCH_PIPELINES", 10, 1),
            queues: count("CASCADE_BENCH_QUEUES", 10_000, 20),
            users: count("CASCADE_BENCH_USERS", 200_000, 100),
            settle: Duration::from_secs(if bench { 5 } else { 0 }),
        }
    }
}

fn metrics_bytes(cluster: &Cluster) -> usize {
    http_get(cluster.http(), "/metrics")
        .map(|(_, body)| body.len())
        .unwrap_or(0)
}

struct Meter<'a> {
    cluster: &'a Cluster,
    settle: Duration,
    last: u64,
}

impl Meter<'_> {
    async fn phase(&mut self, what: &str, items: usize) {
        tokio::time::sleep(self.settle).await;
        let now = rss_bytes(self.cluster.front_pid());
        let grown = now.saturating_sub(self.last);
        let per_item = match items {
            0 => String::from("-"),
            n => format!("{:.0} bytes", grown as f64 / n as f64),
        };
        println!(
            "| {what} | {items} | {:.1} MiB | +{:.1} MiB | {per_item} | {} KiB |",
            now as f64 / 1048576.0,
            grown as f64 / 1048576.0,
            metrics_bytes(self.cluster) / 1024
        );
        self.last = now;
    }
}

fn stage(name: String) -> api::Stage {
    api::Stage {
        name,
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
            concurrency: 1,
            timeout: Some(seconds(10.0)),
        }),
        ..Default::default()
    }
}

async fn apply_pipelines(c: &Client, count: usize) -> Result<(), BoxError> {
    for p in 0..count {
        let pipeline = api::Pipeline {
            name: format!("mem{p}"),
            stages: (0..STAGES).map(|s| stage(format!("s{s}"))).collect(),
        };
        c.admin().apply_pipeline(pipeline).await?;
    }
    Ok(())
}

fn event(queue: String) -> api::EnqueueRequest {
    api::EnqueueRequest {
        queue,
        payload: PAYLOAD.to_vec().into(),
        ..Default::default()
    }
}

async fn fill_queues(c: &Client, count: usize) -> Result<(), BoxError> {
    in_parallel(count, CONCURRENCY, |i| {
        let c = c.clone();
        async move {
            let name = format!("mem-q{i}");
            c.admin()
                .create_queue(api::CreateQueueRequest {
                    name: name.clone(),
                    config: Some(config(30.0, 0)),
                })
                .await?;
            c.ingest().enqueue(event(name)).await?;
            Ok(())
        }
    })
    .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let bench = std::env::args().any(|a| a == "--bench");
    let plan = Plan::from_env(bench);
    let max_queues = (plan.queues + plan.pipelines * STAGES + 1).to_string();
    let max_pipelines = plan.pipelines.max(1).to_string();
    let cluster = tokio::task::spawn_blocking(move || {
        let env = [
            ("CASCADE__CLUSTER__SHARDS", "1"),
            ("CASCADE__LIMITS__MAX_QUEUES", max_queues.as_str()),
            ("CASCADE__LIMITS__MAX_PIPELINES", max_pipelines.as_str()),
            ("CASCADE__TELEMETRY__LOG_LEVEL", "warn"),
        ];
        Cluster::start_with(Mode::Standalone, None, &env)
    })
    .await?;
    let c = cluster.client().await;
    let mut meter = Meter {
        cluster: &cluster,
        settle: plan.settle,
        last: 0,
    };
    println!("| phase | items | RSS | growth | per item | /metrics |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    meter.phase("started", 0).await;
    apply_pipelines(&c, plan.pipelines).await?;
    meter
        .phase(
            "pipelines of 32 no-op stages (per stage)",
            plan.pipelines * STAGES,
        )
        .await;
    fill_queues(&c, plan.queues).await?;
    meter
        .phase("plain queues, 1 event each (per queue)", plan.queues)
        .await;
    fill_per_user_queues(
        &c,
        "mem-inbox",
        plan.users,
        |_| PAYLOAD.to_vec(),
        (BATCH, CONCURRENCY),
    )
    .await?;
    meter
        .phase(
            "per-user queues of a template, 1 event each (per queue)",
            plan.users,
        )
        .await;
    cluster.stop();
    Ok(())
}
