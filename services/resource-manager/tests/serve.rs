//! `serve`, the `cascade-resource-manager` process's entry: it refuses the `local` executor
//! (standalone's) with the key named, and with `none` it runs until shutdown and reports
//! ready meanwhile.

use std::time::Duration;

use cascade_bus::Bus;
use cascade_resource_manager::{Board, ExecutorKind, ServeDeps, serve};
use cascade_service::{Readiness, Settings, shutdown_channel};
use cascade_telemetry::Metrics;

fn deps(readiness: &Readiness) -> ServeDeps {
    ServeDeps {
        bus: Bus::local(),
        metrics: Metrics::new(),
        board: Board::new(),
        readiness: readiness.clone(),
    }
}

#[tokio::test]
async fn the_local_executor_is_refused_with_its_key() {
    let (_trigger, shutdown) = shutdown_channel();
    let err = serve(Settings::default(), deps(&Readiness::default()), shutdown)
        .await
        .expect_err("local is standalone's");
    let text = err.to_string();
    assert!(text.starts_with("resource_manager.executor: "), "{text}");
    assert!(text.contains("\"kubernetes\" or \"none\""), "{text}");
}

#[tokio::test]
async fn with_no_executor_it_serves_until_shutdown() {
    let mut settings = Settings::default();
    settings.resource_manager.executor = ExecutorKind::None;
    settings.resource_manager.interval = Duration::from_millis(100);
    settings.resource_manager.throughput_window = Duration::from_secs(1);
    settings.dispatcher.stats_interval = Duration::from_millis(100);
    let readiness = Readiness::default();
    let (trigger, shutdown) = shutdown_channel();
    let served = tokio::spawn(serve(settings, deps(&readiness), shutdown));
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    while !readiness.is_ready() {
        assert!(tokio::time::Instant::now() < give_up, "never ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    trigger.trigger();
    let ended = tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("stops after shutdown")
        .expect("no panic");
    assert_eq!(ended, Ok(()));
    assert!(!readiness.is_ready(), "not ready once stopped");
}
