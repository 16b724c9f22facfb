//! No event is ever stuck: names whose dead-letter queue could not exist are refused up
//! front, and an event whose move on fails anyway (a queue from before that check, a hand-off
//! its queue refuses) is kept deliverable or dead-lettered, counted and logged.

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::{EventState, Outcome, QueueConfig, QueueName};

use super::observe_tests::observed;
use super::tests::{at, cmd, open, q};
use super::*;
use crate::codec::records::Delivery;
use crate::error::StoreError;

fn long(len: usize) -> QueueName {
    q(&"q".repeat(len))
}

fn invalid(result: Result<impl std::fmt::Debug, StoreError>) -> String {
    match result {
        Err(StoreError::Invalid(e)) => e.to_string(),
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

#[test]
fn names_without_room_for_their_dead_letter_queue_are_refused() {
    let (_d, mut s) = open(ShardSettings::default());
    let now = at(0);
    s.create_queue(now, long(196), QueueConfig::default())
        .expect("<196 bytes>.dlq is 200 bytes");
    let err = invalid(s.create_queue(now, long(197), QueueConfig::default()));
    assert!(err.contains("201 bytes, over 200"), "{err}");
    let own_dlq = QueueConfig {
        dead_letter_queue: Some(q("graveyard")),
        ..QueueConfig::default()
    };
    s.create_queue(now, long(200), own_dlq.clone())
        .expect("a configured dead-letter queue");
    let template = q(&format!("{}*", "t".repeat(196)));
    let err = invalid(s.create_queue(now, template, QueueConfig::default()));
    assert!(err.contains("at most 195 bytes"), "{err}");

    // A template admits names its queues' dead-letter queues cannot follow: refused at enqueue.
    s.create_queue(now, q("t:*"), QueueConfig::default())
        .expect("template");
    let enqueue = |s: &mut Shard, name: &QueueName| {
        let mut c = cmd("x");
        c.queue = name.clone();
        s.enqueue(now, c)
    };
    enqueue(&mut s, &q(&format!("t:{}", "u".repeat(194)))).expect("196 bytes");
    let too_long = q(&format!("t:{}", "u".repeat(195)));
    let err = invalid(enqueue(&mut s, &too_long));
    assert!(err.contains("configure dead_letter_queue"), "{err}");
}

/// A queue stored before names were checked: its `<name>.dlq` cannot exist.
fn legacy_queue(s: &mut Shard, name: &QueueName, config: &QueueConfig) {
    let mut txn = s.st.begin(&s.kv);
    let rec = s.st.write_queue(&mut txn, at(0), name, config, None);
    assert_eq!(rec.kind, crate::codec::records::QueueKind::Explicit);
    let batch = s.st.seal(txn);
    s.st.commit(&mut s.kv, batch);
}

#[test]
fn an_expired_lease_that_cannot_be_dead_lettered_goes_back_and_holds_up_no_other() {
    let (recorder, _d, mut s) = observed();
    let once = QueueConfig {
        max_attempts: 1,
        lease: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    let legacy = long(200);
    legacy_queue(&mut s, &legacy, &once);
    s.create_queue(at(0), q("jobs"), once.clone())
        .expect("create");
    let mut ids = Vec::new();
    for queue in [&legacy, &q("jobs")] {
        let mut c = cmd("x");
        c.queue = queue.clone();
        ids.push(s.enqueue(at(0), c).expect("enqueue").id);
        s.take(at(0), queue, 1, None).expect("take");
    }
    recorder.take();
    // Both leases end in one tick; the legacy one is due first (its queue was made first).
    assert_eq!(s.expire_leases(at(2), 100).expect("expire"), 2);
    let observed = recorder.take();
    assert!(
        observed.contains(&format!("move_failed {legacy} DeadLetter")),
        "{observed:?}"
    );
    let stuck = s.queue_stats(at(2), &legacy).expect("stats");
    assert_eq!(
        (stuck.leased, stuck.delayed),
        (0, 1),
        "back, after a backoff"
    );
    let jobs = s.queue_stats(at(2), &q("jobs")).expect("stats");
    assert_eq!(
        (jobs.leased, jobs.dead_lettered),
        (0, 1),
        "the other moved on"
    );
    let back = s.get(&legacy, ids[0].as_str()).expect("get");
    assert_eq!(back.state, EventState::Delayed);
    assert!(back.activate_at > at(2), "after the queue's backoff");
}

fn delivery(queue: &QueueName, id: &str) -> Delivery {
    Delivery {
        queue: queue.clone(),
        id: cascade_core::EventId::parse(id).expect("id"),
        payload: b"p".to_vec().into(),
        headers: BTreeMap::new(),
        activate_at: at(0),
        created_at: at(0),
    }
}

#[test]
fn a_refused_hand_off_is_dead_lettered_by_the_receiver_and_holds_up_no_other() {
    let (recorder, _d, mut s) = observed();
    s.create_queue(at(0), q("p.next"), QueueConfig::default())
        .expect("create");
    let mut taken = cmd("x");
    taken.queue = q("p.next");
    taken.id = Some(cascade_core::EventId::parse("e1").expect("id"));
    s.enqueue(at(0), taken).expect("enqueue");
    let gone = long(198);
    let batch = vec![
        (1, delivery(&q("p.gone"), "a")),
        (2, delivery(&q("p.next"), "e1")),
        (3, delivery(&gone, "b")),
        (4, delivery(&q("p.next"), "c")),
    ];
    assert_eq!(s.receive(at(1), 3, batch).expect("receive"), 4);
    let next = s.queue_stats(at(1), &q("p.next")).expect("stats");
    assert_eq!(next.ready, 2, "e1 as before, and c");
    let gone_dlq = s.list_dead_letters(&q("p.gone.dlq"), 10, "").expect("list");
    assert_eq!(gone_dlq.items.len(), 1);
    let reason = &gone_dlq.items[0].headers[DEAD_LETTER_REASON];
    assert!(
        reason.starts_with("hand-off refused: queue 'p.gone' does not exist"),
        "{reason}"
    );
    assert_eq!(gone_dlq.items[0].headers[DEAD_LETTER_FROM], "p.gone");
    let taken_dlq = s.list_dead_letters(&q("p.next.dlq"), 10, "").expect("list");
    assert!(taken_dlq.items[0].headers[DEAD_LETTER_REASON].contains("already holds"));
    let undeliverable = s
        .list_dead_letters(&q(UNDELIVERABLE), 10, "")
        .expect("list");
    assert_eq!(
        undeliverable.items[0].headers[DEAD_LETTER_FROM],
        gone.as_str()
    );
    let observed = recorder.take();
    for family in ["p.gone", "p.next", gone.as_str()] {
        assert!(
            observed.contains(&format!("move_failed {family} HandOff")),
            "{family}: {observed:?}"
        );
        assert!(
            observed.contains(&format!("dead_lettered {family} Refused")),
            "{family}: {observed:?}"
        );
    }
    // A resend of the same batch is skipped whole: nothing is dead-lettered twice.
    let again = vec![(1, delivery(&q("p.gone"), "a"))];
    assert_eq!(s.receive(at(2), 3, again).expect("receive"), 0);
}

#[test]
fn a_refused_advance_on_the_same_shard_keeps_the_lease_and_is_counted() {
    let (recorder, _d, mut s) = observed();
    s.create_queue(at(0), q("jobs"), QueueConfig::default())
        .expect("create");
    let e = s.enqueue(at(0), cmd("x")).expect("enqueue");
    let lease = s.take(at(0), &q("jobs"), 1, None).expect("take");
    let advance = Outcome::Advance {
        to: Some("p.gone".into()),
        payload: None,
        headers: BTreeMap::new(),
        delay: None,
    };
    let refused = s.complete(at(1), &q("jobs"), e.id.as_str(), lease[0].token, advance);
    assert!(
        matches!(refused, Err(StoreError::QueueNotFound { .. })),
        "{refused:?}"
    );
    assert!(
        recorder
            .take()
            .contains(&"move_failed jobs HandOff".to_string())
    );
    let stats = s.queue_stats(at(1), &q("jobs")).expect("stats");
    assert_eq!(stats.leased, 1, "unchanged until its lease ends");
}

#[test]
fn leases_still_expire_after_the_wall_clock_steps_back() {
    let (_d, mut s) = open(ShardSettings::default());
    let ten = QueueConfig {
        lease: Duration::from_secs(10),
        ..QueueConfig::default()
    };
    s.create_queue(at(0), q("jobs"), ten).expect("create");
    s.enqueue(at(0), cmd("a")).expect("enqueue");
    s.take(at(100), &q("jobs"), 1, None).expect("take");
    assert_eq!(s.expire_leases(at(111), 100).expect("expire"), 1);
    // A minute back: the new lease's deadline (60 s) is behind every deadline handled.
    let again = s.take(at(50), &q("jobs"), 1, None).expect("take");
    assert_eq!(again.len(), 1);
    assert_eq!(s.expire_leases(at(55), 100).expect("expire"), 0);
    assert_eq!(s.expire_leases(at(61), 100).expect("expire"), 1);
    let stats = s.queue_stats(at(61), &q("jobs")).expect("stats");
    assert_eq!((stats.ready, stats.leased), (1, 0));
}

/// An event whose record is gone from under its lease (or unreadable) is a fault: the
/// sweep reports it once, and still ends every other lease due.
#[test]
fn a_lease_that_faults_holds_up_no_other_lease_due() {
    let (_d, mut s) = open(ShardSettings::default());
    let one_second = QueueConfig {
        lease: Duration::from_secs(1),
        ..QueueConfig::default()
    };
    s.create_queue(at(0), q("jobs"), one_second)
        .expect("create");
    let mut ids = Vec::new();
    for payload in ["a", "b", "c"] {
        ids.push(s.enqueue(at(0), cmd(payload)).expect("enqueue").id);
    }
    assert_eq!(s.take(at(0), &q("jobs"), 3, None).expect("take").len(), 3);
    // The first event's record goes, as a damaged store might lose it.
    let mut txn = s.st.begin(&s.kv);
    let qid = s.st.resolve_queue(&txn, &q("jobs")).expect("queue").rec.id;
    txn.delete(keys::event(qid, ids[0].as_str()));
    let batch = s.st.seal(txn);
    s.st.commit(&mut s.kv, batch);

    // One lease per sweep, as when more are due than a sweep takes: the faulty one first.
    let err = s
        .expire_leases(at(2), 1)
        .expect_err("the fault is reported");
    assert!(err.is_fault(), "{err:?}");
    assert_eq!(s.expire_leases(at(2), 1).expect("passed over"), 1);
    assert_eq!(s.expire_leases(at(2), 1).expect("passed over"), 1);
    let stats = s.queue_stats(at(2), &q("jobs")).expect("stats");
    assert_eq!((stats.ready, stats.leased), (2, 1), "the others went back");
    // Logged once: the next sweeps go on past it.
    assert_eq!(s.expire_leases(at(3), 100).expect("nothing more due"), 0);
    for id in &ids[1..] {
        let event = s.get(&q("jobs"), id.as_str()).expect("get");
        assert_eq!(event.state, EventState::Ready);
    }
}

/// An event whose own headers fill the 64 it may hold, advanced by a worker that traces
/// (its span's `traceparent` on the advance): it moves on untraced, not refused for a
/// header its handler never set.
#[test]
fn a_traced_advance_of_a_full_event_moves_it_on_untraced() {
    let (_d, mut s) = open(ShardSettings::default());
    for name in ["jobs", "next"] {
        s.create_queue(at(0), q(name), QueueConfig::default())
            .expect("create");
    }
    let mut full = cmd("x");
    full.headers = (0..64).map(|i| (format!("h{i}"), "v".to_owned())).collect();
    let id = s.enqueue(at(0), full).expect("enqueue").id;
    let taken = s.take(at(0), &q("jobs"), 1, None).expect("take");
    let traced = Outcome::Advance {
        to: Some("next".into()),
        payload: None,
        headers: BTreeMap::from([(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        )]),
        delay: None,
    };
    s.complete(at(0), &q("jobs"), id.as_str(), taken[0].token, traced)
        .expect("advanced");
    let moved = s.get(&q("next"), id.as_str()).expect("in the next queue");
    assert_eq!(moved.headers.len(), 64);
    assert!(!moved.headers.contains_key("traceparent"));
}
