//! Cascade's message bus (DESIGN §1 "The bus"): request/reply and publish/subscribe on NATS
//! subjects, with one API and two implementations chosen at start-up.
//!
//! - [`Bus::local`]: in-process, for `cascade standalone` and tests (see `local.rs`).
//! - [`Bus::connect_nats`]: a NATS client (see `nats.rs`).
//!
//! Both behave the same as far as callers can tell, and one test suite (`tests/suite.rs`) runs
//! against both: a request nobody subscribes to fails at once with `NoResponders`; a payload over
//! `max_payload` fails with `TooLarge` before anything is sent; a reply that comes after the
//! requester gave up is dropped silently; `*` and `>` wildcards work when subscribing.
//! Subjects come from [`subject`], which takes shard numbers, never queue names.

mod error;
mod local;
mod nats;
mod pattern;
pub mod subject;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;

pub use error::BusError;
pub use local::{LocalBus, SUBSCRIBER_CAPACITY};
pub use nats::NatsBus;

/// The local bus's `max_payload`: 8 MiB, larger than NATS's default 1 MiB so that standalone
/// mode never refuses what a default NATS deployment would accept.
pub const LOCAL_MAX_PAYLOAD: usize = 8 * 1024 * 1024;

/// A handle to the bus; clones share one router or one NATS connection.
#[derive(Clone)]
pub enum Bus {
    Local(LocalBus),
    Nats(NatsBus),
}

impl Bus {
    /// An in-process bus with a `max_payload` of [`LOCAL_MAX_PAYLOAD`].
    pub fn local() -> Bus {
        Bus::local_with_max_payload(LOCAL_MAX_PAYLOAD)
    }

    pub fn local_with_max_payload(max: usize) -> Bus {
        Bus::Local(LocalBus::new(max))
    }

    /// Connects to a NATS server; `client_name` shows in the server's connection list.
    pub async fn connect_nats(url: &str, client_name: &str) -> Result<Bus, BusError> {
        Ok(Bus::Nats(NatsBus::connect(url, client_name).await?))
    }

    /// The largest payload, in bytes, that `publish`, `request` and `respond` accept.
    pub fn max_payload(&self) -> usize {
        match self {
            Bus::Local(bus) => bus.max_payload(),
            Bus::Nats(bus) => bus.max_payload(),
        }
    }

    /// Sends to every current subscriber of a matching pattern; no subscriber is not an error.
    pub async fn publish(&self, subject: &str, payload: Bytes) -> Result<(), BusError> {
        match self {
            Bus::Local(bus) => bus.publish(subject, payload),
            Bus::Nats(bus) => bus.publish(subject, payload).await,
        }
    }

    /// Sends a request and waits up to `timeout` for the first reply. Cancel-safe: dropping the
    /// future abandons the request (the responder may still act on it).
    pub async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, BusError> {
        match self {
            Bus::Local(bus) => bus.request(subject, payload, timeout).await,
            Bus::Nats(bus) => bus.request(subject, payload, timeout).await,
        }
    }

    /// Subscribes to a subject or a pattern with `*` (one token) or a final `>` (the rest).
    /// Once this returns, a request on a matching subject reaches the subscription, from any
    /// connection (the NATS bus waits for the server to acknowledge the subscription).
    pub async fn subscribe(&self, subject: &str) -> Result<Subscription, BusError> {
        let inner = match self {
            Bus::Local(bus) => SubscriptionInner::Local(bus.subscribe(subject)?),
            Bus::Nats(bus) => SubscriptionInner::Nats(bus.subscribe(subject).await?),
        };
        Ok(Subscription { inner })
    }

    /// Encodes `req`, requests, decodes the reply.
    pub async fn call<Req: prost::Message, Rep: prost::Message + Default>(
        &self,
        subject: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        let reply = self
            .request(subject, Bytes::from(req.encode_to_vec()), timeout)
            .await?;
        Rep::decode(reply).map_err(|err| BusError::Decode {
            subject: subject.to_owned(),
            reason: err.to_string(),
        })
    }

    /// Waits until the NATS server has processed everything this handle sent so far, e.g. the
    /// unsubscribe of a dropped subscription. A no-op for the local bus, which routes at once.
    pub async fn flush(&self) -> Result<(), BusError> {
        match self {
            Bus::Local(_) => Ok(()),
            Bus::Nats(bus) => bus.flush().await,
        }
    }

    /// Closes the bus for every clone: further calls fail with `Closed`, and each subscription
    /// yields the messages it already holds and then `None`. For shutdown.
    pub async fn close(&self) -> Result<(), BusError> {
        match self {
            Bus::Local(bus) => {
                bus.close();
                Ok(())
            }
            Bus::Nats(bus) => bus.close().await,
        }
    }
}

impl fmt::Debug for Bus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bus::Local(_) => f.write_str("Bus::Local"),
            Bus::Nats(_) => f.write_str("Bus::Nats"),
        }
    }
}

/// Messages on one subject or pattern, in the order each publisher sent them. Dropping it
/// unsubscribes.
pub struct Subscription {
    inner: SubscriptionInner,
}

enum SubscriptionInner {
    Local(local::LocalSubscription),
    Nats(nats::NatsSubscription),
}

impl Subscription {
    /// The next message, or `None` once the bus is closed. Cancel-safe: usable in `select!`.
    pub async fn next(&mut self) -> Option<Message> {
        match &mut self.inner {
            SubscriptionInner::Local(subscription) => subscription.next().await,
            SubscriptionInner::Nats(subscription) => subscription.next().await,
        }
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Subscription")
    }
}

/// A received message; a request carries a private handle to answer it with [`Message::respond`].
pub struct Message {
    pub subject: String,
    pub payload: Bytes,
    reply: Reply,
}

pub(crate) enum Reply {
    None,
    Local(local::LocalReply),
    Nats(nats::NatsReply),
}

impl Message {
    pub(crate) fn new(subject: String, payload: Bytes, reply: Reply) -> Message {
        Message {
            subject,
            payload,
            reply,
        }
    }

    /// Whether this is a request (it has somewhere to send a reply).
    pub fn wants_reply(&self) -> bool {
        !matches!(self.reply, Reply::None)
    }

    /// Answers a request. Only the first answer reaches the requester; answering after the
    /// requester gave up succeeds and goes nowhere, as with NATS.
    pub async fn respond(&self, payload: Bytes) -> Result<(), BusError> {
        match &self.reply {
            Reply::None => Err(BusError::NoReply {
                subject: self.subject.clone(),
            }),
            Reply::Local(reply) => reply.respond(payload),
            Reply::Nats(reply) => reply.respond(payload).await,
        }
    }

    /// Decodes the payload as a protobuf message.
    pub fn decode<M: prost::Message + Default>(&self) -> Result<M, BusError> {
        M::decode(self.payload.clone()).map_err(|err| BusError::Decode {
            subject: self.subject.clone(),
            reason: err.to_string(),
        })
    }

    /// Encodes `reply` and answers with it.
    pub async fn respond_with<M: prost::Message>(&self, reply: &M) -> Result<(), BusError> {
        self.respond(Bytes::from(reply.encode_to_vec())).await
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the payload: it may hold user data (STYLE: spans carry ids, never payloads).
        f.debug_struct("Message")
            .field("subject", &self.subject)
            .field("payload_len", &self.payload.len())
            .field("wants_reply", &self.wants_reply())
            .finish()
    }
}
