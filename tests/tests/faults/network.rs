//! Network faults between the services: in the distributed mode every service reaches NATS
//! through the test's own TCP proxy, which adds latency, stalls the traffic (bytes held, as
//! when packets are lost and TCP retransmits) and cuts every connection, while producers,
//! consumers and a 3-stage pipeline run. The history must show nothing lost, nothing
//! delivered again after its ack, nothing unexpected, early or corrupt. And a client's own
//! connection to the gateway, gone silent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_e2e::load::Load;
use cascade_e2e::proxy::{Condition, Proxy};
use cascade_e2e::{Cluster, Mode};

use crate::SHORT_REQUEST_TIMEOUT;

/// Longer than the bus's request timeout, so that requests in flight time out.
const STALL: Duration = Duration::from_secs(3);

/// A fault's name and how the proxy plays it.
type Fault = (&'static str, fn(&Proxy));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_stalls_and_cut_connections_to_nats_lose_and_repeat_nothing() {
    let runtime = tokio::runtime::Handle::current();
    let proxy: Arc<Mutex<Option<Proxy>>> = Arc::default();
    let held = Arc::clone(&proxy);
    let mut cluster = tokio::task::spawn_blocking(move || {
        let route = |nats: &str| {
            let upstream = nats.trim_start_matches("nats://");
            let started = runtime.block_on(Proxy::start(upstream));
            let url = format!("nats://{}", started.addr());
            *held.lock().expect("the proxy") = Some(started);
            url
        };
        Cluster::start_routed(Mode::Distributed, None, &SHORT_REQUEST_TIMEOUT, &route)
    })
    .await
    .expect("start the cluster");
    let proxy = proxy.lock().expect("the proxy").take().expect("a proxy");
    let load = Load::start(&mut cluster, "net").await;

    let faults: [Fault; 4] = [
        ("200 ms of latency", |p| {
            p.set(Condition::Delay(Duration::from_millis(200)))
        }),
        ("a stall", |p| p.set(Condition::Stall)),
        ("a cut", |p| p.cut()),
        ("a cut during a stall", |p| {
            p.set(Condition::Stall);
            p.cut();
        }),
    ];
    for &(name, fault) in faults.iter().cycle().take(faults.len() * crate::rounds()) {
        let mut connections = 0;
        let took = load
            .play_fault(&mut cluster, Duration::ZERO, async |_| {
                connections = proxy.accepted();
                fault(&proxy);
                // Held for a while whatever the fault (a cut is over at once; new
                // connections pass).
                tokio::time::sleep(STALL).await;
                proxy.set(Condition::Pass);
            })
            .await;
        let reconnected = proxy.accepted() - connections;
        eprintln!("{name}: serving again {took:?} after it began; {reconnected} connections made");
        if name.contains("cut") {
            assert!(reconnected > 0, "{name}: the services did not reconnect");
        }
    }
    load.check_and_stop(cluster, Duration::ZERO).await;
}

/// A client's connection to the gateway goes silent (a stall: no reset ever comes, as when
/// the gateway's machine is gone). A long poll waiting on it fails with UNAVAILABLE once a
/// keepalive ping goes unanswered, instead of waiting for TCP to give up retransmitting, and
/// the next call connects again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_connection_gone_silent_fails_and_the_next_connects_again() {
    use cascade_client::{Client, ClientOptions, api};
    use cascade_e2e::scenarios::{config, create, item, seconds};

    let cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Standalone))
        .await
        .expect("start");
    let proxy = Proxy::start(cluster.gateway()).await;
    let options = ClientOptions {
        keepalive: Some(Duration::from_secs(1)),
        ..ClientOptions::default()
    };
    let client = Client::connect_with(&format!("http://{}", proxy.addr()), &options)
        .await
        .expect("connect through the proxy");
    create(&client, "silent", config(30.0, 3)).await;

    proxy.set(Condition::Stall);
    let mut worker = client.worker();
    let poll = worker.take(api::TakeRequest {
        queue: "silent".into(),
        max_events: 1,
        wait: Some(seconds(600.0)),
        ..Default::default()
    });
    // Only a bound on a hang: without pings the call waits as long as the connection seems open.
    let answer = tokio::time::timeout(Duration::from_secs(60), poll)
        .await
        .expect("the poll still waits on a silent connection");
    let status = answer.expect_err("nothing answers through a stalled connection");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    proxy.set(Condition::Pass);
    // The first call may still meet the closed connection (CANCELLED) before the channel has
    // seen it close; a call after it connects again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while let Err(status) = client.ingest().enqueue(item("silent", "after")).await {
        assert!(
            std::time::Instant::now() < deadline,
            "not connected again: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(proxy.accepted() >= 2, "connected again");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
