//! Scenario tests of the state machine, one behaviour each, with explicit times.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cascade_core::{
    Code, EventId, EventState, HandlerKind, HandlerSpec, IdempotencyKey, Outcome, Pipeline,
    QueueConfig, QueueName, Stage, Timestamp,
};

use super::*;
use crate::codec::records::HandOff;
use crate::durable::Maintenance;
use crate::error::StoreError;
use crate::kv::Kv;

const T0: u64 = 1_700_000_000_000_000;

pub(super) fn at(secs: u64) -> Timestamp {
    Timestamp::from_micros(T0 + secs * 1_000_000)
}

pub(super) fn q(name: &str) -> QueueName {
    QueueName::parse(name).expect("valid queue name")
}

pub(super) fn open(settings: ShardSettings) -> (tempfile::TempDir, Shard) {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("open kv");
    let shard = Shard::new(kv, settings).expect("shard");
    (dir, shard)
}

fn with_queue(config: QueueConfig) -> (tempfile::TempDir, Shard) {
    let (dir, mut shard) = open(ShardSettings::default());
    shard
        .create_queue(at(0), q("jobs"), config)
        .expect("create");
    (dir, shard)
}

pub(crate) fn pipeline(name: &str, stages: &[&str]) -> Pipeline {
    let stage = |name: &&str| Stage {
        name: (*name).to_owned(),
        queue: QueueConfig::default(),
        handler: HandlerSpec {
            kind: HandlerKind::Builtin("noop".into()),
            concurrency: 1,
            timeout: Duration::from_secs(30),
        },
        priority: 0,
        min_handlers: 0,
        max_handlers: 1,
        next: None,
    };
    Pipeline {
        name: name.to_owned(),
        stages: stages.iter().map(stage).collect(),
    }
}

pub(super) fn cmd(payload: &str) -> EnqueueCmd {
    EnqueueCmd {
        queue: q("jobs"),
        id: None,
        idempotency_key: None,
        payload: payload.as_bytes().to_vec().into(),
        headers: BTreeMap::new(),
        activate_at: None,
    }
}

/// Takes up to `n` events of `queue` and sends each to its dead-letter queue.
fn take_and_dead_letter(s: &mut Shard, now: Timestamp, queue: &str, n: usize) {
    for leased in s.take(now, &q(queue), n, None).expect("take") {
        let dead = Outcome::DeadLetter {
            reason: "bad".into(),
        };
        let id = leased.event.id.as_str();
        s.complete(now, &q(queue), id, leased.token, dead)
            .expect("dead letter");
    }
}

fn payloads(leased: &[LeasedEvent]) -> Vec<String> {
    leased
        .iter()
        .map(|l| String::from_utf8(l.event.payload.to_vec()).expect("utf8"))
        .collect()
}

#[test]
fn enqueue_take_ack_round_trip_with_stats() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let e = s.enqueue(at(1), cmd("a")).expect("enqueue");
    assert!(!e.duplicate);
    assert_eq!(e.id.as_str().len(), 26);
    let taken = s.take(at(2), &q("jobs"), 10, None).expect("take");
    assert_eq!(payloads(&taken), ["a"]);
    assert_eq!(taken[0].event.attempts, 1);
    assert_eq!(taken[0].event.state, EventState::Leased);
    let stats = s.queue_stats(at(2), &q("jobs")).expect("stats");
    assert_eq!((stats.ready, stats.leased, stats.enqueued_total), (0, 1, 1));
    s.complete(
        at(3),
        &q("jobs"),
        e.id.as_str(),
        taken[0].token,
        Outcome::Ack,
    )
    .expect("ack");
    let stats = s.queue_stats(at(3), &q("jobs")).expect("stats");
    assert_eq!((stats.leased, stats.completed_total), (0, 1));
    assert!(matches!(
        s.get(&q("jobs"), e.id.as_str()),
        Err(StoreError::EventNotFound { .. })
    ));
}

/// A read of the outbox stops at its count or at its bytes, whichever comes first, and
/// always returns at least one hand-off.
#[test]
fn outbox_reads_stop_at_their_count_or_their_bytes() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    for i in 0..5 {
        let mut c = cmd(&format!("later-{i}"));
        c.activate_at = Some(at(60));
        s.enqueue(at(1), c).expect("enqueue");
    }
    assert_eq!(
        s.outbox(0, 10, usize::MAX).expect("outbox").entries.len(),
        5
    );
    assert_eq!(s.outbox(0, 2, usize::MAX).expect("outbox").entries.len(), 2);
    assert_eq!(s.outbox(0, 10, 1).expect("outbox").entries.len(), 1);
}

/// A reader goes on from where its last read stopped and sees each entry once: the rest of
/// a read cut short, then only entries added after a read that reached the end.
#[test]
fn outbox_reads_go_on_where_the_last_one_stopped() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let delayed = |s: &mut Shard, name: &str| {
        let mut c = cmd(name);
        c.activate_at = Some(at(60));
        c.id = Some(EventId::parse(name).expect("id"));
        s.enqueue(at(1), c).expect("enqueue");
    };
    let ids = |read: &[(u64, HandOff)]| {
        read.iter()
            .map(|(_, h)| match h {
                HandOff::Schedule { id, .. } => id.as_str().to_owned(),
                HandOff::Deliver(d) => d.id.as_str().to_owned(),
            })
            .collect::<Vec<_>>()
    };
    for name in ["a", "b", "c"] {
        delayed(&mut s, name);
    }
    let first = s.outbox(0, 2, usize::MAX).expect("outbox");
    let rest = s.outbox(first.next, 10, usize::MAX).expect("outbox");
    let none = s.outbox(rest.next, 10, usize::MAX).expect("outbox");
    assert_eq!(ids(&first.entries), ["a", "b"]);
    assert!(first.more, "cut at its count");
    assert_eq!(ids(&rest.entries), ["c"]);
    assert!(!rest.more, "it found all there was");
    assert!(none.entries.is_empty());
    delayed(&mut s, "d");
    let added = s.outbox(none.next, 10, usize::MAX).expect("outbox").entries;
    assert_eq!(ids(&added), ["d"]);
}

#[test]
fn delayed_event_waits_for_its_activation_of_the_current_version() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let mut c = cmd("later");
    c.activate_at = Some(at(60));
    let e = s.enqueue(at(1), c).expect("enqueue");
    assert!(
        s.take(at(2), &q("jobs"), 10, None)
            .expect("take")
            .is_empty()
    );
    let outbox = s.outbox(0, 10, usize::MAX).expect("outbox").entries;
    let [
        (
            _,
            HandOff::Schedule {
                version, at: when, ..
            },
        ),
    ] = outbox.as_slice()
    else {
        panic!("expected one schedule, got {outbox:?}");
    };
    assert_eq!(*when, at(60));
    assert!(
        !s.activate(&q("jobs"), e.id.as_str(), version + 1)
            .expect("activate")
    );
    assert!(
        s.activate(&q("jobs"), e.id.as_str(), *version)
            .expect("activate")
    );
    assert!(
        !s.activate(&q("jobs"), e.id.as_str(), *version)
            .expect("again")
    );
    assert_eq!(
        payloads(&s.take(at(61), &q("jobs"), 10, None).expect("take")),
        ["later"]
    );
}

#[test]
fn ready_order_is_activation_time_then_insertion() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    for (p, t) in [("c", 5), ("a", 3), ("b", 3), ("d", 4)] {
        let mut c = cmd(p);
        c.activate_at = Some(at(t));
        s.enqueue(at(10), c).expect("enqueue");
    }
    let taken = s.take(at(10), &q("jobs"), 10, None).expect("take");
    assert_eq!(payloads(&taken), ["a", "b", "d", "c"]);
}

/// Two takes of ten seconds each before an event is dead-lettered.
fn two_attempts_of_10s() -> QueueConfig {
    QueueConfig {
        max_attempts: 2,
        lease: Duration::from_secs(10),
        ..QueueConfig::default()
    }
}

#[test]
fn expired_lease_redelivers_then_dead_letters_at_max_attempts() {
    let (_d, mut s) = with_queue(two_attempts_of_10s());
    let e = s.enqueue(at(0), cmd("x")).expect("enqueue");
    let first = s.take(at(1), &q("jobs"), 1, None).expect("take");
    assert_eq!(s.expire_leases(at(5), 100).expect("expire"), 0);
    assert_eq!(s.expire_leases(at(11), 100).expect("expire"), 1);
    let stale = s.complete(
        at(12),
        &q("jobs"),
        e.id.as_str(),
        first[0].token,
        Outcome::Ack,
    );
    assert!(matches!(stale, Err(StoreError::StaleLease { .. })));
    let second = s.take(at(12), &q("jobs"), 1, None).expect("take");
    assert_eq!(second[0].event.attempts, 2);
    s.expire_leases(at(30), 100).expect("expire");
    assert!(
        s.take(at(31), &q("jobs"), 1, None)
            .expect("take")
            .is_empty()
    );
    let dead = s.list_dead_letters(&q("jobs.dlq"), 10, "").expect("list");
    assert_eq!(dead.items.len(), 1);
    assert!(dead.items[0].headers[DEAD_LETTER_REASON].contains("lease expired"));
    let stats = s.queue_stats(at(31), &q("jobs")).expect("stats");
    assert_eq!((stats.dead_lettered, stats.expired_leases_total), (1, 2));
    assert_eq!(
        s.redrive(at(32), &q("jobs.dlq"), &RedriveSelection::All, "")
            .expect("redrive"),
        Step {
            done: 1,
            left: 0,
            next: None
        }
    );
    let back = s.take(at(33), &q("jobs"), 1, None).expect("take");
    assert_eq!(
        (back[0].event.attempts, back[0].event.id.clone()),
        (1, e.id)
    );
    assert!(!back[0].event.headers.contains_key(DEAD_LETTER_REASON));
}

#[test]
fn a_dead_letter_keeps_the_last_failure_and_its_emptied_queue_still_answers_stats() {
    let (_d, mut s) = with_queue(two_attempts_of_10s());
    let e = s.enqueue(at(0), cmd("x")).expect("enqueue");
    let first = s.take(at(1), &q("jobs"), 1, None).expect("take");
    let retry = Outcome::Retry {
        delay: Some(Duration::ZERO),
        reason: Some("HTTP 500: store is down".into()),
    };
    s.complete(at(2), &q("jobs"), e.id.as_str(), first[0].token, retry)
        .expect("retry");
    let waiting = s.get(&q("jobs"), e.id.as_str()).expect("get");
    assert_eq!(waiting.headers[LAST_FAILURE], "HTTP 500: store is down");
    // The second attempt's lease runs out: the count says so, the last failure says why.
    s.take(at(3), &q("jobs"), 1, None).expect("take");
    s.expire_leases(at(20), 100).expect("expire");
    let dead = s.list_dead_letters(&q("jobs.dlq"), 10, "").expect("list");
    assert_eq!(
        dead.items[0].headers[DEAD_LETTER_REASON],
        "lease expired after 2 of 2 attempts; last failure: HTTP 500: store is down"
    );
    s.redrive(at(21), &q("jobs.dlq"), &RedriveSelection::All, "")
        .expect("redrive");
    let back = s.get(&q("jobs"), e.id.as_str()).expect("get");
    assert!(back.headers.is_empty(), "{:?}", back.headers);
    let emptied = s.queue_stats(at(22), &q("jobs.dlq")).expect("stats");
    assert_eq!(emptied, QueueStats::default());
    assert!(matches!(
        s.queue_stats(at(22), &q("nowhere")),
        Err(StoreError::QueueNotFound { .. })
    ));
}

/// The dead-letter queue of a template's queue is a dead-letter queue, whatever the template
/// says: dead letters are not dead-lettered again.
#[test]
fn a_template_queues_dead_letters_are_not_dead_lettered_again() {
    let (_d, mut s) = open(ShardSettings::default());
    s.create_queue(at(0), q("inbox:*"), two_attempts_of_10s())
        .expect("template");
    s.enqueue(
        at(0),
        EnqueueCmd {
            queue: q("inbox:erin"),
            ..cmd("x")
        },
    )
    .expect("enqueue");
    take_and_dead_letter(&mut s, at(1), "inbox:erin", 1);
    let dlq = s
        .get_queue(&q("inbox:erin.dlq"))
        .expect("created by its first dead letter");
    assert_eq!(dlq.config.max_attempts, 0, "{dlq:?}");
    // Taken and failed more often than the template's attempts: still there.
    for round in 0..4 {
        let now = at(10 + round * 20);
        let leased = s.take(now, &q("inbox:erin.dlq"), 1, None).expect("take");
        let retry = Outcome::Retry {
            delay: Some(Duration::ZERO),
            reason: None,
        };
        let id = leased[0].event.id.as_str();
        s.complete(now, &q("inbox:erin.dlq"), id, leased[0].token, retry)
            .expect("retry");
    }
    assert_eq!(
        s.list_dead_letters(&q("inbox:erin.dlq"), 10, "")
            .expect("list")
            .items
            .len(),
        1
    );
}

/// The last failure is the last one given, on the final retry too, and it stays with the
/// queue it failed in: an advance leaves it behind.
#[test]
fn the_last_failure_is_the_last_and_stays_where_it_happened() {
    let (_d, mut s) = with_queue(two_attempts_of_10s());
    s.create_queue(at(0), q("next"), QueueConfig::default())
        .expect("create");
    let fail = |reason: &str| Outcome::Retry {
        delay: Some(Duration::ZERO),
        reason: Some(reason.into()),
    };
    let first = s.enqueue(at(0), cmd("x")).expect("enqueue");
    // The last reason is longer than the header keeps: the dead letter's reason keeps more.
    let long = format!("boom 2 {}", "x".repeat(1500));
    for (now, reason) in [(1, "boom 1"), (2, long.as_str())] {
        let leased = s.take(at(now), &q("jobs"), 1, None).expect("take");
        s.complete(
            at(now),
            &q("jobs"),
            first.id.as_str(),
            leased[0].token,
            fail(reason),
        )
        .expect("retry");
    }
    let dead = s.list_dead_letters(&q("jobs.dlq"), 10, "").expect("list");
    let headers = &dead.items[0].headers;
    assert_eq!(headers[LAST_FAILURE], long[..1024]);
    assert!(headers[DEAD_LETTER_REASON].ends_with(&format!("last failure: {long}")));

    // Advanced out of the dead-letter queue, it is no dead letter where it goes.
    let leased = s.take(at(3), &q("jobs.dlq"), 1, None).expect("take");
    let to_next = || Outcome::Advance {
        to: Some("next".into()),
        payload: None,
        headers: BTreeMap::new(),
        delay: None,
    };
    let dead_id = leased[0].event.id.as_str();
    s.complete(at(3), &q("jobs.dlq"), dead_id, leased[0].token, to_next())
        .expect("advance");
    let moved = s.get(&q("next"), dead_id).expect("get");
    for own in [LAST_FAILURE, DEAD_LETTER_FROM, DEAD_LETTER_REASON] {
        assert!(
            !moved.headers.contains_key(own),
            "{own}: {:?}",
            moved.headers
        );
    }

    let second = s.enqueue(at(4), cmd("y")).expect("enqueue");
    let leased = s.take(at(4), &q("jobs"), 1, None).expect("take");
    s.complete(
        at(4),
        &q("jobs"),
        second.id.as_str(),
        leased[0].token,
        fail("boom 3"),
    )
    .expect("retry");
    let leased = s.take(at(5), &q("jobs"), 1, None).expect("take");
    s.complete(
        at(5),
        &q("jobs"),
        second.id.as_str(),
        leased[0].token,
        to_next(),
    )
    .expect("advance");
    let moved = s.get(&q("next"), second.id.as_str()).expect("get");
    assert!(
        !moved.headers.contains_key(LAST_FAILURE),
        "{:?}",
        moved.headers
    );
}

#[test]
fn retry_backs_off_and_reschedule_resets_attempts() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let e = s.enqueue(at(0), cmd("x")).expect("enqueue");
    let l = s.take(at(0), &q("jobs"), 1, None).expect("take");
    s.complete(
        at(1),
        &q("jobs"),
        e.id.as_str(),
        l[0].token,
        Outcome::Retry {
            delay: None,
            reason: None,
        },
    )
    .expect("retry");
    let ev = s.get(&q("jobs"), e.id.as_str()).expect("get");
    assert_eq!(ev.state, EventState::Delayed);
    let wait = ev.activate_at.duration_since(at(1));
    assert!(
        wait >= Duration::from_millis(500) && wait <= Duration::from_secs(1),
        "{wait:?}"
    );
    s.activate(&q("jobs"), e.id.as_str(), ev.version)
        .expect("activate");
    let l = s.take(at(2), &q("jobs"), 1, None).expect("take");
    assert_eq!(l[0].event.attempts, 2);
    let outcome = Outcome::Reschedule {
        activate_at: at(100),
    };
    s.complete(at(3), &q("jobs"), e.id.as_str(), l[0].token, outcome)
        .expect("reschedule");
    let ev = s.get(&q("jobs"), e.id.as_str()).expect("get");
    assert_eq!(
        (ev.attempts, ev.activate_at, ev.state),
        (0, at(100), EventState::Delayed)
    );
}

#[test]
fn dedup_by_client_id_and_idempotency_key() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let mut c = cmd("x");
    c.id = Some(EventId::parse("order-1").expect("id"));
    let first = s.enqueue(at(0), c.clone()).expect("enqueue");
    let again = s.enqueue(at(1), c).expect("enqueue");
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    let mut k = cmd("y");
    k.idempotency_key = Some(IdempotencyKey::parse("key-1").expect("key"));
    let first = s.enqueue(at(0), k.clone()).expect("enqueue");
    let again = s.enqueue(at(2), k.clone()).expect("enqueue");
    assert_eq!((again.duplicate, again.id), (true, first.id.clone()));
    // After the window (15 min by default) the key is new again.
    let later = s.enqueue(at(16 * 60), k).expect("enqueue");
    assert!(!later.duplicate);
    assert_ne!(later.id, first.id);
}

/// An unreadable dedup record fails no enqueue after it, and the pruning removes it like an
/// expired one rather than stopping at it for good.
#[test]
fn an_enqueue_that_went_in_is_not_failed_by_the_pruning_after_it() {
    let (_d, mut s) = with_queue(QueueConfig {
        dedup_window: Duration::from_secs(10),
        ..QueueConfig::default()
    });
    let mut keyed = cmd("keyed");
    keyed.idempotency_key = Some(IdempotencyKey::parse("k").expect("key"));
    s.enqueue(at(0), keyed).expect("enqueue");
    // Its dedup record turns unreadable.
    let (start, end) = keys::dedup_age_space();
    let mut dedup_keys = Vec::new();
    s.kv.scan(&start, &end, |_, dedup_key| {
        dedup_keys.push(dedup_key.to_vec());
        Ok(Flow::Continue)
    })
    .expect("scan");
    let mut txn = s.st.begin(&s.kv);
    for key in dedup_keys {
        txn.put(key, b"not a dedup record".to_vec());
    }
    let batch = s.st.seal(txn);
    s.st.commit(&mut s.kv, batch);

    // After the window, the next enqueue prunes, and meets the damage.
    let after = s.enqueue(at(20), cmd("after")).expect("the event went in");
    assert!(!after.duplicate);
    let stats = s.queue_stats(at(20), &q("jobs")).expect("stats");
    assert_eq!(stats.ready, 2);
    assert_eq!(
        s.dedup_entries(),
        0,
        "the damaged record is pruned, not stuck at"
    );
}

/// A key written again (its window over) leaves its first age entry behind: the pruning
/// removes that one as garbage, and does not wait for the new entry's window before
/// pruning the expired ones after it.
#[test]
fn a_key_written_again_does_not_hold_up_the_pruning_of_others() {
    let (_d, mut s) = with_queue(QueueConfig {
        dedup_window: Duration::from_secs(10),
        ..QueueConfig::default()
    });
    let keyed = |key: &str| {
        let mut c = cmd(key);
        c.idempotency_key = Some(IdempotencyKey::parse(key).expect("key"));
        c
    };
    s.enqueue(at(0), keyed("k")).expect("k, until 10 s");
    s.enqueue(at(5), keyed("j")).expect("j, until 15 s");
    s.enqueue(at(12), keyed("k")).expect("k again, until 22 s");
    assert_eq!(s.dedup_entries(), 2, "k's first entry is gone");
    s.enqueue(at(16), cmd("plain")).expect("enqueue");
    assert_eq!(
        s.dedup_entries(),
        1,
        "j's window is over: only k's second entry is left"
    );
    assert!(s.enqueue(at(16), keyed("k")).expect("enqueue").duplicate);
}

#[test]
fn dedup_entries_stay_within_the_count_bound() {
    let settings = ShardSettings {
        dedup_max_entries: 50,
        ..ShardSettings::default()
    };
    let (_d, mut s) = open(settings);
    s.create_queue(at(0), q("jobs"), QueueConfig::default())
        .expect("create");
    for i in 0..500 {
        let mut c = cmd("x");
        c.idempotency_key = Some(IdempotencyKey::parse(&format!("k{i}")).expect("key"));
        s.enqueue(at(0), c).expect("enqueue");
        assert!(s.dedup_entries() <= 51, "{} entries", s.dedup_entries());
    }
    // The oldest keys aged out, whichever pruning round removed them; the newest are still
    // remembered.
    for i in [0, 1, 5, 20, 100, 300, 440] {
        let mut old = cmd("x");
        old.idempotency_key = Some(IdempotencyKey::parse(&format!("k{i}")).expect("key"));
        assert!(!s.enqueue(at(0), old).expect("enqueue").duplicate, "k{i}");
    }
    let mut recent = cmd("x");
    recent.idempotency_key = Some(IdempotencyKey::parse("k499").expect("key"));
    assert!(s.enqueue(at(0), recent).expect("enqueue").duplicate);
}

#[test]
fn update_and_delete_refused_while_leased() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let e = s.enqueue(at(0), cmd("x")).expect("enqueue");
    let update = EventUpdate {
        payload: Some(b"new".to_vec().into()),
        ..EventUpdate::default()
    };
    let ev = s
        .update(at(1), &q("jobs"), e.id.as_str(), update.clone())
        .expect("update");
    assert_eq!(ev.payload, &b"new"[..]);
    s.take(at(2), &q("jobs"), 1, None).expect("take");
    let held = s.update(at(3), &q("jobs"), e.id.as_str(), update);
    assert!(
        matches!(held, Err(StoreError::LeaseHeld { .. })),
        "{held:?}"
    );
    let held = s.delete(&q("jobs"), e.id.as_str());
    assert!(
        matches!(held, Err(StoreError::LeaseHeld { .. })),
        "{held:?}"
    );
}

#[test]
fn a_queue_changed_or_deleted_after_use_is_seen_as_it_is_now() {
    let big = QueueConfig {
        max_payload_bytes: 1_000,
        ..QueueConfig::default()
    };
    let (_d, mut s) = with_queue(big);
    let payload = "x".repeat(500);
    s.enqueue(at(0), cmd(&payload))
        .expect("within the first limit");
    let small = QueueConfig {
        max_payload_bytes: 100,
        ..QueueConfig::default()
    };
    s.put_queue(at(1), q("jobs"), small).expect("update");
    let refused = s.enqueue(at(2), cmd(&payload));
    assert!(
        matches!(refused, Err(StoreError::PayloadTooLarge { max: 100, .. })),
        "{refused:?}"
    );
    s.delete_queue(&q("jobs"), true).expect("delete");
    let gone = s.enqueue(at(3), cmd("y"));
    assert!(
        matches!(gone, Err(StoreError::QueueNotFound { .. })),
        "{gone:?}"
    );
    s.create_queue(at(4), q("jobs"), QueueConfig::default())
        .expect("again");
    let e = s
        .enqueue(at(5), cmd(&payload))
        .expect("the new queue's limit");
    let taken = s.take(at(6), &q("jobs"), 10, None).expect("take");
    assert_eq!(taken.len(), 1, "only the new queue's event: {taken:?}");
    assert_eq!(taken[0].event.id, e.id);
}

#[test]
fn update_of_activation_time_moves_between_ready_and_delayed() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    let e = s.enqueue(at(0), cmd("x")).expect("enqueue");
    let later = EventUpdate {
        activate_at: Some(at(50)),
        ..EventUpdate::default()
    };
    let ev = s
        .update(at(1), &q("jobs"), e.id.as_str(), later)
        .expect("update");
    assert_eq!(ev.state, EventState::Delayed);
    assert!(s.take(at(2), &q("jobs"), 1, None).expect("take").is_empty());
    let now = EventUpdate {
        activate_at: Some(at(0)),
        ..EventUpdate::default()
    };
    s.update(at(3), &q("jobs"), e.id.as_str(), now)
        .expect("update");
    assert_eq!(s.take(at(3), &q("jobs"), 1, None).expect("take").len(), 1);
}

#[test]
fn template_queues_need_no_creation_and_vanish_when_empty() {
    let (_d, mut s) = open(ShardSettings::default());
    let unknown = s.enqueue(
        at(0),
        EnqueueCmd {
            queue: q("inbox:1"),
            ..cmd("x")
        },
    );
    assert!(
        matches!(unknown, Err(StoreError::QueueNotFound { .. })),
        "{unknown:?}"
    );
    s.create_queue(at(0), q("inbox:*"), QueueConfig::default())
        .expect("template");
    let e = s
        .enqueue(
            at(0),
            EnqueueCmd {
                queue: q("inbox:1"),
                ..cmd("x")
            },
        )
        .expect("enqueue");
    assert_eq!(
        s.list_queues("inbox:", 10, "").expect("list").items.len(),
        2
    );
    let l = s.take(at(1), &q("inbox:1"), 1, None).expect("take");
    s.complete(
        at(1),
        &q("inbox:1"),
        e.id.as_str(),
        l[0].token,
        Outcome::Ack,
    )
    .expect("ack");
    let names: Vec<String> = s
        .list_queues("inbox:", 10, "")
        .expect("list")
        .items
        .into_iter()
        .map(|q| q.name.to_string())
        .collect();
    assert_eq!(names, ["inbox:*"]);
}

#[test]
fn advance_is_local_or_handed_off_and_received_once() {
    let remote = q("p.remote");
    let settings = ShardSettings {
        router: Arc::new(move |name: &QueueName| *name != remote),
        ..ShardSettings::default()
    };
    let (_d, mut s) = open(settings);
    s.create_queue(at(0), q("jobs"), QueueConfig::default())
        .expect("create");
    s.create_queue(at(0), q("p.next"), QueueConfig::default())
        .expect("create");
    let advance = |to: &str| Outcome::Advance {
        to: Some(to.into()),
        payload: None,
        headers: BTreeMap::new(),
        delay: None,
    };
    for to in ["p.next", "p.remote"] {
        let e = s.enqueue(at(0), cmd(to)).expect("enqueue");
        let l = s.take(at(0), &q("jobs"), 1, None).expect("take");
        s.complete(at(1), &q("jobs"), e.id.as_str(), l[0].token, advance(to))
            .expect("advance");
    }
    assert_eq!(
        payloads(&s.take(at(2), &q("p.next"), 10, None).expect("take")),
        ["p.next"]
    );
    let outbox = s.outbox(0, 10, usize::MAX).expect("outbox").entries;
    let [(seq, HandOff::Deliver(d))] = outbox.as_slice() else {
        panic!("expected one delivery, got {outbox:?}");
    };
    assert_eq!(d.queue, q("p.remote"));
    // The receiving shard applies it once, even when it is sent twice.
    let (_d2, mut other) = open(ShardSettings::default());
    other
        .create_queue(at(0), q("p.remote"), QueueConfig::default())
        .expect("create");
    assert_eq!(
        other
            .receive(at(2), 7, vec![(*seq, d.clone())])
            .expect("receive"),
        1
    );
    assert_eq!(
        other
            .receive(at(2), 7, vec![(*seq, d.clone())])
            .expect("receive"),
        0
    );
    assert_eq!(
        other
            .queue_stats(at(2), &q("p.remote"))
            .expect("stats")
            .ready,
        1
    );
    s.outbox_ack(&[*seq]);
    assert!(
        s.outbox(0, 10, usize::MAX)
            .expect("outbox")
            .entries
            .is_empty()
    );
}

#[test]
fn the_outbox_keeps_every_hand_off_not_yet_acknowledged_whatever_the_order_of_acks() {
    let (dir, mut s) = with_queue(QueueConfig::default());
    let delayed = |s: &mut Shard, name: &str| {
        let mut c = cmd(name);
        c.activate_at = Some(at(60));
        s.enqueue(at(0), c).expect("enqueue");
    };
    let seqs = |s: &mut Shard| -> Vec<u64> {
        s.outbox(0, 10, usize::MAX)
            .expect("outbox")
            .entries
            .into_iter()
            .map(|(seq, _)| seq)
            .collect()
    };
    for name in ["a", "b", "c"] {
        delayed(&mut s, name);
    }
    let [a, b, c] = seqs(&mut s)[..] else {
        panic!("three schedules expected");
    };
    s.outbox_ack(&[b]);
    assert_eq!(seqs(&mut s), [a, c]);
    s.outbox_ack(&[a]);
    assert_eq!(seqs(&mut s), [c]);
    delayed(&mut s, "d");
    let d = *seqs(&mut s).last().expect("d's schedule");
    assert_eq!(seqs(&mut s), [c, d]);
    s.outbox_ack(&[c, d]);
    assert!(seqs(&mut s).is_empty());
    delayed(&mut s, "e");
    let [e] = seqs(&mut s)[..] else {
        panic!("one schedule expected");
    };
    assert!(e > d);
    // Reopened over what a checkpoint wrote, it finds the entry again from the start.
    let layer = s.kv_mut().freeze();
    crate::kv::checkpoint::write(s.kv().db(), s.kv().dir(), &layer, 1).expect("checkpoint");
    s.kv_mut().finish_checkpoint();
    drop(s);
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("reopen kv");
    let mut s = Shard::new(kv, ShardSettings::default()).expect("shard");
    assert_eq!(seqs(&mut s), [e]);
}

#[test]
fn take_skips_tombstones_of_events_taken_since_the_checkpoint() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    for i in 0..100 {
        s.enqueue(at(0), cmd(&i.to_string())).expect("enqueue");
    }
    // Push everything to sled, as a checkpoint would.
    let layer = s.kv_mut().freeze();
    crate::kv::checkpoint::write(s.kv().db(), s.kv().dir(), &layer, 1).expect("checkpoint");
    s.kv_mut().finish_checkpoint();
    let mut seen = Vec::new();
    for _ in 0..10 {
        seen.extend(payloads(
            &s.take(at(1), &q("jobs"), 10, None).expect("take"),
        ));
    }
    let expected: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    assert_eq!(seen, expected);
}

#[test]
fn schedule_of_a_deleted_event_never_activates_its_successor_with_the_same_id() {
    let (_d, mut s) = with_queue(QueueConfig {
        dedup_window: Duration::from_secs(10),
        ..QueueConfig::default()
    });
    let mut first = cmd("first");
    first.id = Some(EventId::parse("x").expect("id"));
    first.activate_at = Some(at(20));
    s.enqueue(at(0), first.clone()).expect("enqueue");
    let outbox = s.outbox(0, 10, usize::MAX).expect("outbox").entries;
    let [(_, HandOff::Schedule { version, .. })] = outbox.as_slice() else {
        panic!("expected one schedule, got {outbox:?}");
    };
    let old_version = *version;
    s.delete(&q("jobs"), "x").expect("delete");
    let second = EnqueueCmd {
        payload: b"second".to_vec().into(),
        activate_at: Some(at(60)),
        ..first
    };
    s.enqueue(at(11), second)
        .expect("enqueue again after the window");
    assert!(!s.activate(&q("jobs"), "x", old_version).expect("activate"));
    assert!(
        s.take(at(20), &q("jobs"), 10, None)
            .expect("take")
            .is_empty()
    );
}

#[test]
fn advance_into_a_queue_holding_the_same_id_is_refused_and_changes_nothing() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    s.create_queue(at(0), q("next"), QueueConfig::default())
        .expect("create");
    let x = Some(EventId::parse("x").expect("id"));
    s.enqueue(
        at(0),
        EnqueueCmd {
            queue: q("next"),
            id: x.clone(),
            ..cmd("old")
        },
    )
    .expect("enqueue");
    s.enqueue(
        at(0),
        EnqueueCmd {
            id: x,
            ..cmd("new")
        },
    )
    .expect("enqueue");
    let l = s.take(at(1), &q("jobs"), 1, None).expect("take");
    let advance = Outcome::Advance {
        to: Some("next".into()),
        payload: None,
        headers: BTreeMap::new(),
        delay: None,
    };
    let refused = s.complete(at(2), &q("jobs"), "x", l[0].token, advance);
    assert!(
        matches!(refused, Err(StoreError::IdTaken { .. })),
        "{refused:?}"
    );
    assert_eq!(
        s.get(&q("jobs"), "x").expect("still here").state,
        EventState::Leased
    );
    assert_eq!(
        s.get(&q("next"), "x").expect("untouched").payload,
        &b"old"[..]
    );
}

#[test]
fn a_second_dead_letter_with_the_same_id_is_kept_under_a_new_id() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    // The second round comes after the client ID's dedup window (15 min).
    for (payload, t) in [("first", 0), ("second", 1000)] {
        let c = EnqueueCmd {
            id: Some(EventId::parse("x").expect("id")),
            ..cmd(payload)
        };
        s.enqueue(at(t), c).expect("enqueue");
        take_and_dead_letter(&mut s, at(t), "jobs", 1);
    }
    let dead = s
        .list_dead_letters(&q("jobs.dlq"), 10, "")
        .expect("list")
        .items;
    let payloads: Vec<&[u8]> = dead.iter().map(|e| &e.payload[..]).collect();
    assert_eq!(payloads, [&b"first"[..], &b"second"[..]]);
    assert_eq!(dead[1].headers[super::state::ORIGINAL_ID], "x");
}

#[test]
fn a_redrive_of_all_goes_in_steps_past_the_leased_dead_letters() {
    use super::events::REDRIVE_STEP;
    let (_d, mut s) = with_queue(QueueConfig::default());
    let total = REDRIVE_STEP + 5;
    for i in 0..total {
        s.enqueue(at(0), cmd(&format!("e{i}"))).expect("enqueue");
    }
    take_and_dead_letter(&mut s, at(1), "jobs", total);
    // Two dead letters are being looked at: a redrive leaves them.
    assert_eq!(
        s.take(at(2), &q("jobs.dlq"), 2, None).expect("take").len(),
        2
    );
    let all = RedriveSelection::All;
    let first = s
        .redrive(at(3), &q("jobs.dlq"), &all, "")
        .expect("first step");
    assert_eq!(first.done as usize, REDRIVE_STEP - 2);
    assert_eq!(first.left, 7, "the two leased and the five after the step");
    let after = first.next.expect("a next step");
    let last = s
        .redrive(at(3), &q("jobs.dlq"), &all, &after)
        .expect("last step");
    assert_eq!(
        last,
        Step {
            done: 5,
            left: 2,
            next: None
        }
    );
    let back = s.queue_stats(at(4), &q("jobs")).expect("stats");
    assert_eq!(back.ready as usize, total - 2);
    let dlq = s.queue_stats(at(4), &q("jobs.dlq")).expect("stats");
    assert_eq!((dlq.ready, dlq.leased), (0, 2));
}

#[test]
fn a_template_beside_unrelated_ones_sums_its_own_queues_and_leaves_theirs() {
    use super::families::Families;
    let (dir, mut s) = open(ShardSettings::default());
    s.create_queue(at(0), q("inbox:*"), QueueConfig::default())
        .expect("template");
    let into = |queue: &str| EnqueueCmd {
        queue: q(queue),
        ..cmd("x")
    };
    // A member that comes and goes: its totals stay in its family's.
    s.enqueue(at(1), into("inbox:gone")).expect("enqueue");
    let gone = s.take(at(1), &q("inbox:gone"), 1, None).expect("take");
    let id = gone[0].event.id.as_str();
    s.complete(at(1), &q("inbox:gone"), id, gone[0].token, Outcome::Ack)
        .expect("ack");
    s.enqueue(at(1), into("inbox:alice")).expect("enqueue");
    // Queues made before the template that will cover them.
    s.create_queue(at(1), q("other:a"), QueueConfig::default())
        .expect("create");
    for _ in 0..3 {
        s.enqueue(at(1), into("other:a")).expect("enqueue");
    }
    // And a dead letter of one, in `other:a.dlq`.
    take_and_dead_letter(&mut s, at(1), "other:a", 1);
    let sums = |s: &Shard| -> Vec<(String, u64, u64, u64)> {
        let families = s.family_stats().into_iter();
        families
            .map(|f| (f.name, f.queues, f.stats.ready, f.stats.enqueued_total))
            .collect()
    };
    let inbox = ("inbox:*".to_owned(), 1, 1, 2);
    assert_eq!(sums(&s), std::slice::from_ref(&inbox));

    s.create_queue(at(2), q("other:*"), QueueConfig::default())
        .expect("an unrelated template");
    let all = [
        inbox.clone(),
        ("other:*".to_owned(), 1, 2, 3),
        ("other:*.dlq".to_owned(), 1, 1, 1),
    ];
    assert_eq!(sums(&s), all, "inbox:* kept the totals of its gone member");
    // What the new families hold is what summing every queue again finds.
    let summed = Families::load(s.kv(), &s.st.templates, &s.st.stages).expect("load");
    for family in ["other:*", "other:*.dlq"] {
        assert_eq!(
            summed.stats(family),
            s.st.families.stats(family),
            "{family}"
        );
    }

    // Deleting it drops its family and leaves the others as they were, on disk too.
    s.delete_queue(&q("other:*"), false).expect("delete");
    assert_eq!(sums(&s), std::slice::from_ref(&inbox));
    let layer = s.kv_mut().freeze();
    crate::kv::checkpoint::write(s.kv().db(), s.kv().dir(), &layer, 1).expect("checkpoint");
    s.kv_mut().finish_checkpoint();
    drop(s);
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("reopen kv");
    let s = Shard::new(kv, ShardSettings::default()).expect("reopen");
    assert_eq!(sums(&s), [inbox]);
}

#[test]
fn template_families_sum_their_queues_and_stats_listing_skips_them() {
    let (_d, mut s) = open(ShardSettings::default());
    for name in ["jobs", "inbox:", "zeta", "inbox:*"] {
        s.create_queue(at(0), q(name), QueueConfig::default())
            .expect("create");
    }
    let into = |queue: &str| EnqueueCmd {
        queue: q(queue),
        ..cmd("x")
    };
    for queue in ["inbox:alice", "inbox:alice", "inbox:bob", "jobs"] {
        s.enqueue(at(1), into(queue)).expect("enqueue");
    }
    take_and_dead_letter(&mut s, at(2), "inbox:bob", 1);

    // bob's queue vanished with its last event; its totals stay in the family's.
    let families = s.family_stats();
    let names: Vec<&str> = families.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["inbox:*", "inbox:*.dlq"]);
    let (inbox, dlq) = (&families[0], &families[1]);
    assert_eq!(inbox.queues, 1);
    let sums = &inbox.stats;
    let counts = [
        sums.ready,
        sums.leased,
        sums.enqueued_total,
        sums.dead_lettered,
    ];
    assert_eq!(counts, [2, 0, 3, 1]);
    assert_eq!((dlq.queues, dlq.stats.ready), (1, 1));
    assert_eq!(
        s.queue_stats(at(2), &q("inbox:*")).expect("template"),
        inbox.stats
    );
    assert!(matches!(
        s.queue_stats(at(2), &q("outbox:*")),
        Err(StoreError::QueueNotFound { .. })
    ));

    // Paged, in name order, per-user queues and templates skipped, the bare prefix kept.
    let first = s.list_uncovered_queues(2, "").expect("list");
    let second = s
        .list_uncovered_queues(2, &first.next_page_token)
        .expect("list");
    let listed: Vec<String> = first
        .items
        .iter()
        .chain(&second.items)
        .map(|n| n.to_string())
        .collect();
    assert_eq!(listed, ["inbox:", "jobs", "zeta"]);
    assert!(second.next_page_token.is_empty());

    // A more specific template takes its queues from the broader one, and gives them back
    // when deleted; the sums are rebuilt from the members then.
    s.enqueue(at(3), into("inbox:vip:carol")).expect("enqueue");
    s.create_queue(at(3), q("inbox:vip:*"), QueueConfig::default())
        .expect("nested template");
    let members = |s: &Shard| -> Vec<(String, u64, u64)> {
        let families = s.family_stats().into_iter();
        families
            .map(|f| (f.name, f.queues, f.stats.ready))
            .collect()
    };
    let moved = [
        ("inbox:*".to_owned(), 1, 2),
        ("inbox:*.dlq".to_owned(), 1, 1),
        ("inbox:vip:*".to_owned(), 1, 1),
    ];
    assert_eq!(members(&s), moved);
    s.delete_queue(&q("inbox:vip:*"), false)
        .expect("delete template");
    let back = [
        ("inbox:*".to_owned(), 2, 3),
        ("inbox:*.dlq".to_owned(), 1, 1),
    ];
    assert_eq!(members(&s), back);
}

/// A shard with the template `inbox:*` and the queue `jobs`, whose per-user queue
/// `inbox:bob` held one event, acked, and is gone: its totals stay in the family's.
fn with_a_family() -> (tempfile::TempDir, Shard) {
    let (dir, mut s) = open(ShardSettings::default());
    for name in ["jobs", "inbox:*"] {
        s.create_queue(at(0), q(name), QueueConfig::default())
            .expect("create");
    }
    for queue in ["inbox:alice", "inbox:alice", "inbox:bob"] {
        let into = EnqueueCmd {
            queue: q(queue),
            ..cmd("x")
        };
        s.enqueue(at(1), into).expect("enqueue");
    }
    let bob = s.take(at(2), &q("inbox:bob"), 1, None).expect("take");
    let id = bob[0].event.id.as_str();
    s.complete(at(2), &q("inbox:bob"), id, bob[0].token, Outcome::Ack)
        .expect("ack");
    (dir, s)
}

/// What a restart keeps of the summary: the templates, the families and the queue count.
fn summary(s: &Shard) -> (Vec<String>, Vec<FamilyStats>, u64) {
    let templates = s.st.templates.iter().map(|t| t.name.to_string());
    (templates.collect(), s.family_stats(), s.st.seqs.queue_count)
}

fn reopen(s: Shard) -> Shard {
    let Shard { kv, .. } = s;
    Shard::new(kv, ShardSettings::default()).expect("reopen")
}

#[test]
fn a_shard_opens_with_the_family_sums_it_stored_not_a_rebuild() {
    let (_d, mut s) = with_a_family();
    s.take_unlogged();
    let before = summary(&s);
    assert_eq!(before.1[0].stats.enqueued_total, 3, "{before:?}");
    assert_eq!(before.2, 2, "jobs and inbox:*, not the per-user queues");
    let mut s = reopen(s);
    assert_eq!(
        summary(&s),
        before,
        "bob's totals kept: nothing was summed again"
    );
    assert!(
        s.take_unlogged().is_empty(),
        "nothing to build, nothing written"
    );
}

#[test]
fn a_store_written_before_the_summary_gets_it_when_opened() {
    let (_d, s) = with_a_family();
    let before = summary(&s);
    let Shard { mut kv, .. } = s;
    let mut earlier = crate::kv::Batch::default();
    for key in [
        keys::template("inbox:*"),
        keys::family("inbox:*"),
        keys::meta(SUMMARIZED),
        keys::meta("queue_count"),
    ] {
        earlier.delete(key);
    }
    kv.apply(earlier);
    let mut s = Shard::new(kv, ShardSettings::default()).expect("open");
    let (templates, families, count) = summary(&s);
    assert_eq!((&templates, count), (&before.0, before.2));
    // Summed from the live members: bob's totals are not among them any more.
    assert_eq!(
        (families[0].queues, families[0].stats.enqueued_total),
        (1, 2)
    );
    assert!(!s.take_unlogged().is_empty(), "the summary goes to the log");
    assert_eq!(summary(&reopen(s)), (templates, families, count));
}

#[test]
fn a_queue_holding_events_is_deleted_only_with_force() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    s.enqueue(at(0), cmd("ready")).expect("enqueue");
    let mut later = cmd("later");
    later.activate_at = Some(at(60));
    s.enqueue(at(0), later).expect("enqueue");
    s.take(at(1), &q("jobs"), 1, None).expect("take");
    let refused = s.delete_queue(&q("jobs"), false).expect_err("not empty");
    assert_eq!(refused.code(), Code::FailedPrecondition);
    assert!(
        refused
            .to_string()
            .contains("(0 ready, 1 delayed, 1 leased events)"),
        "{refused}"
    );
    assert_eq!(
        s.queue_stats(at(2), &q("jobs"))
            .expect("still there")
            .delayed,
        1
    );
    s.delete_queue(&q("jobs"), true).expect("forced");
    assert!(s.queue_stats(at(2), &q("jobs")).is_err(), "gone");
    s.create_queue(at(3), q("empty"), QueueConfig::default())
        .expect("create");
    s.delete_queue(&q("empty"), false)
        .expect("an empty queue needs no force");
}

#[test]
fn a_purge_step_removes_at_most_its_share_and_says_where_the_next_starts() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    for i in 0..5 {
        s.enqueue(at(0), cmd(&format!("e{i}"))).expect("enqueue");
    }
    let mut later = cmd("later");
    later.activate_at = Some(at(60));
    s.enqueue(at(0), later).expect("enqueue");
    s.take(at(1), &q("jobs"), 2, None).expect("take");
    let first = s.purge_queue(&q("jobs"), 4, "").expect("purge");
    assert_eq!((first.done, first.left), (4, 2));
    let after = first.next.expect("a full step names the next");
    let second = s.purge_queue(&q("jobs"), 4, &after).expect("purge");
    assert_eq!((second.done, second.left, second.next), (2, 0, None));
    let stats = s.queue_stats(at(2), &q("jobs")).expect("stats");
    assert_eq!((stats.ready, stats.delayed, stats.leased), (0, 0, 0));
    assert!(
        s.take(at(2), &q("jobs"), 10, None)
            .expect("take")
            .is_empty()
    );

    s.create_queue(at(0), q("inbox:*"), QueueConfig::default())
        .expect("template");
    for i in 0..3 {
        let to_user = EnqueueCmd {
            queue: q("inbox:u1"),
            ..cmd(&format!("m{i}"))
        };
        s.enqueue(at(0), to_user).expect("enqueue");
    }
    let step = s.purge_queue(&q("inbox:u1"), 2, "").expect("purge");
    assert_eq!((step.done, step.left), (2, 1));
    let last = s
        .purge_queue(&q("inbox:u1"), 2, &step.next.expect("next"))
        .expect("purge");
    assert_eq!((last.done, last.left, last.next), (1, 0, None));
    // Emptied, a per-user queue is gone: nothing is left to purge.
    assert_eq!(
        s.purge_queue(&q("inbox:u1"), 2, "").expect("purge"),
        Step::default()
    );
}

#[test]
fn a_purge_ends_quietly_when_its_dead_letter_queue_vanished_between_steps() {
    let (_d, mut s) = with_queue(QueueConfig::default());
    for i in 0..3 {
        s.enqueue(at(0), cmd(&format!("e{i}"))).expect("enqueue");
    }
    take_and_dead_letter(&mut s, at(1), "jobs", 3);
    let dlq = q("jobs.dlq");
    let first = s.purge_queue(&dlq, 1, "").expect("first step");
    let after = first.next.expect("more to purge");
    // A consumer of the dead letters takes and acknowledges the rest: the queue goes.
    for leased in s.take(at(2), &dlq, 10, None).expect("take") {
        let id = leased.event.id.as_str();
        s.complete(at(2), &dlq, id, leased.token, Outcome::Ack)
            .expect("ack");
    }
    assert_eq!(
        s.purge_queue(&dlq, 1, &after).expect("the next step"),
        Step::default()
    );
    let gone = s.purge_queue(&dlq, 1, "").expect_err("a first step");
    assert!(matches!(gone, StoreError::QueueNotFound { .. }), "{gone}");
}

#[test]
fn a_take_lost_in_a_crash_never_sees_its_lease_token_handed_out_again() {
    let (dir, mut s) = with_queue(QueueConfig::default());
    s.begin_run();
    s.enqueue(at(0), cmd("once")).expect("enqueue");
    // Everything so far reaches the disk, as a checkpoint (or the log) would make it.
    let layer = s.kv_mut().freeze();
    crate::kv::checkpoint::write(s.kv().db(), s.kv().dir(), &layer, 1).expect("checkpoint");
    s.kv_mut().finish_checkpoint();
    // A take answered before its fsync, then a crash: the take never reached the disk.
    let lost = s.take(at(1), &q("jobs"), 1, None).expect("take");
    let [lost] = lost.as_slice() else {
        panic!("one event taken, got {lost:?}");
    };
    let (lost_id, lost_token) = (lost.event.id.clone(), lost.token);
    drop(s);
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("reopen kv");
    let mut s = Shard::new(kv, ShardSettings::default()).expect("reopen");
    s.begin_run();
    let again = s.take(at(2), &q("jobs"), 1, None).expect("take again");
    let [again] = again.as_slice() else {
        panic!("the event is back, got {again:?}");
    };
    assert_eq!(again.event.id, lost_id);
    assert_ne!(again.token, lost_token, "a token of the lost run came back");
    let stale = s
        .complete(
            at(3),
            &q("jobs"),
            lost_id.as_str(),
            lost_token,
            Outcome::Ack,
        )
        .expect_err("the lost run's token is stale");
    assert!(matches!(stale, StoreError::StaleLease { .. }), "{stale}");
    s.complete(
        at(3),
        &q("jobs"),
        lost_id.as_str(),
        again.token,
        Outcome::Ack,
    )
    .expect("the new lease completes");
}

#[test]
fn a_missing_queue_is_named_with_a_template_that_would_match_it() {
    let (_d, s) = with_queue(QueueConfig::default());
    let said = |name: &str| {
        s.get_queue(&q(name))
            .map(drop)
            .expect_err("no such queue")
            .to_string()
    };
    assert_eq!(
        said("inbox:bob"),
        "queue 'inbox:bob' does not exist; create it with CreateQueue, or create a template such as 'inbox:*' that matches it"
    );
    assert_eq!(
        said("inbox:*"),
        "queue 'inbox:*' does not exist; create it with CreateQueue"
    );
}
