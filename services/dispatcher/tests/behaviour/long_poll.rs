//! A long-poll take waits for an event to arrive in its queue and answers as soon as it
//! does; with nothing arriving it answers empty when its wait ends; a shutdown ends the
//! wait at once.

use std::time::{Duration, Instant};

use crate::cluster::{Cluster, payload_of};

#[tokio::test]
async fn long_poll() {
    let mut cluster = Cluster::start(1).await;
    cluster.create_queue("inbox", None).await;

    let started = Instant::now();
    assert!(
        cluster
            .take("inbox", 1, Duration::from_millis(200))
            .await
            .is_empty()
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200),
        "answered after {waited:?}"
    );

    let (taken, enqueued_at) =
        tokio::join!(cluster.take("inbox", 5, Duration::from_secs(5)), async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let at = Instant::now();
            cluster.enqueue_now("inbox", b"arrived").await;
            at
        });
    assert_eq!(taken.len(), 1);
    assert_eq!(payload_of(&taken[0]), b"arrived");
    // Woken by the arrival, long before its 5 s wait ends (a loose bound: how fast is for the
    // benchmarks to say, and a loaded CI machine's fsync alone can take tens of ms).
    let latency = enqueued_at.elapsed();
    assert!(
        latency < Duration::from_secs(2),
        "woken {latency:?} after the enqueue"
    );

    // A long poll in flight when the shard stops answers instead of holding the shutdown.
    let waiting = {
        let bus = cluster.bus.clone();
        let subject = cascade_bus::subject::dispatcher(&cluster.settings.cluster.name, 0);
        tokio::spawn(async move {
            let request = cascade_proto::bus::v1::DispatcherRequest {
                op: Some(cascade_proto::bus::v1::dispatcher_request::Op::Take(
                    cascade_proto::v1::TakeRequest {
                        queue: "inbox".into(),
                        max_events: 1,
                        wait: Some(cascade_proto::convert::duration_to_proto(
                            Duration::from_secs(30),
                        )),
                        ..Default::default()
                    },
                )),
            };
            bus.call::<_, cascade_proto::bus::v1::DispatcherReply>(
                &subject,
                request,
                Duration::from_secs(40),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopping = Instant::now();
    cluster.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "shutdown waited for the long poll"
    );
    let reply = waiting
        .await
        .expect("join")
        .expect("the long poll was answered");
    assert!(reply.result.is_some());
}
