//! What the scenarios ask of every system, each with its own client (Cascade with
//! `cascade-client`, Redis with the `redis` crate, PostgreSQL with `tokio-postgres`, NATS
//! with `async-nats`): a durable enqueue, a bulk fill, and a take of up to 100 events that
//! acknowledges them. Each system is used as a queue the way its users build one: see its
//! module.

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cascade_client::{BatchingEnqueuer, BatchingOptions, Client, api};
use cascade_e2e::bench::AckingConsumer;

use crate::BoxError;

/// Bytes of every event's payload unless `CASCADE_BENCH_PAYLOAD_BYTES` says otherwise.
const DEFAULT_PAYLOAD_BYTES: usize = 100;
/// The number and due time every payload starts with.
const PAYLOAD_HEAD: usize = 16;

/// Bytes of every event's payload: `CASCADE_BENCH_PAYLOAD_BYTES`, default 100, read once.
pub fn payload_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| match std::env::var("CASCADE_BENCH_PAYLOAD_BYTES") {
        Err(_) => DEFAULT_PAYLOAD_BYTES,
        Ok(value) => value
            .parse()
            .ok()
            .filter(|&bytes| bytes >= PAYLOAD_HEAD)
            .unwrap_or_else(|| {
                panic!("CASCADE_BENCH_PAYLOAD_BYTES={value}: give a number of bytes, at least {PAYLOAD_HEAD}")
            }),
    })
}

/// A payload: the event's number and when it is due (µs since the epoch; 0: at once), then
/// pseudo-random bytes up to [`payload_bytes`]. The number makes every payload unique (Redis
/// keeps leased events in a sorted set by value); the random rest makes it incompressible, so
/// that no system's disk use gains from a compression that real payloads would not allow.
pub fn payload(number: u64, due_micros: u64) -> Vec<u8> {
    let size = payload_bytes();
    let mut bytes = Vec::with_capacity(size);
    bytes.extend_from_slice(&number.to_be_bytes());
    bytes.extend_from_slice(&due_micros.to_be_bytes());
    // xorshift64*, seeded by the number: cheap, and different for every event.
    let mut state = number.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while bytes.len() < size {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let word = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        let take = word.len().min(size - bytes.len());
        bytes.extend_from_slice(&word[..take]);
    }
    bytes
}

/// When a payload's event was due, µs since the epoch.
pub fn due_of(payload: &[u8]) -> u64 {
    payload
        .get(8..16)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One event to enqueue: its payload and when it is due (µs since the epoch; `None`: now).
pub struct Item {
    pub payload: Vec<u8>,
    pub due: Option<u64>,
}

/// What the enqueue scenario drives: a system's producers, one event at a time.
pub trait Producing: Send + Sync + 'static {
    /// One connection of a producer.
    type Producer: Send + 'static;
    const NAME: &'static str;

    fn producer(&self) -> impl Future<Output = Result<Self::Producer, BoxError>> + Send;
    /// One event, answered once it is durable (as durable as the system makes it).
    fn enqueue(
        producer: &mut Self::Producer,
        queue: &str,
        item: Item,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// A queue system as the scenarios drive it.
pub trait Peer: Producing {
    /// One connection of a consumer.
    type Consumer: Send + 'static;
    /// Whether it delivers events at a later time.
    const DELAYS: bool;

    /// Makes `queues` ready for use.
    fn setup(&self, queues: &[String]) -> impl Future<Output = Result<(), BoxError>> + Send;
    fn consumer(&self) -> impl Future<Output = Result<Self::Consumer, BoxError>> + Send;
    /// The longest a take may wait for an event of its queue, if the system has a long poll
    /// ([`Peer::take_ack_waiting`]) and uses it: its delayed consumers then wait on one queue
    /// each instead of polling several.
    fn long_poll(&self) -> Option<Duration> {
        None
    }
    /// Many events at once, the fastest way the system offers (a backlog's fill).
    fn enqueue_many(
        producer: &mut Self::Producer,
        queue: &str,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
    /// Takes up to `max` due events of `queue` under a lease and acknowledges them (done):
    /// their payloads. Empty when none is due; it may wait a moment for one. An ack may go
    /// with the consumer's next request, if the system has one that carries it.
    fn take_ack(
        consumer: &mut Self::Consumer,
        queue: &str,
        max: usize,
    ) -> impl Future<Output = Result<Vec<Vec<u8>>, BoxError>> + Send;
    /// [`Peer::take_ack`], waiting up to `wait` for a first event if none is due yet. Only
    /// called on systems with a [`Peer::long_poll`]; the others answer at once.
    fn take_ack_waiting(
        consumer: &mut Self::Consumer,
        queue: &str,
        max: usize,
        _wait: Duration,
    ) -> impl Future<Output = Result<Vec<Vec<u8>>, BoxError>> + Send {
        Self::take_ack(consumer, queue, max)
    }
    /// Sends the acks still held for a next request; the consumer is done.
    fn finish(_consumer: &mut Self::Consumer) -> impl Future<Output = Result<(), BoxError>> + Send {
        async { Ok(()) }
    }
    /// A client that many producers share, as the tasks of one service would: each producer
    /// of the `shared` scenario holds a clone of it.
    type Shared: Clone + Send + Sync + 'static;
    fn shared(&self) -> impl Future<Output = Result<Self::Shared, BoxError>> + Send;
    /// One event through the shared client, answered once it is durable.
    fn enqueue_shared(
        shared: &Self::Shared,
        queue: &str,
        item: Item,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

/// A peer's producers sharing one client ([`Peer::shared`]), driven as the enqueue
/// scenario drives separate ones.
pub struct OneClient<P: Peer> {
    pub shared: P::Shared,
}

impl<P: Peer> Producing for OneClient<P> {
    type Producer = P::Shared;
    const NAME: &'static str = P::NAME;

    async fn producer(&self) -> Result<P::Shared, BoxError> {
        Ok(self.shared.clone())
    }

    async fn enqueue(shared: &mut P::Shared, queue: &str, item: Item) -> Result<(), BoxError> {
        P::enqueue_shared(shared, queue, item).await
    }
}

/// Cascade, through `cascade-client`: `Enqueue`, `EnqueueBatch`, and a `Take` that carries
/// the acks of the consumer's previous batch (its last acks go in one `Complete`).
pub struct Cascade {
    pub addr: String,
    /// Whether its delayed consumers wait in a long-poll `Take`, as its worker SDK's do, or
    /// poll as Redis's and PostgreSQL's must.
    pub long_polls: bool,
}

/// The wait of a long-poll take: long enough that an idle queue costs one call a second.
const LONG_POLL: Duration = Duration::from_secs(1);

fn timestamp(micros: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (micros / 1_000_000) as i64,
        nanos: ((micros % 1_000_000) * 1000) as i32,
    }
}

pub fn request(queue: &str, item: Item) -> api::EnqueueRequest {
    api::EnqueueRequest {
        queue: queue.to_owned(),
        payload: item.payload.into(),
        when: item
            .due
            .map(|due| api::enqueue_request::When::ActivateAt(timestamp(due))),
        ..api::EnqueueRequest::default()
    }
}

impl Producing for Cascade {
    type Producer = Client;
    const NAME: &'static str = "Cascade";

    async fn producer(&self) -> Result<Client, BoxError> {
        Ok(Client::connect(&self.addr).await?)
    }

    async fn enqueue(client: &mut Client, queue: &str, item: Item) -> Result<(), BoxError> {
        client.ingest().enqueue(request(queue, item)).await?;
        Ok(())
    }
}

impl Peer for Cascade {
    type Consumer = AckingConsumer;
    const DELAYS: bool = true;

    async fn setup(&self, queues: &[String]) -> Result<(), BoxError> {
        let client = Client::connect(&self.addr).await?;
        for name in queues {
            let create = api::CreateQueueRequest {
                name: name.clone(),
                config: None,
            };
            client.admin().create_queue(create).await?;
        }
        Ok(())
    }

    async fn consumer(&self) -> Result<AckingConsumer, BoxError> {
        Ok(AckingConsumer::new(Client::connect(&self.addr).await?))
    }

    fn long_poll(&self) -> Option<Duration> {
        self.long_polls.then_some(LONG_POLL)
    }

    async fn enqueue_many(
        client: &mut Client,
        queue: &str,
        items: Vec<Item>,
    ) -> Result<(), BoxError> {
        let items = items.into_iter().map(|item| request(queue, item)).collect();
        let answer = client
            .ingest()
            .enqueue_batch(api::EnqueueBatchRequest { items })
            .await?;
        match answer.into_inner().results.iter().find(|r| r.code != 0) {
            Some(refused) => Err(format!("an item was refused: {}", refused.message).into()),
            None => Ok(()),
        }
    }

    async fn take_ack(
        consumer: &mut AckingConsumer,
        queue: &str,
        max: usize,
    ) -> Result<Vec<Vec<u8>>, BoxError> {
        // No wait: a consumer going round its queues is not held by an empty one.
        Self::take_ack_waiting(consumer, queue, max, Duration::ZERO).await
    }

    async fn take_ack_waiting(
        consumer: &mut AckingConsumer,
        queue: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Vec<u8>>, BoxError> {
        Ok(consumer.take(queue, max, wait).await?.0)
    }

    async fn finish(consumer: &mut AckingConsumer) -> Result<(), BoxError> {
        consumer.finish().await.map(drop)
    }

    /// `cascade-client`'s batching enqueuer: the producers' events go together as
    /// `EnqueueBatch` calls.
    type Shared = BatchingEnqueuer;

    async fn shared(&self) -> Result<BatchingEnqueuer, BoxError> {
        let client = Client::connect(&self.addr).await?;
        Ok(client.batching_enqueuer(BatchingOptions::default()))
    }

    async fn enqueue_shared(
        enqueuer: &BatchingEnqueuer,
        queue: &str,
        item: Item,
    ) -> Result<(), BoxError> {
        enqueuer.enqueue(request(queue, item)).await?;
        Ok(())
    }
}
