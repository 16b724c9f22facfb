//! The Kubernetes executor against an HTTP server playing the API server on loopback: the
//! exact requests it makes (path, verb, content type, merge-patch body, bearer token), that
//! it reads each Deployment every round, counts only ready pods as working handlers (none
//! when the API server leaves the count out), patches only a changed count, and that a
//! failing stage neither stops the others nor is forgotten.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cascade_resource_manager::{
    Decision, Executor, Explanation, Inputs, KubernetesExecutor, KubernetesSettings, Throughput,
    ThroughputSource,
};
use common::{current, stage};
use serde_json::{Value, json};

const NAMESPACE: &str = "jobs";
const TOKEN: &str = "test-token-1234";
const SHIP: &str = "/apis/apps/v1/namespaces/jobs/deployments/cascade-stage-orders-ship";
const SHIP_SCALE: &str =
    "/apis/apps/v1/namespaces/jobs/deployments/cascade-stage-orders-ship/scale";
const PACK: &str = "/apis/apps/v1/namespaces/jobs/deployments/packer";
const PACK_SCALE: &str = "/apis/apps/v1/namespaces/jobs/deployments/packer/scale";

/// One request as the API server saw it.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    method: Method,
    path: String,
    query: Option<String>,
    content_type: Option<String>,
    authorization: Option<String>,
    body: Option<Value>,
}

#[derive(Default)]
struct ApiServer {
    seen: Vec<Seen>,
    /// Replicas per Deployment path, as set.
    replicas: BTreeMap<String, i64>,
    /// Ready replicas per Deployment path: a patch does not change them (pods take their
    /// time), the test does.
    ready: BTreeMap<String, i64>,
    /// Scale paths whose PATCH answers 500.
    failing: Vec<String>,
}

type Shared = Arc<Mutex<ApiServer>>;

async fn api_server(State(server): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body: Bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .expect("a small body");
    let header_of = |name: header::HeaderName| {
        parts
            .headers
            .get(name)
            .map(|v| v.to_str().expect("ascii header").to_owned())
    };
    let path = parts.uri.path().to_owned();
    let mut server = server.lock().expect("not poisoned");
    server.seen.push(Seen {
        method: parts.method.clone(),
        path: path.clone(),
        // kube writes a bare `?` when there are no parameters: the same as none.
        query: parts
            .uri
            .query()
            .filter(|q| !q.is_empty())
            .map(str::to_owned),
        content_type: header_of(header::CONTENT_TYPE),
        authorization: header_of(header::AUTHORIZATION),
        body: (!body.is_empty()).then(|| serde_json::from_slice(&body).expect("a JSON body")),
    });
    if parts.method == Method::PATCH && server.failing.contains(&path) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "{}").into_response();
    }
    let deployment = path.strip_suffix("/scale").unwrap_or(&path).to_owned();
    let Some(&replicas) = server.replicas.get(&deployment) else {
        return (StatusCode::NOT_FOUND, "{}").into_response();
    };
    let name = deployment.rsplit('/').next().expect("a deployment name");
    let metadata = json!({ "name": name, "namespace": NAMESPACE });
    let answer = match (&parts.method, path.ends_with("/scale")) {
        (&Method::GET, false) => json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": metadata,
            "spec": { "replicas": replicas, "selector": {}, "template": {} },
            // The API server leaves out a count of 0, and a new Deployment's whole status.
            "status": match server.ready.get(&deployment) {
                Some(ready) => json!({ "replicas": replicas, "readyReplicas": ready }),
                None => json!({}),
            },
        }),
        (&Method::PATCH, true) => {
            let patch: Value = serde_json::from_slice(&body).expect("a JSON patch");
            let to = patch["spec"]["replicas"].as_i64().expect("replicas");
            server.replicas.insert(deployment.clone(), to);
            json!({
                "apiVersion": "autoscaling/v1",
                "kind": "Scale",
                "metadata": metadata,
                "spec": { "replicas": to },
                "status": { "replicas": to },
            })
        }
        _ => return (StatusCode::METHOD_NOT_ALLOWED, "{}").into_response(),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// The executor, talking plain HTTP with a bearer token to a fake API server where the
/// ship Deployment runs 1 replica and the packer 2, all ready.
async fn start() -> (KubernetesExecutor, Shared) {
    let server = Shared::default();
    for (deployment, replicas) in [(SHIP, 1), (PACK, 2)] {
        set_replicas(&server, deployment, replicas, replicas);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    let app = Router::new()
        .fallback(api_server)
        .with_state(server.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let url = format!("http://{addr}").parse().expect("a URI");
    let mut config = kube::Config::new(url);
    config.default_namespace = "elsewhere".into();
    config.auth_info = serde_json::from_value(json!({ "token": TOKEN })).expect("auth info");
    config.default_retry = false;
    config.read_timeout = Some(Duration::from_secs(10));
    let client = kube::Client::try_from(config).expect("a client");
    let mut settings = KubernetesSettings::default();
    settings
        .deployments
        .insert("orders.pack".into(), "packer".into());
    (
        KubernetesExecutor::new(client, NAMESPACE, &settings),
        server,
    )
}

/// The Deployment at `path` runs `replicas`, `ready` of them ready.
fn set_replicas(server: &Shared, path: &str, replicas: i64, ready: i64) {
    let mut server = server.lock().expect("not poisoned");
    server.replicas.insert(path.into(), replicas);
    server.ready.insert(path.into(), ready);
}

fn set_ready(server: &Shared, path: &str, ready: i64) {
    server
        .lock()
        .expect("not poisoned")
        .ready
        .insert(path.into(), ready);
}

fn taken(server: &Shared) -> Vec<Seen> {
    std::mem::take(&mut server.lock().expect("not poisoned").seen)
}

fn get(path: &str) -> Seen {
    Seen {
        method: Method::GET,
        path: path.into(),
        query: None,
        content_type: None,
        authorization: Some(format!("Bearer {TOKEN}")),
        body: None,
    }
}

fn patch(path: &str, replicas: u32) -> Seen {
    Seen {
        method: Method::PATCH,
        path: path.into(),
        query: None,
        content_type: Some("application/merge-patch+json".into()),
        authorization: Some(format!("Bearer {TOKEN}")),
        body: Some(json!({ "spec": { "replicas": replicas } })),
    }
}

fn decision(name: &str, handlers: u32) -> Decision {
    Decision {
        stage: stage(name),
        priority: 1,
        current: 0,
        wanted: handlers,
        handlers,
        batch: 10,
        explanation: Explanation {
            inputs: Inputs {
                stats_at: None,
                ready: 0,
                leased: 0,
                due_soon: 0.0,
                oldest_ready_age: Duration::ZERO,
                arrivals_per_sec: 0.0,
                throughput: Throughput {
                    per_handler: 1.0,
                    source: ThroughputSource::Assumed,
                },
                expired_leases: 0,
                work: 0.0,
                need: 0.0,
                target_drain: Duration::from_secs(60),
            },
            reasons: Vec::new(),
        },
    }
}

#[tokio::test]
async fn reads_each_deployment_every_round_counts_ready_pods_and_patches_only_changes() {
    let (executor, server) = start().await;
    let stages = [&stage("orders.ship"), &stage("orders.pack")];
    let reads = vec![get(SHIP), get(PACK)];

    executor.observe(&stages).await;
    assert_eq!(taken(&server), reads);
    assert_eq!(
        executor.current(),
        current(&[("orders.ship", 1), ("orders.pack", 2)]),
        "a round starts from what runs"
    );

    let round = [decision("orders.ship", 3), decision("orders.pack", 2)];
    executor.apply(&round).await.expect("applied");
    assert_eq!(
        taken(&server),
        vec![patch(SHIP_SCALE, 3)],
        "the packer already runs 2: not patched"
    );
    let set = current(&[("orders.ship", 3), ("orders.pack", 2)]);
    assert_eq!(executor.current(), set);
    assert_eq!(
        executor.working(),
        current(&[("orders.ship", 1), ("orders.pack", 2)]),
        "the two new pods do no work yet"
    );

    set_ready(&server, SHIP, 3);
    executor.observe(&stages).await;
    executor.apply(&round).await.expect("applied again");
    assert_eq!(taken(&server), reads, "read, and nothing to patch");
    assert_eq!(executor.working(), set, "the new pods are ready");

    // A pod lost later (a node gone) stops counting; none counts where the API server
    // leaves the count out.
    set_ready(&server, SHIP, 2);
    server.lock().expect("not poisoned").ready.remove(PACK);
    executor.observe(&stages).await;
    assert_eq!(taken(&server), reads);
    assert_eq!(
        executor.working(),
        current(&[("orders.ship", 2), ("orders.pack", 0)])
    );
    assert_eq!(executor.current(), set, "what is set is unchanged");

    let round = [decision("orders.ship", 0), decision("orders.pack", 2)];
    executor.apply(&round).await.expect("scaled to zero");
    assert_eq!(taken(&server), vec![patch(SHIP_SCALE, 0)]);
    assert_eq!(
        executor.current(),
        current(&[("orders.ship", 0), ("orders.pack", 2)])
    );
    assert_eq!(
        executor.working(),
        current(&[("orders.ship", 0), ("orders.pack", 0)]),
        "stopping pods are no handlers"
    );
}

#[tokio::test]
async fn a_failing_stage_does_not_stop_the_others_and_is_read_again() {
    let (executor, server) = start().await;
    server
        .lock()
        .expect("not poisoned")
        .failing
        .push(SHIP_SCALE.into());

    let stages = [&stage("orders.ship"), &stage("orders.pack")];
    executor.observe(&stages).await;
    let round = [decision("orders.ship", 4), decision("orders.pack", 5)];
    let err = executor
        .apply(&round)
        .await
        .expect_err("the ship patch fails");
    assert!(
        err.to_string()
            .contains("patch the scale of deployment cascade-stage-orders-ship"),
        "{err}"
    );
    assert_eq!(
        taken(&server),
        vec![
            get(SHIP),
            get(PACK),
            patch(SHIP_SCALE, 4),
            patch(PACK_SCALE, 5)
        ]
    );
    assert_eq!(executor.current(), current(&[("orders.pack", 5)]));

    server.lock().expect("not poisoned").failing.clear();
    executor.observe(&stages).await;
    executor.apply(&round).await.expect("applied");
    assert_eq!(
        taken(&server),
        vec![get(SHIP), get(PACK), patch(SHIP_SCALE, 4)],
        "the failed stage is read again and patched"
    );
}

/// A manager started beside running replicas, whose read before the round failed: the
/// decision started from nothing, so the stage is read and left as it runs, not scaled
/// down to what a round from nothing wanted.
#[tokio::test]
async fn a_stage_decided_before_its_count_was_known_is_only_read() {
    let (executor, server) = start().await;
    set_replicas(&server, SHIP, 8, 8);

    executor
        .apply(&[decision("orders.ship", 1)])
        .await
        .expect("read");
    assert_eq!(taken(&server), vec![get(SHIP)], "no patch down from 8");
    assert_eq!(executor.current(), current(&[("orders.ship", 8)]));
}
