//! One dispatcher shard down in the distributed mode: the other shard's queues keep
//! serving, requests for the down shard's queues get UNAVAILABLE naming the shard (and that
//! a retry is safe), and once it is back its events are all there.

use std::time::{Duration, Instant};

use cascade_client::Client;
use cascade_core::{QueueName, shard_of};
use cascade_e2e::cluster::SHARDS;
use cascade_e2e::scenarios::{
    ack, complete, config, create, enqueue, item, names_on_two_shards, payload, take_n,
};
use cascade_e2e::{Cluster, Mode};
use tonic::Code;

const WITHIN: Duration = Duration::from_secs(30);

/// The first answer to an enqueue into `queue` that is not OK.
async fn refusal(c: &Client, queue: &str) -> tonic::Status {
    let deadline = Instant::now() + WITHIN;
    loop {
        match c.ingest().enqueue(item(queue, "while down")).await {
            Err(status) => return status,
            // The shard's process may not have been seen gone yet.
            Ok(_) => assert!(Instant::now() < deadline, "{queue} kept accepting"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_other_shards_serve_and_the_down_one_is_named() {
    let mut cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Distributed))
        .await
        .expect("start");
    let c = cluster.client().await;
    let (up, down) = names_on_two_shards("shard-down");
    let down_shard = shard_of(&QueueName::parse(&down).expect("name"), SHARDS);
    for queue in [&up, &down] {
        create(&c, queue, config(30.0, 5)).await;
        enqueue(&c, item(queue, "before")).await;
    }
    tokio::task::block_in_place(|| cluster.kill_dispatcher(down_shard));

    let status = refusal(&c, &down).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .starts_with(&format!("shard {down_shard}: ")),
        "{}",
        status.message()
    );
    assert!(
        status.message().contains("safe to retry"),
        "{}",
        status.message()
    );
    // The other shard serves enqueues, takes and acks throughout.
    enqueue(&c, item(&up, "during")).await;
    let taken = take_n(&c, &up, 2, WITHIN).await;
    assert_eq!(taken.len(), 2);
    for event in &taken {
        assert_eq!(complete(&c, event, ack()).await.code, 0);
    }

    tokio::task::block_in_place(|| cluster.restart_dispatcher(down_shard));
    let c = cluster.client().await;
    let back = take_n(&c, &down, 1, WITHIN).await;
    assert_eq!(back.len(), 1, "the event acknowledged before the crash");
    assert_eq!(payload(&back[0]), "before");
    cluster.stop();
}
