//! A take answers with as many events as fit in one bus message — fewer rather than a
//! failure — and the events that did not fit are not left leased: they are taken next.

use std::collections::HashSet;
use std::time::Duration;

use cascade_bus::Bus;

use crate::cluster::{Cluster, ack, completion, payload_of};

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

/// A take carrying completions keeps room in its reply for their results. When that room is
/// what the next event lacks, the completions still apply and the event waits for the next
/// take, which has the whole reply: the take does not fail.
#[tokio::test]
async fn completions_carried_make_room_for_their_results() {
    let mut cluster = Cluster::start_on(1, Bus::local_with_max_payload(MAX_PAYLOAD)).await;
    cluster.create_queue("mixed", None).await;
    cluster.enqueue_now("mixed", b"small").await;
    // Fits a reply of its own (the bus's size less the shard's 4 KiB for the envelope), not
    // one beside 39 results of about a hundred bytes.
    let big = vec![7u8; MAX_PAYLOAD - 5 * 1024];
    cluster.enqueue_now("mixed", &big).await;
    let small = cluster.take("mixed", 1, Duration::ZERO).await;
    assert_eq!(small.len(), 1);
    // The first acks it; the others find its lease gone. Their results need more room than
    // the big event leaves.
    let acks = vec![completion(&small[0], ack()); 40];
    let answer = cluster
        .take_completing("mixed", 1, Duration::ZERO, acks)
        .await;
    assert!(answer.events.is_empty(), "took {}", answer.events.len());
    let codes: Vec<i32> = answer.completions.iter().map(|r| r.code).collect();
    let stale = 9; // FAILED_PRECONDITION
    assert_eq!(codes[0], 0, "{:?}", answer.completions[0]);
    assert!(codes[1..].iter().all(|&c| c == stale), "{codes:?}");
    assert_eq!(codes.len(), 40);
    let next = cluster.take("mixed", 1, Duration::ZERO).await;
    assert_eq!(next.len(), 1);
    assert_eq!(payload_of(&next[0]), big.as_slice());
    let stats = cluster.stats("mixed").await;
    assert_eq!(
        (stats.completed_total, stats.leased, stats.ready),
        (1, 1, 0)
    );
    cluster.stop().await;
}

/// Takes that carry the acks of the last batch learn how many events fit a reply like any
/// other: an event is cut from a reply (and released, its attempt counted) at most once.
#[tokio::test]
async fn takes_carrying_acks_learn_what_fits() {
    let mut cluster = Cluster::start_on(1, Bus::local_with_max_payload(MAX_PAYLOAD)).await;
    cluster.create_queue("carry", None).await;
    cluster.enqueue_now("carry", b"small").await;
    for i in 0..EVENTS {
        cluster
            .enqueue_now("carry", &vec![i as u8; EVENT_BYTES])
            .await;
    }
    let mut held = cluster.take("carry", 1, Duration::ZERO).await;
    let mut attempts = Vec::new();
    for _ in 0..EVENTS {
        let acks = held
            .iter()
            .map(|leased| completion(leased, ack()))
            .collect();
        let answer = cluster
            .take_completing("carry", EVENTS as u32, Duration::ZERO, acks)
            .await;
        assert!(
            answer.completions.iter().all(|r| r.code == 0),
            "{:?}",
            answer.completions
        );
        held = answer.events;
        attempts.extend(
            held.iter()
                .map(|leased| leased.event.as_ref().expect("event").attempts),
        );
        if attempts.len() == EVENTS {
            break;
        }
    }
    assert_eq!(attempts.len(), EVENTS);
    assert!(attempts.iter().all(|&a| a <= 2), "attempts: {attempts:?}");
    cluster.stop().await;
}
