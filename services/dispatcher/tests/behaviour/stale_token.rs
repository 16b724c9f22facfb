//! A completion with a lease token that is not current changes nothing and gets
//! FAILED_PRECONDITION (9); a malformed token gets INVALID_ARGUMENT (3) naming the field.

use std::time::Duration;

use cascade_proto::v1;

use crate::cluster::{Cluster, ack};

#[tokio::test]
async fn stale_token() {
    let mut cluster = Cluster::start(1).await;
    cluster.create_queue("jobs", None).await;
    cluster.enqueue_now("jobs", b"x").await;
    let taken = cluster.take("jobs", 1, Duration::ZERO).await;
    assert_eq!(taken.len(), 1);

    let mut forged = taken[0].clone();
    forged.lease_token = "00000000000fffff".into();
    let result = cluster.complete(&forged, ack()).await;
    assert_eq!(result.code, 9, "{}", result.message);
    assert!(result.message.contains("not current"), "{}", result.message);
    assert_eq!(
        cluster.stats("jobs").await.leased,
        1,
        "a stale completion changes nothing"
    );

    let mut malformed = taken[0].clone();
    malformed.lease_token = "nope".into();
    let result = cluster.complete(&malformed, ack()).await;
    assert_eq!(result.code, 3);
    assert!(
        result.message.starts_with("lease_token: "),
        "{}",
        result.message
    );
    assert_eq!(result.field, "lease_token");

    assert_eq!(cluster.complete(&taken[0], ack()).await.code, 0);
    let again = cluster.complete(&taken[0], ack()).await;
    assert_eq!(
        again.code, 9,
        "a token is good for one outcome: {}",
        again.message
    );
    let release = v1::completion::Outcome::Release(v1::Release {});
    assert_eq!(cluster.complete(&taken[0], release).await.code, 9);
    cluster.stop().await;
}
