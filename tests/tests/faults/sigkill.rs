//! SIGKILL loops while producers, consumers and a 3-stage pipeline run: `cascade standalone`
//! killed and started again on its data; in the distributed mode, each stateful service in
//! turn (a dispatcher, an activation-timer) and the NATS server itself. After the last
//! restart the load drains and the history must show nothing lost, nothing delivered
//! again after its ack, nothing unexpected, early or corrupt.

use std::time::Duration;

use cascade_e2e::load::Load;
use cascade_e2e::{Cluster, Mode, Part};
use tokio::time::Instant;

/// Deliveries (consumers' and the handler's) between two kills, so that each kill lands
/// in a running load, wherever it has got to.
const BETWEEN_KILLS: usize = 300;
const PROGRESS_WITHIN: Duration = Duration::from_secs(60);
const SERVING_WITHIN: Duration = Duration::from_secs(60);
const DRAIN_WITHIN: Duration = Duration::from_secs(120);

/// A gateway's request lost with a killed dispatcher holds that shard's requests back for
/// `bus.request_timeout` (10 s by default): shorter here, so that a kill costs little time.
const ENV: [(&str, &str); 1] = [("CASCADE__BUS__REQUEST_TIMEOUT", "1s")];

async fn crash_loop(mode: Mode, base: &str, kills: &[Part]) {
    let mut cluster = tokio::task::spawn_blocking(move || Cluster::start_with(mode, None, &ENV))
        .await
        .expect("start the cluster");
    let load = Load::start(&mut cluster, base).await;
    for &part in kills.iter().cycle().take(kills.len() * crate::rounds()) {
        load.wait_for_progress(load.progress(), BETWEEN_KILLS, PROGRESS_WITHIN)
            .await;
        let start = Instant::now();
        tokio::task::block_in_place(|| cluster.crash_and_restart(part));
        load.wait_serving(&cluster, SERVING_WITHIN).await;
        load.history.fault(start, Instant::now());
        eprintln!("{part:?} killed, serving again after {:?}", start.elapsed());
    }
    load.wait_for_progress(load.progress(), BETWEEN_KILLS, PROGRESS_WITHIN)
        .await;
    let counts = load.finish(&cluster, DRAIN_WITHIN, Duration::ZERO).await;
    eprintln!("{counts}");
    assert!(counts.clean(), "{counts}");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_killed_again_and_again_loses_and_repeats_nothing() {
    crash_loop(Mode::Standalone, "kill-sa", &[Part::Dispatcher(0); 4]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stateful_service_and_nats_killed_in_turn_lose_and_repeat_nothing() {
    let kills = [
        Part::Dispatcher(0),
        Part::Timer(1),
        Part::Nats,
        Part::Dispatcher(1),
        Part::Timer(0),
        Part::Nats,
    ];
    crash_loop(Mode::Distributed, "kill-dist", &kills).await;
}
