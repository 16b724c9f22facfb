//! The NATS bus: a thin layer over one async-nats client, with the server's credentials and
//! TLS as [`NatsConnect`] says.
//!
//! Payload sizes are checked against the server's `max_payload` before anything is sent, so an
//! oversize message fails with `TooLarge` here exactly as in the local bus. Reconnects and the
//! buffering while disconnected are async-nats's job; a request made while disconnected times
//! out. async-nats queues what is sent (2,048 messages) and stops taking more while it
//! reconnects, and its own timeout starts only once a request is queued: so every send here
//! is bounded as a whole, a request by its timeout, a publish, a reply or a subscription by
//! `SEND_TIMEOUT` and a flush by both, and a process whose server is gone
//! still stops when told to. After
//! `close`, every operation fails with `Closed`.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_nats::{Client, ConnectOptions, PublishErrorKind, RequestErrorKind, Subject, Subscriber};
use bytes::Bytes;
use futures::StreamExt;

use crate::body::Body;
use crate::error::BusError;
use crate::pattern::{validate_pattern, validate_subject};
use crate::{Message, Reply};

/// How long `subscribe` and `flush` wait for the server to confirm it has caught up.
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a publish, a reply or a subscription may wait for room in the client's queue.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Why such a wait ended.
const QUEUE_FULL: &str =
    "the client's queue stayed full: the connection to the NATS server is down";

#[derive(Clone)]
pub struct NatsBus {
    client: Client,
    closed: Arc<AtomicBool>,
}

/// How to reach a NATS server: its URL (`nats://`, or `tls://` to insist on TLS), the
/// credentials it asks for (at most one kind), and TLS: the CA of its certificate (then
/// TLS is required) and a client certificate when it asks for one.
#[derive(Clone, Debug, Default)]
pub struct NatsConnect {
    pub url: String,
    pub credentials: NatsCredentials,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// A NATS server's authentication: none, a token, a user and password, an nkey seed, or a
/// credentials file (a JWT and its nkey seed).
#[derive(Clone, Default)]
pub enum NatsCredentials {
    #[default]
    None,
    Token(String),
    UserPassword(String, String),
    NkeySeed(String),
    File(PathBuf),
}

impl std::fmt::Debug for NatsCredentials {
    /// Names the kind, never the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCredentials::None => f.write_str("None"),
            NatsCredentials::Token(_) => f.write_str("Token"),
            NatsCredentials::UserPassword(user, _) => write!(f, "UserPassword({user})"),
            NatsCredentials::NkeySeed(_) => f.write_str("NkeySeed"),
            NatsCredentials::File(path) => write!(f, "File({})", path.display()),
        }
    }
}

impl NatsConnect {
    /// Plain NATS at `url`.
    pub fn url(url: &str) -> NatsConnect {
        NatsConnect {
            url: url.to_owned(),
            ..NatsConnect::default()
        }
    }

    async fn options(&self, client_name: &str) -> Result<ConnectOptions, BusError> {
        let mut options = ConnectOptions::new().name(client_name);
        options = match &self.credentials {
            NatsCredentials::None => options,
            NatsCredentials::Token(token) => options.token(token.clone()),
            NatsCredentials::UserPassword(user, password) => {
                options.user_and_password(user.clone(), password.clone())
            }
            NatsCredentials::NkeySeed(seed) => options.nkey(seed.clone()),
            NatsCredentials::File(path) => {
                options
                    .credentials_file(path)
                    .await
                    .map_err(|e| BusError::Nats {
                        op: "read the credentials file",
                        reason: format!("{}: {e}", path.display()),
                    })?
            }
        };
        if let Some(ca) = &self.ca_file {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.client_cert {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options)
    }
}

/// `url` with any user name, password or token in it hidden, for messages.
pub fn without_credentials(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl NatsBus {
    /// Fails if the server cannot be reached now; once connected, async-nats reconnects.
    pub async fn connect(server: &NatsConnect, client_name: &str) -> Result<NatsBus, BusError> {
        let url = &server.url;
        let client = server
            .options(client_name)
            .await?
            .connect(url)
            .await
            .map_err(|err| BusError::Nats {
                op: "connect",
                reason: format!("{}: {err}", without_credentials(url)),
            })?;
        Ok(NatsBus {
            client,
            closed: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Whether the client is connected to a server now (async-nats reconnects on its own).
    pub fn is_connected(&self) -> bool {
        self.client.connection_state() == async_nats::connection::State::Connected
    }

    /// The `max_payload` of the server's INFO, updated by async-nats on every (re)connect.
    pub fn max_payload(&self) -> usize {
        self.client.max_payload()
    }

    pub async fn publish(&self, subject: &str, payload: Bytes) -> Result<(), BusError> {
        self.check_open()?;
        check_size(payload.len(), self.max_payload())?;
        validate_subject(subject)?;
        publish(&self.client, subject.to_owned(), payload, "publish").await
    }

    /// Cancel-safe: dropping the future abandons the request; a late reply is discarded.
    pub async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, BusError> {
        self.check_open()?;
        let size = payload.len();
        let max = self.max_payload();
        check_size(size, max)?;
        validate_subject(subject)?;
        let request = async_nats::Request::new()
            .payload(payload)
            .timeout(Some(timeout));
        let timed_out = || BusError::Timeout {
            subject: subject.to_owned(),
            after: timeout,
        };
        let sent = tokio::time::timeout(
            timeout,
            self.client.send_request(subject.to_owned(), request),
        );
        match sent.await.map_err(|_| timed_out())? {
            Ok(reply) => Ok(reply.payload),
            Err(err) => Err(match err.kind() {
                RequestErrorKind::NoResponders => BusError::NoResponders {
                    subject: subject.to_owned(),
                },
                RequestErrorKind::TimedOut => timed_out(),
                // Only if the server's limit shrank between our check and the send.
                RequestErrorKind::MaxPayloadExceeded => BusError::TooLarge { size, max },
                RequestErrorKind::InvalidSubject | RequestErrorKind::Other => {
                    self.nats_error("request", format!("on subject '{subject}': {err}"))
                }
            }),
        }
    }

    /// Returns once the server has the subscription, or after `ROUND_TRIP_TIMEOUT` if it does
    /// not answer (e.g. while reconnecting).
    pub async fn subscribe(&self, pattern: &str) -> Result<NatsSubscription, BusError> {
        self.check_open()?;
        validate_pattern(pattern)?;
        let subscribing = self.client.subscribe(pattern.to_owned());
        let subscriber = tokio::time::timeout(SEND_TIMEOUT, subscribing)
            .await
            .map_err(|_| self.nats_error("subscribe", format!("to '{pattern}': {QUEUE_FULL}")))?
            .map_err(|err| self.nats_error("subscribe", format!("to '{pattern}': {err}")))?;
        // Without this round trip a request from another connection could still get
        // NoResponders (a start-up race). The subscription itself is in place either way, and
        // async-nats renews it on reconnect, so a failed confirmation is only logged.
        if let Err(err) = self.round_trip().await {
            tracing::warn!(pattern, error = %err, "bus.subscribe: the server did not confirm the subscription");
        }
        Ok(NatsSubscription {
            subscriber,
            client: self.client.clone(),
        })
    }

    /// Waits until the server has processed everything this client sent so far.
    pub async fn flush(&self) -> Result<(), BusError> {
        self.check_open()?;
        self.round_trip().await
    }

    /// A request to a fresh inbox nobody subscribes to: the server answers "no responders" only
    /// after processing everything this connection sent before it. (`Client::flush` only empties
    /// the socket buffer, and async-nats has no ping call.)
    async fn round_trip(&self) -> Result<(), BusError> {
        let probe = async_nats::Request::new().timeout(Some(ROUND_TRIP_TIMEOUT));
        let sent = self.client.send_request(self.client.new_inbox(), probe);
        // The probe's own timeout starts once it is queued: the wait for a place comes first.
        let answered = tokio::time::timeout(SEND_TIMEOUT + ROUND_TRIP_TIMEOUT, sent)
            .await
            .map_err(|_| self.nats_error("round trip to the server", QUEUE_FULL.to_owned()))?;
        match answered {
            Ok(_) => Ok(()),
            Err(err) if err.kind() == RequestErrorKind::NoResponders => Ok(()),
            Err(err) => Err(self.nats_error("round trip to the server", err.to_string())),
        }
    }

    /// Drains: subscriptions yield what they hold and then `None`; the connection then closes.
    pub async fn close(&self) -> Result<(), BusError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.client.drain().await.map_err(|err| BusError::Nats {
            op: "drain",
            reason: err.to_string(),
        })
    }

    fn check_open(&self) -> Result<(), BusError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(BusError::Closed);
        }
        Ok(())
    }

    /// An async-nats failure, reported as `Closed` when it is the result of our own `close`.
    fn nats_error(&self, op: &'static str, reason: String) -> BusError {
        if self.closed.load(Ordering::Acquire) {
            return BusError::Closed;
        }
        BusError::Nats { op, reason }
    }
}

pub struct NatsSubscription {
    subscriber: Subscriber,
    /// Kept for the reply handles of requests received on this subscription.
    client: Client,
}

impl NatsSubscription {
    /// Cancel-safe (`Subscriber` is a stream backed by a channel).
    pub async fn next(&mut self) -> Option<Message> {
        let message = self.subscriber.next().await?;
        let reply = match message.reply {
            Some(reply_subject) => Reply::Nats(NatsReply {
                client: self.client.clone(),
                subject: reply_subject,
            }),
            None => Reply::None,
        };
        Some(Message::new(
            message.subject.as_str().to_owned(),
            Body::Encoded(message.payload),
            reply,
        ))
    }
}

/// The reply handle of a request received over NATS: its inbox subject.
pub(crate) struct NatsReply {
    client: Client,
    subject: Subject,
}

impl NatsReply {
    /// Publishing to an inbox nobody reads any more (the requester gave up) is not an error.
    pub(crate) async fn respond(&self, payload: Bytes) -> Result<(), BusError> {
        check_size(payload.len(), self.client.max_payload())?;
        publish(&self.client, self.subject.clone(), payload, "respond").await
    }
}

async fn publish(
    client: &Client,
    subject: impl async_nats::ToSubject,
    payload: Bytes,
    op: &'static str,
) -> Result<(), BusError> {
    let size = payload.len();
    let sent = tokio::time::timeout(SEND_TIMEOUT, client.publish(subject, payload));
    sent.await
        .map_err(|_| BusError::Nats {
            op,
            reason: format!("{QUEUE_FULL} (waited {SEND_TIMEOUT:?})"),
        })?
        .map_err(|err| match err.kind() {
            PublishErrorKind::MaxPayloadExceeded => BusError::TooLarge {
                size,
                max: client.max_payload(),
            },
            PublishErrorKind::InvalidSubject | PublishErrorKind::Send => BusError::Nats {
                op,
                reason: err.to_string(),
            },
        })
}

fn check_size(size: usize, max: usize) -> Result<(), BusError> {
    if size > max {
        return Err(BusError::TooLarge { size, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::without_credentials;

    #[test]
    fn credentials_in_a_url_are_hidden() {
        assert_eq!(
            without_credentials("nats://user:s3cret@nats:4222"),
            "nats://***@nats:4222"
        );
        assert_eq!(
            without_credentials("nats://tok@nats:4222"),
            "nats://***@nats:4222"
        );
        assert_eq!(without_credentials("nats://nats:4222"), "nats://nats:4222");
    }
}
