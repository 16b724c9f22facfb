//! NATS JetStream as a queue: one stream with file storage and work-queue retention (a
//! message is gone once acknowledged), a subject per queue and a durable pull consumer per
//! queue with explicit acks. An enqueue is a publish answered by the server's ack once the
//! message is stored (the Debian server, 2.9, does not fsync each one); a take fetches up
//! to 100 messages and acks each. JetStream has no delayed delivery.

use std::collections::HashMap;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::Config as PullConfig;
use async_nats::jetstream::consumer::{AckPolicy, PullConsumer};
use async_nats::jetstream::stream::{Config as StreamConfig, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, Context};
use futures::StreamExt;

use crate::BoxError;
use crate::systems::{Item, Peer, Producing, payload_bytes};

const STREAM: &str = "QUEUES";
/// How long a fetch waits for messages before it answers with what it has, when the batch
/// it asks for is small...
const FETCH_WAIT: Duration = Duration::from_millis(20);
/// ...and when it is larger than [`SMALL_FETCH_BYTES`]: the server must deliver the whole
/// batch before the fetch expires. With 16-KiB payloads (1.6 MB a batch) NATS 2.9 answered
/// a 20-ms fetch with one message, and 16 consumers' 100-ms fetches with a few each; 500 ms
/// let whole batches through.
const LARGE_FETCH_WAIT: Duration = Duration::from_millis(500);
const SMALL_FETCH_BYTES: usize = 64 << 10;

pub struct Nats {
    pub url: String,
}

fn fetch_wait(max: usize) -> Duration {
    match max * payload_bytes() <= SMALL_FETCH_BYTES {
        true => FETCH_WAIT,
        false => LARGE_FETCH_WAIT,
    }
}

fn subject(queue: &str) -> String {
    format!("queues.{queue}")
}

/// A consumer's connection and the pull consumer of each queue it has taken from.
pub struct Consumer {
    context: Context,
    consumers: HashMap<String, PullConsumer>,
}

impl Nats {
    async fn context(&self) -> Result<Context, BoxError> {
        Ok(jetstream::new(async_nats::connect(&self.url).await?))
    }
}

impl Producing for Nats {
    type Producer = Context;
    const NAME: &'static str = "NATS JetStream";

    async fn producer(&self) -> Result<Context, BoxError> {
        self.context().await
    }

    async fn enqueue(context: &mut Context, queue: &str, item: Item) -> Result<(), BoxError> {
        context
            .publish(subject(queue), item.payload.into())
            .await?
            .await?;
        Ok(())
    }
}

impl Peer for Nats {
    type Consumer = Consumer;
    const DELAYS: bool = false;

    async fn setup(&self, queues: &[String]) -> Result<(), BoxError> {
        let context = self.context().await?;
        let stream = context
            .get_or_create_stream(StreamConfig {
                name: STREAM.into(),
                subjects: vec!["queues.>".into()],
                retention: RetentionPolicy::WorkQueue,
                storage: StorageType::File,
                ..StreamConfig::default()
            })
            .await?;
        for queue in queues {
            stream
                .get_or_create_consumer(
                    queue,
                    PullConfig {
                        durable_name: Some(queue.clone()),
                        filter_subject: subject(queue),
                        ack_policy: AckPolicy::Explicit,
                        max_ack_pending: 100_000,
                        ..PullConfig::default()
                    },
                )
                .await?;
        }
        Ok(())
    }

    async fn consumer(&self) -> Result<Consumer, BoxError> {
        Ok(Consumer {
            context: self.context().await?,
            consumers: HashMap::new(),
        })
    }

    async fn enqueue_many(
        context: &mut Context,
        queue: &str,
        items: Vec<Item>,
    ) -> Result<(), BoxError> {
        let mut acks = Vec::with_capacity(items.len());
        for item in items {
            acks.push(context.publish(subject(queue), item.payload.into()).await?);
        }
        for ack in acks {
            ack.await?;
        }
        Ok(())
    }

    async fn take_ack(c: &mut Consumer, queue: &str, max: usize) -> Result<Vec<Vec<u8>>, BoxError> {
        if !c.consumers.contains_key(queue) {
            let stream = c.context.get_stream(STREAM).await?;
            let consumer: PullConsumer = stream.get_consumer(queue).await?;
            c.consumers.insert(queue.to_owned(), consumer);
        }
        let consumer = &c.consumers[queue];
        let mut batch = consumer
            .fetch()
            .max_messages(max)
            .expires(fetch_wait(max))
            .messages()
            .await?;
        let mut payloads = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            let message = message?;
            message.ack().await?;
            payloads.push(message.payload.to_vec());
        }
        Ok(payloads)
    }

    /// One connection: the producers' publishes and their acks share it.
    type Shared = Context;

    async fn shared(&self) -> Result<Context, BoxError> {
        self.context().await
    }

    async fn enqueue_shared(context: &Context, queue: &str, item: Item) -> Result<(), BoxError> {
        Self::enqueue(&mut context.clone(), queue, item).await
    }
}
