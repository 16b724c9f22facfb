//! Pipelines as users see them: applied through `Admin`, an event enqueued by pipeline name
//! walks its stages (on both shards) with `advance` and is gone after the last, a `to` jumps
//! to a named stage, and re-applying a pipeline changes a stage's config without losing
//! its events.

use std::time::Duration;

use cascade_client::{Client, api};
use cascade_core::{QueueName, shard_of};
use tonic::Code;

use super::{complete, config, enqueue, id, payload, seconds, stats, take, take_n};
use crate::Cluster;
use crate::cluster::SHARDS;

fn stage(name: &str, lease_s: f64) -> api::Stage {
    api::Stage {
        name: name.into(),
        queue: Some(config(lease_s, 5)),
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Builtin("noop".into())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn pipeline(name: &str, stages: &[&str]) -> api::Pipeline {
    api::Pipeline {
        name: name.into(),
        stages: stages.iter().map(|s| stage(s, 30.0)).collect(),
    }
}

async fn apply(c: &Client, pipeline: api::Pipeline) -> api::Pipeline {
    let name = pipeline.name.clone();
    c.admin()
        .apply_pipeline(pipeline)
        .await
        .unwrap_or_else(|e| panic!("apply {name}: {e}"))
        .into_inner()
}

fn shard(queue: &str) -> u32 {
    shard_of(&QueueName::parse(queue).expect("name"), SHARDS)
}

/// A pipeline name whose consecutive `stages` live on different shards.
pub fn spread_over_shards(base: &str, stages: &[&str]) -> String {
    (0..1000)
        .map(|i| format!("{base}{i}"))
        .find(|p| {
            stages
                .windows(2)
                .all(|w| shard(&format!("{p}.{}", w[0])) != shard(&format!("{p}.{}", w[1])))
        })
        .expect("a name whose stages alternate between the shards")
}

fn by_pipeline(pipeline: &str, body: &str) -> api::EnqueueRequest {
    api::EnqueueRequest {
        pipeline: pipeline.into(),
        payload: body.as_bytes().to_vec().into(),
        ..Default::default()
    }
}

fn advance(to: &str) -> api::completion::Outcome {
    api::completion::Outcome::Advance(api::Advance {
        to: to.into(),
        ..Default::default()
    })
}

pub async fn pipeline_walks_its_stages_and_acks_after_the_last(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let stages = ["validate", "charge", "ship"];
    let name = spread_over_shards("walk", &stages);
    let stored = apply(&c, pipeline(&name, &stages)).await;
    assert_eq!(stored.stages.len(), 3);
    let got = c
        .admin()
        .get_pipeline(api::GetPipelineRequest { name: name.clone() })
        .await
        .expect("get the pipeline")
        .into_inner();
    assert_eq!(got, stored);
    let listed = c
        .admin()
        .list_pipelines(api::ListPipelinesRequest {})
        .await
        .expect("list pipelines")
        .into_inner();
    assert!(listed.pipelines.contains(&stored));

    let mut ids = Vec::new();
    for i in 0..3 {
        let sent = enqueue(&c, by_pipeline(&name, &format!("order {i}"))).await;
        assert_eq!(sent.queue, format!("{name}.validate"));
        ids.push(sent.id);
    }
    ids.sort();
    for stage in stages {
        let queue = format!("{name}.{stage}");
        let taken = take_n(&c, &queue, 3, Duration::from_secs(20)).await;
        let mut seen: Vec<String> = taken.iter().map(id).collect();
        seen.sort();
        assert_eq!(seen, ids, "every event once at {queue}");
        for e in &taken {
            let done = complete(&c, e, advance("")).await;
            assert_eq!(done.code, 0, "advance from {queue}: {done:?}");
        }
    }
    // After the last stage the advance was an ack: nothing went anywhere.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for stage in stages {
        let queue = format!("{name}.{stage}");
        assert!(
            take(&c, &queue, 10, 0.0).await.is_empty(),
            "left in {queue}"
        );
        let s = stats(&c, &queue).await;
        assert_eq!(
            (s.enqueued_total, s.completed_total, s.ready, s.leased),
            (3, 3, 0, 0),
            "{queue}: {s:?}"
        );
    }
}

pub async fn advance_to_a_named_stage_jumps(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let name = spread_over_shards("jump", &["intake", "done"]);
    apply(&c, pipeline(&name, &["intake", "review", "done"])).await;
    enqueue(&c, by_pipeline(&name, "skip review")).await;
    let intake = format!("{name}.intake");
    let taken = take_n(&c, &intake, 1, Duration::from_secs(10)).await;
    assert_eq!(taken.len(), 1);

    let unknown = complete(&c, &taken[0], advance("nowhere")).await;
    assert_eq!(unknown.code, Code::InvalidArgument as i32, "{unknown:?}");
    assert!(
        unknown.message.starts_with("completions[0].advance.to: ")
            && unknown.message.contains("(intake, review, done)"),
        "{}",
        unknown.message
    );
    let jumped = complete(&c, &taken[0], advance("done")).await;
    assert_eq!(
        jumped.code, 0,
        "the refused advance changed nothing: {jumped:?}"
    );
    let arrived = take_n(&c, &format!("{name}.done"), 1, Duration::from_secs(10)).await;
    assert_eq!(arrived.len(), 1);
    assert_eq!(payload(&arrived[0]), "skip review");
    assert!(
        take(&c, &format!("{name}.review"), 10, 0.0)
            .await
            .is_empty()
    );

    // A plain queue has no next stage: advancing there without a target is done with it.
    super::create(&c, "plain-jobs", config(30.0, 5)).await;
    enqueue(&c, super::item("plain-jobs", "x")).await;
    let plain = take(&c, "plain-jobs", 1, 0.0).await;
    let done = complete(&c, &plain[0], advance("")).await;
    assert_eq!(done.code, 0, "{done:?}");
    let s = stats(&c, "plain-jobs").await;
    assert_eq!((s.ready, s.leased, s.completed_total), (0, 0, 1), "{s:?}");
    let err = c
        .ingest()
        .enqueue(by_pipeline("no-such-pipeline", "x"))
        .await
        .expect_err("no such pipeline");
    assert_eq!(err.code(), Code::NotFound, "{err}");
}

pub async fn reapplied_pipeline_keeps_its_events(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let name = spread_over_shards("evolve", &["first", "second"]);
    apply(&c, pipeline(&name, &["first", "second"])).await;
    let first = format!("{name}.first");
    for i in 0..5 {
        enqueue(&c, by_pipeline(&name, &format!("e{i}"))).await;
    }
    let held = take(&c, &first, 1, 0.0).await;
    assert_eq!(held.len(), 1);

    let mut changed = pipeline(&name, &["first", "second", "third"]);
    changed.stages[0] = stage("first", 120.0);
    apply(&c, changed).await;
    let queue = c
        .admin()
        .get_queue(api::GetQueueRequest {
            name: first.clone(),
        })
        .await
        .expect("the stage queue")
        .into_inner();
    assert_eq!(queue.config.and_then(|q| q.lease), Some(seconds(120.0)));
    let s = stats(&c, &first).await;
    assert_eq!((s.ready, s.leased), (4, 1), "events kept: {s:?}");

    // The lease given before the change still completes; new takes get the new lease.
    assert_eq!(complete(&c, &held[0], advance("")).await.code, 0);
    let rest = take(&c, &first, 10, 0.0).await;
    assert_eq!(rest.len(), 4);
    let expires = rest[0]
        .lease_expires_at
        .as_ref()
        .expect("a deadline")
        .seconds;
    let now = super::now_plus(Duration::ZERO).seconds;
    assert!(
        expires - now > 60,
        "the new 120 s lease applies: {}",
        expires - now
    );
    for e in &rest {
        assert_eq!(complete(&c, e, advance("")).await.code, 0);
    }
    let second = take_n(&c, &format!("{name}.second"), 5, Duration::from_secs(20)).await;
    assert_eq!(second.len(), 5, "every event reached the second stage");
    // `second` is no longer the last stage: its advance goes on to the new `third`.
    for e in &second {
        assert_eq!(complete(&c, e, advance("")).await.code, 0);
    }
    let third = take_n(&c, &format!("{name}.third"), 5, Duration::from_secs(20)).await;
    assert_eq!(third.len(), 5);
}
