//! A small client for Cascade's gRPC API: one HTTP/2 connection shared by the
//! `Ingest`, `Worker` and `Admin` stubs. The stubs are the generated ones, so every RPC and
//! message of the contract is available as is. A worker calls through [`WorkerCalls`], which
//! in the process that serves the gateway skips the connection.
//!
//! A service whose many tasks enqueue one event each shares a [`BatchingEnqueuer`]
//! ([`Client::batching_enqueuer`]): their events go together as `EnqueueBatch` calls, and
//! each task is answered for its own.
//!
//! [`ClientOptions`] carry what a secured gateway asks for: TLS (the gateway's CA, and a
//! client certificate for mutual TLS) and a bearer token, sent on every call as
//! `authorization: Bearer <token>`. An `https://` address speaks TLS, trusting the given CA
//! or else the system's roots; an address without a scheme is `https://` when TLS options
//! are given and `http://` otherwise.

mod batching;
mod worker_calls;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cascade_proto::v1::admin_client::AdminClient;
use cascade_proto::v1::ingest_client::IngestClient;
use cascade_proto::v1::worker_client::WorkerClient;
use cascade_proto::v1::worker_server::Worker;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub use batching::{BatchingEnqueuer, BatchingOptions};
pub use cascade_proto::RefusedWhole;
pub use cascade_proto::v1 as api;
pub use worker_calls::WorkerCalls;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("'{addr}' is not a gRPC address like http://127.0.0.1:7700: {reason}")]
    BadAddress { addr: String, reason: String },
    #[error("cannot connect to Cascade at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// A TLS file or the token cannot be used; `what` names it (`--ca /path`).
    #[error("{what}: {reason}")]
    Credentials { what: String, reason: String },
    /// A [`ClientOptions`] field out of its range.
    #[error("{field}: {reason}")]
    Option {
        field: &'static str,
        reason: &'static str,
    },
}

/// What an innermost cause says, e.g. "Connection refused (os error 111)": the outer
/// layers only say "transport error".
pub fn innermost_cause(error: &dyn std::error::Error) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Whether the gateway refused a whole request, before applying anything, for what its
/// items are (more or larger than its limits, one outside the caller's grants): its status
/// says so in its metadata (`cascade-refused-whole`), and the same items sent in smaller
/// requests each get a verdict of their own. A quota, backpressure or an unreachable shard
/// never says so: sending the items again in parts would meet the same answer.
pub fn is_refused_whole(status: &tonic::Status) -> bool {
    status
        .metadata()
        .contains_key(cascade_proto::REFUSED_WHOLE_KEY)
}

/// Why the gateway refused a whole request ([`is_refused_whole`]), when it says so in a way
/// this build knows.
pub fn refused_whole_reason(status: &tonic::Status) -> Option<RefusedWhole> {
    let value = status.metadata().get(cascade_proto::REFUSED_WHOLE_KEY)?;
    RefusedWhole::parse(value.to_str().ok()?)
}

/// The indices of the items outside the caller's grants, in the request's order, when the
/// gateway refused a whole request for them ([`RefusedWhole::ForbiddenItem`]) and listed
/// them: the request's other items may go again together, without those. A list too long
/// for the status may leave some off; the rest, sent again, finds them.
pub fn forbidden_items(status: &tonic::Status) -> Option<Vec<usize>> {
    if refused_whole_reason(status) != Some(RefusedWhole::ForbiddenItem) {
        return None;
    }
    let value = status.metadata().get(cascade_proto::FORBIDDEN_ITEMS_KEY)?;
    cascade_proto::parse_item_list(value.to_str().ok()?)
}

/// A request's `items`, refused whole for those outside the caller's grants
/// ([`forbidden_items`]), split into `(forbidden, others)` in their order: the others may go
/// again together. `Err(items)` when the status lists none that fit them.
pub fn forbidden_apart<T>(
    items: Vec<T>,
    status: &tonic::Status,
) -> Result<(Vec<T>, Vec<T>), Vec<T>> {
    let Some(forbidden) = forbidden_items(status) else {
        return Err(items);
    };
    if forbidden.last().is_none_or(|&last| last >= items.len()) {
        return Err(items);
    }
    // Ascending, as the gateway lists them.
    let mut forbidden = forbidden.into_iter().peekable();
    let (mut refused, mut others) = (Vec::new(), Vec::new());
    for (index, item) in items.into_iter().enumerate() {
        match forbidden.next_if_eq(&index) {
            Some(_) => refused.push(item),
            None => others.push(item),
        }
    }
    Ok((refused, others))
}

/// Pings more often than this would be a load of their own.
const MIN_KEEPALIVE: Duration = Duration::from_secs(1);

/// The largest answer read (tonic's default, 4 MiB, is below an event with the largest
/// payload). The gateway bounds its answers by its own limits; this only needs to be above
/// them.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// TLS and a token for a secured gateway (the default is neither), and how the connection
/// is watched.
#[derive(Clone)]
pub struct ClientOptions {
    /// PEM CA certificates that signed the gateway's certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// A PEM client certificate and its key, for mutual TLS.
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// Sent as `authorization: Bearer <token>` on every call.
    pub token: Option<String>,
    /// While calls wait on the connection (a worker's long poll, a slow answer), an HTTP/2
    /// ping checks it this often, and one not answered within the same time closes it: its
    /// calls fail with UNAVAILABLE and the next call connects again. Without it, a connection
    /// to a gateway whose machine is gone (no reset ever comes) is found dead only when TCP
    /// gives up retransmitting, many minutes later, and every call on it waits for its own
    /// deadline meanwhile. `None`: no pings. The default, 20 s, suits the gateway, which
    /// answers pings at any rate; other gRPC servers may not (grpc-go's and grpc-java's
    /// close connections that ping more often than every 5 minutes, by default).
    pub keepalive: Option<Duration>,
    /// How long making the connection may take: TCP, then the TLS handshake, each; default
    /// 10 s.
    pub connect_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            ca_pem: None,
            identity_pem: None,
            token: None,
            keepalive: Some(Duration::from_secs(20)),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for ClientOptions {
    /// Says what is set, never the token or the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity_pem.is_some())
            .field("token", &self.token.is_some())
            .field("keepalive", &self.keepalive)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl ClientOptions {
    /// Options from files (errors name `names`' entry for each: a flag or a setting) and a
    /// token.
    pub fn from_files(
        ca: Option<&Path>,
        cert_and_key: Option<(&Path, &Path)>,
        token: Option<String>,
        names: [&str; 3],
    ) -> Result<ClientOptions, ClientError> {
        let read = |name: &str, path: &Path| {
            std::fs::read(path).map_err(|e| ClientError::Credentials {
                what: format!("{name} {}", path.display()),
                reason: e.to_string(),
            })
        };
        let identity_pem = match cert_and_key {
            Some((cert, key)) => Some((read(names[1], cert)?, read(names[2], key)?)),
            None => None,
        };
        Ok(ClientOptions {
            ca_pem: ca.map(|path| read(names[0], path)).transpose()?,
            identity_pem,
            token,
            ..ClientOptions::default()
        })
    }

    fn wants_tls(&self) -> bool {
        self.ca_pem.is_some() || self.identity_pem.is_some()
    }
}

/// Puts the bearer token on every call.
#[derive(Clone, Debug, Default)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// What the stubs call through: the connection, with the token added to each call.
pub type Connection = InterceptedService<Channel, BearerToken>;

#[derive(Clone)]
pub struct Client {
    channel: Channel,
    token: BearerToken,
    /// The gateway's `Worker` service itself, when this process serves it.
    in_process_worker: Option<Arc<dyn Worker>>,
}

impl Client {
    /// Connects to a Cascade gateway, e.g. `http://127.0.0.1:7700` (the scheme may be left out).
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::connect_with(addr, &ClientOptions::default()).await
    }

    /// Connects with TLS and a token as `options` say.
    pub async fn connect_with(addr: &str, options: &ClientOptions) -> Result<Client, ClientError> {
        let endpoint = endpoint(addr, options)?;
        let channel = endpoint.connect().await.map_err(|e| ClientError::Connect {
            addr: addr.to_string(),
            reason: innermost_cause(&e),
        })?;
        Ok(Client {
            channel,
            token: token(options)?,
            in_process_worker: None,
        })
    }

    /// A client whose connection is made on first use and made again after a failure, so
    /// it may be made before the gateway is up. Call it inside a Tokio runtime.
    pub fn connect_lazy(addr: &str, options: &ClientOptions) -> Result<Client, ClientError> {
        Ok(Client {
            channel: endpoint(addr, options)?.connect_lazy(),
            token: token(options)?,
            in_process_worker: None,
        })
    }

    /// A client on a channel made elsewhere (an in-process one), without a token.
    pub fn from_channel(channel: Channel) -> Client {
        Client {
            channel,
            token: BearerToken::default(),
            in_process_worker: None,
        }
    }

    /// A client of the gateway this process serves: [`Client::worker_calls`] calls `worker`
    /// (the gateway's service) directly; the stubs use `channel` (an in-process one).
    pub fn in_process(channel: Channel, worker: Arc<dyn Worker>) -> Client {
        Client {
            in_process_worker: Some(worker),
            ..Client::from_channel(channel)
        }
    }

    pub fn ingest(&self) -> IngestClient<Connection> {
        IngestClient::new(self.connection()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// An enqueuer that many tasks share (clone it), sending their events together as
    /// `EnqueueBatch` calls. Call it inside a Tokio runtime.
    pub fn batching_enqueuer(&self, options: BatchingOptions) -> BatchingEnqueuer {
        BatchingEnqueuer::start(self.ingest(), options)
    }

    pub fn worker(&self) -> WorkerClient<Connection> {
        WorkerClient::new(self.connection()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// What a worker calls: the gateway's service itself when this process serves it,
    /// else the `Worker` stub.
    pub fn worker_calls(&self) -> WorkerCalls {
        match &self.in_process_worker {
            Some(service) => WorkerCalls::InProcess(Arc::clone(service)),
            None => WorkerCalls::Remote(self.worker()),
        }
    }

    pub fn admin(&self) -> AdminClient<Connection> {
        AdminClient::new(self.connection()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// The connection with the token, for other stubs (health, reflection, one's own).
    pub fn connection(&self) -> Connection {
        InterceptedService::new(self.channel.clone(), self.token.clone())
    }
}

fn endpoint(addr: &str, options: &ClientOptions) -> Result<Endpoint, ClientError> {
    let bad = |reason: String| ClientError::BadAddress {
        addr: addr.to_string(),
        reason,
    };
    let url = match (addr.contains("://"), options.wants_tls()) {
        (true, _) => addr.to_string(),
        (false, true) => format!("https://{addr}"),
        (false, false) => format!("http://{addr}"),
    };
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(options.connect_timeout);
    if let Some(every) = options.keepalive {
        if every < MIN_KEEPALIVE {
            return Err(ClientError::Option {
                field: "keepalive",
                reason: "must be at least 1s, or None for no pings",
            });
        }
        endpoint = endpoint
            .http2_keep_alive_interval(every)
            .keep_alive_timeout(every)
            .keep_alive_while_idle(false);
    }
    if !url.starts_with("https://") {
        return match options.wants_tls() {
            true => Err(bad(
                "a CA or client certificate is given: use https:// (or no scheme)".into(),
            )),
            false => Ok(endpoint),
        };
    }
    // The endpoint's own connect timeout covers TCP only.
    let mut tls = ClientTlsConfig::new().timeout(options.connect_timeout);
    tls = match &options.ca_pem {
        Some(ca) => tls.ca_certificate(Certificate::from_pem(ca)),
        None => tls.with_enabled_roots(),
    };
    if let Some((cert, key)) = &options.identity_pem {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    endpoint
        .tls_config(tls)
        .map_err(|e| bad(innermost_cause(&e)))
}

fn token(options: &ClientOptions) -> Result<BearerToken, ClientError> {
    let Some(token) = &options.token else {
        return Ok(BearerToken::default());
    };
    let mut value: MetadataValue<Ascii> =
        format!("Bearer {token}")
            .parse()
            .map_err(|_| ClientError::Credentials {
                what: "the token".into(),
                reason: "must be printable ASCII without line breaks".into(),
            })?;
    // Kept out of HTTP/2 header compression tables and debug output.
    value.set_sensitive(true);
    Ok(BearerToken(Some(value)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(reason: RefusedWhole, forbidden: &[usize]) -> tonic::Status {
        let mut status = tonic::Status::permission_denied("items[1].queue: may not produce");
        cascade_proto::mark_refused_whole(&mut status, reason, forbidden);
        status
    }

    #[test]
    fn pings_more_often_than_a_second_are_refused_naming_the_option() {
        let options = |every: u64| ClientOptions {
            keepalive: Some(Duration::from_millis(every)),
            ..ClientOptions::default()
        };
        let refused = endpoint("http://127.0.0.1:7700", &options(0)).expect_err("0 s");
        assert_eq!(
            refused.to_string(),
            "keepalive: must be at least 1s, or None for no pings"
        );
        assert!(endpoint("http://127.0.0.1:7700", &options(999)).is_err());
        assert!(endpoint("http://127.0.0.1:7700", &options(1000)).is_ok());
    }

    #[test]
    fn the_listed_items_are_set_apart_from_the_others() {
        let items = || vec!["a", "b", "c", "d", "e"];
        let status = refused(RefusedWhole::ForbiddenItem, &[1, 4]);
        assert_eq!(forbidden_items(&status), Some(vec![1, 4]));
        assert_eq!(
            forbidden_apart(items(), &status),
            Ok((vec!["b", "e"], vec!["a", "c", "d"]))
        );
        // Nothing to set apart: no list, one that does not fit the items, another reason.
        for status in [
            refused(RefusedWhole::ForbiddenItem, &[]),
            refused(RefusedWhole::ForbiddenItem, &[2, 5]),
            refused(RefusedWhole::TooLarge, &[1]),
        ] {
            assert_eq!(
                forbidden_apart(items(), &status),
                Err(items()),
                "{status:?}"
            );
        }
    }
}
