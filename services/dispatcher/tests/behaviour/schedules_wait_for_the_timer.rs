//! Store-and-forward: while the activation timer is down, a delayed event's schedule waits
//! in the dispatcher's outbox and is re-sent until the timer takes it; the event then
//! becomes ready (late, never lost). Meanwhile the shard's other hand-offs go on.

use std::time::{Duration, Instant};

use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1;
use cascade_proto::v1::enqueue_request::When;

use crate::cluster::{Cluster, PATIENCE, enqueue_request, payload_of};

#[tokio::test]
async fn schedules_wait_for_the_timer() {
    let mut cluster = Cluster::start_without_timer(1, |_| {}).await;
    cluster.create_queue("jobs", None).await;
    let mut request = enqueue_request("jobs", b"patient");
    request.when = Some(When::Delay(duration_to_proto(Duration::from_millis(100))));
    assert_eq!(cluster.enqueue(request).await.code, 0);

    // Well past its time, with no timer it stays delayed.
    assert!(
        cluster
            .take("jobs", 1, Duration::from_millis(400))
            .await
            .is_empty()
    );
    assert_eq!(cluster.stats("jobs").await.delayed, 1);

    let started = Instant::now();
    cluster.start_timer().await;
    let taken = cluster.take("jobs", 1, Duration::from_secs(5)).await;
    assert_eq!(taken.len(), 1);
    assert_eq!(payload_of(&taken[0]), b"patient");
    // Soon after the timer's start: one outbox retry (100ms here), the timer's store opening
    // and the firing, with room for a loaded CI machine.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    cluster.stop().await;
}

/// A backlog of schedules larger than one request goes out in several, each acknowledged
/// before the next is read, and every event becomes ready exactly once.
#[tokio::test]
async fn a_backlog_of_schedules_goes_out_in_several_requests() {
    const EVENTS: usize = 7;
    let mut cluster = Cluster::start_without_timer(1, |s| s.dispatcher.outbox_batch = 2).await;
    cluster.create_queue("jobs", None).await;
    for i in 0..EVENTS {
        let mut request = enqueue_request("jobs", format!("event {i}").as_bytes());
        request.when = Some(When::Delay(duration_to_proto(Duration::from_millis(100))));
        assert_eq!(cluster.enqueue(request).await.code, 0);
    }
    assert_eq!(cluster.stats("jobs").await.delayed, EVENTS as u64);

    cluster.start_timer().await;
    let mut payloads = Vec::new();
    while payloads.len() < EVENTS {
        let taken = cluster
            .take("jobs", EVENTS as u32, Duration::from_secs(5))
            .await;
        assert!(
            !taken.is_empty(),
            "only {} of {EVENTS} became ready",
            payloads.len()
        );
        payloads.extend(
            taken
                .iter()
                .map(|t| String::from_utf8_lossy(payload_of(t)).into_owned()),
        );
    }
    payloads.sort();
    let expected: Vec<String> = (0..EVENTS).map(|i| format!("event {i}")).collect();
    assert_eq!(payloads, expected);
    let stats = cluster.stats("jobs").await;
    assert_eq!(
        (stats.delayed, stats.ready, stats.leased),
        (0, 0, EVENTS as u64)
    );
    cluster.stop().await;
}

/// With the timer down and more schedules waiting than the pump reads at once, an advance
/// to another shard's queue, written after them, arrives all the same; once the timer is
/// back every delayed event becomes ready once.
#[tokio::test]
async fn a_timer_that_is_down_holds_up_no_other_hand_off() {
    const DELAYED: usize = 50;
    let mut cluster = Cluster::start_without_timer(2, |s| s.dispatcher.outbox_batch = 2).await;
    let here = cluster.queue_on(0, "jobs-");
    let there = cluster.queue_on(1, "next-");
    cluster.create_queue(&here, None).await;
    cluster.create_queue(&there, None).await;
    for i in 0..DELAYED {
        let mut request = enqueue_request(&here, format!("delayed {i}").as_bytes());
        request.when = Some(When::Delay(duration_to_proto(Duration::from_millis(100))));
        assert_eq!(cluster.enqueue(request).await.code, 0);
    }
    cluster.enqueue_now(&here, b"now").await;
    let taken = cluster.take(&here, 1, Duration::ZERO).await;
    assert_eq!(payload_of(&taken[0]), b"now");
    let advance = v1::completion::Outcome::Advance(v1::Advance {
        to: there.clone(),
        payload: Some(b"advanced".to_vec().into()),
        ..Default::default()
    });
    assert_eq!(cluster.complete(&taken[0], advance).await.code, 0);

    let arrived = cluster.take(&there, 1, PATIENCE).await;
    assert_eq!(arrived.len(), 1, "the advance waited behind the schedules");
    assert_eq!(payload_of(&arrived[0]), b"advanced");
    assert_eq!(cluster.stats(&here).await.delayed, DELAYED as u64);

    cluster.start_timer().await;
    let mut payloads = Vec::new();
    while payloads.len() < DELAYED {
        let taken = cluster.take(&here, DELAYED as u32, PATIENCE).await;
        assert!(!taken.is_empty(), "only {} became ready", payloads.len());
        payloads.extend(
            taken
                .iter()
                .map(|t| String::from_utf8_lossy(payload_of(t)).into_owned()),
        );
    }
    payloads.sort();
    let mut expected: Vec<String> = (0..DELAYED).map(|i| format!("delayed {i}")).collect();
    expected.sort();
    assert_eq!(payloads, expected);
    let stats = cluster.stats(&here).await;
    assert_eq!((stats.delayed, stats.ready), (0, 0));
    cluster.stop().await;
}
