//! Two processes for one dispatcher shard on the same bus would each apply the requests they
//! were given and answer in turn from stores that drift apart. A second one refuses to
//! start, naming the first, which keeps serving.

use std::time::Duration;

use cascade_e2e::scenarios::{config, create, enqueue, item, stats};
use cascade_e2e::{Cluster, Mode};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_for_a_served_shard_refuses_to_start() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Distributed))
        .await
        .expect("start");
    let first = cluster.dispatcher_pid(0);
    let mut second = cluster.start_second_dispatcher(0);
    let status = tokio::task::spawn_blocking(move || {
        let status = second.wait_exit(Duration::from_secs(60));
        (status, second.log())
    })
    .await
    .expect("wait");
    let (status, log) = status;
    assert!(!status.success(), "the second process serves too:\n{log}");
    assert!(
        log.contains(&format!(
            "dispatcher shard 0 stopped: another process already serves it on this bus (process {first} on host"
        )),
        "the refusal does not name the first:\n{log}"
    );

    // The first still serves: every queue of shard 0 answers from its one store.
    let c = cluster.client().await;
    let queue = (0..100)
        .map(|i| format!("served{i}"))
        .find(|q| {
            cascade_core::shard_of(
                &cascade_core::QueueName::parse(q).expect("name"),
                cascade_e2e::cluster::SHARDS,
            ) == 0
        })
        .expect("a queue of shard 0");
    create(&c, &queue, config(30.0, 3)).await;
    enqueue(&c, item(&queue, "one")).await;
    assert_eq!(stats(&c, &queue).await.ready, 1);
}
