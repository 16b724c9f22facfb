//! Cascade's message bus: request/reply and publish/subscribe on NATS
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
//!
//! A typed request ([`Bus::call`]) and its reply travel on the local bus as the protobuf values
//! themselves, and are encoded only at the NATS edge (`body.rs`): services in one process pay
//! no encoding, and services in many see the same messages. A request may also be a value of
//! the sender's own type ([`Typed`], [`Bus::call_typed`]): a receiver in the same process takes
//! it as it is ([`Message::take_typed`]), one across NATS gets the message it encodes to.
//!
//! Every request's duration and result goes to the bus's [`RequestObserver`], if one is set
//! ([`Bus::observe_requests`]; the process wires it to its metrics), named by the operation
//! the caller gives ([`Bus::call_as`]) or by the subject's role.

mod body;
mod error;
mod local;
mod nats;
mod pattern;
pub mod subject;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::body::Body;
pub use crate::body::{Received, Typed};
pub use error::BusError;
pub use local::{LocalBus, SUBSCRIBER_CAPACITY};
pub use nats::{NatsBus, NatsConnect, NatsCredentials, without_credentials};

/// The local bus's `max_payload`: 8 MiB, larger than NATS's default 1 MiB so that standalone
/// mode never refuses what a default NATS deployment would accept.
pub const LOCAL_MAX_PAYLOAD: usize = 8 * 1024 * 1024;

/// A handle to the bus; clones share one router or one NATS connection, and one
/// [`RequestObserver`].
#[derive(Clone)]
pub struct Bus {
    transport: Transport,
    observer: Arc<OnceLock<Arc<dyn RequestObserver>>>,
}

#[derive(Clone)]
enum Transport {
    Local(LocalBus),
    Nats(NatsBus),
}

/// Told of every request's duration and result (metrics). Called on the requester's task
/// once the request ends: it must be cheap and must not block.
pub trait RequestObserver: Send + Sync {
    /// `op` names the operation: the one given to [`Bus::request_as`] / [`Bus::call_as`],
    /// else the role of the subject (`dispatcher`, `timer`, or `other`).
    fn requested(&self, op: &'static str, took: Duration, result: RequestResult);
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestResult {
    Ok,
    /// It could not be sent, nobody answered, or the reply did not decode.
    Error,
    /// No reply within the timeout.
    Timeout,
}

impl Bus {
    /// An in-process bus with a `max_payload` of [`LOCAL_MAX_PAYLOAD`].
    pub fn local() -> Bus {
        Bus::local_with_max_payload(LOCAL_MAX_PAYLOAD)
    }

    pub fn local_with_max_payload(max: usize) -> Bus {
        Bus::with(Transport::Local(LocalBus::new(max)))
    }

    /// Connects to a NATS server; `client_name` shows in the server's connection list.
    pub async fn connect_nats(server: &NatsConnect, client_name: &str) -> Result<Bus, BusError> {
        Ok(Bus::with(Transport::Nats(
            NatsBus::connect(server, client_name).await?,
        )))
    }

    fn with(transport: Transport) -> Bus {
        Bus {
            transport,
            observer: Arc::new(OnceLock::new()),
        }
    }

    /// Reports every request of this bus and its clones to `observer` from now on; the
    /// first observer set stays (one per process). Returns whether it was set.
    pub fn observe_requests(&self, observer: Arc<dyn RequestObserver>) -> bool {
        self.observer.set(observer).is_ok()
    }

    /// The largest payload, in bytes, that `publish`, `request` and `respond` accept.
    pub fn max_payload(&self) -> usize {
        match &self.transport {
            Transport::Local(bus) => bus.max_payload(),
            Transport::Nats(bus) => bus.max_payload(),
        }
    }

    /// Whether messages can flow now: the in-process bus always; NATS while connected.
    pub fn is_connected(&self) -> bool {
        match &self.transport {
            Transport::Local(_) => true,
            Transport::Nats(bus) => bus.is_connected(),
        }
    }

    /// Sends to every current subscriber of a matching pattern; no subscriber is not an error.
    pub async fn publish(&self, subject: &str, payload: Bytes) -> Result<(), BusError> {
        match &self.transport {
            Transport::Local(bus) => bus.publish(subject, payload),
            Transport::Nats(bus) => bus.publish(subject, payload).await,
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
        self.request_as(subject_role(subject), subject, payload, timeout)
            .await
    }

    /// [`Bus::request`], reported to the observer as operation `op`.
    pub async fn request_as(
        &self,
        op: &'static str,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, BusError> {
        let reply = self
            .exchange(op, subject, Body::Encoded(payload), timeout)
            .await?;
        Ok(reply.into_bytes())
    }

    /// One request and its reply, each as a value on the local bus and as bytes on NATS.
    async fn exchange(
        &self,
        op: &'static str,
        subject: &str,
        body: Body,
        timeout: Duration,
    ) -> Result<Body, BusError> {
        let started = Instant::now();
        let reply = match &self.transport {
            Transport::Local(bus) => bus.request(subject, body, timeout).await,
            Transport::Nats(bus) => bus
                .request(subject, body.into_bytes(), timeout)
                .await
                .map(Body::Encoded),
        };
        if let Some(observer) = self.observer.get() {
            let result = match &reply {
                Ok(_) => RequestResult::Ok,
                Err(BusError::Timeout { .. }) => RequestResult::Timeout,
                Err(_) => RequestResult::Error,
            };
            observer.requested(op, started.elapsed(), result);
        }
        reply
    }

    /// Subscribes to a subject or a pattern with `*` (one token) or a final `>` (the rest).
    /// Once this returns, a request on a matching subject reaches the subscription, from any
    /// connection (the NATS bus waits for the server to acknowledge the subscription).
    pub async fn subscribe(&self, subject: &str) -> Result<Subscription, BusError> {
        let inner = match &self.transport {
            Transport::Local(bus) => SubscriptionInner::Local(bus.subscribe(subject)?),
            Transport::Nats(bus) => SubscriptionInner::Nats(bus.subscribe(subject).await?),
        };
        Ok(Subscription { inner })
    }

    /// Requests with `req` and returns the reply as an `Rep`: passed as values on the local
    /// bus, encoded and decoded on NATS.
    pub async fn call<
        Req: prost::Message + Sync + 'static,
        Rep: prost::Message + Default + 'static,
    >(
        &self,
        subject: &str,
        req: Req,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        self.call_as(subject_role(subject), subject, req, timeout)
            .await
    }

    /// [`Bus::call`], reported to the observer as operation `op`.
    pub async fn call_as<
        Req: prost::Message + Sync + 'static,
        Rep: prost::Message + Default + 'static,
    >(
        &self,
        op: &'static str,
        subject: &str,
        req: Req,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        self.call_body(op, subject, Body::value(req), timeout).await
    }

    /// Requests with a value of the caller's own type, reported to the observer as operation
    /// `op`: passed as it is on the local bus, encoded by its `encode` on NATS; the reply as
    /// with [`Bus::call`].
    pub async fn call_typed<
        Req: Clone + Send + Sync + 'static,
        Rep: prost::Message + Default + 'static,
    >(
        &self,
        op: &'static str,
        subject: &str,
        req: Typed<Req>,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        self.call_body(op, subject, Body::Value(Box::new(req)), timeout)
            .await
    }

    async fn call_body<Rep: prost::Message + Default + 'static>(
        &self,
        op: &'static str,
        subject: &str,
        body: Body,
        timeout: Duration,
    ) -> Result<Rep, BusError> {
        let reply = self.exchange(op, subject, body, timeout).await?;
        reply.into_message(subject)
    }

    /// Waits until the NATS server has processed everything this handle sent so far, e.g. the
    /// unsubscribe of a dropped subscription. A no-op for the local bus, which routes at once.
    pub async fn flush(&self) -> Result<(), BusError> {
        match &self.transport {
            Transport::Local(_) => Ok(()),
            Transport::Nats(bus) => bus.flush().await,
        }
    }

    /// Closes the bus for every clone: further calls fail with `Closed`, and each subscription
    /// yields the messages it already holds and then `None`. For shutdown.
    pub async fn close(&self) -> Result<(), BusError> {
        match &self.transport {
            Transport::Local(bus) => {
                bus.close();
                Ok(())
            }
            Transport::Nats(bus) => bus.close().await,
        }
    }
}

impl fmt::Debug for Bus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.transport {
            Transport::Local(_) => f.write_str("Bus::Local"),
            Transport::Nats(_) => f.write_str("Bus::Nats"),
        }
    }
}

/// The role token of `cascade.<cluster>.<role>.<shard>`, as a fixed name (a label value).
fn subject_role(subject: &str) -> &'static str {
    match subject.split('.').nth(2) {
        Some("dispatcher") => "dispatcher",
        Some("timer") => "timer",
        Some("stats") => "stats",
        _ => "other",
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
    body: Body,
    reply: Reply,
}

pub(crate) enum Reply {
    None,
    Local(local::LocalReply),
    Nats(nats::NatsReply),
}

impl Message {
    pub(crate) fn new(subject: String, body: Body, reply: Reply) -> Message {
        Message {
            subject,
            body,
            reply,
        }
    }

    /// The encoded payload (encoded now if it came as a value from this process).
    pub fn payload(&self) -> Bytes {
        self.body.bytes()
    }

    /// Whether this is a request (it has somewhere to send a reply).
    pub fn wants_reply(&self) -> bool {
        !matches!(self.reply, Reply::None)
    }

    /// Answers a request. Only the first answer reaches the requester; answering after the
    /// requester gave up succeeds and goes nowhere, as with NATS.
    pub async fn respond(&self, payload: Bytes) -> Result<(), BusError> {
        self.answer(Body::Encoded(payload)).await
    }

    /// Answers with `reply`: the value itself on the local bus, encoded on NATS.
    pub async fn respond_with<M: prost::Message + Sync + 'static>(
        &self,
        reply: M,
    ) -> Result<(), BusError> {
        self.answer(Body::value(reply)).await
    }

    async fn answer(&self, body: Body) -> Result<(), BusError> {
        match &self.reply {
            Reply::None => Err(BusError::NoReply {
                subject: self.subject.clone(),
            }),
            Reply::Local(reply) => reply.respond(body),
            Reply::Nats(reply) => reply.respond(body.into_bytes()).await,
        }
    }

    /// Decodes the payload as a protobuf message, leaving the message as it is.
    pub fn decode<M: prost::Message + Default + 'static>(&self) -> Result<M, BusError> {
        Body::Encoded(self.payload()).into_message(&self.subject)
    }

    /// Takes the payload out as a protobuf message: the value itself if another service of
    /// this process sent it as one, else decoded. The message keeps its reply handle and is
    /// left with an empty payload.
    pub fn take<M: prost::Message + Default + 'static>(&mut self) -> Result<M, BusError> {
        let body = std::mem::replace(&mut self.body, Body::Encoded(Bytes::new()));
        body.into_message(&self.subject)
    }

    /// Takes the payload out: the sender's [`Typed`] value of type `T` if another service of
    /// this process sent one, else the message of type `M` (decoded, or itself). As
    /// [`Message::take`], the message keeps its reply handle.
    pub fn take_typed<T: 'static, M: prost::Message + Default + 'static>(
        &mut self,
    ) -> Result<Received<T, M>, BusError> {
        let body = std::mem::replace(&mut self.body, Body::Encoded(Bytes::new()));
        body.into_typed(&self.subject)
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the payload: it may hold user data (STYLE: spans carry ids, never payloads).
        f.debug_struct("Message")
            .field("subject", &self.subject)
            .field("payload_len", &self.body.len())
            .field("wants_reply", &self.wants_reply())
            .finish()
    }
}

#[cfg(test)]
mod observer_tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(&'static str, RequestResult)>>);

    impl RequestObserver for Seen {
        fn requested(&self, op: &'static str, _took: Duration, result: RequestResult) {
            self.0.lock().expect("lock").push((op, result));
        }
    }

    #[tokio::test]
    async fn every_request_of_every_clone_is_reported_with_its_op_and_result() {
        let bus = Bus::local();
        let seen = Arc::new(Seen::default());
        assert!(bus.observe_requests(seen.clone()));
        assert!(
            !bus.clone().observe_requests(Arc::new(Seen::default())),
            "one per bus"
        );
        let mut answering = bus
            .subscribe("cascade.c.dispatcher.0")
            .await
            .expect("subscribe");
        let responder = tokio::spawn(async move {
            let request = answering.next().await.expect("a request");
            request
                .respond(Bytes::from_static(b"a"))
                .await
                .expect("respond");
            // The second request is never answered: it times out.
            let _unanswered = answering.next().await;
        });
        let clone = bus.clone();
        let short = Duration::from_millis(50);
        clone
            .request_as(
                "take",
                "cascade.c.dispatcher.0",
                Bytes::new(),
                Duration::from_secs(5),
            )
            .await
            .expect("answered");
        let timed_out = clone
            .request("cascade.c.dispatcher.0", Bytes::new(), short)
            .await;
        assert!(
            matches!(timed_out, Err(BusError::Timeout { .. })),
            "{timed_out:?}"
        );
        let nobody = bus.request("cascade.c.timer.0", Bytes::new(), short).await;
        assert!(nobody.is_err());
        responder.abort();
        assert_eq!(
            *seen.0.lock().expect("lock"),
            [
                ("take", RequestResult::Ok),
                ("dispatcher", RequestResult::Timeout),
                ("timer", RequestResult::Error),
            ]
        );
    }
}
