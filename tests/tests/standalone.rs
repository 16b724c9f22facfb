//! `cascade standalone` as a new user meets it: started with the example config, driven with
//! the `cascade` client subcommands as the README shows, found by gRPC reflection, healthy,
//! and stopped cleanly with SIGTERM.

use std::path::PathBuf;
use std::time::Duration;

use cascade_e2e::{Cluster, Mode};

fn example_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/cascade.toml")
}

/// `cascade <args> --json` against the cluster: its lines parsed.
fn cli(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> Vec<serde_json::Value> {
    cascade_e2e::cli::json_with(cluster, args, stdin)
}

#[test]
fn readme_walkthrough_with_the_cli() {
    let cluster = Cluster::start_with(Mode::Standalone, Some(&example_config()), &[]);
    cli(
        &cluster,
        &["queue", "create", "jobs", "--lease", "30s"],
        None,
    );
    let sent = cli(
        &cluster,
        // Long enough for the next command (a whole process) to run before it is due.
        &["enqueue", "jobs", "hello", "--delay", "3s"],
        None,
    );
    let id = sent[0]["id"].as_str().expect("an id").to_string();
    assert_eq!(sent[0]["duplicate"], false);
    assert!(
        cli(&cluster, &["take", "jobs"], None).is_empty(),
        "taken before its time"
    );
    // A long poll: answered when the event comes due.
    let taken = cli(&cluster, &["take", "jobs", "--wait", "10s"], None);
    assert_eq!(taken.len(), 1, "not takeable after its time");
    assert_eq!(taken[0]["id"], id.as_str());
    assert_eq!(taken[0]["payload"], "hello");
    let token = taken[0]["lease_token"]
        .as_str()
        .expect("a token")
        .to_string();
    cli(&cluster, &["ack", "jobs", &id, &token], None);
    // A payload from standard input.
    cli(&cluster, &["enqueue", "jobs"], Some("from stdin"));
    let stats = cli(&cluster, &["stats", "jobs"], None);
    assert_eq!(stats[0]["completed_total"], 1);
    assert_eq!(stats[0]["ready"], 1);
    let queues = cli(&cluster, &["queue", "list"], None);
    assert!(queues.iter().any(|q| q["name"] == "jobs"), "{queues:?}");

    // A queue that holds an event is deleted only with --force.
    let refused = cascade_e2e::cli::refused(&cluster, &["queue", "delete", "jobs"], 1);
    assert!(
        refused.contains("is not empty (1 ready, 0 delayed, 0 leased events)")
            && refused.contains("cascade queue delete --force"),
        "{refused}"
    );
    assert_eq!(cli(&cluster, &["stats", "jobs"], None)[0]["ready"], 1);
    cli(&cluster, &["queue", "delete", "jobs", "--force"], None);
    let queues = cli(&cluster, &["queue", "list"], None);
    assert!(!queues.iter().any(|q| q["name"] == "jobs"), "{queues:?}");
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Standalone))
        .await
        .expect("start");
    let channel = cluster.client().await.connection();
    for service in ["cascade.v1.Ingest", "cascade.v1.Worker", "cascade.v1.Admin"] {
        let status = HealthClient::new(channel.clone())
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("health check")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service}");
    }
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(futures::stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let answer = answers.message().await.expect("stream").expect("an answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a service list: {answer:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in ["cascade.v1.Ingest", "cascade.v1.Worker", "cascade.v1.Admin"] {
        assert!(
            names.iter().any(|n| n == service),
            "{service} not in {names:?}"
        );
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// The example config's demo pipeline runs out of the box: `cascade standalone` starts a
/// stage worker for each of its stages (builtin handlers), and events enqueued by pipeline
/// name flow through all three, retries included, as the README shows.
#[test]
fn demo_pipeline_flows_through_every_stage() {
    let cluster = Cluster::start_with(Mode::Standalone, Some(&example_config()), &[]);
    for i in 0..50 {
        cli(
            &cluster,
            &["enqueue", "demo", &format!("event {i}"), "--pipeline"],
            None,
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let last = cli(&cluster, &["stats", "demo.deliver"], None);
        let done = last[0]["completed_total"].as_u64().unwrap_or(0)
            + last[0]["dead_lettered"].as_u64().unwrap_or(0);
        if done == 50 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "events stuck: {:?} / {:?} / {:?}",
            cli(&cluster, &["stats", "demo.receive"], None),
            cli(&cluster, &["stats", "demo.enrich"], None),
            last
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for stage in ["receive", "enrich"] {
        let s = cli(&cluster, &["stats", &format!("demo.{stage}")], None);
        assert_eq!(s[0]["completed_total"], 50, "{stage}: {s:?}");
    }
    cluster.stop();
}

/// A stage whose handler no one knows (a typo) gets no worker: the process stays ready and
/// serves every other queue, and `/readyz` names the stage and why, until the pipeline is
/// applied with a handler that exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stage_whose_handler_is_unknown_shows_on_readyz_until_mended() {
    use cascade_client::api;
    use cascade_e2e::process::http_get;
    use cascade_e2e::scenarios::noop_pipeline;

    let cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Standalone))
        .await
        .expect("start");
    let c = cluster.client().await;
    let apply = |handler: &str| {
        let mut pipeline = noop_pipeline("typo", "s");
        pipeline.stages[0].handler = Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Builtin(handler.into())),
            concurrency: 1,
            ..Default::default()
        });
        let mut admin = c.admin();
        async move { admin.apply_pipeline(pipeline).await.expect("applied") }
    };
    let readyz_until = |what: &str, told: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let answer = http_get(cluster.http(), "/readyz");
            if let Some((200, body)) = &answer
                && told(body)
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: /readyz said {answer:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    apply("nopo").await;
    readyz_until("the stage's condition", &|body| {
        body.starts_with("ready\n")
            && body.contains("degraded: stage typo.s: its stage worker cannot start:")
            && body.contains("no handler named \"nopo\"")
    });
    apply("noop").await;
    readyz_until("the condition cleared", &|body| body == "ready\n");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
