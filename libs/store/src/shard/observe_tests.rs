//! What the state machine reports to its `ShardObserver`, with the queue's family.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_core::{IdempotencyKey, Outcome, QueueConfig, Timestamp};

use super::tests::{at, cmd, open, q};
use super::*;
use crate::observe::{DeadLetterCause, MoveStep};

#[derive(Default)]
pub(super) struct Recorder(Mutex<Vec<String>>);

impl Recorder {
    fn push(&self, what: String) {
        self.0.lock().expect("lock").push(what);
    }

    pub(super) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("lock"))
    }
}

impl ShardObserver for Recorder {
    fn enqueued(&self, family: &str, duplicate: bool) {
        self.push(format!("enqueued {family} duplicate={duplicate}"));
    }

    fn dead_lettered(&self, family: &str, cause: DeadLetterCause) {
        self.push(format!("dead_lettered {family} {cause:?}"));
    }

    fn lease_expired(&self, family: &str) {
        self.push(format!("lease_expired {family}"));
    }

    fn move_failed(&self, family: &str, step: MoveStep) {
        self.push(format!("move_failed {family} {step:?}"));
    }

    fn activated(&self, family: &str, activate_at: Timestamp) {
        self.push(format!("activated {family} {}", activate_at.as_micros()));
    }
}

pub(super) fn observed() -> (Arc<Recorder>, tempfile::TempDir, Shard) {
    let recorder = Arc::new(Recorder::default());
    let settings = ShardSettings {
        observer: recorder.clone(),
        ..ShardSettings::default()
    };
    let (dir, shard) = open(settings);
    (recorder, dir, shard)
}

fn once() -> QueueConfig {
    QueueConfig {
        max_attempts: 1,
        ..QueueConfig::default()
    }
}

#[test]
fn template_queues_are_reported_under_their_template() {
    let (seen, _d, mut s) = observed();
    s.create_queue(at(0), q("inbox:*"), once())
        .expect("template");
    let mut alice = cmd("hi");
    alice.queue = q("inbox:alice");
    alice.idempotency_key = Some(IdempotencyKey::parse("k").expect("key"));
    s.enqueue(at(1), alice.clone()).expect("enqueue");
    s.enqueue(at(1), alice).expect("again");
    let taken = s.take(at(2), &q("inbox:alice"), 1, None).expect("take");
    let retry = Outcome::Retry {
        delay: None,
        reason: None,
    };
    let id = taken[0].event.id.as_str();
    s.complete(at(2), &q("inbox:alice"), id, taken[0].token, retry)
        .expect("retry at max: dead letter");
    let mut later = cmd("later");
    later.queue = q("inbox:bob");
    later.activate_at = Some(at(9));
    let scheduled = s.enqueue(at(3), later).expect("delayed");
    let id = scheduled.id.as_str();
    let version = s.get(&q("inbox:bob"), id).expect("get").version;
    assert!(s.activate(&q("inbox:bob"), id, version).expect("activate"));
    assert_eq!(
        seen.take(),
        [
            "enqueued inbox:* duplicate=false".to_owned(),
            "enqueued inbox:* duplicate=true".to_owned(),
            "dead_lettered inbox:* MaxAttempts".to_owned(),
            "enqueued inbox:* duplicate=false".to_owned(),
            format!("activated inbox:* {}", at(9).as_micros()),
        ]
    );
}

#[test]
fn expiries_dead_letters_advances_and_activations_are_reported() {
    let (seen, _d, mut s) = observed();
    s.create_queue(at(0), q("jobs"), once()).expect("jobs");
    s.create_queue(at(0), q("next"), QueueConfig::default())
        .expect("next");
    for payload in ["expires", "dead", "moves"] {
        s.enqueue(at(1), cmd(payload)).expect("enqueue");
    }
    let taken = s
        .take(at(2), &q("jobs"), 3, Some(Duration::from_secs(10)))
        .expect("take");
    let requested = Outcome::DeadLetter {
        reason: "bad".into(),
    };
    s.complete(
        at(3),
        &q("jobs"),
        taken[1].event.id.as_str(),
        taken[1].token,
        requested,
    )
    .expect("dead letter");
    let advance = Outcome::Advance {
        to: Some("next".into()),
        payload: None,
        headers: Default::default(),
        delay: None,
    };
    s.complete(
        at(3),
        &q("jobs"),
        taken[2].event.id.as_str(),
        taken[2].token,
        advance,
    )
    .expect("advance");
    s.expire_leases(at(20), 10).expect("expire");
    let mut later = cmd("later");
    later.activate_at = Some(at(30));
    let scheduled = s.enqueue(at(4), later).expect("delayed");
    let version = s
        .get(&q("jobs"), scheduled.id.as_str())
        .expect("get")
        .version;
    assert!(
        s.activate(&q("jobs"), scheduled.id.as_str(), version)
            .expect("activate")
    );
    assert_eq!(
        seen.take(),
        [
            "enqueued jobs duplicate=false".to_owned(),
            "enqueued jobs duplicate=false".to_owned(),
            "enqueued jobs duplicate=false".to_owned(),
            "dead_lettered jobs Requested".to_owned(),
            "enqueued next duplicate=false".to_owned(),
            "lease_expired jobs".to_owned(),
            "dead_lettered jobs MaxAttempts".to_owned(),
            "enqueued jobs duplicate=false".to_owned(),
            format!("activated jobs {}", at(30).as_micros()),
        ]
    );
}
