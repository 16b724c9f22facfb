//! Pipelines on the shards: each stores the whole pipeline and owns the queues of its own
//! stages; re-applying changes a stage queue's config and keeps its events, also across a
//! restart; a bad pipeline or an unknown name gets the right status.

use std::time::Duration;

use cascade_proto::bus::v1::dispatcher_reply::Result as Answer;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1;

use crate::cluster::{Cluster, PATIENCE, enqueue_request};

fn stage(name: &str, lease: Duration) -> v1::Stage {
    v1::Stage {
        name: name.into(),
        queue: Some(v1::QueueConfig {
            lease: Some(duration_to_proto(lease)),
            ..v1::QueueConfig::default()
        }),
        handler: Some(v1::HandlerSpec {
            kind: Some(v1::handler_spec::Kind::Builtin("noop".into())),
            ..v1::HandlerSpec::default()
        }),
        ..v1::Stage::default()
    }
}

fn pipeline(name: &str, lease_of_a: Duration) -> v1::Pipeline {
    v1::Pipeline {
        name: name.into(),
        stages: vec![stage("a", lease_of_a), stage("b", Duration::from_secs(30))],
    }
}

/// Applies on every shard, as the gateway does, and returns what shard 0 stored.
async fn apply(cluster: &Cluster, pipeline: &v1::Pipeline) -> v1::Pipeline {
    let mut stored = Vec::new();
    for shard in 0..cluster.settings.cluster.shards {
        let op = Op::ApplyPipeline(pipeline.clone());
        match cluster.call_shard(shard, op, PATIENCE).await {
            Answer::Pipeline(answer) => stored.push(answer),
            other => panic!("apply on shard {shard}: {other:?}"),
        }
    }
    stored.swap_remove(0)
}

async fn lease_of(cluster: &Cluster, queue: &str) -> Option<prost_types::Duration> {
    let op = Op::GetQueue(v1::GetQueueRequest { name: queue.into() });
    match cluster.call(queue, op).await {
        Answer::Queue(queue) => queue.config.and_then(|config| config.lease),
        other => panic!("get_queue {queue}: {other:?}"),
    }
}

async fn get(cluster: &Cluster, shard: u32, name: &str) -> Answer {
    let op = Op::GetPipeline(v1::GetPipelineRequest { name: name.into() });
    cluster.call_shard(shard, op, PATIENCE).await
}

#[tokio::test]
async fn pipelines() {
    let mut cluster = Cluster::start(2).await;
    // A pipeline whose two stages live on different shards.
    let name = (0..1000)
        .map(|i| format!("flow{i}"))
        .find(|p| {
            cluster.shard_of(&format!("{p}.a")) == 0 && cluster.shard_of(&format!("{p}.b")) == 1
        })
        .expect("a pipeline spread over both shards");
    let (first, second) = (format!("{name}.a"), format!("{name}.b"));
    let stored = apply(&cluster, &pipeline(&name, Duration::from_secs(30))).await;
    assert_eq!(stored.name, name);
    assert_eq!(stored.stages[0].max_handlers, 1, "defaults are filled in");
    assert_eq!(
        lease_of(&cluster, &first).await.map(|d| d.seconds),
        Some(30)
    );
    assert!(lease_of(&cluster, &second).await.is_some());
    for shard in [0, 1] {
        let Answer::Pipeline(got) = get(&cluster, shard, &name).await else {
            panic!("shard {shard} holds the pipeline");
        };
        assert_eq!(got, stored);
    }

    // Re-applied with a longer lease: the events stay, the lease given stays.
    for payload in [b"one", b"two"] {
        let result = cluster.enqueue(enqueue_request(&first, payload)).await;
        assert_eq!(result.code, 0, "{}", result.message);
    }
    assert_eq!(cluster.take(&first, 1, Duration::ZERO).await.len(), 1);
    apply(&cluster, &pipeline(&name, Duration::from_secs(90))).await;
    assert_eq!(
        lease_of(&cluster, &first).await.map(|d| d.seconds),
        Some(90)
    );
    let stats = cluster.stats(&first).await;
    assert_eq!((stats.ready, stats.leased), (1, 1), "{stats:?}");

    cluster.restart().await;
    let Answer::Pipeline(got) = get(&cluster, 1, &name).await else {
        panic!("the pipeline survives a restart");
    };
    assert_eq!(
        got.stages[0]
            .queue
            .as_ref()
            .and_then(|q| q.lease.as_ref())
            .map(|d| d.seconds),
        Some(90)
    );
    let Answer::Pipelines(listed) = cluster
        .call_shard(0, Op::ListPipelines(v1::ListPipelinesRequest {}), PATIENCE)
        .await
    else {
        panic!("a list");
    };
    let names: Vec<&str> = listed.pipelines.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, [name.as_str()]);

    // Bad requests change nothing.
    let mut bad = pipeline("other", Duration::from_secs(30));
    bad.stages[1].next = "nowhere".into();
    let Answer::Error(status) = cluster
        .call_shard(0, Op::ApplyPipeline(bad), PATIENCE)
        .await
    else {
        panic!("an invalid pipeline is refused");
    };
    assert_eq!(status.code, 3);
    assert!(
        status.message.starts_with("stages[1].next: "),
        "{}",
        status.message
    );
    let Answer::Error(status) = get(&cluster, 0, "other").await else {
        panic!("nothing was stored");
    };
    assert_eq!(status.code, 5);
    assert_eq!(
        status.message,
        "pipeline 'other' does not exist; apply it with ApplyPipeline"
    );
    let Answer::Error(status) = get(&cluster, 0, "a.b").await else {
        panic!("a bad name is refused");
    };
    assert_eq!(status.code, 3);
    cluster.stop().await;
}
