//! A restart on the same data directory keeps everything: ready, leased and delayed
//! events, lease tokens, dedup, and the schedule of the activation timer.

use std::time::{Duration, Instant};

use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1::enqueue_request::When;

use crate::cluster::{Cluster, ack, enqueue_request, payload_of};

#[tokio::test]
async fn restart() {
    let mut cluster = Cluster::start(1).await;
    cluster.create_queue("jobs", None).await;
    for payload in [&b"one"[..], b"two", b"three"] {
        cluster.enqueue_now("jobs", payload).await;
    }
    let mut with_id = enqueue_request("jobs", b"keyed");
    with_id.id = "order-42".into();
    assert_eq!(cluster.enqueue(with_id.clone()).await.code, 0);
    // Still delayed after the restart and the checks below, however slow the machine.
    let delay = Duration::from_secs(3);
    let mut delayed = enqueue_request("jobs", b"delayed");
    delayed.when = Some(When::Delay(duration_to_proto(delay)));
    let delayed_at = Instant::now();
    assert_eq!(cluster.enqueue(delayed).await.code, 0);
    let leased = cluster.take("jobs", 1, Duration::ZERO).await;
    assert_eq!(payload_of(&leased[0]), b"one");

    cluster.restart().await;

    let stats = cluster.stats("jobs").await;
    assert_eq!((stats.ready, stats.leased, stats.enqueued_total), (3, 1, 5));
    assert_eq!(stats.ready + stats.delayed, 4, "{stats:?}");
    let again = cluster.enqueue(with_id).await;
    assert!(again.ok.expect("ok").duplicate, "dedup survives a restart");
    assert_eq!(
        cluster.complete(&leased[0], ack()).await.code,
        0,
        "the lease survives a restart"
    );

    let ready = cluster.take("jobs", 10, Duration::ZERO).await;
    let payloads: Vec<&[u8]> = ready.iter().map(payload_of).collect();
    assert_eq!(payloads, [&b"two"[..], b"three", b"keyed"]);
    let fired = cluster.take("jobs", 1, Duration::from_secs(5)).await;
    assert_eq!(fired.len(), 1, "the schedule survives a restart");
    assert_eq!(payload_of(&fired[0]), b"delayed");
    assert!(delayed_at.elapsed() >= delay);
    cluster.stop().await;
}
