//! Coalescing: concurrent requests for one shard travel in one bus request.
//!
//! Each shard has one sender task and a bounded inbox of jobs (items with a reply channel).
//! The task sends whatever is waiting as one request, whenever fewer than
//! `ingest.requests_in_flight` of its requests are unanswered: under load batches grow by
//! themselves, the shard applies the next batch while the previous one is made durable, and
//! an idle gateway adds no delay (no timers). A request is capped by item count
//! (`ingest.max_batch_items`, and no more than one bus message holds the results of) and by
//! bytes (what one bus message carries); a job that does not fit waits for the next request,
//! so jobs for a shard leave in the order they arrived.
//! Requests in flight together may be applied in either order: they carry independent
//! callers (the shard's writer still assigns sequence numbers one at a time). The parts of
//! one caller's items (a batch too large for one bus message) are handed over one after the
//! other, each once the previous one is answered, so they keep their order.
//!
//! Failure policy: a failed bus request fails each of its items with the same code and
//! message (per item, so a batch spread over shards reports each item). A full inbox is
//! RESOURCE_EXHAUSTED at once rather than a wait.

use std::sync::Arc;

use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::convert::ShardRequest;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::IngestError;
use crate::limits::Limits;
use crate::route::Shards;

/// Jobs waiting per shard at most (a job is one unary request, or one shard's share of a
/// batch, or a bus-message-sized part of it).
const INBOX_JOBS: usize = 4096;

/// One kind of coalesced request.
pub(crate) trait Batch: Send + Sync + 'static {
    /// One item of the bus request, validated, e.g. an `EnqueueItem`.
    type Item: Send + 'static;
    /// What each item gets back, e.g. an `EnqueueResult`.
    type Outcome: Send + 'static;
    /// What was asked, for errors: "an enqueue batch".
    const ASKED: &'static str;
    fn request(items: Vec<Self::Item>) -> ShardRequest;
    /// The reply's per-item outcomes in order; a reply of another kind is an error.
    fn outcomes(shard: u32, reply: Reply) -> Result<Vec<Self::Outcome>, IngestError>;
    /// The outcome of an item whose request failed.
    fn failed(err: &IngestError) -> Self::Outcome;
    /// The client request's list of items, e.g. `items`.
    const LIST: &'static str;
    /// Places a shard's failure of an item under the item's prefix (`gateway::place`).
    fn place(outcome: &mut Self::Outcome, prefix: impl FnOnce() -> String);

    /// Places a shard's failure of the item at `index` of the client's list (`items[2]`).
    fn place_at(outcome: &mut Self::Outcome, index: usize) {
        Self::place(outcome, || Self::item_path(index));
    }

    /// The gateway's own failure to prepare the item at `index`, placed under it.
    fn under_item<T>(prepared: Result<T, IngestError>, index: usize) -> Result<T, IngestError> {
        prepared.map_err(|err| err.under(&Self::item_path(index)))
    }

    /// The path of the item at `index` of the client's list: `items[2]`.
    fn item_path(index: usize) -> String {
        format!("{}[{index}]", Self::LIST)
    }
}

/// An item with its size in bytes inside the bus request's message, as the gateway measured
/// it (what normalising it may add is within the room kept for the envelope).
pub(crate) struct Sized<I> {
    pub item: I,
    pub bytes: usize,
}

struct Job<B: Batch> {
    items: Vec<B::Item>,
    bytes: usize,
    reply: oneshot::Sender<Vec<B::Outcome>>,
}

pub(crate) struct Coalescer<B: Batch> {
    inboxes: Vec<mpsc::Sender<Job<B>>>,
    max_items: usize,
    max_bytes: usize,
}

impl<B: Batch> Coalescer<B> {
    /// Starts one sender task per shard in `tasks`. The tasks end once the coalescer is
    /// dropped and every job taken has been answered.
    pub fn start(shards: &Arc<Shards>, limits: &Limits, tasks: &mut JoinSet<()>) -> Coalescer<B> {
        let max_items = limits.bus_items();
        let max_bytes = limits.bus_room;
        let in_flight = limits.requests_in_flight.max(1);
        let inboxes = (0..shards.count())
            .map(|shard| {
                let (inbox, jobs) = mpsc::channel(INBOX_JOBS);
                let sender = ShardSender::<B> {
                    shard,
                    shards: Arc::clone(shards),
                    max_items,
                    max_bytes,
                    in_flight,
                    marker: std::marker::PhantomData,
                };
                tasks.spawn(sender.run(jobs));
                inbox
            })
            .collect();
        Coalescer {
            inboxes,
            max_items,
            max_bytes,
        }
    }

    /// Sends `items`, all owned by `shard`, and returns one outcome per item in their order.
    /// Items that do not fit one bus message go in parts, each handed over once the previous
    /// one is answered, so that they keep their order at the shard.
    /// Cancel-safe in the sense that matters: a part already handed over is still sent, later
    /// parts are not (a retry with the same ids or keys answers those applied as duplicates).
    pub async fn submit(&self, shard: u32, items: Vec<Sized<B::Item>>) -> Vec<B::Outcome> {
        let mut outcomes = Vec::with_capacity(items.len());
        for chunk in chunks(items, self.max_items, self.max_bytes) {
            let count = chunk.len();
            let answered = match self.hand_over(shard, chunk) {
                Ok(answer) => answer.await.map_err(|_| IngestError::ShuttingDown),
                Err(err) => Err(err),
            };
            match answered {
                Ok(answer) => outcomes.extend(answer),
                Err(err) => outcomes.extend((0..count).map(|_| B::failed(&err))),
            }
        }
        outcomes
    }

    fn hand_over(
        &self,
        shard: u32,
        chunk: Vec<Sized<B::Item>>,
    ) -> Result<oneshot::Receiver<Vec<B::Outcome>>, IngestError> {
        let inbox = self
            .inboxes
            .get(shard as usize)
            .ok_or_else(|| IngestError::BadReply {
                shard,
                asked: B::ASKED,
                got: "no such shard in this gateway".to_owned(),
            })?;
        let (reply, answer) = oneshot::channel();
        let job = Job::<B> {
            bytes: chunk.iter().map(|sized| sized.bytes).sum(),
            items: chunk.into_iter().map(|sized| sized.item).collect(),
            reply,
        };
        inbox.try_send(job).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => IngestError::Overloaded {
                shard,
                pending: INBOX_JOBS,
            },
            mpsc::error::TrySendError::Closed(_) => IngestError::ShuttingDown,
        })?;
        Ok(answer)
    }
}

/// Splits `items` into runs of at most `max_items` items and `max_bytes` bytes (an item
/// larger than `max_bytes` alone makes a run; the caller has refused those already).
fn chunks<I>(items: Vec<Sized<I>>, max_items: usize, max_bytes: usize) -> Vec<Vec<Sized<I>>> {
    let mut runs: Vec<Vec<Sized<I>>> = Vec::new();
    let mut bytes = 0;
    for item in items {
        let fits = runs
            .last()
            .is_some_and(|run| run.len() < max_items && bytes + item.bytes <= max_bytes);
        if !fits {
            runs.push(Vec::new());
            bytes = 0;
        }
        bytes += item.bytes;
        if let Some(run) = runs.last_mut() {
            run.push(item);
        }
    }
    runs
}

/// The task that sends one shard's jobs.
struct ShardSender<B: Batch> {
    shard: u32,
    shards: Arc<Shards>,
    max_items: usize,
    max_bytes: usize,
    /// Requests unanswered at once at most (`ingest.requests_in_flight`).
    in_flight: usize,
    marker: std::marker::PhantomData<fn() -> B>,
}

impl<B: Batch> ShardSender<B> {
    async fn run(self, mut inbox: mpsc::Receiver<Job<B>>) {
        let mut carried: Option<Job<B>> = None;
        let mut sending = FuturesUnordered::new();
        loop {
            // While every slot is taken, jobs gather in the inbox for the next request.
            while sending.len() >= self.in_flight {
                sending.next().await;
            }
            let first = match carried.take() {
                Some(job) => job,
                // Both branches are cancel-safe: a request's future stays in `sending`.
                None => tokio::select! {
                    Some(()) = sending.next() => continue,
                    job = inbox.recv() => match job {
                        Some(job) => job,
                        None => break,
                    },
                },
            };
            let (mut items, mut bytes) = (first.items.len(), first.bytes);
            let mut jobs = vec![first];
            // Whatever arrived while the previous request was out goes now, up to the caps.
            while let Ok(job) = inbox.try_recv() {
                if items + job.items.len() > self.max_items || bytes + job.bytes > self.max_bytes {
                    carried = Some(job);
                    break;
                }
                items += job.items.len();
                bytes += job.bytes;
                jobs.push(job);
            }
            sending.push(self.send(jobs));
        }
        // The coalescer is gone: answer the requests still out, then end.
        while sending.next().await.is_some() {}
    }

    async fn send(&self, jobs: Vec<Job<B>>) {
        let mut replies = Vec::with_capacity(jobs.len());
        let mut items = Vec::new();
        let mut bytes = 0;
        for job in jobs {
            replies.push((job.items.len(), job.reply));
            items.extend(job.items);
            bytes += job.bytes;
        }
        let total = items.len();
        tracing::trace!(
            shard = self.shard,
            items = total,
            jobs = replies.len(),
            "ingest.coalesce.send"
        );
        let timeout = self.shards.timeout();
        let request = B::request(items);
        let answered = match self.shards.send(self.shard, request, bytes, timeout).await {
            Ok(reply) => match B::outcomes(self.shard, reply) {
                Ok(outcomes) if outcomes.len() != total => Err(IngestError::BadReply {
                    shard: self.shard,
                    asked: B::ASKED,
                    got: format!("{} results for {total} items", outcomes.len()),
                }),
                answered => answered,
            },
            Err(err) => Err(err),
        };
        match answered {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for (count, reply) in replies {
                    // A caller that gave up has dropped its end: nothing to tell it.
                    let _ = reply.send(outcomes.by_ref().take(count).collect());
                }
            }
            Err(err) => {
                if !matches!(err, IngestError::Shard { .. }) {
                    tracing::warn!(shard = self.shard, items = total, error = %err, "ingest.coalesce.failed");
                }
                for (count, reply) in replies {
                    let _ = reply.send((0..count).map(|_| B::failed(&err)).collect());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(bytes: usize) -> Sized<usize> {
        Sized { item: bytes, bytes }
    }

    fn shape(runs: &[Vec<Sized<usize>>]) -> Vec<Vec<usize>> {
        runs.iter()
            .map(|run| run.iter().map(|s| s.item).collect())
            .collect()
    }

    #[test]
    fn chunks_respect_count_and_bytes_and_keep_order() {
        let items = vec![sized(1), sized(2), sized(3), sized(4), sized(5)];
        assert_eq!(
            shape(&chunks(items, 2, 100)),
            vec![vec![1, 2], vec![3, 4], vec![5]]
        );
        let items = vec![sized(4), sized(4), sized(3), sized(9), sized(1)];
        assert_eq!(
            shape(&chunks(items, 10, 8)),
            vec![vec![4, 4], vec![3], vec![9], vec![1]]
        );
        assert!(chunks(Vec::<Sized<usize>>::new(), 2, 8).is_empty());
    }
}
