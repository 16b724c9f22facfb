//! A long-poll take waits for an event to arrive in its queue and answers as soon as it
//! does; with nothing arriving it answers empty when its wait ends; a shutdown ends the
//! wait at once.

use std::time::{Duration, Instant};

use crate::cluster::{Cluster, completion, payload_of};

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

/// A long poll carrying the release of the only event it could take: the take finds nothing,
/// the release makes the event ready, and the poll answers with it and with the release's
/// result, kept across its waits.
#[tokio::test]
async fn a_long_poll_takes_what_its_own_completion_released() {
    let cluster = Cluster::start(1).await;
    cluster.create_queue("inbox", None).await;
    cluster.enqueue_now("inbox", b"again").await;
    let first = cluster.take("inbox", 1, Duration::ZERO).await;
    assert_eq!(first.len(), 1);
    let release = cascade_proto::v1::completion::Outcome::Release(cascade_proto::v1::Release {});
    let answer = cluster
        .take_completing(
            "inbox",
            1,
            Duration::from_secs(30),
            vec![completion(&first[0], release)],
        )
        .await;
    assert_eq!(answer.completions.len(), 1);
    assert_eq!(answer.completions[0].code, 0, "{:?}", answer.completions);
    assert_eq!(answer.events.len(), 1);
    assert_eq!(payload_of(&answer.events[0]), b"again");
    let event = answer.events[0].event.as_ref().expect("an event");
    assert_eq!(event.attempts, 2);
}
