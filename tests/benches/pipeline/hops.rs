//! The timing no-op: the stages' handler advances every event at once, like the built-in
//! `noop`, and for a sample of events (payload starting with [`SAMPLED`]) notes when each
//! stage's handler started, so that the time of each hop is measured per event:
//!
//! - hop 1, enqueue → stage 1: from the event's `created_at` (the enqueue, on the shard's
//!   clock) to the start of stage 1's handler;
//! - hop k, stage k-1 → stage k: from the start of stage k-1's handler to the start of
//!   stage k's, for the same event (the advance made durable, the take that leased it);
//! - of which "ready → handler": from the event's `activate_at` at stage k (when the
//!   advance that brought it was applied) to the start of the handler.
//!
//! The last stage's ack has no next handler to see it, so it is not in these times. One
//! process, one clock (µs).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use cascade_core::{Event, Outcome, Timestamp};
use cascade_worker::{Handler, HandlerError};

/// The first payload byte of a sampled event.
pub const SAMPLED: u8 = b'S';

pub struct Hops {
    /// The stages' queues, in order.
    queues: Vec<String>,
    measuring: AtomicBool,
    /// Handler calls at the last stage (every event, sampled or not).
    last_stage_calls: AtomicU64,
    inner: Mutex<Samples>,
}

#[derive(Default)]
struct Samples {
    /// When each sampled event's handler last started, until its last stage.
    started: HashMap<String, u64>,
    hop: Vec<Vec<u64>>,
    ready_wait: Vec<Vec<u64>>,
    end_to_end: Vec<u64>,
}

/// p50 and p99 of one kind of hop.
pub struct Percentiles {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
}

pub struct Report {
    pub hop: Vec<Percentiles>,
    pub ready_wait: Vec<Percentiles>,
    pub end_to_end: Percentiles,
}

impl Hops {
    pub fn new(queues: Vec<String>) -> Hops {
        let stages = queues.len();
        Hops {
            queues,
            measuring: AtomicBool::new(false),
            last_stage_calls: AtomicU64::new(0),
            inner: Mutex::new(Samples {
                hop: vec![Vec::new(); stages],
                ready_wait: vec![Vec::new(); stages],
                ..Samples::default()
            }),
        }
    }

    /// Samples are kept only while measuring (the steady window).
    pub fn measure(&self, on: bool) {
        self.measuring.store(on, Ordering::Relaxed);
    }

    pub fn last_stage_calls(&self) -> u64 {
        self.last_stage_calls.load(Ordering::Relaxed)
    }

    fn record(&self, event: &Event) {
        let Some(stage) = self.queues.iter().position(|q| q == event.queue.as_str()) else {
            return;
        };
        let last = stage + 1 == self.queues.len();
        if last {
            self.last_stage_calls.fetch_add(1, Ordering::Relaxed);
        }
        if event.payload.first() != Some(&SAMPLED) {
            return;
        }
        let now = Timestamp::from_system_time(SystemTime::now()).as_micros();
        let since = |t: Timestamp| now.saturating_sub(t.as_micros());
        let measuring = self.measuring.load(Ordering::Relaxed);
        let mut samples = self.inner.lock().expect("hop samples");
        let previous = match stage {
            0 => Some(event.created_at.as_micros()),
            _ => samples.started.remove(event.id.as_str()),
        };
        if !last {
            samples.started.insert(event.id.as_str().to_owned(), now);
        }
        if !measuring {
            return;
        }
        if let Some(previous) = previous {
            samples.hop[stage].push(now.saturating_sub(previous));
        }
        samples.ready_wait[stage].push(since(event.activate_at));
        if last {
            samples.end_to_end.push(since(event.created_at));
        }
    }

    pub fn report(&self) -> Report {
        let mut samples = self.inner.lock().expect("hop samples");
        let samples = &mut *samples;
        Report {
            hop: samples.hop.iter_mut().map(|v| percentiles(v)).collect(),
            ready_wait: samples
                .ready_wait
                .iter_mut()
                .map(|v| percentiles(v))
                .collect(),
            end_to_end: percentiles(&mut samples.end_to_end),
        }
    }
}

fn percentiles(micros: &mut [u64]) -> Percentiles {
    micros.sort_unstable();
    let at = |q: usize| {
        let i = (micros.len() * q / 100).min(micros.len().saturating_sub(1));
        Duration::from_micros(micros.get(i).copied().unwrap_or(0))
    };
    Percentiles {
        samples: micros.len(),
        p50: at(50),
        p99: at(99),
    }
}

/// The stages' handler: the built-in `noop` (advance at once), noting hop times first.
pub struct TimedNoop(pub std::sync::Arc<Hops>);

impl Handler for TimedNoop {
    async fn handle(&self, event: &Event, _attempt: u32) -> Result<Outcome, HandlerError> {
        self.0.record(event);
        Ok(Outcome::Advance {
            to: None,
            payload: None,
            headers: Default::default(),
            delay: None,
        })
    }
}
