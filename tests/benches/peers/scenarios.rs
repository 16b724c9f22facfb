//! The scenarios, the same for every system: unary enqueues from P producers (each on its
//! own connection, one enqueue at a time), take+ack in batches of 100 by C consumers
//! draining a backlog, and delayed events due over a window, taken as they come due. Each
//! measures its rate, and the CPU time of the server and of this process (the clients)
//! per operation from `/proc`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cascade_e2e::process::{TICKS_PER_SECOND, cpu_ticks};
use tokio::task::JoinSet;

use crate::systems::{Item, Peer, Producing, due_of, now_micros, payload, payload_bytes};
use crate::{BoxError, Plan};

/// Queues per scenario; producers go round them, consumers share them out.
pub const QUEUES: usize = 16;
/// Events per take, and per acknowledgement.
pub const BATCH: usize = 100;
/// Events per bulk enqueue while filling a backlog, at most...
const FILL_CHUNK: usize = 1000;
/// ...and payload bytes per bulk enqueue at most (Cascade refuses an `EnqueueBatch` of more
/// than `ingest.max_batch_bytes`, 16 MiB by default).
const FILL_CHUNK_BYTES: usize = 8 << 20;
/// Consumers of the delayed scenario on a system without a long poll, each going round
/// `QUEUES / DELAYED_CONSUMERS` of the queues.
const DELAYED_CONSUMERS: usize = 4;
/// Pause of a polling consumer whose whole round of queues found nothing due.
const IDLE_PAUSE: Duration = Duration::from_millis(1);

/// What a scenario measured.
pub struct Measured {
    /// Operations (enqueues, or events taken and acked) per second.
    pub rate: f64,
    /// The median and the 99th percentile of one call (an enqueue).
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// CPU time per operation of the server and of the clients (this process), µs.
    pub server_us: f64,
    pub client_us: f64,
}

/// The delays of events delivered after they came due.
pub struct Lateness {
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Events delivered before they were due (a bug in the system or the harness).
    pub early: u64,
}

/// The CPU ticks of each server process, by pid.
pub type ServerTicks<'a> = &'a dyn Fn() -> Vec<(u32, u64)>;

/// Server and client CPU ticks, read together.
struct Cpu {
    server: Vec<(u32, u64)>,
    client: u64,
}

fn cpu(server: ServerTicks<'_>) -> Cpu {
    Cpu {
        server: server(),
        client: cpu_ticks(std::process::id()).unwrap_or(0),
    }
}

/// Server and client CPU per operation, µs. A server process that started within the
/// window (a PostgreSQL backend) counts whole; one that ended within it is not seen.
fn per_op(before: &Cpu, after: &Cpu, ops: u64) -> (f64, f64) {
    let us = |ticks: u64| ticks as f64 / TICKS_PER_SECOND * 1e6 / ops.max(1) as f64;
    let server: u64 = after
        .server
        .iter()
        .map(|(pid, ticks)| {
            let earlier = before
                .server
                .iter()
                .find(|(p, _)| p == pid)
                .map_or(0, |(_, t)| *t);
            ticks.saturating_sub(earlier)
        })
        .sum();
    (us(server), us(after.client.saturating_sub(before.client)))
}

pub fn queues(scenario: &str) -> Vec<String> {
    (0..QUEUES).map(|i| format!("{scenario}-{i}")).collect()
}

/// `producers` connections, each enqueuing one event at a time, round-robin over `queues`.
pub async fn enqueue<P: Producing>(
    peer: &Arc<P>,
    server: ServerTicks<'_>,
    queues: &[String],
    producers: usize,
    plan: &Plan,
) -> Result<Measured, BoxError> {
    let done = Arc::new(AtomicU64::new(0));
    let (stop, measuring) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut tasks = JoinSet::new();
    for n in 0..producers {
        let mut producer = peer.producer().await?;
        let queue = queues[n % queues.len()].clone();
        let (done, stop, measuring) =
            (Arc::clone(&done), Arc::clone(&stop), Arc::clone(&measuring));
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let mut number = (n as u64) << 40;
            while !stop.load(Ordering::Relaxed) {
                number += 1;
                let sent = Instant::now();
                let item = Item {
                    payload: payload(number, 0),
                    due: None,
                };
                P::enqueue(&mut producer, &queue, item).await?;
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(sent.elapsed());
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, BoxError>(latencies)
        });
    }
    tokio::time::sleep(plan.warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let (before, count, at) = (cpu(server), done.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(plan.window).await;
    let (after, ops) = (cpu(server), done.load(Ordering::Relaxed) - count);
    let elapsed = at.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    while let Some(finished) = tasks.join_next().await {
        latencies.extend(finished??);
    }
    latencies.sort_unstable();
    let (server_us, client_us) = per_op(&before, &after, ops);
    Ok(Measured {
        rate: ops as f64 / elapsed.as_secs_f64(),
        p50: latencies.get(latencies.len() / 2).copied(),
        p99: latencies.get(latencies.len() * 99 / 100).copied(),
        server_us,
        client_us,
    })
}

/// Enqueues `count` events in bulk, event `i` due at `due(i)` (`None`: now) into queue
/// `i % queues.len()`, so that every queue has its share all along; one producer per queue
/// sends its events in chunks.
pub async fn fill<P: Peer>(
    peer: &Arc<P>,
    queues: &[String],
    count: usize,
    due: impl Fn(usize) -> Option<u64> + Clone + Send + 'static,
) -> Result<(), BoxError> {
    let mut tasks = JoinSet::new();
    for (q, queue) in queues.iter().enumerate() {
        let mut producer = peer.producer().await?;
        let (queue, due) = (queue.clone(), due.clone());
        let mine: Vec<usize> = (q..count).step_by(queues.len()).collect();
        tasks.spawn(async move {
            let chunk_events = (FILL_CHUNK_BYTES / payload_bytes()).clamp(1, FILL_CHUNK);
            for chunk in mine.chunks(chunk_events) {
                let items = chunk
                    .iter()
                    .map(|&i| {
                        let due = due(i);
                        Item {
                            payload: payload(i as u64, due.unwrap_or(0)),
                            due,
                        }
                    })
                    .collect();
                P::enqueue_many(&mut producer, &queue, items).await?;
            }
            Ok::<_, BoxError>(())
        });
    }
    while let Some(filled) = tasks.join_next().await {
        filled??;
    }
    Ok(())
}

/// `consumers` connections taking and acking batches of [`BATCH`] from a backlog of
/// `plan.backlog` events, for the window or until the backlog is gone.
pub async fn take<P: Peer>(
    peer: &Arc<P>,
    server: ServerTicks<'_>,
    queues: &[String],
    consumers: usize,
    plan: &Plan,
) -> Result<Measured, BoxError> {
    fill(peer, queues, plan.backlog, |_| None).await?;
    drain(peer, server, queues, consumers, plan.backlog, plan.window).await
}

/// `consumers` connections taking and acking batches of [`BATCH`] from the `backlog` events
/// ready in `queues`, for `window` or until they are gone.
pub async fn drain<P: Peer>(
    peer: &Arc<P>,
    server: ServerTicks<'_>,
    queues: &[String],
    consumers: usize,
    backlog: usize,
    window: Duration,
) -> Result<Measured, BoxError> {
    let taken = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Every consumer connected first; they start together once the clock runs.
    let (go, started) = tokio::sync::watch::channel(false);
    let mut tasks = JoinSet::new();
    for n in 0..consumers {
        let mut consumer = peer.consumer().await?;
        let mut started = started.clone();
        let mine: Vec<String> = queues
            .iter()
            .skip(n % queues.len())
            .step_by(consumers.min(queues.len()))
            .cloned()
            .collect();
        let (taken, stop) = (Arc::clone(&taken), Arc::clone(&stop));
        tasks.spawn(async move {
            started.wait_for(|go| *go).await?;
            let mut empty_in_a_row = 0;
            for queue in mine.iter().cycle() {
                if stop.load(Ordering::Relaxed) || empty_in_a_row > mine.len() * 3 {
                    break;
                }
                let batch = P::take_ack(&mut consumer, queue, BATCH).await?;
                match batch.is_empty() {
                    true => empty_in_a_row += 1,
                    false => empty_in_a_row = 0,
                }
                taken.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            P::finish(&mut consumer).await?;
            Ok::<_, BoxError>(())
        });
    }
    let (before, at) = (cpu(server), Instant::now());
    go.send_replace(true);
    let total = backlog as u64;
    while at.elapsed() < window && taken.load(Ordering::Relaxed) < total && !tasks.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if let Some(ended) = tasks.try_join_next() {
            ended??;
        }
    }
    // The window closes once every consumer stopped and sent its last acks (Cascade's go
    // with a consumer's next take, so its last batch's go at its end).
    stop.store(true, Ordering::Relaxed);
    while let Some(ended) = tasks.join_next().await {
        ended??;
    }
    let (after, ops, elapsed) = (cpu(server), taken.load(Ordering::Relaxed), at.elapsed());
    let (server_us, client_us) = per_op(&before, &after, ops);
    Ok(Measured {
        rate: ops as f64 / elapsed.as_secs_f64(),
        p50: None,
        p99: None,
        server_us,
        client_us,
    })
}

/// `plan.delayed` events due evenly over `plan.spread` (from a moment after they are all
/// enqueued), taken as they come due: how late each was delivered.
pub async fn delayed<P: Peer>(
    peer: &Arc<P>,
    queues: &[String],
    plan: &Plan,
) -> Result<Lateness, BoxError> {
    let count = plan.delayed;
    let start = now_micros() + plan.lead.as_micros() as u64;
    let step = plan.spread.as_micros() as u64 / count.max(1) as u64;
    fill(peer, queues, count, move |i| Some(start + i as u64 * step)).await?;
    let deadline = Instant::now() + plan.lead + plan.spread + Duration::from_secs(60);
    let delivered = Arc::new(AtomicU64::new(0));
    // A system with a long poll waits on each queue; the others go round theirs.
    let long_poll = peer.long_poll();
    let consumers = match long_poll {
        Some(_) => queues.len(),
        None => DELAYED_CONSUMERS,
    };
    let mut tasks = JoinSet::new();
    for n in 0..consumers {
        let mut consumer = peer.consumer().await?;
        let mine: Vec<String> = queues.iter().skip(n).step_by(consumers).cloned().collect();
        let delivered = Arc::clone(&delivered);
        tasks.spawn(async move {
            let (mut late, mut early) = (Vec::new(), 0);
            // Takes in a row that found nothing: a polling consumer of several queues idles
            // only when none of them had work.
            let mut empty_in_a_row = 0;
            for queue in mine.iter().cycle() {
                if delivered.load(Ordering::Relaxed) >= count as u64 || Instant::now() > deadline {
                    break;
                }
                let batch = match long_poll {
                    Some(wait) => P::take_ack_waiting(&mut consumer, queue, BATCH, wait).await?,
                    None => P::take_ack(&mut consumer, queue, BATCH).await?,
                };
                let now = now_micros();
                if long_poll.is_none() {
                    empty_in_a_row = if batch.is_empty() {
                        empty_in_a_row + 1
                    } else {
                        0
                    };
                    if empty_in_a_row == mine.len() {
                        empty_in_a_row = 0;
                        tokio::time::sleep(IDLE_PAUSE).await;
                    }
                }
                for taken in &batch {
                    match now.checked_sub(due_of(taken)) {
                        Some(micros) => late.push(Duration::from_micros(micros)),
                        None => early += 1,
                    }
                }
                delivered.fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
            P::finish(&mut consumer).await?;
            Ok::<_, BoxError>((late, early))
        });
    }
    let (mut late, mut early) = (Vec::with_capacity(count), 0);
    while let Some(ended) = tasks.join_next().await {
        let (more, more_early) = ended??;
        late.extend(more);
        early += more_early;
    }
    if late.len() + (early as usize) < count {
        return Err(format!(
            "only {} of {count} delayed events came",
            late.len() + early as usize
        )
        .into());
    }
    late.sort_unstable();
    let at = |p: f64| late[((late.len() - 1) as f64 * p) as usize];
    Ok(Lateness {
        p50: at(0.50),
        p99: at(0.99),
        max: late.last().copied().unwrap_or_default(),
        early,
    })
}
