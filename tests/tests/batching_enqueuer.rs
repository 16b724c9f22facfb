//! `cascade-client`'s batching enqueuer against a real `cascade standalone` with
//! authentication on: many tasks' single enqueues go out as fewer `EnqueueBatch` calls, and
//! each task gets the answer its own unary `Enqueue` would have had (its ID, a duplicate,
//! its own refusal naming its own field). A batch the gateway refuses whole, having applied
//! nothing, goes again so that only the events at fault are refused: those it lists as
//! outside the caller's grants alone and the others together, and one of too many items or
//! bytes in halves; one refused for the caller's rate quota is every event's refusal, in one
//! call.
//!
//! The test runs on Tokio's current-thread runtime: the enqueuer's task cannot run until
//! the test's task yields, so the calls joined below reach it together, however fast the
//! server answers. Joining up to 56 calls stays within the runtime's budget of operations
//! per turn of a task (two per call), so those go out as one batch.

use std::path::Path;

use cascade_client::{BatchingEnqueuer, BatchingOptions, Client, ClientOptions, api};
use cascade_e2e::process::http_get;
use cascade_e2e::scenarios::{config, create, item, stats};
use cascade_e2e::{Cluster, Mode};
use cascade_security::token_sha256;
use futures::future::join_all;
use tonic::Code;

const TOKEN: &str = "batching-token-4d1f";
/// An identity allowed one event a second.
const LIMITED_TOKEN: &str = "limited-token-0c7a";
const EVENTS: usize = 600;
/// The gateway's `ingest.max_batch_items` and `ingest.max_batch_bytes` here, below the
/// enqueuer's defaults.
const SERVER_MAX_ITEMS: usize = 50;
const SERVER_MAX_BYTES: usize = 4096;

/// The `Enqueue` and `EnqueueBatch` calls the gateway has answered so far
/// (`cascade_enqueue_duration_seconds_count{rpc}`).
#[derive(Clone, Copy, Debug)]
struct Calls {
    unary: u64,
    batches: u64,
}

fn calls(cluster: &Cluster) -> Calls {
    let (_, metrics) = http_get(cluster.http(), "/metrics").expect("metrics");
    let count = |rpc: &str| {
        let label = format!("rpc=\"{rpc}\"");
        metrics
            .lines()
            .filter(|l| l.starts_with("cascade_enqueue_duration_seconds_count{"))
            .filter(|l| l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    Calls {
        unary: count("enqueue"),
        batches: count("enqueue_batch"),
    }
}

fn since(before: Calls, cluster: &Cluster) -> Calls {
    let now = calls(cluster);
    Calls {
        unary: now.unary - before.unary,
        batches: now.batches - before.batches,
    }
}

fn with_id(queue: &str, id: &str, payload: &str) -> api::EnqueueRequest {
    api::EnqueueRequest {
        id: id.into(),
        ..item(queue, payload)
    }
}

async fn enqueue_all(
    enqueuer: &BatchingEnqueuer,
    requests: Vec<api::EnqueueRequest>,
) -> Vec<Result<api::EnqueueResponse, tonic::Status>> {
    join_all(requests.into_iter().map(|r| enqueuer.enqueue(r))).await
}

/// A refusal with `code` whose message starts with `says`.
fn assert_refused(status: &tonic::Status, code: Code, says: &str) {
    assert_eq!(status.code(), code, "{status:?}");
    assert!(status.message().starts_with(says), "{status:?}");
}

/// Every answer is a fresh enqueue.
fn all_fresh(answers: Vec<Result<api::EnqueueResponse, tonic::Status>>, what: &str) {
    for (i, answer) in answers.into_iter().enumerate() {
        let answer = answer.unwrap_or_else(|e| panic!("{what}, event {i}: {e:?}"));
        assert!(!answer.duplicate, "{what}, event {i} was a duplicate");
    }
}

async fn start(dir: &Path) -> Cluster {
    let identities = dir.join("identities.toml");
    let identity = |name: &str, token: &str, grants: &str, quotas: &str| {
        format!(
            "[[identities]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ngrants = {grants}\n{quotas}\n",
            token_sha256(token)
        )
    };
    let batcher =
        r#"[{ role = "admin", queues = ["*"] }, { role = "producer", queues = ["batched.*"] }]"#;
    let limited = r#"[{ role = "producer", queues = ["limited.*"] }]"#;
    let file = identity("batcher", TOKEN, batcher, "")
        + &identity(
            "limited",
            LIMITED_TOKEN,
            limited,
            "quotas = { enqueue_rate = 1 }",
        );
    std::fs::write(&identities, file).expect("write identities");
    let identities = identities.display().to_string();
    tokio::task::spawn_blocking(move || {
        Cluster::start_with(
            Mode::Standalone,
            None,
            &[
                ("CASCADE__AUTH__ENABLED", "true"),
                ("CASCADE__AUTH__IDENTITIES_FILE", &identities),
                (
                    "CASCADE__INGEST__MAX_BATCH_ITEMS",
                    &SERVER_MAX_ITEMS.to_string(),
                ),
                (
                    "CASCADE__INGEST__MAX_BATCH_BYTES",
                    &SERVER_MAX_BYTES.to_string(),
                ),
            ],
        )
    })
    .await
    .expect("start")
}

async fn connect(cluster: &Cluster, token: &str) -> Client {
    let options = ClientOptions {
        token: Some(token.into()),
        ..ClientOptions::default()
    };
    Client::connect_with(cluster.gateway(), &options)
        .await
        .expect("connect")
}

#[tokio::test]
async fn concurrent_enqueues_go_out_together_each_answered_for_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = start(dir.path()).await;
    let client = connect(&cluster, TOKEN).await;
    create(&client, "batched.main", config(30.0, 3)).await;
    create(&client, "other", config(30.0, 3)).await;
    let within_limits = BatchingOptions {
        max_items: SERVER_MAX_ITEMS,
        max_bytes: SERVER_MAX_BYTES,
        ..BatchingOptions::default()
    };
    let enqueuer = client.batching_enqueuer(within_limits);

    // Many at once: each answered with its own ID, in fewer calls than events.
    let before = calls(&cluster);
    let requests = (0..EVENTS)
        .map(|i| with_id("batched.main", &format!("e-{i}"), &i.to_string()))
        .collect();
    for (i, answer) in enqueue_all(&enqueuer, requests)
        .await
        .into_iter()
        .enumerate()
    {
        let answer = answer.unwrap_or_else(|e| panic!("event {i}: {e:?}"));
        assert_eq!(answer.id, format!("e-{i}"));
        assert_eq!(answer.queue, "batched.main");
        assert!(!answer.duplicate, "event {i}");
    }
    let made = since(before, &cluster);
    assert!(made.batches > 0, "no EnqueueBatch call: {made:?}");
    assert!(made.unary + made.batches < EVENTS as u64, "{made:?}");
    assert_eq!(
        stats(&client, "batched.main").await.enqueued_total,
        EVENTS as u64
    );
    let stored = client
        .ingest()
        .get(api::GetRequest {
            queue: "batched.main".into(),
            id: "e-417".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(&stored.payload[..], b"417");

    // One call of each kind of answer, together: each gets its own.
    let mixed = vec![
        with_id("batched.main", "e-3", "again"),
        with_id("batched.main", "bad/id", "x"),
        item("batched.missing", "x"),
        with_id("batched.main", "fresh", "y"),
    ];
    let answers = enqueue_all(&enqueuer, mixed).await;
    let duplicate = answers[0].as_ref().expect("a duplicate is not an error");
    assert!(duplicate.duplicate);
    assert_eq!(duplicate.id, "e-3");
    let invalid = answers[1].as_ref().expect_err("a malformed ID");
    assert_eq!(invalid.code(), Code::InvalidArgument);
    assert_eq!(
        invalid.message(),
        "id: must be 1-128 bytes of [A-Za-z0-9._:-], got '/' at byte 3"
    );
    let unknown = answers[2].as_ref().expect_err("no such queue");
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
    assert!(!unknown.message().starts_with("items["), "{unknown:?}");
    assert_eq!(answers[3].as_ref().expect("fresh").id, "fresh");

    // Events outside the caller's grants have their batch refused whole: the gateway lists
    // them, each goes again alone and is refused as by its own call, and the others go again
    // together.
    let before = calls(&cluster);
    let answers = enqueue_all(
        &enqueuer,
        vec![
            item("batched.main", "allowed"),
            item("other", "forbidden"),
            item("batched.main", "allowed too"),
            item("other", "forbidden too"),
        ],
    )
    .await;
    answers[0].as_ref().expect("its own queue");
    answers[2].as_ref().expect("its own queue");
    let says = "queue: identity 'batcher' may not produce to queue 'other'";
    for forbidden in [&answers[1], &answers[3]] {
        let forbidden = forbidden.as_ref().expect_err("another's queue");
        assert_refused(forbidden, Code::PermissionDenied, says);
    }
    let made = since(before, &cluster);
    assert_eq!((made.batches, made.unary), (2, 2), "{made:?}");
    assert_eq!(stats(&client, "other").await.enqueued_total, 0);

    // Batches over the gateway's limits are refused whole with nothing applied: they go
    // again in halves, within the limits here, and each event is enqueued once.
    // With no bound on calls in flight either: more than can be counted is capped.
    let unbounded = client.batching_enqueuer(BatchingOptions {
        max_in_flight: usize::MAX,
        ..BatchingOptions::default()
    });
    let before = calls(&cluster);
    let many = (0..SERVER_MAX_ITEMS + 6)
        .map(|i| with_id("batched.main", &format!("many-{i}"), "z"))
        .collect();
    all_fresh(enqueue_all(&unbounded, many).await, "over the item limit");
    let made = since(before, &cluster);
    assert_eq!((made.batches, made.unary), (3, 0), "{made:?}");
    let before = calls(&cluster);
    let payload = "p".repeat(200);
    let large = (0..30)
        .map(|i| with_id("batched.main", &format!("large-{i}"), &payload))
        .collect();
    all_fresh(enqueue_all(&unbounded, large).await, "over the byte limit");
    let made = since(before, &cluster);
    assert_eq!((made.batches, made.unary), (3, 0), "{made:?}");
    assert_eq!(
        stats(&client, "batched.main").await.enqueued_total,
        (EVENTS + 1 + 2 + SERVER_MAX_ITEMS + 6 + 30) as u64
    );
    // The caller's rate quota: a first batch passes a full bucket and is paid for; the next
    // is refused whole, and each of its events gets that refusal, with no call made again.
    let limited = connect(&cluster, LIMITED_TOKEN).await;
    create(&client, "limited.q", config(30.0, 3)).await;
    let enqueuer = limited.batching_enqueuer(BatchingOptions::default());
    let burst = || (0..20).map(|i| item("limited.q", &i.to_string())).collect();
    all_fresh(enqueue_all(&enqueuer, burst()).await, "a full bucket");
    let before = calls(&cluster);
    let says = "items: identity 'limited' is over its quota: enqueue_rate of 1 events per second";
    for answer in enqueue_all(&enqueuer, burst()).await {
        assert_refused(
            &answer.expect_err("over the quota"),
            Code::ResourceExhausted,
            says,
        );
    }
    let made = since(before, &cluster);
    assert_eq!((made.batches, made.unary), (1, 0), "{made:?}");
    assert_eq!(stats(&client, "limited.q").await.enqueued_total, 20);
    // Off this runtime's thread: the server's graceful stop waits for this client's
    // connection to close, which this thread serves.
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
