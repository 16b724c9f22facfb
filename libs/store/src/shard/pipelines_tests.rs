//! Pipelines in the shard: stored whole on every shard, stage queues only where owned, and
//! re-applying changes the stages' configs without touching their events.

use std::sync::Arc;
use std::time::Duration;

use cascade_core::{Outcome, QueueConfig};

use crate::error::StoreError;
use crate::shard::tests::{at, cmd, open, pipeline, q};
use crate::shard::{EnqueueCmd, ShardSettings};

fn into(queue: &str, payload: &str) -> EnqueueCmd {
    EnqueueCmd {
        queue: q(queue),
        ..cmd(payload)
    }
}

#[test]
fn a_pipeline_is_stored_whole_and_its_owned_stage_queues_created() {
    // This shard owns every queue but `orders.ship`.
    let settings = ShardSettings {
        router: Arc::new(|queue| queue.as_str() != "orders.ship"),
        ..ShardSettings::default()
    };
    let (_d, mut s) = open(settings);
    let orders = pipeline("orders", &["validate", "ship"]);
    assert_eq!(
        s.apply_pipeline(at(0), orders.clone()).expect("apply"),
        orders
    );
    assert_eq!(s.get_pipeline("orders").expect("stored"), orders);
    assert_eq!(
        s.get_queue(&q("orders.validate"))
            .expect("stage queue")
            .config,
        QueueConfig::default()
    );
    assert!(matches!(
        s.get_queue(&q("orders.ship")),
        Err(StoreError::QueueNotFound { .. })
    ));
    s.apply_pipeline(at(1), pipeline("billing", &["charge"]))
        .expect("apply");
    let names: Vec<String> = s
        .list_pipelines()
        .expect("list")
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["billing", "orders"]);
    let err = s.get_pipeline("nowhere").expect_err("not stored");
    assert_eq!(
        err.to_string(),
        "pipeline 'nowhere' does not exist; apply it with ApplyPipeline"
    );
    assert_eq!(err.code(), cascade_core::Code::NotFound);
}

#[test]
fn an_invalid_pipeline_changes_nothing() {
    let (_d, mut s) = open(ShardSettings::default());
    s.take_unlogged(); // What opening a new store writes (its summary, `Shard::new`).
    let mut bad = pipeline("orders", &["a", "b"]);
    bad.stages[1].next = Some("nowhere".into());
    let err = s.apply_pipeline(at(0), bad).expect_err("invalid");
    assert_eq!(err.code(), cascade_core::Code::InvalidArgument);
    assert!(s.list_pipelines().expect("list").is_empty());
    assert!(s.get_queue(&q("orders.a")).is_err());
    assert!(s.take_unlogged().is_empty(), "nothing was written");
}

#[test]
fn reapplying_changes_stage_configs_and_keeps_their_events() {
    let (_d, mut s) = open(ShardSettings::default());
    let first = pipeline("orders", &["validate", "ship"]);
    s.apply_pipeline(at(0), first.clone()).expect("apply");
    s.enqueue(at(1), into("orders.validate", "waiting"))
        .expect("enqueue");
    s.enqueue(at(1), into("orders.validate", "taken"))
        .expect("enqueue");
    let leased = s.take(at(2), &q("orders.validate"), 1, None).expect("take");
    assert_eq!(leased.len(), 1);

    let mut second = pipeline("orders", &["validate", "pack"]);
    second.stages[0].queue.lease = Duration::from_secs(90);
    s.apply_pipeline(at(3), second.clone()).expect("re-apply");
    assert_eq!(s.get_pipeline("orders").expect("stored"), second);
    let validate = s.get_queue(&q("orders.validate")).expect("stage queue");
    assert_eq!(validate.config.lease, Duration::from_secs(90));
    let stats = s.queue_stats(at(3), &q("orders.validate")).expect("stats");
    assert_eq!((stats.ready, stats.leased, stats.enqueued_total), (1, 1, 2));
    // The lease given before keeps its token; the next take gets the new lease.
    s.complete(
        at(4),
        &q("orders.validate"),
        leased[0].event.id.as_str(),
        leased[0].token,
        Outcome::Ack,
    )
    .expect("the old lease still completes");
    let next = s.take(at(5), &q("orders.validate"), 1, None).expect("take");
    assert_eq!(next[0].expires_at, at(95));
    // A stage dropped from the pipeline keeps its queue; a new one gets its queue.
    assert!(s.get_queue(&q("orders.ship")).is_ok());
    assert!(s.get_queue(&q("orders.pack")).is_ok());
    // Applying the same again writes nothing but the record.
    let _ = s.take_unlogged();
    s.apply_pipeline(at(6), second).expect("same again");
    assert_eq!(s.take_unlogged().len(), 1);
}

#[test]
fn put_queue_replaces_a_config_and_keeps_the_events() {
    let (_d, mut s) = open(ShardSettings::default());
    s.create_queue(at(0), q("t:*"), QueueConfig::default())
        .expect("template");
    s.enqueue(at(1), into("t:1", "x")).expect("enqueue");
    let longer = QueueConfig {
        lease: Duration::from_secs(120),
        ..QueueConfig::default()
    };
    s.put_queue(at(2), q("t:1"), longer.clone())
        .expect("put over a template-made queue");
    assert_eq!(s.get_queue(&q("t:1")).expect("queue").config, longer);
    let taken = s.take(at(3), &q("t:1"), 10, None).expect("take");
    assert_eq!(taken.len(), 1, "its event stayed");
    s.complete(
        at(4),
        &q("t:1"),
        taken[0].event.id.as_str(),
        taken[0].token,
        Outcome::Ack,
    )
    .expect("ack");
    // Explicit now: empty, it stays (a template-made queue would be gone).
    assert_eq!(s.get_queue(&q("t:1")).expect("kept").config, longer);
    // A create with another config is still refused; put replaces.
    let err = s
        .create_queue(at(5), q("t:1"), QueueConfig::default())
        .expect_err("exists");
    assert!(matches!(err, StoreError::QueueExists { .. }));
    s.put_queue(at(5), q("t:1"), QueueConfig::default())
        .expect("put");
    assert_eq!(
        s.get_queue(&q("t:1")).expect("queue").config,
        QueueConfig::default()
    );
    // A template's config is replaced for the queues it makes from then on.
    s.put_queue(at(6), q("t:*"), longer.clone())
        .expect("put template");
    assert_eq!(s.get_queue(&q("t:9")).expect("matches").config, longer);
}

/// A stage's queue is never summed into a template's family, even under the catch-all `*`:
/// stats publish it by name (`covered_stage_queues`), so the resource manager still sees it.
#[test]
fn stage_queues_stay_out_of_template_families() {
    let (_d, mut s) = open(ShardSettings::default());
    s.create_queue(at(0), q("*"), QueueConfig::default())
        .expect("catch-all template");
    // Queues the catch-all made, one of them named like a stage before the pipeline exists.
    for queue in ["demo.receive", "demo.receive", "inbox:a"] {
        s.enqueue(at(1), into(queue, "x")).expect("enqueue");
    }
    let sums = |s: &crate::shard::Shard| {
        let families = s.family_stats();
        let all = families
            .iter()
            .find(|f| f.name == "*")
            .expect("the family of *");
        (all.queues, all.stats.ready)
    };
    assert_eq!(sums(&s), (2, 3));
    assert!(s.covered_stage_queues().expect("stages").is_empty());

    s.apply_pipeline(at(2), pipeline("demo", &["receive", "deliver"]))
        .expect("apply");
    assert_eq!(sums(&s), (1, 1), "the stage's queue left the family");
    let stages: Vec<String> = s
        .covered_stage_queues()
        .expect("stages")
        .iter()
        .map(|n| n.to_string())
        .collect();
    assert_eq!(stages, ["demo.deliver", "demo.receive"]);
    assert!(
        s.list_uncovered_queues(100, "")
            .expect("list")
            .items
            .is_empty()
    );

    // The stage's own counts move; the family's do not.
    s.enqueue(at(3), into("demo.receive", "y"))
        .expect("enqueue");
    assert_eq!(sums(&s), (1, 1));
    let stage = s.queue_stats(at(3), &q("demo.receive")).expect("stats");
    assert_eq!(stage.ready, 3);

    // A template created after the pipeline leaves the stages out too.
    s.create_queue(at(4), q("demo.*"), QueueConfig::default())
        .expect("template over the stages");
    let demo = s.family_stats().into_iter().find(|f| f.name == "demo.*");
    assert_eq!(demo.map(|f| f.queues), Some(0));
}
