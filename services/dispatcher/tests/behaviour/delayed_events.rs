//! A delayed event cannot be taken before its time; the activation timer makes it ready
//! when it comes (within a few milliseconds here; the bound below is loose for loaded CI
//! machines, and lateness is the benchmark's to measure).

use std::time::{Duration, Instant};

use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1::enqueue_request::When;

use crate::cluster::{Cluster, enqueue_request, payload_of};

/// Long enough for the checks before it to run while the event is still delayed.
const DELAY: Duration = Duration::from_secs(1);

#[tokio::test]
async fn delayed_events() {
    let mut cluster = Cluster::start(1).await;
    cluster.create_queue("later", None).await;
    let mut request = enqueue_request("later", b"soon");
    request.when = Some(When::Delay(duration_to_proto(DELAY)));
    let enqueued_at = Instant::now();
    let result = cluster.enqueue(request).await;
    assert_eq!(result.code, 0, "{}", result.message);

    assert!(
        cluster.take("later", 1, Duration::ZERO).await.is_empty(),
        "not before its time"
    );
    let stats = cluster.stats("later").await;
    assert_eq!((stats.delayed, stats.ready), (1, 0));

    // A long poll is woken by the activation.
    let taken = cluster.take("later", 1, Duration::from_secs(5)).await;
    let waited = enqueued_at.elapsed();
    assert_eq!(taken.len(), 1);
    assert_eq!(payload_of(&taken[0]), b"soon");
    assert!(waited >= DELAY, "taken after {waited:?}, before its delay");
    assert!(
        waited < DELAY + Duration::from_secs(1),
        "taken {waited:?} after enqueue: late"
    );
    cluster.stop().await;
}
