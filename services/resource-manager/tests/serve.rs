//! `serve`, the `cascade-resource-manager` process's entry: it refuses the `local` executor
//! (standalone's) with the key named, and with `none` it runs until shutdown and reports
//! ready once a dispatcher shard has listed the pipelines. The shards are played by the
//! test on the in-process bus: a pipeline that cannot be read does not keep the others
//! unmanaged, and a shard that answers with an error is passed over for the next.

use std::time::Duration;

use cascade_bus::{Bus, subject};
use cascade_proto::bus::v1::{DispatcherReply, Status, dispatcher_reply};
use cascade_proto::v1::{self, ListPipelinesResponse, handler_spec};
use cascade_resource_manager::{Board, ExecutorKind, ResourceManagerError, ServeDeps, serve};
use cascade_service::{Readiness, Settings, ShutdownTrigger, shutdown_channel};
use cascade_telemetry::Metrics;
use tokio::task::JoinHandle;

const PATIENCE: Duration = Duration::from_secs(10);

fn deps(bus: &Bus, board: &Board, readiness: &Readiness) -> ServeDeps {
    ServeDeps {
        bus: bus.clone(),
        metrics: Metrics::new(),
        board: board.clone(),
        readiness: readiness.clone(),
    }
}

/// The `none` executor, deciding every 100 ms.
fn settings() -> Settings {
    let mut settings = Settings::default();
    settings.resource_manager.executor = ExecutorKind::None;
    settings.resource_manager.interval = Duration::from_millis(100);
    settings.resource_manager.throughput_window = Duration::from_secs(1);
    settings.dispatcher.stats_interval = Duration::from_millis(100);
    settings
}

/// A pipeline of one stage, `charge`; without a handler it cannot be read.
fn pipeline(name: &str, handler: Option<handler_spec::Kind>) -> v1::Pipeline {
    v1::Pipeline {
        name: name.into(),
        stages: vec![v1::Stage {
            name: "charge".into(),
            handler: Some(v1::HandlerSpec {
                kind: handler,
                ..v1::HandlerSpec::default()
            }),
            ..v1::Stage::default()
        }],
    }
}

fn listed(pipelines: Vec<v1::Pipeline>) -> dispatcher_reply::Result {
    dispatcher_reply::Result::Pipelines(ListPipelinesResponse { pipelines })
}

fn refused() -> dispatcher_reply::Result {
    dispatcher_reply::Result::Error(Status {
        code: 14,
        message: "not now".into(),
    })
}

/// Plays dispatcher shard `shard` of `settings.cluster`: answers every request with `answer`.
async fn play_shard(
    bus: &Bus,
    settings: &Settings,
    shard: u32,
    answer: dispatcher_reply::Result,
) -> JoinHandle<()> {
    let subject = subject::dispatcher(&settings.cluster.name, shard);
    let mut requests = bus.subscribe(&subject).await.expect("subscribe as a shard");
    tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            let reply = DispatcherReply {
                result: Some(answer.clone()),
            };
            let _ = message.respond_with(reply).await;
        }
    })
}

/// Stops `serve` and checks that it ended well.
async fn shut_down(trigger: ShutdownTrigger, served: JoinHandle<Result<(), ResourceManagerError>>) {
    trigger.trigger();
    let ended = tokio::time::timeout(PATIENCE, served)
        .await
        .expect("stops after shutdown")
        .expect("no panic");
    assert_eq!(ended, Ok(()));
}

/// Waits until `done` says yes, polling; panics after [`PATIENCE`] with `what`.
async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(tokio::time::Instant::now() < give_up, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_local_executor_is_refused_with_its_key() {
    let (_trigger, shutdown) = shutdown_channel();
    let deps = deps(&Bus::local(), &Board::new(), &Readiness::default());
    let err = serve(Settings::default(), deps, shutdown)
        .await
        .expect_err("local is standalone's");
    let text = err.to_string();
    assert!(text.starts_with("resource_manager.executor: "), "{text}");
    assert!(text.contains("\"kubernetes\" or \"none\""), "{text}");
}

#[tokio::test]
async fn with_no_executor_it_serves_until_shutdown() {
    let settings = settings();
    let (bus, readiness) = (Bus::local(), Readiness::default());
    let noop = Some(handler_spec::Kind::Builtin("noop".into()));
    let shard = play_shard(&bus, &settings, 0, listed(vec![pipeline("orders", noop)])).await;
    let (trigger, shutdown) = shutdown_channel();
    let served = tokio::spawn(serve(
        settings,
        deps(&bus, &Board::new(), &readiness),
        shutdown,
    ));
    wait_for("ready", || readiness.is_ready()).await;
    shut_down(trigger, served).await;
    assert!(!readiness.is_ready(), "not ready once stopped");
    shard.abort();
}

#[tokio::test]
async fn it_is_not_ready_until_a_shard_has_listed_the_pipelines() {
    let settings = settings();
    let (bus, readiness) = (Bus::local(), Readiness::default());
    let (trigger, shutdown) = shutdown_channel();
    let served = tokio::spawn(serve(
        settings.clone(),
        deps(&bus, &Board::new(), &readiness),
        shutdown,
    ));
    // Several intervals of lists that fail: no shard answers yet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!readiness.is_ready(), "ready before any pipeline list");
    let shard = play_shard(&bus, &settings, 0, listed(Vec::new())).await;
    wait_for("ready once a shard answers", || readiness.is_ready()).await;
    shut_down(trigger, served).await;
    assert!(!readiness.is_ready(), "not ready once stopped");
    shard.abort();
}

#[tokio::test]
async fn a_pipeline_that_cannot_be_read_does_not_keep_the_others_unmanaged() {
    let settings = settings();
    let (bus, board, readiness) = (Bus::local(), Board::new(), Readiness::default());
    let noop = Some(handler_spec::Kind::Builtin("noop".into()));
    let pipelines = vec![pipeline("broken", None), pipeline("orders", noop)];
    let shard = play_shard(&bus, &settings, 0, listed(pipelines)).await;
    let (trigger, shutdown) = shutdown_channel();
    let served = tokio::spawn(serve(settings, deps(&bus, &board, &readiness), shutdown));
    wait_for("orders.charge is decided", || {
        board.render().contains("orders.charge")
    })
    .await;
    let table = board.render();
    assert!(!table.contains("broken.charge"), "{table}");
    shut_down(trigger, served).await;
    shard.abort();
}

#[tokio::test]
async fn a_shard_that_answers_with_an_error_is_passed_over_for_the_next() {
    let mut settings = settings();
    settings.cluster.shards = 2;
    let (bus, board, readiness) = (Bus::local(), Board::new(), Readiness::default());
    let noop = Some(handler_spec::Kind::Builtin("noop".into()));
    let first = play_shard(&bus, &settings, 0, refused()).await;
    let second = play_shard(&bus, &settings, 1, listed(vec![pipeline("orders", noop)])).await;
    let (trigger, shutdown) = shutdown_channel();
    let served = tokio::spawn(serve(settings, deps(&bus, &board, &readiness), shutdown));
    wait_for("orders.charge is decided from shard 1's list", || {
        board.render().contains("orders.charge")
    })
    .await;
    assert!(readiness.is_ready(), "shard 1's list makes it ready");
    shut_down(trigger, served).await;
    first.abort();
    second.abort();
}
