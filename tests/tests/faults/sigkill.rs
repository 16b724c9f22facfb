//! SIGKILL loops while producers, consumers and a 3-stage pipeline run: `cascade standalone`
//! killed and started again on its data; in the distributed mode, each stateful service in
//! turn (a dispatcher, an activation-timer) and the NATS server itself. After the last
//! restart the load drains and the history must show nothing lost, nothing delivered
//! again after its ack, nothing unexpected, early or corrupt.

use std::time::Duration;

use cascade_e2e::load::Load;
use cascade_e2e::{Cluster, Mode, Part};

use crate::SHORT_REQUEST_TIMEOUT;

async fn crash_loop(mode: Mode, base: &str, kills: &[Part]) {
    let mut cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(mode, None, &SHORT_REQUEST_TIMEOUT)
    })
    .await
    .expect("start the cluster");
    let load = Load::start(&mut cluster, base).await;
    for &part in kills.iter().cycle().take(kills.len() * crate::rounds()) {
        let took = load
            .play_fault(&mut cluster, Duration::ZERO, async |cluster| {
                tokio::task::block_in_place(|| cluster.crash_and_restart(part));
            })
            .await;
        eprintln!("{part:?} killed, serving again after {took:?}");
    }
    load.check_and_stop(cluster, Duration::ZERO).await;
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
