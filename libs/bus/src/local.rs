//! The in-process bus: a router from subscription patterns to bounded channels, so that
//! `cascade standalone` runs every service in one process with the same semantics as NATS.
//!
//! - `publish` offers the message to every matching subscriber without waiting: a subscriber
//!   whose channel is full misses it (counted and logged), like a NATS slow consumer.
//! - `request` and its reply carry a [`Body`]: a value passes as itself, never encoded, to a
//!   single subscriber (several share one encoding).
//! - `request` attaches one reply slot (a oneshot) shared by every matching subscriber; the first
//!   `respond` wins, later ones are ignored, as with a NATS inbox. It waits for channel room
//!   (backpressure) within its timeout. No matching subscriber: `NoResponders` at once.
//! - A `Subscription` removes itself from the router when dropped. Closing the bus drops every
//!   sender, so each subscription yields what it holds and then `None`.
//!
//! The router lock is a std mutex held only to look up or change the table, never across an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::body::Body;
use crate::error::BusError;
use crate::pattern::{has_wildcard, matches, validate_pattern, validate_subject};
use crate::{Message, Reply};

/// Messages a subscriber can hold before `publish` drops for it and `request` waits.
pub const SUBSCRIBER_CAPACITY: usize = 1024;

#[derive(Clone)]
pub struct LocalBus {
    router: Arc<Router>,
}

struct Router {
    max_payload: usize,
    next_id: AtomicU64,
    /// Messages `publish` dropped because a subscriber was full, since the bus started.
    dropped: AtomicU64,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    closed: bool,
    /// Literal patterns, looked up by equality: the common case (one shard's subject).
    literal: HashMap<String, Vec<Entry>>,
    /// Patterns with `*` or `>`, scanned on every send; there are few of them.
    wildcard: Vec<(String, Entry)>,
}

#[derive(Clone)]
struct Entry {
    id: u64,
    sender: mpsc::Sender<Message>,
}

impl LocalBus {
    pub fn new(max_payload: usize) -> LocalBus {
        LocalBus {
            router: Arc::new(Router {
                max_payload,
                next_id: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                table: Mutex::new(Table::default()),
            }),
        }
    }

    pub fn max_payload(&self) -> usize {
        self.router.max_payload
    }

    /// Messages dropped by `publish` because a subscriber's channel was full.
    pub fn dropped_messages(&self) -> u64 {
        self.router.dropped.load(Ordering::Relaxed)
    }

    pub fn publish(&self, subject: &str, payload: Bytes) -> Result<(), BusError> {
        self.check_size(payload.len())?;
        validate_subject(subject)?;
        for entry in self.router.matching(subject)? {
            let message = Message::new(
                subject.to_owned(),
                Body::Encoded(payload.clone()),
                Reply::None,
            );
            match entry.sender.try_send(message) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    let dropped_total = self.router.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(
                        subject,
                        subscription = entry.id,
                        dropped_total,
                        "bus.publish: subscriber is full, message dropped for it"
                    );
                }
                // Its Subscription is being dropped and will leave the table.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        Ok(())
    }

    /// Cancel-safe: dropping the future abandons the request; a late reply is discarded.
    pub(crate) async fn request(
        &self,
        subject: &str,
        mut body: Body,
        timeout: Duration,
    ) -> Result<Body, BusError> {
        self.check_size(body.len())?;
        validate_subject(subject)?;
        let targets = self.router.matching(subject)?;
        if targets.is_empty() {
            return Err(no_responders(subject));
        }
        let (reply_tx, reply_rx) = oneshot::channel();
        let slot = Arc::new(Mutex::new(Some(reply_tx)));
        let max_payload = self.router.max_payload;
        let exchange = async move {
            let mut delivered = 0;
            let last = targets.len() - 1;
            for (index, entry) in targets.into_iter().enumerate() {
                let reply = Reply::Local(LocalReply {
                    slot: Arc::clone(&slot),
                    max_payload,
                });
                let body = match index == last {
                    true => std::mem::replace(&mut body, Body::Encoded(Bytes::new())),
                    false => body.share(),
                };
                let message = Message::new(subject.to_owned(), body, reply);
                // Waiting here is the backpressure: a busy responder slows its requesters.
                if entry.sender.send(message).await.is_ok() {
                    delivered += 1;
                }
            }
            if delivered == 0 {
                // Every subscriber went away between the lookup and the send.
                return Err(no_responders(subject));
            }
            // Only the delivered messages may hold the slot now, so if they are all dropped
            // unanswered the receiver sees it.
            drop(slot);
            match reply_rx.await {
                Ok(reply) => Ok(reply),
                // Dropped without an answer: NATS would wait out the timeout, so do the same.
                Err(_) => std::future::pending().await,
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(BusError::Timeout {
                subject: subject.to_owned(),
                after: timeout,
            }),
        }
    }

    pub fn subscribe(&self, pattern: &str) -> Result<LocalSubscription, BusError> {
        validate_pattern(pattern)?;
        let id = self.router.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(SUBSCRIBER_CAPACITY);
        let entry = Entry { id, sender };
        let mut table = self.router.lock();
        if table.closed {
            return Err(BusError::Closed);
        }
        if has_wildcard(pattern) {
            table.wildcard.push((pattern.to_owned(), entry));
        } else {
            table
                .literal
                .entry(pattern.to_owned())
                .or_default()
                .push(entry);
        }
        Ok(LocalSubscription {
            receiver,
            _registration: Registration {
                router: Arc::downgrade(&self.router),
                id,
                pattern: pattern.to_owned(),
            },
        })
    }

    /// Refuses new work and ends every subscription once it has yielded what it holds.
    pub fn close(&self) {
        let mut table = self.router.lock();
        table.closed = true;
        table.literal.clear();
        table.wildcard.clear();
    }

    fn check_size(&self, size: usize) -> Result<(), BusError> {
        check_size(size, self.router.max_payload)
    }
}

impl Router {
    /// A poisoned lock only means another thread panicked mid-update of a plain table; every
    /// update leaves it consistent, so keep using it.
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The subscribers whose pattern matches `subject`, cloned so no lock is held while sending.
    fn matching(&self, subject: &str) -> Result<Vec<Entry>, BusError> {
        let table = self.lock();
        if table.closed {
            return Err(BusError::Closed);
        }
        let mut found: Vec<Entry> = table.literal.get(subject).cloned().unwrap_or_default();
        found.extend(
            table
                .wildcard
                .iter()
                .filter(|(pattern, _)| matches(pattern, subject))
                .map(|(_, entry)| entry.clone()),
        );
        Ok(found)
    }

    fn remove(&self, id: u64, pattern: &str) {
        let mut table = self.lock();
        if has_wildcard(pattern) {
            table.wildcard.retain(|(_, entry)| entry.id != id);
        } else if let Some(entries) = table.literal.get_mut(pattern) {
            entries.retain(|entry| entry.id != id);
            if entries.is_empty() {
                table.literal.remove(pattern);
            }
        }
    }
}

pub struct LocalSubscription {
    receiver: mpsc::Receiver<Message>,
    _registration: Registration,
}

impl LocalSubscription {
    /// Cancel-safe (an mpsc receive).
    pub async fn next(&mut self) -> Option<Message> {
        self.receiver.recv().await
    }
}

/// Removes the subscriber from the router when its `Subscription` is dropped.
struct Registration {
    router: Weak<Router>,
    id: u64,
    pattern: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(router) = self.router.upgrade() {
            router.remove(self.id, &self.pattern);
        }
    }
}

/// The reply handle of a local request; every copy of the request shares one slot.
pub(crate) struct LocalReply {
    slot: Arc<Mutex<Option<oneshot::Sender<Body>>>>,
    max_payload: usize,
}

impl LocalReply {
    pub(crate) fn respond(&self, payload: Body) -> Result<(), BusError> {
        check_size(payload.len(), self.max_payload)?;
        let sender = self
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match sender {
            // The requester may have given up: like a reply to a NATS inbox nobody reads, not an error.
            Some(sender) => {
                let _ = sender.send(payload);
            }
            None => tracing::debug!("bus.respond: the request was already answered"),
        }
        Ok(())
    }
}

fn check_size(size: usize, max: usize) -> Result<(), BusError> {
    if size > max {
        return Err(BusError::TooLarge { size, max });
    }
    Ok(())
}

fn no_responders(subject: &str) -> BusError {
    BusError::NoResponders {
        subject: subject.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn publish_drops_only_for_a_full_subscriber() {
        let bus = LocalBus::new(1024);
        let mut slow = bus.subscribe("s").expect("subscribe");
        let mut fast = bus.subscribe("s").expect("subscribe");
        for i in 0..SUBSCRIBER_CAPACITY {
            bus.publish("s", Bytes::from(i.to_string()))
                .expect("publish");
            let got = fast.next().await.expect("fast receives");
            assert_eq!(got.payload(), i.to_string());
        }
        bus.publish("s", Bytes::from_static(b"extra"))
            .expect("publish");
        assert_eq!(bus.dropped_messages(), 1);
        let extra = fast.next().await.expect("fast still receives");
        assert_eq!(extra.payload(), "extra");
        let first = slow.next().await.expect("slow keeps what it held");
        assert_eq!(first.payload(), "0");
    }

    #[tokio::test]
    async fn request_waits_for_room_in_a_full_subscriber() {
        let bus = LocalBus::new(1024);
        let mut responder = bus.subscribe("s").expect("subscribe");
        for _ in 0..SUBSCRIBER_CAPACITY {
            bus.publish("s", Bytes::new()).expect("publish");
        }
        let requester = bus.clone();
        let request = tokio::spawn(async move {
            requester
                .request(
                    "s",
                    Body::Encoded(Bytes::from_static(b"q")),
                    Duration::from_secs(10),
                )
                .await
        });
        // Drain the published backlog; the request arrives behind it, then answer it.
        let mut drained = 0;
        while let Some(message) = responder.next().await {
            if message.wants_reply() {
                message
                    .respond(Bytes::from_static(b"a"))
                    .await
                    .expect("respond");
                break;
            }
            drained += 1;
        }
        assert_eq!(drained, SUBSCRIBER_CAPACITY);
        let reply = request.await.expect("join").expect("reply");
        assert_eq!(reply.bytes(), "a");
        assert_eq!(bus.dropped_messages(), 0);
    }

    #[tokio::test]
    async fn dropped_subscription_leaves_the_table() {
        let bus = LocalBus::new(1024);
        let literal = bus.subscribe("a.b").expect("subscribe");
        let wildcard = bus.subscribe("a.*").expect("subscribe");
        drop(literal);
        drop(wildcard);
        let table = bus.router.lock();
        assert!(table.literal.is_empty());
        assert!(table.wildcard.is_empty());
    }

    #[tokio::test]
    async fn dropping_every_bus_handle_ends_subscriptions() {
        let bus = LocalBus::new(1024);
        let mut subscription = bus.subscribe("a").expect("subscribe");
        drop(bus);
        assert!(subscription.next().await.is_none());
    }

    #[tokio::test]
    async fn unanswered_request_times_out_even_if_the_message_is_dropped() {
        let bus = LocalBus::new(1024);
        let mut responder = bus.subscribe("s").expect("subscribe");
        let requester = bus.clone();
        let request = tokio::spawn(async move {
            requester
                .request("s", Body::Encoded(Bytes::new()), Duration::from_millis(200))
                .await
        });
        drop(responder.next().await.expect("request arrives"));
        let err = request.await.expect("join").expect_err("no reply");
        assert!(matches!(err, BusError::Timeout { .. }), "{err}");
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct Ask {
        #[prost(string, tag = "1")]
        what: String,
    }

    fn ask(what: &str) -> Ask {
        Ask { what: what.into() }
    }

    /// Requests `ask("question")` as a value on subject `s`, on a task of its own.
    fn ask_in_background(bus: &LocalBus) -> tokio::task::JoinHandle<Result<Body, BusError>> {
        let requester = bus.clone();
        tokio::spawn(async move {
            let asked = Body::value(ask("question"));
            requester.request("s", asked, Duration::from_secs(10)).await
        })
    }

    #[tokio::test]
    async fn a_value_and_its_reply_pass_as_themselves_to_one_subscriber() {
        let bus = LocalBus::new(1024);
        let mut responder = bus.subscribe("s").expect("subscribe");
        let request = ask_in_background(&bus);
        let mut message = responder.next().await.expect("the request");
        assert!(matches!(message.body, Body::Value(_)), "not encoded");
        assert_eq!(message.take::<Ask>().expect("taken"), ask("question"));
        message.respond_with(ask("answer")).await.expect("respond");
        let reply = request.await.expect("join").expect("reply");
        assert!(matches!(reply, Body::Value(_)), "not encoded");
        assert_eq!(
            reply.into_message::<Ask>("s").expect("the reply"),
            ask("answer")
        );
    }

    #[tokio::test]
    async fn several_subscribers_each_get_the_value_encoded() {
        let bus = LocalBus::new(1024);
        let mut first = bus.subscribe("s").expect("subscribe");
        let mut second = bus.subscribe("s").expect("subscribe");
        let request = ask_in_background(&bus);
        for subscription in [&mut first, &mut second] {
            let message = subscription.next().await.expect("the request");
            assert!(matches!(message.body, Body::Encoded(_)));
            assert_eq!(message.decode::<Ask>().expect("decoded"), ask("question"));
            message.respond_with(ask("answer")).await.expect("respond");
        }
        let reply = request.await.expect("join").expect("reply");
        assert_eq!(
            reply.into_message::<Ask>("s").expect("the reply"),
            ask("answer")
        );
    }

    #[tokio::test]
    async fn a_value_over_max_payload_is_refused_before_it_is_sent() {
        let bus = LocalBus::new(8);
        let _responder = bus.subscribe("s").expect("subscribe");
        let asked = Body::value(ask("a question longer than eight bytes"));
        let err = bus
            .request("s", asked, Duration::from_secs(10))
            .await
            .expect_err("too large");
        assert!(matches!(err, BusError::TooLarge { max: 8, .. }), "{err}");
    }
}
