//! What the outbox pump has read and not yet sent, one backlog per receiver.
//!
//! The outbox is one sequence of hand-offs to every receiver. The pump reads it once, from a
//! cursor that only moves forward, and sorts what it reads into one backlog per receiver, so
//! that a receiver that cannot take its hand-offs holds up only its own. Each backlog holds
//! its receiver's oldest hand-offs whole, in sequence order, ready to send. What it cannot
//! hold — every hand-off of a receiver resting after a failed send, and whatever would pass
//! its share or the pump's memory budget — it leaves in the store, remembering only the
//! sequence from which its receiver is `behind`. Once that receiver is free again and has
//! sent what it holds, the pump reads its hand-offs again from there (a catch-up read, which
//! passes over the entries of other receivers) until it reaches the cursor.

use std::collections::{HashMap, VecDeque};

use cascade_core::shard_of;
use cascade_store::codec::records::HandOff;

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Receiver {
    /// The activation timer of the same shard number: schedules.
    Timer,
    /// The dispatcher shard that owns the queue: deliveries.
    Dispatcher(u32),
}

impl Receiver {
    pub(super) fn of(hand_off: &HandOff, shards: u32) -> Receiver {
        match hand_off {
            HandOff::Schedule { .. } => Receiver::Timer,
            HandOff::Deliver(delivery) => Receiver::Dispatcher(shard_of(&delivery.queue, shards)),
        }
    }
}

/// At most this many hand-offs and bytes (as encoded in a request).
#[derive(Copy, Clone, Debug)]
pub(super) struct Limits {
    pub entries: usize,
    pub bytes: usize,
}

/// A hand-off read from the outbox, with its sequence and its cost in a request.
pub(super) struct Entry {
    pub seq: u64,
    pub hand_off: HandOff,
    pub cost: usize,
}

#[derive(Default)]
struct Backlog {
    /// The oldest hand-offs not yet sent, in sequence order.
    held: VecDeque<Entry>,
    /// What `held` costs in requests.
    held_bytes: usize,
    /// This receiver's hand-offs from this sequence on, below the cursor, were left in the
    /// store; all of them are newer than `held`.
    behind: Option<u64>,
}

pub(super) struct Backlogs {
    by_receiver: HashMap<Receiver, Backlog>,
    /// What one backlog may hold: enough to send the next batch as soon as the one in flight
    /// is answered; more would only be read again after a failure.
    share: Limits,
    /// What all backlogs may hold at once.
    budget: Limits,
    held: Limits,
}

impl Backlogs {
    pub(super) fn new(share: Limits, budget: Limits) -> Backlogs {
        Backlogs {
            by_receiver: HashMap::new(),
            share,
            budget,
            held: Limits {
                entries: 0,
                bytes: 0,
            },
        }
    }

    /// Adds the hand-off `seq` the cursor read for `receiver`, in sequence order; left in
    /// the store if `receiver` rests, is behind already, or its share or the budget would be
    /// passed. Its `cost` is worked out only if it may be held.
    pub(super) fn add(
        &mut self,
        receiver: Receiver,
        resting: bool,
        (seq, hand_off): (u64, HandOff),
        cost: impl FnOnce(&HandOff) -> usize,
    ) {
        let backlog = self.by_receiver.entry(receiver).or_default();
        let held = !resting
            && backlog.behind.is_none()
            && backlog.held.len() < self.share.entries
            && self.held.entries < self.budget.entries;
        let cost = if held { cost(&hand_off) } else { 0 };
        if !held || !Self::fits(self.share, self.budget, self.held, backlog, cost) {
            backlog.behind.get_or_insert(seq);
            return;
        }
        let entry = Entry {
            seq,
            hand_off,
            cost,
        };
        Self::hold(&mut self.held, backlog, entry);
    }

    /// Whether one more hand-off of `cost` stays within `backlog`'s share and the budget.
    fn fits(share: Limits, budget: Limits, held: Limits, backlog: &Backlog, cost: usize) -> bool {
        backlog.held.len() < share.entries
            && backlog.held_bytes + cost <= share.bytes
            && held.entries < budget.entries
            && held.bytes + cost <= budget.bytes
    }

    fn hold(held: &mut Limits, backlog: &mut Backlog, entry: Entry) {
        held.entries += 1;
        held.bytes += entry.cost;
        backlog.held_bytes += entry.cost;
        backlog.held.push_back(entry);
    }

    fn release(held: &mut Limits, backlog: &mut Backlog, entry: &Entry) {
        held.entries -= 1;
        held.bytes -= entry.cost;
        backlog.held_bytes -= entry.cost;
    }

    /// A send to `receiver` of the hand-offs from `oldest` on failed: everything it holds is
    /// left in the store, to be read again from there after its rest.
    pub(super) fn rest(&mut self, receiver: Receiver, oldest: u64) {
        let backlog = self.by_receiver.entry(receiver).or_default();
        for entry in std::mem::take(&mut backlog.held) {
            Self::release(&mut self.held, backlog, &entry);
        }
        backlog.behind = Some(backlog.behind.map_or(oldest, |behind| behind.min(oldest)));
    }

    /// Where a catch-up read for `receiver` starts, if it needs one: it holds nothing, and
    /// has hand-offs left in the store.
    pub(super) fn catch_up_from(&self, receiver: Receiver) -> Option<u64> {
        let backlog = self.by_receiver.get(&receiver)?;
        backlog.held.is_empty().then_some(backlog.behind).flatten()
    }

    /// Takes in what a catch-up read for `receiver` found of its own, in sequence order: its
    /// entries below `cursor`, read up to `next`, as many as its share and
    /// the budget allow (at least one); the rest are read again. Once the reads have reached
    /// the cursor, the cursor's reads bring the rest.
    pub(super) fn caught_up(
        &mut self,
        receiver: Receiver,
        found: impl IntoIterator<Item = Entry>,
        next: u64,
        cursor: u64,
    ) {
        let backlog = self.by_receiver.entry(receiver).or_default();
        let mut left_at = None;
        // In sequence order: what comes after the cursor, or after one left, is not taken
        // (nor looked at, when `found` works out costs as it goes).
        for entry in found.into_iter().take_while(|entry| entry.seq < cursor) {
            let first = backlog.held.is_empty();
            if !first && !Self::fits(self.share, self.budget, self.held, backlog, entry.cost) {
                left_at = Some(entry.seq);
                break;
            }
            Self::hold(&mut self.held, backlog, entry);
        }
        backlog.behind = left_at.or((next < cursor).then_some(next));
        if backlog.held.is_empty() && backlog.behind.is_none() {
            self.by_receiver.remove(&receiver);
        }
    }

    /// The next batch for `receiver`: its oldest hand-offs held, at most `limits` (but at
    /// least one, so that a hand-off too large for the bus fails loudly instead of waiting).
    pub(super) fn batch(&mut self, receiver: Receiver, limits: Limits) -> Vec<Entry> {
        let Some(backlog) = self.by_receiver.get_mut(&receiver) else {
            return Vec::new();
        };
        let mut batch: Vec<Entry> = Vec::new();
        let mut bytes = 0;
        while let Some(entry) = backlog.held.front() {
            let fits = batch.is_empty()
                || (batch.len() < limits.entries && bytes + entry.cost <= limits.bytes);
            if !fits {
                break;
            }
            let entry = backlog.held.pop_front().expect("a front entry");
            bytes += entry.cost;
            Self::release(&mut self.held, backlog, &entry);
            batch.push(entry);
        }
        if backlog.held.is_empty() && backlog.behind.is_none() {
            self.by_receiver.remove(&receiver);
        }
        batch
    }

    /// Receivers with a backlog, those with the oldest hand-offs first.
    pub(super) fn receivers(&self) -> Vec<Receiver> {
        let mut receivers: Vec<(Option<u64>, Receiver)> = self
            .by_receiver
            .iter()
            .map(|(receiver, backlog)| {
                let oldest = backlog.held.front().map(|entry| entry.seq);
                (oldest.or(backlog.behind), *receiver)
            })
            .collect();
        receivers.sort_by_key(|(oldest, _)| *oldest);
        receivers
            .into_iter()
            .map(|(_, receiver)| receiver)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use cascade_core::{EventId, QueueName, Timestamp};

    use super::*;

    const ROOMY: Limits = Limits {
        entries: 100,
        bytes: 1 << 20,
    };
    const TO_1: Receiver = Receiver::Dispatcher(1);

    fn schedule() -> HandOff {
        HandOff::Schedule {
            queue: QueueName::parse("jobs").expect("queue"),
            id: EventId::parse("e").expect("id"),
            version: 1,
            at: Timestamp::from_micros(1),
        }
    }

    fn entry(seq: u64, cost: usize) -> Entry {
        Entry {
            seq,
            hand_off: schedule(),
            cost,
        }
    }

    fn seqs(batch: &[Entry]) -> Vec<u64> {
        batch.iter().map(|entry| entry.seq).collect()
    }

    #[test]
    fn each_receiver_gets_its_entries_in_order_the_oldest_first() {
        let mut backlogs = Backlogs::new(ROOMY, ROOMY);
        backlogs.add(TO_1, false, (1, schedule()), |_| 10);
        backlogs.add(Receiver::Timer, false, (2, schedule()), |_| 10);
        backlogs.add(TO_1, false, (3, schedule()), |_| 10);
        assert_eq!(backlogs.receivers(), [TO_1, Receiver::Timer]);
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [1, 3]);
        assert_eq!(seqs(&backlogs.batch(Receiver::Timer, ROOMY)), [2]);
        assert!(backlogs.receivers().is_empty());
    }

    #[test]
    fn a_batch_stops_at_its_count_or_bytes_without_skipping_ahead() {
        let mut backlogs = Backlogs::new(ROOMY, ROOMY);
        for (seq, cost) in [(1, 150), (2, 150), (3, 1)] {
            backlogs.add(TO_1, false, (seq, schedule()), |_| cost);
        }
        let small = Limits {
            entries: 100,
            bytes: 250,
        };
        // The second does not fit; the small third must not overtake it.
        assert_eq!(seqs(&backlogs.batch(TO_1, small)), [1]);
        let two = Limits {
            entries: 2,
            ..ROOMY
        };
        assert_eq!(seqs(&backlogs.batch(TO_1, two)), [2, 3]);
    }

    #[test]
    fn a_hand_off_too_large_for_the_bus_is_still_sent_alone() {
        let mut backlogs = Backlogs::new(ROOMY, ROOMY);
        backlogs.add(TO_1, false, (7, schedule()), |_| 500);
        backlogs.add(TO_1, false, (8, schedule()), |_| 1);
        let tight = Limits {
            entries: 100,
            bytes: 50,
        };
        assert_eq!(seqs(&backlogs.batch(TO_1, tight)), [7]);
    }

    /// A failed send leaves its receiver's hand-offs in the store from the oldest failed on;
    /// others are held and sent meanwhile, and the receiver catches up by sequence later.
    #[test]
    fn a_resting_receiver_is_read_again_from_its_oldest_hand_off() {
        let mut backlogs = Backlogs::new(ROOMY, ROOMY);
        backlogs.add(TO_1, false, (1, schedule()), |_| 10);
        backlogs.add(TO_1, false, (2, schedule()), |_| 10);
        let failed = backlogs.batch(
            TO_1,
            Limits {
                entries: 1,
                ..ROOMY
            },
        );
        backlogs.rest(TO_1, failed[0].seq);
        backlogs.add(TO_1, true, (3, schedule()), |_| 10);
        backlogs.add(Receiver::Timer, false, (4, schedule()), |_| 10);
        assert!(
            backlogs.batch(TO_1, ROOMY).is_empty(),
            "nothing held while it rests"
        );
        assert_eq!(seqs(&backlogs.batch(Receiver::Timer, ROOMY)), [4]);

        // Its rest over, it reads from 1 on (4 is the timer's); 5 is at the cursor.
        assert_eq!(backlogs.catch_up_from(TO_1), Some(1));
        let found = [1, 2, 3, 5].map(|seq| entry(seq, 10));
        backlogs.caught_up(TO_1, found, 6, 5);
        assert_eq!(backlogs.catch_up_from(TO_1), None);
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [1, 2, 3]);
        // Caught up, it is held again as the cursor reads.
        backlogs.add(TO_1, false, (5, schedule()), |_| 10);
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [5]);
    }

    #[test]
    fn a_catch_up_read_cut_short_goes_on_from_where_it_stopped() {
        let mut backlogs = Backlogs::new(ROOMY, ROOMY);
        backlogs.rest(TO_1, 10);
        backlogs.caught_up(TO_1, [entry(10, 1), entry(11, 1)], 12, 50);
        assert_eq!(
            backlogs.catch_up_from(TO_1),
            None,
            "it holds some: send them first"
        );
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [10, 11]);
        assert_eq!(backlogs.catch_up_from(TO_1), Some(12));
    }

    /// Past the budget, entries are left in the store, and later entries of the same
    /// receiver too, to keep its order.
    #[test]
    fn past_the_budget_hand_offs_wait_in_the_store() {
        let two = Limits {
            entries: 2,
            bytes: 1 << 20,
        };
        let mut backlogs = Backlogs::new(ROOMY, two);
        backlogs.add(TO_1, false, (1, schedule()), |_| 10);
        backlogs.add(TO_1, false, (2, schedule()), |_| 10);
        backlogs.add(Receiver::Timer, false, (3, schedule()), |_| 10);
        backlogs.add(TO_1, false, (4, schedule()), |_| 10);
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [1, 2]);
        assert_eq!(backlogs.catch_up_from(TO_1), Some(4));
        assert_eq!(backlogs.catch_up_from(Receiver::Timer), Some(3));
        // With room again, the timer's next entry still waits behind its 3.
        backlogs.add(Receiver::Timer, false, (5, schedule()), |_| 10);
        assert!(backlogs.batch(Receiver::Timer, ROOMY).is_empty());
        let found = [entry(3, 10), entry(5, 10)];
        backlogs.caught_up(Receiver::Timer, found, 6, 6);
        assert_eq!(seqs(&backlogs.batch(Receiver::Timer, ROOMY)), [3, 5]);
    }

    /// A receiver holds at most its share, so that one with a large backlog leaves the
    /// budget to the others.
    #[test]
    fn past_its_share_a_receiver_waits_in_the_store() {
        let two = Limits {
            entries: 2,
            bytes: 1 << 20,
        };
        let mut backlogs = Backlogs::new(two, ROOMY);
        for seq in 1..=3 {
            backlogs.add(TO_1, false, (seq, schedule()), |_| 10);
        }
        backlogs.add(Receiver::Timer, false, (4, schedule()), |_| 10);
        assert_eq!(seqs(&backlogs.batch(Receiver::Timer, ROOMY)), [4]);
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [1, 2]);
        assert_eq!(backlogs.catch_up_from(TO_1), Some(3));
        // A catch-up holds its share too, and the rest is read again after.
        let found = (3..=6).map(|seq| entry(seq, 10));
        backlogs.caught_up(TO_1, found, 7, 9);
        assert_eq!(seqs(&backlogs.batch(TO_1, ROOMY)), [3, 4]);
        assert_eq!(backlogs.catch_up_from(TO_1), Some(5));
    }
}
