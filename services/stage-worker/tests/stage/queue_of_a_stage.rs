//! A queue given by name that is a pipeline's stage (`--queue orders.check`) is served as
//! that stage, even when the pipeline is applied after the worker started: its events
//! advance to the next stage, where as a plain queue they would be acked and skip the rest
//! of the pipeline. A queue of that shape that is no stage stays a plain queue.

use cascade_proto::v1;
use cascade_service::shutdown_channel;

use crate::harness::{Cascade, stage_config, wait_until};

#[tokio::test]
async fn a_stage_named_as_a_queue_advances_its_events() {
    let cascade = Cascade::start().await;
    // The queues exist before their workers start (a worker stops on a queue that does
    // not), and the pipeline comes after: `orders.check` is a plain queue until then.
    let lease = std::time::Duration::from_secs(5);
    for queue in ["orders.check", "emails.high"] {
        cascade
            .create_queue(queue, crate::harness::queue_config(lease))
            .await;
    }
    let (trigger, shutdown) = shutdown_channel();
    let mut workers = tokio::task::JoinSet::new();
    for queue in ["orders.check", "emails.high"] {
        let config = stage_config(&cascade, queue, "builtin:noop");
        workers.spawn(cascade_stage_worker::run(config, shutdown.clone()));
    }
    cascade
        .apply_pipeline("orders", &[("check", None), ("ship", None)])
        .await;
    cascade
        .client
        .ingest()
        .enqueue(v1::EnqueueRequest {
            pipeline: "orders".into(),
            payload: b"order".to_vec().into(),
            ..Default::default()
        })
        .await
        .expect("enqueue by pipeline");
    cascade.enqueue("emails.high", b"mail", &[]).await;

    wait_until("the order reached the next stage", 10, || async {
        cascade.stats("orders.ship").await.ready == 1
    })
    .await;
    assert_eq!(cascade.stats("orders.check").await.completed_total, 1);
    cascade.wait_for_completed("emails.high", 1).await;
    trigger.trigger();
    while let Some(stopped) = workers.join_next().await {
        stopped
            .expect("its task")
            .expect("the worker stopped cleanly");
    }
    cascade.stop().await;
}
