//! `cascade-resource-manager` as its own process on NATS (executor `none`): it learns the
//! stages from the pipelines the shards hold, reads the stats they publish, and publishes
//! each round of decisions on `cascade.<cluster>.rm.decisions`, with the gauges on its
//! `/metrics` and the table on `/rm/explain`.

use std::time::{Duration, Instant};

use cascade_bus::Bus;
use cascade_client::api;
use cascade_e2e::process::http_body;
use cascade_e2e::{Cluster, Mode};

const STAGE: &str = "waves.work";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_process_publishes_decisions_from_the_shards_stats() {
    let env = [
        ("CASCADE__DISPATCHER__STATS_INTERVAL", "100ms"),
        ("CASCADE__RESOURCE_MANAGER__INTERVAL", "250ms"),
        ("CASCADE__RESOURCE_MANAGER__THROUGHPUT_WINDOW", "1s"),
        ("CASCADE__RESOURCE_MANAGER__TARGET_DRAIN", "2s"),
    ];
    let mut cluster =
        tokio::task::spawn_blocking(move || Cluster::start_with(Mode::Distributed, None, &env))
            .await
            .expect("start the cluster");
    let c = cluster.client().await;
    c.admin()
        .apply_pipeline(api::Pipeline {
            name: "waves".into(),
            stages: vec![api::Stage {
                name: "work".into(),
                handler: Some(api::HandlerSpec {
                    kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
                    concurrency: 1,
                    ..Default::default()
                }),
                min_handlers: 0,
                max_handlers: 3,
                priority: 1,
                ..Default::default()
            }],
        })
        .await
        .expect("apply the pipeline");
    // A backlog nobody works off: the stage wants handlers.
    let items = (0..50)
        .map(|i| api::EnqueueRequest {
            pipeline: "waves".into(),
            payload: format!("event {i}").into_bytes().into(),
            ..Default::default()
        })
        .collect();
    c.ingest()
        .enqueue_batch(api::EnqueueBatchRequest { items })
        .await
        .expect("enqueue");

    let url = cluster.nats_url().expect("a NATS URL").to_owned();
    let bus = Bus::connect_nats(&cascade_bus::NatsConnect::url(&url), "rm-test")
        .await
        .expect("connect");
    let mut decisions = bus
        .subscribe(&cascade_bus::subject::rm_decisions("default"))
        .await
        .expect("subscribe to the decisions");
    let admin = tokio::task::block_in_place(|| {
        cluster.start_resource_manager(&[("CASCADE__RESOURCE_MANAGER__EXECUTOR", "none")])
    });

    let deadline = Instant::now() + Duration::from_secs(30);
    let decided = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(left, decisions.next())
            .await
            .expect("a decision for the stage within 30 s")
            .expect("the bus is open");
        let round: serde_json::Value =
            serde_json::from_slice(&message.payload()).expect("a round is JSON");
        let stage = round["stages"]
            .as_array()
            .and_then(|stages| stages.iter().find(|s| s["stage"] == STAGE))
            .cloned();
        if let Some(stage) = stage
            && stage["handlers"].as_u64() > Some(0)
        {
            break stage;
        }
    };
    assert!(decided["handlers"].as_u64() <= Some(3), "{decided}");
    assert!(
        decided["why"].as_str().is_some_and(|why| !why.is_empty()),
        "{decided}"
    );
    let metrics = http_body(&admin, "/metrics").expect("GET /metrics");
    assert!(
        metrics.contains(&format!("cascade_rm_desired_handlers{{stage=\"{STAGE}\"}}")),
        "{metrics}"
    );
    let explain = http_body(&admin, "/rm/explain").expect("GET /rm/explain");
    assert!(explain.contains(STAGE), "{explain}");

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
