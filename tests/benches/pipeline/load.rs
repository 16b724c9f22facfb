//! The producers: tasks that enqueue by pipeline name with `EnqueueBatch` of 100 events of
//! 100 bytes (one in ten sampled for hop times), each on its own connection, either as fast
//! as the pipeline drains (at most `backlog` events enqueued and not yet at the last stage,
//! so the run measures a flow, not a fill) or at a fixed rate (to measure latency below
//! saturation).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use cascade_client::{Client, api};
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::BoxError;
use crate::hops::{Hops, SAMPLED};

pub const BATCH: usize = 100;
pub const PAYLOAD_BYTES: usize = 100;
/// One event in this many is sampled for hop times.
const SAMPLE_EVERY: usize = 10;

#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// As fast as the pipeline takes them, with at most this many events in it.
    Backlog(u64),
    /// This many events per second in all, whatever the pipeline does.
    Rate(f64),
}

pub struct Load {
    /// Items the gateway refused (e.g. RESOURCE_EXHAUSTED when an inbox is full).
    pub refused: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    tasks: JoinSet<Result<(), BoxError>>,
}

impl Load {
    pub async fn start(
        gateway: &str,
        pipeline: &str,
        producers: usize,
        pace: Pace,
        hops: &Arc<Hops>,
    ) -> Result<Load, BoxError> {
        let enqueued = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = JoinSet::new();
        for _ in 0..producers {
            let producer = Producer {
                client: Client::connect(gateway).await?,
                pipeline: pipeline.to_owned(),
                enqueued: Arc::clone(&enqueued),
                refused: Arc::clone(&refused),
                stop: Arc::clone(&stop),
                hops: Arc::clone(hops),
            };
            tasks.spawn(producer.run(pace, producers));
        }
        Ok(Load {
            refused,
            stop,
            tasks,
        })
    }

    pub async fn stop(mut self) -> Result<(), BoxError> {
        self.stop.store(true, Ordering::Relaxed);
        while let Some(done) = self.tasks.join_next().await {
            done??;
        }
        Ok(())
    }
}

enum Gate {
    Tick(tokio::time::Interval),
    Backlog(u64),
}

struct Producer {
    client: Client,
    pipeline: String,
    enqueued: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    hops: Arc<Hops>,
}

impl Producer {
    async fn run(self, pace: Pace, producers: usize) -> Result<(), BoxError> {
        let mut gate = match pace {
            Pace::Rate(rate) => {
                let every = Duration::from_secs_f64(BATCH as f64 * producers as f64 / rate);
                let mut tick = tokio::time::interval(every);
                // Behind schedule, send the missed batches at once: the offered load stays
                // the rate asked for (open loop), and a backlog shows in the latencies.
                tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
                Gate::Tick(tick)
            }
            Pace::Backlog(most) => Gate::Backlog(most),
        };
        let mut ingest = self.client.ingest();
        while !self.stop.load(Ordering::Relaxed) {
            match &mut gate {
                Gate::Tick(tick) => {
                    tick.tick().await;
                }
                Gate::Backlog(most) => {
                    let through = self.hops.last_stage_calls();
                    if self
                        .enqueued
                        .load(Ordering::Relaxed)
                        .saturating_sub(through)
                        > *most
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        continue;
                    }
                }
            }
            let items = (0..BATCH)
                .map(|i| {
                    let mut payload = vec![b'-'; PAYLOAD_BYTES];
                    if i % SAMPLE_EVERY == 0 {
                        payload[0] = SAMPLED;
                    }
                    api::EnqueueRequest {
                        pipeline: self.pipeline.clone(),
                        payload: payload.into(),
                        ..Default::default()
                    }
                })
                .collect();
            let request = api::EnqueueBatchRequest { items };
            let results = ingest.enqueue_batch(request).await?.into_inner().results;
            let ok = results.iter().filter(|r| r.code == 0).count() as u64;
            self.enqueued.fetch_add(ok, Ordering::Relaxed);
            self.refused
                .fetch_add(results.len() as u64 - ok, Ordering::Relaxed);
        }
        Ok(())
    }
}
