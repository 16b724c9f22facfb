//! The fault suite's history checker: what the producers had acknowledged, what consumers
//! and the pipeline's handler were given, which acks were confirmed, and when faults were
//! on; then, once everything has drained, five counts that must all be 0:
//!
//! - **lost**: an acknowledged enqueue that never arrived (a plain queue's event never
//!   delivered, or delivered and neither acked nor with an ack whose answer was lost; a
//!   pipeline event never handled successfully by the last stage);
//! - **duplicated after ack**: a delivery after the ack of the same event was confirmed
//!   (plain queue: the consumer's ack answered OK; a pipeline stage: the next stage already
//!   had the event; the last stage, whose ack the test cannot see: a second success with no
//!   fault between it and the first);
//! - **unexpected**: a delivery of an event no producer had acknowledged;
//! - **early**: a first delivery before the event's time (the enqueue's send plus its delay)
//!   by more than an allowance (0, or a clock step's size);
//! - **corrupt**: a delivery whose payload is not the one enqueued.
//!
//! Times are the test process's monotonic clock: an event sent at `t` with delay `d` cannot
//! be due before `t + d`, and a delivery recorded at `r` happened before `r`, so `r < t + d`
//! proves it early whatever the server's clock says.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Where an event was enqueued: a plain queue a consumer takes from, or a pipeline of
/// `stages` stages whose handler the test serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line {
    Queue,
    Pipeline { stages: usize },
}

#[derive(Clone, Debug)]
struct Sent {
    line: Line,
    payload: Vec<u8>,
    /// The first send of the enqueue plus its delay.
    due: Instant,
}

#[derive(Clone, Debug)]
struct Delivery {
    id: String,
    stage: usize,
    payload: Vec<u8>,
    at: Instant,
    succeeded: bool,
}

#[derive(Default)]
struct Record {
    sent: HashMap<String, Sent>,
    deliveries: Vec<Delivery>,
    /// Plain queue acks answered OK, by event.
    acked: HashMap<String, Instant>,
    /// Plain queue events with an ack whose answer was lost (it may have been done).
    ack_unknown: HashSet<String>,
    /// From the start of each fault to the moment everything served again.
    faults: Vec<(Instant, Instant)>,
}

/// Observations of one test, shared by its producers, consumers and handler.
#[derive(Default)]
pub struct History {
    record: Mutex<Record>,
}

/// The checker's result: every count must be 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub enqueued: usize,
    pub lost: usize,
    pub duplicated_after_ack: usize,
    pub unexpected: usize,
    pub early: usize,
    pub corrupt: usize,
    /// Deliveries beyond the first of a stage that the rules allow (redeliveries after a
    /// fault, retries after a failed handler): reported, not an error.
    pub redelivered: usize,
    /// The first few events behind the non-zero counts.
    pub examples: Vec<String>,
}

impl Counts {
    pub fn clean(&self) -> bool {
        self.lost + self.duplicated_after_ack + self.unexpected + self.early + self.corrupt == 0
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} enqueued: lost {}, duplicated after ack {}, unexpected {}, early {}, corrupt {} \
             ({} redelivered)",
            self.enqueued,
            self.lost,
            self.duplicated_after_ack,
            self.unexpected,
            self.early,
            self.corrupt,
            self.redelivered
        )?;
        for example in &self.examples {
            write!(f, "\n  {example}")?;
        }
        Ok(())
    }
}

const EXAMPLES: usize = 20;

impl History {
    /// An enqueue the server acknowledged; `first_sent` is when its first try was sent.
    pub fn enqueued(
        &self,
        id: &str,
        line: Line,
        payload: &[u8],
        first_sent: Instant,
        delay: Duration,
    ) {
        let sent = Sent {
            line,
            payload: payload.to_vec(),
            due: first_sent + delay,
        };
        self.lock().sent.insert(id.to_owned(), sent);
    }

    /// A delivery to a consumer (stage 0) or to the handler of pipeline stage `stage`;
    /// `succeeded`: the handler answered 2xx (a consumer's deliveries always count).
    pub fn delivered(&self, id: &str, stage: usize, payload: &[u8], at: Instant, succeeded: bool) {
        self.lock().deliveries.push(Delivery {
            id: id.to_owned(),
            stage,
            payload: payload.to_vec(),
            at,
            succeeded,
        });
    }

    /// A consumer's ack of a plain queue's event answered OK.
    pub fn acked(&self, id: &str, at: Instant) {
        self.lock().acked.entry(id.to_owned()).or_insert(at);
    }

    /// A consumer's ack whose answer never came (the call failed): it may have been done.
    pub fn ack_unknown(&self, id: &str) {
        self.lock().ack_unknown.insert(id.to_owned());
    }

    /// A fault from `start` until everything served again at `end`.
    pub fn fault(&self, start: Instant, end: Instant) {
        self.lock().faults.push((start, end));
    }

    /// How many enqueues were acknowledged so far.
    pub fn sent(&self) -> usize {
        self.lock().sent.len()
    }

    /// How many acknowledged enqueues have not arrived yet: plain-queue events without an
    /// ack (confirmed or with its answer lost), pipeline events not in `pipeline_done`.
    pub fn unarrived(&self, pipeline_done: &HashSet<String>) -> usize {
        let record = self.lock();
        record
            .sent
            .iter()
            .filter(|(id, sent)| match sent.line {
                Line::Queue => !record.acked.contains_key(*id) && !record.ack_unknown.contains(*id),
                Line::Pipeline { .. } => !pipeline_done.contains(*id),
            })
            .count()
    }

    /// How many deliveries were recorded so far (to wait for progress between faults).
    pub fn deliveries(&self) -> usize {
        self.lock().deliveries.len()
    }

    /// Checks the history; `early_allowance`: how early a first delivery may be (a step of
    /// the server's clock), zero otherwise.
    pub fn check(&self, early_allowance: Duration) -> Counts {
        self.lock().check(early_allowance)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().expect("the history")
    }
}

impl Record {
    fn check(&self, early_allowance: Duration) -> Counts {
        let mut counts = Counts {
            enqueued: self.sent.len(),
            ..Counts::default()
        };
        let mut by_event: HashMap<&str, Vec<&Delivery>> = HashMap::new();
        for d in &self.deliveries {
            by_event.entry(d.id.as_str()).or_default().push(d);
        }
        let note = |counts: &mut Counts, what: String| {
            if counts.examples.len() < EXAMPLES {
                counts.examples.push(what);
            }
        };
        for id in by_event.keys() {
            if !self.sent.contains_key(*id) {
                counts.unexpected += 1;
                note(
                    &mut counts,
                    format!("{id}: delivered, never acknowledged to a producer"),
                );
            }
        }
        for (id, sent) in &self.sent {
            let mut deliveries = by_event.remove(id.as_str()).unwrap_or_default();
            deliveries.sort_by_key(|d| d.at);
            if deliveries.iter().any(|d| d.payload != sent.payload) {
                counts.corrupt += 1;
                note(&mut counts, format!("{id}: delivered with another payload"));
            }
            if let Some(first) = deliveries.iter().find(|d| d.stage == 0)
                && first.at + early_allowance < sent.due
            {
                counts.early += 1;
                note(
                    &mut counts,
                    format!("{id}: delivered {:?} early", sent.due - first.at),
                );
            }
            let stages = match sent.line {
                Line::Queue => 1,
                Line::Pipeline { stages } => stages,
            };
            for stage in 0..stages {
                let here: Vec<&Delivery> = deliveries
                    .iter()
                    .copied()
                    .filter(|d| d.stage == stage)
                    .collect();
                counts.redelivered += here.len().saturating_sub(1);
                let last = stage + 1 == stages;
                let done_at = match sent.line {
                    Line::Queue => self.acked.get(id).copied(),
                    Line::Pipeline { .. } if !last => deliveries
                        .iter()
                        .find(|d| d.stage == stage + 1)
                        .map(|d| d.at),
                    Line::Pipeline { .. } => None,
                };
                if let Some(done_at) = done_at
                    && let Some(late) = here.iter().find(|d| d.at > done_at)
                {
                    counts.duplicated_after_ack += 1;
                    note(
                        &mut counts,
                        format!(
                            "{id}: stage {stage} again {:?} after its ack",
                            late.at - done_at
                        ),
                    );
                }
                let successes: Vec<Instant> =
                    here.iter().filter(|d| d.succeeded).map(|d| d.at).collect();
                if matches!(sent.line, Line::Pipeline { .. })
                    && last
                    && let Some(repeat) = successes
                        .windows(2)
                        .find(|pair| !self.fault_between(pair[0], pair[1]))
                {
                    counts.duplicated_after_ack += 1;
                    note(
                        &mut counts,
                        format!(
                            "{id}: last stage succeeded twice, {:?} apart, with no fault between",
                            repeat[1] - repeat[0]
                        ),
                    );
                }
            }
            let arrived = match sent.line {
                Line::Queue => {
                    !deliveries.is_empty()
                        && (self.acked.contains_key(id) || self.ack_unknown.contains(id))
                }
                Line::Pipeline { stages } => deliveries
                    .iter()
                    .any(|d| d.stage + 1 == stages && d.succeeded),
            };
            if !arrived {
                counts.lost += 1;
                note(
                    &mut counts,
                    format!("{id}: lost ({} deliveries)", deliveries.len()),
                );
            }
        }
        counts
    }

    /// Whether a fault was on at some moment between `from` and `to`.
    fn fault_between(&self, from: Instant, to: Instant) -> bool {
        self.faults
            .iter()
            .any(|&(start, end)| start <= to && end >= from)
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
