//! `due_counts` (the resource manager's question): the scheduled entries of the queues asked
//! about due by each bound, per queue, with empty trailing buckets left out; bounds out of
//! order are refused.

use std::time::Duration;

use cascade_bus::subject;
use cascade_core::{Clock, SystemClock};
use cascade_proto::bus::v1::{
    DueBucket, DueCountsRequest, TimerReply, TimerRequest, timer_reply, timer_request,
};
use cascade_proto::convert::timestamp_to_proto;

use crate::harness::{Harness, PATIENCE};

async fn ask(timer: &Harness, bounds: Vec<prost_types::Timestamp>) -> TimerReply {
    let request = TimerRequest {
        op: Some(timer_request::Op::DueCounts(DueCountsRequest {
            bounds,
            queues: vec!["jobs".into(), "other".into()],
        })),
    };
    let subject = subject::timer(&timer.settings.cluster.name, 0);
    timer
        .bus
        .call(&subject, request, PATIENCE)
        .await
        .expect("the timer answers")
}

#[tokio::test]
async fn due_counts() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    for (id, minutes) in [("a", 10), ("b", 20), ("c", 25), ("late", 90)] {
        timer.schedule(id, Duration::from_secs(minutes * 60)).await;
    }
    let now = SystemClock.now();
    let bound =
        |minutes: u64| timestamp_to_proto(now.saturating_add(Duration::from_secs(minutes * 60)));
    let reply = ask(&timer, vec![bound(15), bound(30), bound(60)]).await;
    let Some(timer_reply::Result::DueCounts(counts)) = reply.result else {
        panic!("due counts expected: {reply:?}");
    };
    assert_eq!(counts.queues.len(), 1, "{counts:?}");
    assert_eq!(counts.queues[0].queue, "jobs");
    assert_eq!(
        counts.queues[0].buckets,
        vec![
            DueBucket {
                until: Some(bound(15)),
                count: 1
            },
            DueBucket {
                until: Some(bound(30)),
                count: 2
            },
        ],
        "the empty last bucket is left out; `late` is past the last bound"
    );

    let reply = ask(&timer, vec![bound(30), bound(15)]).await;
    let Some(timer_reply::Result::Error(status)) = reply.result else {
        panic!("bounds out of order are refused: {reply:?}");
    };
    assert_eq!(status.code, 3, "INVALID_ARGUMENT: {status:?}");
    assert!(status.message.contains("bounds[1]"), "{status:?}");
    timer.stop().await;
}
