//! The fault suite's workload: producers enqueue single events (half of them delayed)
//! alternately into a plain queue and into a 3-stage pipeline ([`Flow`]), consumers take
//! and ack the plain queue, and everything seen goes into a [`History`]. Producers retry a
//! failed enqueue with the same client ID until it is acknowledged (a repeated ID is
//! answered with the original event), so a fault never leaves an event half-sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cascade_client::{Client, api};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::Code;

use crate::Cluster;
use crate::flow::{Flow, STAGES};
use crate::history::{Counts, History, Line};
use crate::scenarios::{config, create, seconds};

/// Every call of the workload gives up after this (a stalled connection must not hang it).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one event may keep failing to enqueue before the test fails.
const ENQUEUE_WITHIN: Duration = Duration::from_secs(60);
/// Lease of the plain queue and of the pipeline's stages: short, so that what a fault
/// leaves leased comes back soon.
pub const LEASE: Duration = Duration::from_secs(3);
/// Deliveries (consumers' and the handler's) before each fault, so that each lands in a
/// running load, wherever it has got to.
const BETWEEN_FAULTS: usize = 300;
const PROGRESS_WITHIN: Duration = Duration::from_secs(60);
const SERVING_WITHIN: Duration = Duration::from_secs(60);
/// How long the drain may take; what has not arrived by then is lost.
const DRAIN_WITHIN: Duration = Duration::from_secs(120);
const PRODUCERS: usize = 4;
const CONSUMERS: usize = 2;
/// A producer's pause between two enqueues: about 800 events/s in all.
const PAUSE: Duration = Duration::from_millis(5);
/// The longest delay of an event, unless the test asks for another.
const LONGEST_DELAY: Duration = Duration::from_millis(1_500);

pub struct Load {
    history: Arc<History>,
    flow: Flow,
    queue: String,
    producing: Arc<AtomicBool>,
    consuming: Arc<AtomicBool>,
    producers: Vec<JoinHandle<()>>,
    consumers: Vec<JoinHandle<()>>,
}

impl Load {
    /// Creates the queue `<base>-q` and the pipeline `<base>…`, and starts the producers and
    /// consumers against the cluster's gateway.
    pub async fn start(cluster: &mut Cluster, base: &str) -> Load {
        Load::start_with_delays(cluster, base, LONGEST_DELAY).await
    }

    /// Like [`Load::start`], with delays of up to `longest_delay`.
    pub async fn start_with_delays(
        cluster: &mut Cluster,
        base: &str,
        longest_delay: Duration,
    ) -> Load {
        let flow = Flow::start(cluster, base, LEASE.as_secs_f64(), 11).await;
        let queue = format!("{base}-q");
        let c = cluster.client().await;
        create(&c, &queue, config(LEASE.as_secs_f64(), 0)).await;
        let history = Arc::new(History::default());
        let producing = Arc::new(AtomicBool::new(true));
        let consuming = Arc::new(AtomicBool::new(true));
        let producers = (0..PRODUCERS)
            .map(|n| {
                let producer = Producer {
                    client: c.clone(),
                    history: Arc::clone(&history),
                    queue: queue.clone(),
                    pipeline: flow.pipeline.clone(),
                    tag: format!("{base}-{n}"),
                    seed: n as u64,
                    longest_delay,
                };
                tokio::spawn(producer.run(Arc::clone(&producing)))
            })
            .collect();
        let consumers = (0..CONSUMERS)
            .map(|_| {
                let consumer = Consumer {
                    client: c.clone(),
                    history: Arc::clone(&history),
                    queue: queue.clone(),
                };
                tokio::spawn(consumer.run(Arc::clone(&consuming)))
            })
            .collect();
        Load {
            history,
            flow,
            queue,
            producing,
            consuming,
            producers,
            consumers,
        }
    }

    /// Everything seen so far: consumers' deliveries and the handler's calls.
    fn progress(&self) -> usize {
        self.history.deliveries() + self.flow.server.call_count()
    }

    /// Plays one fault: waits for more deliveries, runs `fault`, waits until every shard
    /// serves again, and records the fault from its start until then plus `linger` (how long
    /// after it a redelivery may still be its doing). Returns how long it took.
    pub async fn play_fault(
        &self,
        cluster: &mut Cluster,
        linger: Duration,
        fault: impl AsyncFnOnce(&mut Cluster),
    ) -> Duration {
        self.wait_for_progress().await;
        let start = Instant::now();
        fault(cluster).await;
        self.wait_serving(cluster).await;
        self.history.fault(start, Instant::now() + linger);
        start.elapsed()
    }

    /// Lets the load run on past the last fault, drains it, requires a clean history
    /// (`early_allowance` as in [`History::check`]) and stops the cluster.
    pub async fn check_and_stop(self, cluster: Cluster, early_allowance: Duration) {
        self.wait_for_progress().await;
        let counts = self.finish(&cluster, early_allowance).await;
        eprintln!("{counts}");
        assert!(counts.clean(), "{counts}");
        tokio::task::spawn_blocking(move || cluster.stop())
            .await
            .expect("stop the cluster");
    }

    /// Waits until [`BETWEEN_FAULTS`] more deliveries were seen.
    async fn wait_for_progress(&self) {
        let (from, more, within) = (self.progress(), BETWEEN_FAULTS, PROGRESS_WITHIN);
        let deadline = Instant::now() + within;
        while self.progress() < from + more {
            assert!(
                Instant::now() < deadline,
                "no progress: {} deliveries within {within:?}, wanted {more}",
                self.progress() - from
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the producers, waits until every event has gone through (each arrived: acked
    /// from the plain queue or handled by the last stage; and the queue and every stage hold
    /// nothing, so nothing is in flight), stops the consumers and checks the history;
    /// `early_allowance` as in [`History::check`]. Events that never arrive within
    /// [`DRAIN_WITHIN`] are reported as lost by the check.
    async fn finish(mut self, cluster: &Cluster, early_allowance: Duration) -> Counts {
        let within = DRAIN_WITHIN;
        self.producing.store(false, Ordering::SeqCst);
        for p in std::mem::take(&mut self.producers) {
            p.await.expect("a producer");
        }
        let c = cluster.client().await;
        let deadline = Instant::now() + within;
        loop {
            let held = self.held(&c).await;
            let done = self.flow.server.succeeded_ids(STAGES[STAGES.len() - 1]);
            let unarrived = self.history.unarrived(&done);
            if matches!(held, Ok(0)) && unarrived == 0 {
                break;
            }
            if Instant::now() >= deadline {
                // Held events are a stall; events gone without arriving are for the check.
                assert!(
                    matches!(held, Ok(0)),
                    "not drained within {within:?}: {held:?} events still held"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.consuming.store(false, Ordering::SeqCst);
        for c in std::mem::take(&mut self.consumers) {
            c.await.expect("a consumer");
        }
        for call in self.flow.server.calls() {
            let stage = STAGES
                .iter()
                .position(|s| *s == call.stage)
                .unwrap_or_else(|| panic!("a call of an unknown stage: {call:?}"));
            self.history
                .delivered(&call.id, stage, &call.payload, call.at, call.succeeded());
        }
        self.history.check(early_allowance)
    }

    /// Waits until the gateway answers for the plain queue and every stage again (after
    /// a fault: every shard serves).
    async fn wait_serving(&self, cluster: &Cluster) {
        let within = SERVING_WITHIN;
        let c = cluster.client().await;
        let deadline = Instant::now() + within;
        while let Err(status) = self.held(&c).await {
            assert!(
                Instant::now() < deadline,
                "not serving within {within:?}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Events held (ready, delayed or leased) by the plain queue and the stages.
    async fn held(&self, c: &Client) -> Result<u64, tonic::Status> {
        let request = api::QueueStatsRequest {
            name: self.queue.clone(),
        };
        let q = c.admin().queue_stats(request).await?.into_inner();
        let stages = self.flow.stats(c).await?;
        Ok(std::iter::once(&q)
            .chain(&stages)
            .map(|s| s.ready + s.delayed + s.leased)
            .sum())
    }
}

/// Whether a failed call may be tried again: what a fault causes (the server gone, a
/// stalled connection, backpressure), not a refusal of the request itself.
fn transient(status: &tonic::Status) -> bool {
    !matches!(
        status.code(),
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::Unauthenticated
            | Code::Unimplemented
    )
}

fn timed<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_TIMEOUT);
    request
}

struct Producer {
    client: Client,
    history: Arc<History>,
    queue: String,
    pipeline: String,
    tag: String,
    seed: u64,
    longest_delay: Duration,
}

impl Producer {
    async fn run(self, producing: Arc<AtomicBool>) {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut seq = 0u64;
        while producing.load(Ordering::SeqCst) {
            let id = format!("{}-{seq}", self.tag);
            let line = match seq % 2 {
                0 => Line::Queue,
                _ => Line::Pipeline {
                    stages: STAGES.len(),
                },
            };
            // Two in four delayed: one plain-queue event and one pipeline event.
            let delay = match seq % 4 < 2 {
                true => Duration::ZERO,
                false => self.longest_delay.mul_f64(rng.f64()),
            };
            let payload = format!("{id}:{}", rng.u64(..)).into_bytes();
            self.enqueue(&id, line, payload, delay).await;
            seq += 1;
            tokio::time::sleep(PAUSE).await;
        }
    }

    /// Enqueues until acknowledged, then records it.
    async fn enqueue(&self, id: &str, line: Line, payload: Vec<u8>, delay: Duration) {
        let (queue, pipeline) = match line {
            Line::Queue => (self.queue.clone(), String::new()),
            Line::Pipeline { .. } => (String::new(), self.pipeline.clone()),
        };
        let request = api::EnqueueRequest {
            queue,
            pipeline,
            id: id.to_owned(),
            payload: payload.clone().into(),
            when: Some(api::enqueue_request::When::Delay(seconds(
                delay.as_secs_f64(),
            ))),
            ..Default::default()
        };
        let first_sent = Instant::now();
        loop {
            match self.client.ingest().enqueue(timed(request.clone())).await {
                Ok(answer) => {
                    let answer = answer.into_inner();
                    assert_eq!(answer.id, id, "the event's ID");
                    self.history.enqueued(id, line, &payload, first_sent, delay);
                    return;
                }
                Err(status) if transient(&status) => {
                    assert!(
                        first_sent.elapsed() < ENQUEUE_WITHIN,
                        "{id} not enqueued within {ENQUEUE_WITHIN:?}: {status}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(status) => panic!("enqueue {id}: {status}"),
            }
        }
    }
}

struct Consumer {
    client: Client,
    history: Arc<History>,
    queue: String,
}

impl Consumer {
    async fn run(self, consuming: Arc<AtomicBool>) {
        while consuming.load(Ordering::SeqCst) {
            let take = api::TakeRequest {
                queue: self.queue.clone(),
                max_events: 16,
                wait: Some(seconds(0.2)),
                ..Default::default()
            };
            let events = match self.client.worker().take(timed(take)).await {
                Ok(answer) => answer.into_inner().events,
                Err(status) if transient(&status) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(status) => panic!("take from {}: {status}", self.queue),
            };
            if events.is_empty() {
                continue;
            }
            let at = Instant::now();
            let mut completions = Vec::new();
            for leased in &events {
                let event = leased.event.as_ref().expect("an event");
                self.history
                    .delivered(&event.id, 0, &event.payload, at, true);
                completions.push(api::Completion {
                    queue: event.queue.clone(),
                    id: event.id.clone(),
                    lease_token: leased.lease_token.clone(),
                    outcome: Some(api::completion::Outcome::Ack(api::Ack {})),
                });
            }
            let request = api::CompleteRequest { completions };
            match self.client.worker().complete(timed(request)).await {
                Ok(answer) => {
                    let at = Instant::now();
                    for (leased, result) in events.iter().zip(answer.into_inner().results) {
                        let id = &leased.event.as_ref().expect("an event").id;
                        match Code::from_i32(result.code) {
                            Code::Ok => self.history.acked(id, at),
                            // The lease ended and the event went to another consumer.
                            Code::FailedPrecondition => {}
                            // The shard could not be reached: it may or may not have acked.
                            code if code == Code::Unavailable || code == Code::DeadlineExceeded => {
                                self.history.ack_unknown(id)
                            }
                            code => panic!("ack {id}: {code:?} {}", result.message),
                        }
                    }
                }
                Err(_) => {
                    for leased in &events {
                        self.history
                            .ack_unknown(&leased.event.as_ref().expect("an event").id);
                    }
                }
            }
        }
    }
}
