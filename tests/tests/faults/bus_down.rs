//! NATS down: no process of the distributed mode can do its job, so each says so on
//! `/readyz` (503, naming the bus) instead of looking ready while its requests time out, and
//! each is ready again once NATS is back.

use std::time::{Duration, Instant};

use cascade_e2e::process::http_get_with;
use cascade_e2e::{Cluster, Mode};

const WITHIN: Duration = Duration::from_secs(60);

/// Waits until every process's `/readyz` answers `status` with a body holding `says`.
fn wait_all(cluster: &Cluster, status: u16, says: &str) {
    let deadline = Instant::now() + WITHIN;
    for (name, http) in cluster.admin_addrs() {
        loop {
            let answer = http_get_with(&http, "/readyz", &[]);
            if answer
                .as_ref()
                .is_some_and(|(code, _, body)| *code == status && body.contains(says))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: /readyz answered {answer:?}, waited for {status} with {says:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn every_process_is_unavailable_while_nats_is_down() {
    let mut cluster = Cluster::start(Mode::Distributed);
    let url = cluster.nats_url().expect("a NATS URL").to_owned();
    wait_all(&cluster, 200, "ready");

    cluster.kill_nats();
    let down = format!("not ready\nunavailable: bus: not connected to NATS at {url}");
    wait_all(&cluster, 503, &down);

    cluster.restart_nats();
    wait_all(&cluster, 200, "ready");
}
