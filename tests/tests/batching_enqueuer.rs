//! `cascade-client`'s batching enqueuer against a real `cascade standalone`: many tasks'
//! single enqueues go out as fewer `EnqueueBatch` calls, and each task gets the answer its
//! own unary `Enqueue` would have had (its ID, a duplicate, its own refusal naming its own
//! field); a batch the gateway refuses whole for its size goes again event by event.
//!
//! The tests run on Tokio's current-thread runtime: the calls joined below are all handed
//! to the enqueuer before its task runs, so they go out in batches however fast the server
//! answers.

use cascade_client::{BatchingEnqueuer, BatchingOptions, api};
use cascade_e2e::process::http_get;
use cascade_e2e::scenarios::{config, create, item, stats};
use cascade_e2e::{Cluster, Mode};
use futures::future::join_all;
use tonic::Code;

const EVENTS: usize = 600;
/// The gateway's `ingest.max_batch_items` here, below the enqueuer's default.
const SERVER_MAX_ITEMS: usize = 50;

/// `cascade_enqueue_duration_seconds_count{rpc}`: the calls of that kind the gateway answered.
fn calls(metrics: &str, rpc: &str) -> u64 {
    let label = format!("rpc=\"{rpc}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with("cascade_enqueue_duration_seconds_count{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
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

#[tokio::test]
async fn concurrent_enqueues_go_out_together_each_answered_for_itself() {
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::start_with(
            Mode::Standalone,
            None,
            &[(
                "CASCADE__INGEST__MAX_BATCH_ITEMS",
                &SERVER_MAX_ITEMS.to_string(),
            )],
        )
    })
    .await
    .expect("start");
    let client = cluster.client().await;
    create(&client, "batched", config(30.0, 3)).await;
    let within_limit = BatchingOptions {
        max_items: SERVER_MAX_ITEMS,
        ..BatchingOptions::default()
    };
    let enqueuer = client.batching_enqueuer(within_limit);

    let requests = (0..EVENTS)
        .map(|i| with_id("batched", &format!("e-{i}"), &i.to_string()))
        .collect();
    for (i, answer) in enqueue_all(&enqueuer, requests)
        .await
        .into_iter()
        .enumerate()
    {
        let answer = answer.unwrap_or_else(|e| panic!("event {i}: {e:?}"));
        assert_eq!(answer.id, format!("e-{i}"));
        assert_eq!(answer.queue, "batched");
        assert!(!answer.duplicate, "event {i}");
    }
    assert_eq!(
        stats(&client, "batched").await.enqueued_total,
        EVENTS as u64
    );
    let stored = client
        .ingest()
        .get(api::GetRequest {
            queue: "batched".into(),
            id: "e-417".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(&stored.payload[..], b"417");
    let (_, metrics) = http_get(cluster.http(), "/metrics").expect("metrics");
    let (unary, batches) = (calls(&metrics, "enqueue"), calls(&metrics, "enqueue_batch"));
    assert!(batches > 0, "no EnqueueBatch call: {unary} unary");
    assert!(
        unary + batches < EVENTS as u64,
        "{EVENTS} events took {unary} unary and {batches} batch calls"
    );

    // One call of each kind of answer, together: each gets its own.
    let mixed = vec![
        with_id("batched", "e-3", "again"),
        with_id("batched", "bad/id", "x"),
        item("no-such-queue", "x"),
        with_id("batched", "fresh", "y"),
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
    assert_eq!(
        stats(&client, "batched").await.enqueued_total,
        EVENTS as u64 + 1
    );

    // Batches over the gateway's item limit are refused whole, with nothing applied: their
    // events go again one by one, and each is enqueued once.
    let oversized = client.batching_enqueuer(BatchingOptions::default());
    let requests = (0..SERVER_MAX_ITEMS * 3)
        .map(|i| with_id("batched", &format!("big-{i}"), "z"))
        .collect();
    for (i, answer) in enqueue_all(&oversized, requests)
        .await
        .into_iter()
        .enumerate()
    {
        let answer = answer.unwrap_or_else(|e| panic!("event {i} of the oversized batches: {e:?}"));
        assert!(
            !answer.duplicate,
            "event {i} was applied before its unary call"
        );
    }
    assert_eq!(
        stats(&client, "batched").await.enqueued_total,
        (EVENTS + 1 + SERVER_MAX_ITEMS * 3) as u64
    );
    // Off this runtime's thread: the server's graceful stop waits for this client's
    // connection to close, which this thread serves.
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
