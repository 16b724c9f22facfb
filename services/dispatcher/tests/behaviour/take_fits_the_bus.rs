//! A take answers with as many events as fit in one bus message — fewer rather than a
//! failure — and the events that did not fit are not left leased: they are taken next.

use std::collections::HashSet;
use std::time::Duration;

use cascade_bus::Bus;

use crate::cluster::Cluster;

const MAX_PAYLOAD: usize = 64 * 1024;
const EVENT_BYTES: usize = 20 * 1024;
const EVENTS: usize = 10;

#[tokio::test]
async fn take_fits_the_bus() {
    let mut cluster = Cluster::start_on(1, Bus::local_with_max_payload(MAX_PAYLOAD)).await;
    cluster.create_queue("big", None).await;
    for i in 0..EVENTS {
        cluster
            .enqueue_now("big", &vec![i as u8; EVENT_BYTES])
            .await;
    }

    let first = cluster.take("big", EVENTS as u32, Duration::ZERO).await;
    assert!(
        !first.is_empty() && first.len() < EVENTS,
        "took {}",
        first.len()
    );
    let stats = cluster.stats("big").await;
    assert_eq!(
        (stats.leased, stats.ready),
        (first.len() as u64, (EVENTS - first.len()) as u64)
    );

    let mut seen: HashSet<String> = first
        .iter()
        .map(|e| e.event.as_ref().expect("event").id.clone())
        .collect();
    for _ in 0..EVENTS {
        let more = cluster.take("big", EVENTS as u32, Duration::ZERO).await;
        for leased in &more {
            let id = leased.event.as_ref().expect("event").id.clone();
            assert!(seen.insert(id), "an event was handed out twice");
        }
        if seen.len() == EVENTS {
            break;
        }
    }
    assert_eq!(seen.len(), EVENTS);
    let stats = cluster.stats("big").await;
    assert_eq!((stats.leased, stats.ready), (EVENTS as u64, 0));
    cluster.stop().await;
}
