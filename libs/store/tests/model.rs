//! Model-based test of the dispatcher shard: random sequences of operations run
//! against the real `Shard` and against `Model`, a naive in-memory statement of the semantics,
//! under one simulated clock. After every operation both give the same answer (value or error
//! kind) and everything observable agrees: per queue the ready / delayed / leased counts, the
//! oldest ready age and the lifetime totals; every event as `get` (and, for dead-letter queues,
//! `list_dead_letters`) shows it; and the activation schedule the shard hands to the timer.
//!
//! What it proves, for the sequences tried: takes deliver ready events in exact
//! `(activate_at, insertion)` order, delayed ones only after the timer activates them (late is
//! fine; stale and repeated activations are ignored, also across a deleted and re-created ID);
//! every lease outcome, extend and expiry moves the event where §2 says, counting attempts per
//! stage and dead-lettering at `max_attempts`; a stale token gets `StaleLease` and a leased
//! event refuses update and delete with `LeaseHeld`, changing nothing; a repeated client ID or
//! idempotency key answers the original within the queue's dedup window; an advance onto a
//! taken ID is refused and a dead letter onto one renamed; redrive returns dead letters to
//! their queue; template-made and dead-letter queues appear on first use and vanish when
//! empty, and a template's family sums its members, keeping the totals of those that
//! vanished; no lease outlives an expiry pass after its deadline, also for a queue whose name
//! is at the length limit (its dead-letter queue's name is 200 bytes); a version changes exactly when its event does; a checkpoint changes nothing.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use EventState::{Delayed, Leased, Ready};
use bytes::Bytes;
use cascade_core::{Event, EventId, EventState, IdempotencyKey, Outcome, QueueConfig};
use cascade_core::{QueueName, Timestamp};
use cascade_store::codec::records::HandOff;
use cascade_store::durable::Maintenance;
use cascade_store::kv::{Kv, Layer, checkpoint};
use cascade_store::shard::{DEAD_LETTER_FROM as FROM, DEAD_LETTER_REASON as REASON, LAST_FAILURE};
use cascade_store::shard::{EnqueueCmd, EventUpdate, LeaseToken, QueueStats, RedriveSelection};
use cascade_store::{Shard, ShardSettings, StoreError};
use proptest::collection::vec;
use proptest::option::weighted as some;
use proptest::prelude::*;

/// The header of a dead letter renamed because its ID was taken in the dead-letter queue.
const ORIGINAL_ID: &str = "cascade-original-id";
const T0: u64 = 1_700_000_000_000_000;
const SEC: u64 = 1_000_000;
/// Clock steps and delays are whole ticks and activation times sit on a grid, so that equal
/// activation times (ties, broken by insertion order) and `activate_at == now` are common.
const TICK: u64 = 250_000;
const GRID: u64 = 500_000;

/// A name at the length limit of a queue with the default dead-letter queue: `<B>.dlq` is 200
/// bytes, the longest a name may be.
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
/// Name, max_attempts, default lease, dedup window. `t:1` is made by the template `t:*`.
const QUEUES: [(&str, u32, u64, u64); 4] = [
    ("a", 3, 5 * SEC, 900 * SEC), // the default 15-minute window: it holds for a whole case
    (B, 2, 2 * SEC, 60 * SEC),
    ("c", 0, 10 * SEC, 10 * SEC), // unlimited attempts; a window that often runs out
    ("t:1", 2, 3 * SEC, 5 * SEC), // IDs come back soon: renamed dead letters
];
/// The config a dead-letter queue is made with.
const DLQ: (&str, u32, u64, u64) = ("", 0, 30 * SEC, 900 * SEC);
/// Targets of `advance`: the queues, and one that does not exist.
const ADVANCE_TO: [&str; 5] = ["a", B, "c", "t:1", "nowhere"];

fn qn(name: &str) -> QueueName {
    QueueName::parse(name).expect("valid queue name")
}

fn ts(micros: u64) -> Timestamp {
    Timestamp::from_micros(micros)
}

/// The `k`-th grid point from the one at or below `now`.
fn grid(now: u64, k: i8) -> u64 {
    ((now / GRID) as i64 + i64::from(k)) as u64 * GRID
}

/// Ready if its time has come, else delayed.
fn state_at(at: Timestamp, now: u64) -> EventState {
    if at.as_micros() <= now {
        Ready
    } else {
        Delayed
    }
}

/// A redrive as the dispatcher runs it: one step after another until the last.
fn redrive_step_by_step(
    shard: &mut Shard,
    t: Timestamp,
    dlq: &QueueName,
    which: &RedriveSelection,
) -> Result<u64, StoreError> {
    let (mut moved, mut after) = (0, String::new());
    loop {
        let step = shard.redrive(t, dlq, which, &after)?;
        moved += step.done;
        match step.next {
            Some(next) => after = next,
            None => return Ok(moved),
        }
    }
}

fn same<T: PartialEq + Debug>(real: T, model: T, what: &str) {
    assert_eq!(
        real, model,
        "{what}: the shard (left) differs from the model (right)"
    );
}

type R<T> = Result<T, Fail>;
/// What enqueue answers: id, duplicate, activate_at.
type Answer = (EventId, bool, Timestamp);

/// The error kinds the model predicts; any other error fails the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fail {
    QueueNotFound,
    EventNotFound,
    LeaseHeld(u64),
    StaleLease,
    IdTaken,
    Invalid,
}

fn fail(e: StoreError) -> Fail {
    match e {
        StoreError::QueueNotFound { .. } => Fail::QueueNotFound,
        StoreError::EventNotFound { .. } => Fail::EventNotFound,
        StoreError::LeaseHeld { until, .. } => Fail::LeaseHeld(until.as_micros()),
        StoreError::StaleLease { .. } => Fail::StaleLease,
        StoreError::IdTaken { .. } => Fail::IdTaken,
        StoreError::Invalid(_) => Fail::Invalid,
        other => panic!("unexpected error: {other}"),
    }
}

/// An event as the model predicts it: versions are checked apart (§2 says only when they
/// change), and the text of a dead letter's reason is not modelled.
fn norm(e: &Event) -> Event {
    let mut e = e.clone();
    e.version = 0;
    e.headers.entry(REASON.into()).and_modify(String::clear);
    e
}

#[derive(Clone, Debug)]
struct MEvent {
    e: Event,
    /// Insertion order, which breaks ties in activation time.
    seq: u64,
    /// The epoch of its latest lease: every take makes a new one, shard-wide.
    epoch: u64,
    /// The schedule entry made when it last became delayed: only that one may activate it.
    sched: u64,
    /// Writes since it was inserted: its version must change with each.
    writes: u64,
}

/// A schedule entry for the timer: `serial` is the model's name for it, `version` the shard's.
#[derive(Clone, Debug)]
struct Sched {
    queue: String,
    id: String,
    at: u64,
    serial: u64,
    version: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    enqueued: u64,
    completed: u64,
    dead_lettered: u64,
    expired: u64,
    retries: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Explicit,
    /// Made by a template: always addressable; its record (and totals) gone while empty.
    Template,
    /// Made by its first dead letter, gone (totals too) once empty.
    DeadLetter,
}

#[derive(Clone, Debug)]
struct MQueue {
    kind: Kind,
    /// Name, max_attempts, lease, dedup window.
    config: (&'static str, u32, u64, u64),
    events: BTreeMap<String, MEvent>,
    /// (b'i' client id | b'k' idempotency key, value) → (event id, activate_at, expires_at).
    dedup: BTreeMap<(u8, String), (EventId, Timestamp, u64)>,
    totals: Totals,
}

impl MQueue {
    fn new(kind: Kind, config: (&'static str, u32, u64, u64)) -> MQueue {
        let (events, dedup, totals) = Default::default();
        MQueue {
            kind,
            config,
            events,
            dedup,
            totals,
        }
    }

    /// The totals `queue_stats` shows: a vanished queue's went with it.
    fn shown_totals(&self) -> Totals {
        let gone = self.kind != Kind::Explicit && self.events.is_empty();
        if gone { Totals::default() } else { self.totals }
    }
}

/// The shard's semantics, stated as plainly as possible.
#[derive(Clone, Default)]
struct Model {
    now: u64,
    seq: u64,
    epoch: u64,
    serial: u64,
    queues: BTreeMap<String, MQueue>,
    /// Schedule entries made since the timer last read the outbox, in order.
    outbox: Vec<Sched>,
    /// Dead letters renamed since the last check, under a placeholder ID: (queue, placeholder).
    renamed: Vec<(String, String)>,
    /// What the members of each template family counted, those that vanished included.
    family_totals: BTreeMap<String, Totals>,
}

impl Model {
    fn new() -> Model {
        let mut m = Model {
            now: T0,
            ..Model::default()
        };
        for q in &QUEUES[..3] {
            m.queues.insert(q.0.into(), MQueue::new(Kind::Explicit, *q));
        }
        // `t:*` gives its config to every name it matches, but its queues' dead letters go
        // to a dead-letter queue: `t:1.dlq` is only ever reached by them.
        m.queues
            .insert("t:1".into(), MQueue::new(Kind::Template, QUEUES[3]));
        m.queues
            .insert("t:1.dlq".into(), MQueue::new(Kind::Template, DLQ));
        m
    }

    fn queue(&self, q: &str) -> R<&MQueue> {
        match self.queues.get(q) {
            Some(mq) if mq.kind != Kind::DeadLetter || !mq.events.is_empty() => Ok(mq),
            _ => Err(Fail::QueueNotFound),
        }
    }

    fn mq(&mut self, q: &str) -> &mut MQueue {
        self.queues.get_mut(q).expect("known queue")
    }

    /// Counts in `q`'s totals and in its template family's.
    fn tally(&mut self, q: &str, count: fn(&mut Totals)) {
        count(&mut self.mq(q).totals);
        if let Some(family) = family_of(q) {
            count(self.family_totals.entry(family.into()).or_default());
        }
    }

    fn ev(&self, q: &str, id: &str) -> Option<&MEvent> {
        self.queues.get(q)?.events.get(id)
    }

    /// Stores an event: a new version, and a schedule entry if it is delayed.
    fn write(&mut self, mut ev: MEvent) {
        let (queue, id) = (ev.e.queue.to_string(), ev.e.id.to_string());
        ev.writes += 1;
        if ev.e.state == Delayed {
            self.serial += 1;
            ev.sched = self.serial;
            let (at, serial) = (ev.e.activate_at.as_micros(), self.serial);
            let sched = Sched {
                queue: queue.clone(),
                id: id.clone(),
                at,
                serial,
                version: 0,
            };
            self.outbox.push(sched);
        }
        self.mq(&queue).events.insert(id, ev);
    }

    /// A new event in `q`, with the ID, payload, headers and times of `e`.
    fn insert(&mut self, q: &str, mut e: Event) -> R<()> {
        let (now, seq) = (self.now, self.seq + 1);
        let mq = self.mq(q);
        if mq.events.contains_key(e.id.as_str()) {
            return Err(Fail::IdTaken);
        }
        mq.totals = mq.shown_totals();
        self.tally(q, |t| t.enqueued += 1);
        self.seq = seq;
        let state = state_at(e.activate_at, now);
        (e.queue, e.state, e.attempts, e.lease_expires_at) = (qn(q), state, 0, None);
        self.write(MEvent {
            e,
            seq,
            epoch: 0,
            sched: 0,
            writes: 0,
        });
        Ok(())
    }

    /// A leased event goes back: ready if its time has come, else delayed.
    fn requeue(&mut self, mut ev: MEvent) {
        ev.e.state = state_at(ev.e.activate_at, self.now);
        ev.e.lease_expires_at = None;
        self.write(ev);
    }

    /// Moves an event from `q` to `<q>.dlq`, ready now; renamed if its ID is taken there.
    fn dead_letter(&mut self, q: &str, ev: MEvent) {
        let mq = self.mq(q);
        mq.events.remove(ev.e.id.as_str());
        self.tally(q, |t| t.dead_lettered += 1);
        let dlq = format!("{q}.dlq");
        let made = MQueue::new(Kind::DeadLetter, DLQ);
        let mq = self.queues.entry(dlq.clone()).or_insert(made);
        let taken = mq.events.contains_key(ev.e.id.as_str());
        let mut e = ev.e;
        e.activate_at = ts(self.now);
        e.headers.insert(FROM.into(), q.into());
        e.headers.insert(REASON.into(), String::new());
        if taken {
            e.headers.insert(ORIGINAL_ID.into(), e.id.to_string());
            e.id = EventId::parse(&format!("{}.:{}", e.id, self.seq)).expect("placeholder");
            self.renamed.push((dlq.clone(), e.id.to_string()));
        }
        self.insert(&dlq, e).expect("a free ID");
    }

    /// Answers (id, duplicate, activate_at); `e` is the event to store if it is new.
    fn enqueue(&mut self, id: Option<String>, key: Option<String>, e: Event) -> Answer {
        let (now, q) = (self.now, e.queue.to_string());
        let mq = &self.queues[&q];
        let mut keys = Vec::new();
        keys.extend(id.clone().map(|v| (b'i', v)));
        keys.extend(key.map(|v| (b'k', v)));
        for k in &keys {
            match mq.dedup.get(k) {
                Some((id, at, expires)) if *expires > now => return (id.clone(), true, *at),
                _ => {}
            }
        }
        if let Some(ev) = id.and_then(|id| mq.events.get(&id)) {
            return (ev.e.id.clone(), true, ev.e.activate_at);
        }
        let (id, at, expires) = (e.id.clone(), e.activate_at, now + mq.config.3);
        self.insert(&q, e).expect("a free ID");
        for k in keys {
            self.mq(&q).dedup.insert(k, (id.clone(), at, expires));
        }
        (id, false, at)
    }

    /// Leases the first `max` ready events in (activate_at, insertion) order: (id, epoch) each.
    fn take(&mut self, q: &str, max: usize, lease: Option<u64>) -> R<Vec<(String, u64)>> {
        let mq = self.queue(q)?;
        let deadline = ts(self.now + lease.unwrap_or(mq.config.2));
        let mut ready: Vec<&MEvent> = mq.events.values().collect();
        ready.retain(|e| e.e.state == Ready);
        ready.sort_by_key(|e| (e.e.activate_at, e.seq));
        let taken: Vec<MEvent> = ready.into_iter().take(max).cloned().collect();
        let mut out = Vec::new();
        for mut ev in taken {
            self.epoch += 1;
            (ev.e.state, ev.e.attempts, ev.epoch) = (Leased, ev.e.attempts + 1, self.epoch);
            ev.e.lease_expires_at = Some(deadline);
            out.push((ev.e.id.to_string(), ev.epoch));
            self.write(ev);
        }
        Ok(out)
    }

    /// The event, if `epoch` is its current lease and the deadline has not passed.
    fn leased(&self, q: &str, id: &str, epoch: u64) -> R<MEvent> {
        let now = Some(ts(self.now));
        let live =
            |m: &&MEvent| m.e.state == Leased && m.epoch == epoch && m.e.lease_expires_at > now;
        self.ev(q, id).filter(live).cloned().ok_or(Fail::StaleLease)
    }

    fn complete(&mut self, q: &str, id: &str, epoch: u64, outcome: Outcome) -> R<()> {
        let mut ev = self.leased(q, id, epoch)?;
        if let Outcome::Advance { to: Some(to), .. } = &outcome
            && self.queue(to)?.events.contains_key(id)
            && to != q
        {
            return Err(Fail::IdTaken);
        }
        let now = self.now;
        let max = self.queues[q].config.1;
        let exhausted = max != 0 && ev.e.attempts >= max;
        let dead_letters = match &outcome {
            Outcome::DeadLetter { .. } => true,
            Outcome::Retry { .. } => exhausted,
            _ => false,
        };
        if dead_letters && format!("{q}.dlq").len() > 200 {
            // `<B>.dlq.dlq` cannot exist: refused, and the event stays leased until its end.
            return Err(Fail::Invalid);
        }
        ev.e.lease_expires_at = None;
        match outcome {
            Outcome::Ack | Outcome::Advance { .. } => {
                self.mq(q).events.remove(id);
                self.tally(q, |t| t.completed += 1);
                if let Outcome::Advance {
                    to, payload, delay, ..
                } = outcome
                {
                    ev.e.activate_at = ts(now).saturating_add(delay.unwrap_or_default());
                    ev.e.payload = payload.unwrap_or(ev.e.payload);
                    for own in [LAST_FAILURE, FROM, REASON] {
                        ev.e.headers.remove(own);
                    }
                    self.insert(&to.expect("to"), ev.e).expect("a free ID");
                }
            }
            Outcome::DeadLetter { .. } => self.dead_letter(q, ev),
            Outcome::Retry { reason, .. } if exhausted => {
                let mut ev = ev;
                ev.e.headers
                    .insert(LAST_FAILURE.into(), reason.expect("a reason"));
                self.dead_letter(q, ev)
            }
            Outcome::Retry { delay, reason } => {
                ev.e.activate_at = ts(now).saturating_add(delay.expect("explicit delay"));
                ev.e.headers
                    .insert(LAST_FAILURE.into(), reason.expect("a reason"));
                self.tally(q, |t| t.retries += 1);
                self.requeue(ev);
            }
            Outcome::Reschedule { activate_at } => {
                (ev.e.activate_at, ev.e.attempts) = (activate_at, 0);
                self.requeue(ev);
            }
            Outcome::Release => self.requeue(ev),
        }
        Ok(())
    }

    fn extend(&mut self, q: &str, id: &str, epoch: u64, by: u64) -> R<u64> {
        let mut ev = self.leased(q, id, epoch)?;
        ev.e.lease_expires_at = Some(ts(self.now + by));
        self.write(ev);
        Ok(self.now + by)
    }

    /// Leases whose deadline has come end: back to ready, or dead-lettered at max_attempts.
    fn expire(&mut self) -> usize {
        let mut due: Vec<(Timestamp, String, MEvent)> = Vec::new();
        for (q, mq) in &self.queues {
            for ev in mq.events.values() {
                if let Some(d) = ev.e.lease_expires_at.filter(|d| d.as_micros() <= self.now) {
                    due.push((d, q.clone(), ev.clone()));
                }
            }
        }
        due.sort_by(|x, y| (x.0, &x.1, &x.2.e.id).cmp(&(y.0, &y.1, &y.2.e.id)));
        for (_, q, ev) in due.clone() {
            self.tally(&q, |t| t.expired += 1);
            let mq = self.mq(&q);
            if mq.config.1 != 0 && ev.e.attempts >= mq.config.1 {
                self.dead_letter(&q, ev);
            } else {
                self.requeue(ev);
            }
        }
        due.len()
    }

    /// The timer fires an entry: only the latest one of a still-delayed event activates it.
    fn activate(&mut self, s: &Sched) -> bool {
        let current = |ev: &&MEvent| ev.e.state == Delayed && ev.sched == s.serial;
        let Some(mut ev) = self.ev(&s.queue, &s.id).filter(current).cloned() else {
            return false;
        };
        ev.e.state = Ready;
        self.write(ev);
        true
    }

    /// An event for update or delete: refused while leased (past its deadline too, until
    /// expiry ends the lease).
    fn unleased(&self, q: &str, id: &str) -> R<MEvent> {
        let ev = self.queue(q)?.events.get(id).ok_or(Fail::EventNotFound)?;
        match (ev.e.state, ev.e.lease_expires_at) {
            (Leased, Some(until)) => Err(Fail::LeaseHeld(until.as_micros())),
            _ => Ok(ev.clone()),
        }
    }

    fn update(&mut self, q: &str, id: &str, p: Option<Bytes>, at: Option<u64>) -> R<Event> {
        let mut ev = self.unleased(q, id)?;
        ev.e.payload = p.unwrap_or(ev.e.payload);
        ev.e.activate_at = at.map_or(ev.e.activate_at, ts);
        ev.e.state = state_at(ev.e.activate_at, self.now);
        self.write(ev);
        Ok(self.queues[q].events[id].e.clone())
    }

    fn delete(&mut self, q: &str, id: &str) -> R<()> {
        self.unleased(q, id)?;
        self.mq(q).events.remove(id);
        Ok(())
    }

    /// Moves unleased dead letters (`None`: all, in ID order) back to the queues they came
    /// from, ready now; all or nothing.
    fn redrive(&mut self, dlq: &str, ids: Option<Vec<String>>) -> R<u64> {
        let Ok(mq) = self.queue(dlq) else {
            return Ok(0);
        };
        let ids = ids.unwrap_or_else(|| mq.events.keys().cloned().collect());
        let before = self.clone();
        let mut moved = 0;
        for id in ids {
            let ev = self.ev(dlq, &id).filter(|ev| ev.e.state != Leased);
            let mut e = match ev {
                Some(ev) if ev.e.headers.contains_key(FROM) => ev.e.clone(),
                _ => continue,
            };
            let origin = e.headers.remove(FROM).expect("checked");
            e.headers.remove(REASON);
            e.headers.remove(LAST_FAILURE);
            e.activate_at = ts(self.now);
            self.mq(dlq).events.remove(&id);
            if let Err(f) = self.insert(&origin, e) {
                *self = before;
                return Err(f);
            }
            moved += 1;
        }
        Ok(moved)
    }
}

/// A lease outcome; times in ticks from now, `Reschedule` on the grid.
#[derive(Clone, Debug)]
enum How {
    Ack,
    Retry(u64),
    Reschedule(i8),
    Release,
    DeadLetter,
    /// (index in `ADVANCE_TO`, new payload?, delay)
    Advance(usize, bool, u64),
}

/// An operation; `pick`s choose among what exists when it runs.
#[derive(Clone, Debug)]
enum Op {
    /// (queue, client id, idempotency key, activation: `None` now, else a grid point)
    Enqueue(usize, Option<u8>, Option<u8>, Option<i8>),
    /// (queue: 4..8 is the dead-letter queue of `q - 4`, max, lease in seconds)
    Take(usize, usize, Option<u64>),
    /// (a lease the model holds current if any, else any handed out; pick; outcome: `None`
    /// extends the lease by the seconds given)
    Complete(bool, usize, Option<How>, u64),
    Expire,
    /// The timer fires (pick, or all due entries; and keeps them to fire again later).
    Fire(usize, bool, bool),
    /// (pick, `None` deletes, else (new payload?, new activation on the grid))
    Update(usize, Option<(bool, Option<i8>)>),
    Clock(u64),
    /// (queue, picks of its dead letters: `None` redrives all)
    Redrive(usize, Option<Vec<usize>>),
    /// Freezes the active layer, or writes the frozen one into sled and thaws.
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    let how = prop_oneof![
        4 => Just(How::Ack),
        4 => (0..=12u64).prop_map(How::Retry),
        2 => (-10i8..=30).prop_map(How::Reschedule),
        3 => Just(How::Release),
        2 => Just(How::DeadLetter),
        3 => (0..5usize, any::<bool>(), 0..=8u64).prop_map(|(to, p, d)| How::Advance(to, p, d)),
    ];
    let at = || some(0.6, -20i8..=40);
    let pick = any::<usize>;
    prop_oneof![
        30 => (0..4usize, some(0.6, 0..4u8), some(0.3, 0..4u8), at())
            .prop_map(|(q, id, key, at)| Op::Enqueue(q, id, key, at)),
        15 => (prop_oneof![4 => 0..4usize, 1 => 4..8usize], 1..=5usize, some(0.5, 1..=10u64))
            .prop_map(|(q, max, lease)| Op::Take(q, max, lease)),
        24 => (prop::bool::weighted(0.8), pick(), some(0.85, how), 1..=10u64)
            .prop_map(|(live, pick, how, by)| Op::Complete(live, pick, how, by)),
        4 => Just(Op::Expire),
        8 => (pick(), any::<bool>(), prop::bool::weighted(0.2))
            .prop_map(|(pick, all, keep)| Op::Fire(pick, all, keep)),
        8 => (pick(), some(0.6, (any::<bool>(), at()))).prop_map(|(p, c)| Op::Update(p, c)),
        15 => prop_oneof![4 => 0..=20u64, 1 => 4..=48u64].prop_map(Op::Clock),
        2 => (0..4usize, some(0.6, vec(pick(), 0..4))).prop_map(|(q, p)| Op::Redrive(q, p)),
        1 => Just(Op::Checkpoint),
    ]
}

/// A lease handed out: queue, event id, the shard's token, the model's epoch.
type Lease = (String, String, LeaseToken, u64);

/// The shard, the model, and the test's stand-ins for the timer and the workers.
struct World {
    _dir: tempfile::TempDir,
    shard: Shard,
    model: Model,
    leases: Vec<Lease>,
    /// Entries read from the outbox, waiting for their time: the activation timer.
    timer: Vec<Sched>,
    /// (queue, id) → (its insertion seq, writes, version) when last checked.
    versions: BTreeMap<(String, String), (u64, u64, u64)>,
    frozen: Option<Arc<Layer>>,
    checkpoints: u64,
    step: usize,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("open kv");
        let mut shard = Shard::new(kv, ShardSettings::default()).expect("shard");
        for (name, max_attempts, lease, window) in QUEUES {
            let name = qn(if name == "t:1" { "t:*" } else { name });
            let (lease, dedup_window) =
                (Duration::from_micros(lease), Duration::from_micros(window));
            let config = QueueConfig {
                max_attempts,
                lease,
                dedup_window,
                ..Default::default()
            };
            shard.create_queue(ts(T0), name, config).expect("create");
        }
        let (model, leases, timer, versions) = (Model::new(), vec![], vec![], BTreeMap::new());
        let (frozen, checkpoints, step) = (None, 0, 0);
        World {
            _dir: dir,
            shard,
            model,
            leases,
            timer,
            versions,
            frozen,
            checkpoints,
            step,
        }
    }

    fn run(mut self, ops: &[Op]) {
        self.check();
        for (step, op) in ops.iter().enumerate() {
            self.step = step;
            let run = std::panic::AssertUnwindSafe(|| {
                self.apply(op);
                self.shard.take_unlogged();
                self.check();
            });
            if let Err(panic) = std::panic::catch_unwind(run) {
                eprintln!("failed at step {step}: {op:?}");
                std::panic::resume_unwind(panic);
            }
        }
    }

    fn pick_lease(&self, live: bool, pick: usize) -> Option<Lease> {
        let current = |l: &&Lease| self.model.leased(&l.0, &l.1, l.3).is_ok();
        let mut pool: Vec<&Lease> = self.leases.iter().filter(current).collect();
        if !live || pool.is_empty() {
            pool = self.leases.iter().collect();
        }
        (!pool.is_empty()).then(|| pool[pick % pool.len()].clone())
    }

    /// Any event the model holds, or one of two that may not exist.
    fn pick_event(&self, pick: usize) -> (String, String) {
        let mut pool: Vec<(String, String)> = vec![
            ("t:1".into(), "ghost".into()),
            (format!("{B}.dlq"), "c0".into()),
        ];
        for (q, mq) in &self.model.queues {
            pool.extend(mq.events.keys().map(|id| (q.clone(), id.clone())));
        }
        pool[pick % pool.len()].clone()
    }

    fn outcome(&self, how: &How) -> Outcome {
        let delay = |ticks: u64| Duration::from_micros(ticks * TICK);
        match *how {
            How::Ack => Outcome::Ack,
            How::Retry(ticks) => Outcome::Retry {
                delay: Some(delay(ticks)),
                reason: Some(format!("failed at step {}", self.step)),
            },
            How::Reschedule(k) => Outcome::Reschedule {
                activate_at: ts(grid(self.model.now, k)),
            },
            How::Release => Outcome::Release,
            How::DeadLetter => Outcome::DeadLetter {
                reason: "the model says so".into(),
            },
            How::Advance(to, payload, ticks) => Outcome::Advance {
                to: Some(ADVANCE_TO[to].into()),
                payload: payload.then(|| Bytes::from(format!("v{}", self.step))),
                headers: BTreeMap::new(),
                delay: (ticks > 0).then(|| delay(ticks)),
            },
        }
    }

    fn apply(&mut self, op: &Op) {
        let (now, t) = (self.model.now, ts(self.model.now));
        match op {
            Op::Enqueue(q, id, key, at) => {
                let q = qn(QUEUES[*q].0);
                let (id, key) = (id.map(|i| format!("c{i}")), key.map(|k| format!("k{k}")));
                let parse_key = |k: &String| IdempotencyKey::parse(k).expect("key");
                let cmd = EnqueueCmd {
                    queue: q.clone(),
                    id: id.as_ref().map(|i| EventId::parse(i).expect("id")),
                    idempotency_key: key.as_ref().map(parse_key),
                    payload: Bytes::from(format!("p{}", self.step)),
                    headers: BTreeMap::new(),
                    activate_at: at.map(|k| ts(grid(now, k))),
                };
                let real = self.shard.enqueue(t, cmd.clone()).expect("enqueue");
                same(&real.queue, &q, "queue");
                let new = Event {
                    id: cmd.id.unwrap_or(real.id.clone()),
                    queue: q,
                    payload: cmd.payload,
                    headers: cmd.headers,
                    activate_at: cmd.activate_at.unwrap_or(t),
                    state: Ready,
                    attempts: 0,
                    created_at: t,
                    version: 0,
                    lease_expires_at: None,
                };
                let want = self.model.enqueue(id, key, new);
                same((real.id, real.duplicate, real.activate_at), want, "enqueue");
            }
            Op::Take(q, max, lease) => {
                let q = QUEUES[q % 4].0.to_string() + if *q < 4 { "" } else { ".dlq" };
                let secs = lease.map(Duration::from_secs);
                let real = self.shard.take(t, &qn(&q), *max, secs).map_err(fail);
                let want = self.model.take(&q, *max, lease.map(|s| s * SEC));
                let (Ok(real), Ok(want)) = (&real, &want) else {
                    return same(real.map(|r| r.len()), want.map(|w| w.len()), "take");
                };
                let events = &self.model.queues[&q].events;
                let expected: Vec<Event> =
                    want.iter().map(|(id, _)| events[id].e.clone()).collect();
                let got: Vec<Event> = real.iter().map(|l| norm(&l.event)).collect();
                same(got, expected, "take");
                for (l, (id, epoch)) in real.iter().zip(want) {
                    same(Some(l.expires_at), l.event.lease_expires_at, "deadline");
                    self.leases.push((q.clone(), id.clone(), l.token, *epoch));
                }
                let excess = self.leases.len().saturating_sub(64);
                self.leases.drain(..excess);
            }
            Op::Complete(live, pick, how, by) => {
                let Some((q, id, token, epoch)) = self.pick_lease(*live, *pick) else {
                    return;
                };
                let Some(how) = how else {
                    let by_s = Duration::from_secs(*by);
                    let real = self.shard.extend(t, &qn(&q), &id, token, by_s);
                    let want = self.model.extend(&q, &id, epoch, by * SEC);
                    return same(real.map(|t| t.as_micros()).map_err(fail), want, "extend");
                };
                let outcome = self.outcome(how);
                let real = self.shard.complete(t, &qn(&q), &id, token, outcome.clone());
                let want = self.model.complete(&q, &id, epoch, outcome);
                same(real.map_err(fail), want, "complete");
            }
            Op::Expire => {
                let real = self.shard.expire_leases(t, 10_000).expect("expire");
                same(real, self.model.expire(), "expired leases");
                // No event is stuck: after an expiry pass no lease is past its deadline
                // (the model's leased events; `check` finds any the shard has and it has not).
                for (name, mq) in &self.model.queues {
                    for (id, _) in mq.events.iter().filter(|(_, ev)| ev.e.state == Leased) {
                        let got = self.shard.get(&qn(name), id).expect("get");
                        let deadline = got.lease_expires_at.expect("a lease has a deadline");
                        assert!(deadline > t, "{name}/{id}: leased past its deadline");
                    }
                }
                // Ageing the dedup window must change nothing the model sees.
                self.shard.prune_dedup(t, 10_000).expect("prune");
            }
            Op::Fire(pick, all, keep) => {
                let mut due: Vec<usize> = (0..self.timer.len()).collect();
                due.retain(|&i| self.timer[i].at <= now);
                let fired = match (due.len(), *all) {
                    (0, _) => return,
                    (_, true) => due,
                    (n, false) => vec![due[pick % n]],
                };
                for &i in &fired {
                    let s = &self.timer[i];
                    let real = self.shard.activate(&qn(&s.queue), &s.id, s.version);
                    same(real.expect("activate"), self.model.activate(s), "activate");
                }
                for &i in fired.iter().rev().filter(|_| !keep) {
                    self.timer.remove(i);
                }
            }
            Op::Update(pick, None) => {
                let (q, id) = self.pick_event(*pick);
                let real = self.shard.delete(&qn(&q), &id).map_err(fail);
                same(real, self.model.delete(&q, &id), "delete");
            }
            Op::Update(pick, Some((payload, at))) => {
                let (q, id) = self.pick_event(*pick);
                let payload = payload.then(|| Bytes::from(format!("u{}", self.step)));
                let at = at.map(|k| grid(now, k));
                let (activate_at, headers) = (at.map(ts), BTreeMap::new());
                let update = EventUpdate {
                    payload: payload.clone(),
                    headers,
                    activate_at,
                };
                let real = self.shard.update(t, &qn(&q), &id, update);
                let want = self.model.update(&q, &id, payload, at);
                same(real.map(|e| norm(&e)).map_err(fail), want, "update");
            }
            Op::Clock(ticks) => self.model.now += ticks * TICK,
            Op::Redrive(q, picks) => {
                let dlq = format!("{}.dlq", QUEUES[*q].0);
                let mut pool = vec!["ghost".to_string()];
                if let Some(mq) = self.model.queues.get(&dlq) {
                    pool.extend(mq.events.keys().cloned());
                }
                let pick = |i: &usize| pool[i % pool.len()].clone();
                let ids: Option<Vec<String>> = picks.as_ref().map(|p| p.iter().map(pick).collect());
                let parse = |i: &String| EventId::parse(i).expect("id");
                let which = match &ids {
                    Some(ids) => RedriveSelection::Ids(ids.iter().map(parse).collect()),
                    None => RedriveSelection::All,
                };
                let real =
                    redrive_step_by_step(&mut self.shard, t, &qn(&dlq), &which).map_err(fail);
                same(real, self.model.redrive(&dlq, ids), "redrive");
            }
            Op::Checkpoint => match self.frozen.take() {
                None => self.frozen = Some(self.shard.kv_mut().freeze()),
                Some(layer) => {
                    self.checkpoints += 1;
                    let (kv, lsn) = (self.shard.kv(), self.checkpoints);
                    checkpoint::write(kv.db(), kv.dir(), &layer, lsn).expect("checkpoint");
                    self.shard.kv_mut().finish_checkpoint();
                }
            },
        }
    }

    /// Everything observable agrees. New schedule entries go to the timer; renamed dead
    /// letters get the IDs the shard gave them (`<id>.<n>`).
    fn check(&mut self) {
        let t = ts(self.model.now);
        for (dlq, placeholder) in std::mem::take(&mut self.model.renamed) {
            let page = self.shard.list_dead_letters(&qn(&dlq), 1000, "");
            let mq = self.model.mq(&dlq);
            let mut ev = mq.events.remove(&placeholder).expect("renamed");
            let original = ev.e.headers[ORIGINAL_ID].clone();
            let mut new = page.expect("list").items;
            // One expiry pass may rename several dead letters into one queue: each is told
            // apart by the ID it had.
            new.retain(|e| {
                !mq.events.contains_key(e.id.as_str())
                    && e.headers.get(ORIGINAL_ID) == Some(&original)
            });
            let [real] = new.as_slice() else {
                panic!("one renamed dead letter in {dlq}: {new:?}")
            };
            let prefix = format!("{original}.");
            let n = real
                .id
                .as_str()
                .strip_prefix(&prefix)
                .expect("<original>.<n>");
            assert!(n.parse::<u64>().is_ok(), "renamed {}", real.id);
            ev.e.id = real.id.clone();
            mq.events.insert(real.id.to_string(), ev);
        }

        let out = self
            .shard
            .outbox(0, 10_000, usize::MAX)
            .expect("outbox")
            .entries;
        let new = std::mem::take(&mut self.model.outbox);
        same(out.len(), new.len(), "schedule entries");
        for ((_, hand_off), mut s) in out.iter().zip(new) {
            let HandOff::Schedule {
                queue,
                id,
                version,
                at,
            } = hand_off
            else {
                panic!("unexpected hand-off {hand_off:?}");
            };
            let entry = (queue.as_str(), id.as_str(), at.as_micros());
            same(entry, (&s.queue[..], &s.id[..], s.at), "schedule entry");
            s.version = *version;
            self.timer.push(s);
        }
        let seqs: Vec<u64> = out.iter().map(|(seq, _)| *seq).collect();
        self.shard.outbox_ack(&seqs);

        for (name, mq) in &self.model.queues {
            let q = qn(name);
            let events: Vec<Event> = mq.events.values().map(|ev| ev.e.clone()).collect();
            if name.ends_with(".dlq") {
                let page = self.shard.list_dead_letters(&q, 1000, "").expect("list");
                same(page.items.iter().map(norm).collect(), events.clone(), name);
            }
            if self.model.queue(name).is_err() {
                continue; // a vanished dead-letter queue: no stats to ask for
            }
            let s = self.shard.queue_stats(t, &q).expect("stats");
            let count = |state| events.iter().filter(|e| e.state == state).count() as u64;
            let ready = events.iter().filter(|e| e.state == Ready);
            let oldest = ready.map(|e| t.duration_since(e.activate_at)).max();
            let real = ([s.ready, s.delayed, s.leased], s.oldest_ready_age);
            let want = (
                [Ready, Delayed, Leased].map(count),
                oldest.unwrap_or_default(),
            );
            same(real, want, "ready, delayed, leased, oldest ready age");
            same(totals_of(&s), mq.shown_totals(), "totals");
            for (id, ev) in &mq.events {
                let got = self.shard.get(&q, id).expect("get");
                same(norm(&got), ev.e.clone(), "get");
                let key = (name.clone(), id.clone());
                if let Some(&(seq, writes, version)) = self.versions.get(&key)
                    && seq == ev.seq
                {
                    same(got.version.cmp(&version), ev.writes.cmp(&writes), "version");
                }
                self.versions.insert(key, (ev.seq, ev.writes, got.version));
                if ev.e.state == Delayed {
                    let s = self.timer.iter().find(|s| s.serial == ev.sched);
                    let s = s.expect("a delayed event has a schedule entry");
                    same(s.version, got.version, "version in the schedule entry");
                }
            }
        }
        self.check_families(t);
    }

    /// A template family's stats are its members' summed, with the totals of the members that
    /// vanished kept; `queue_stats` of the template shows the same.
    fn check_families(&self, t: Timestamp) {
        let families = self.shard.family_stats();
        let names: Vec<&str> = families.iter().map(|f| f.name.as_str()).collect();
        assert!(
            names.contains(&"t:*"),
            "every template has a family: {names:?}"
        );
        for family in ["t:*", "t:*.dlq"] {
            let real = families.iter().find(|f| f.name == family);
            let real = real
                .map(|f| (f.queues, f.stats.clone()))
                .unwrap_or_default();
            let members = self.model.queues.iter();
            let members: Vec<&MQueue> = members
                .filter(|(name, mq)| family_of(name) == Some(family) && !mq.events.is_empty())
                .map(|(_, mq)| mq)
                .collect();
            let count = |state| {
                let events = members.iter().flat_map(|mq| mq.events.values());
                events.filter(|ev| ev.e.state == state).count() as u64
            };
            let totals = self.model.family_totals.get(family).copied();
            same(
                (real.0, [real.1.ready, real.1.delayed, real.1.leased]),
                (members.len() as u64, [Ready, Delayed, Leased].map(count)),
                &format!("{family}: members; ready, delayed, leased"),
            );
            same(totals_of(&real.1), totals.unwrap_or_default(), family);
        }
        let template = self
            .shard
            .queue_stats(t, &qn("t:*"))
            .expect("template stats");
        let summed = families.iter().find(|f| f.name == "t:*").map(|f| &f.stats);
        same(Some(&template), summed, "queue_stats of the template");
    }
}

fn totals_of(s: &QueueStats) -> Totals {
    Totals {
        enqueued: s.enqueued_total,
        completed: s.completed_total,
        dead_lettered: s.dead_lettered,
        expired: s.expired_leases_total,
        retries: s.retries_total,
    }
}

/// The template family `q` belongs to: `t:*` makes `t:1`, and `t:1.dlq` counts under
/// `t:*.dlq`.
fn family_of(q: &str) -> Option<&'static str> {
    match (q.starts_with("t:"), q.ends_with(".dlq")) {
        (false, _) => None,
        (true, false) => Some("t:*"),
        (true, true) => Some("t:*.dlq"),
    }
}

fn cases() -> Option<u32> {
    std::env::var("PROPTEST_CASES").ok()?.parse().ok()
}

/// PROPTEST_CASES cases (default 128) of 100-300 operations each. No failure file is written:
/// the shrunk failing sequence is printed.
fn config() -> ProptestConfig {
    let cases = cases().unwrap_or(128);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn shard_matches_model(ops in vec(op(), 100..=300)) {
        World::new().run(&ops);
    }
}
