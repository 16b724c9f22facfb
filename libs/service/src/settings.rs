//! The settings of every Cascade process, one typed tree: built-in defaults, then the file
//! given with `--config` (TOML), then `CASCADE__SECTION__KEY` environment variables, then
//! command-line flags. Validated once at start; an error names the key. Each service reads
//! the sections it needs; one tree (rather than one per service) lets one file configure a
//! whole cluster and catches a misspelt key in any section.
//!
//! `deploy/config/cascade.toml` is the complete, commented example; a test parses it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_bus::{NatsConnect, NatsCredentials};
use cascade_core::units::{format_duration, format_size, one_of, serde_duration, serde_size};
use cascade_store::ShardLimits;
use cascade_store::durable::Watermark;
use serde::{Deserialize, Serialize};

use crate::{ServiceError, load_layers};

mod resource_manager;
mod security;
pub use resource_manager::{
    ExecutorKind, KubernetesSettings, RATE_INTERVALS, ResourceManagerSettings,
};
pub use security::{AuthSettings, ClientTlsFiles, GrpcTlsSettings, Secret};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub cluster: ClusterSettings,
    pub bus: BusSettings,
    pub grpc: GrpcSettings,
    pub http: HttpSettings,
    /// Authentication and authorization: identities, grants, quotas, the handler URLs
    /// pipelines may name.
    pub auth: AuthSettings,
    pub data: DataSettings,
    pub store: StoreSettings,
    pub dispatcher: DispatcherSettings,
    pub timer: TimerSettings,
    pub ingest: IngestSettings,
    pub limits: LimitSettings,
    /// Logs, trace export (OTLP) and service identity; see `cascade_telemetry`.
    pub telemetry: cascade_telemetry::TelemetrySettings,
    /// The resource manager: the handler budget shared by priority, and how fast it reacts;
    /// see `cascade_resource_manager`.
    pub resource_manager: ResourceManagerSettings,
    pub standalone: StandaloneSettings,
    /// Pipelines applied at start (re-applied each time: a changed stage config takes effect,
    /// events stay). More can be applied at run time with `Admin.ApplyPipeline`.
    pub pipelines: Vec<cascade_core::Pipeline>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Part of every bus subject: clusters sharing a NATS server stay apart.
    pub name: String,
    /// Dispatcher shards (and as many timer shards). Queues are spread over them by name;
    /// changing it moves queues between shards, so it is fixed for a cluster's life.
    pub shards: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum BusKind {
    /// In-process: every service in one process (`cascade standalone`).
    Local,
    Nats,
}

impl TryFrom<String> for BusKind {
    type Error = String;

    fn try_from(given: String) -> Result<BusKind, String> {
        one_of(
            &given,
            &[("local", BusKind::Local), ("nats", BusKind::Nats)],
        )
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BusSettings {
    pub kind: BusKind,
    /// `nats://host:port`, or `tls://host:port` to insist on TLS.
    pub url: String,
    /// How long a service waits for another's answer before UNAVAILABLE.
    #[serde(with = "serde_duration")]
    pub request_timeout: Duration,
    /// The NATS server's credentials, at most one kind: a token, a user and password, an
    /// nkey seed, or a credentials file.
    pub token: Option<Secret>,
    pub user: Option<String>,
    pub password: Option<Secret>,
    pub nkey_seed: Option<Secret>,
    pub credentials_file: Option<PathBuf>,
    /// TLS to the NATS server: its CA (then TLS is required), and a client certificate
    /// and key for a server that verifies clients.
    pub tls: ClientTlsFiles,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcSettings {
    pub addr: String,
    /// Client connections at once at most (fewer if the process's file descriptor limit
    /// would not leave room for everything else); a connection past them is closed at once.
    pub max_connections: u32,
    /// Client connections at once from one IP address at most (0: no limit of its own), so
    /// that one client cannot take every place under `max_connections`; a connection past
    /// it is closed at once.
    pub max_connections_per_peer: u32,
    /// Concurrent requests (HTTP/2 streams) per connection, advertised to clients.
    pub max_concurrent_streams: u32,
    /// A connection that sends nothing for this long after it opens is closed.
    #[serde(with = "serde_duration")]
    pub handshake_timeout: Duration,
    /// How often the server pings a quiet connection, and how long it waits for the answer
    /// before it closes the connection (a client that vanished).
    #[serde(with = "serde_duration")]
    pub keepalive_interval: Duration,
    #[serde(with = "serde_duration")]
    pub keepalive_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    #[serde(with = "serde_duration")]
    pub idle_timeout: Duration,
    /// Requests in flight at once, all connections together; one more is shed at once
    /// with RESOURCE_EXHAUSTED (health checks are not counted).
    pub max_requests_in_flight: u32,
    /// Bytes of responses (events' payloads) that clients have not read yet, all
    /// connections together; a response that would pass it is refused.
    #[serde(with = "serde_size")]
    pub max_unread_response_bytes: u64,
    /// The same for one connection, so that one client cannot hold it all.
    #[serde(with = "serde_size")]
    pub max_unread_response_bytes_per_connection: u64,
    /// TLS on this port (and mutual TLS with a client CA).
    pub tls: GrpcTlsSettings,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    pub addr: String,
}

/// What `cascade standalone` runs besides the shards and the gateway.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StandaloneSettings {
    /// A stage worker for every stage of every pipeline (and the resource manager over
    /// them). Off when the stages are served by workers of one's own (the SDK, or the
    /// `cascade-stage-worker` binary): standalone's would compete with them for events.
    pub stage_workers: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSettings {
    /// Each shard's store lives in `<dir>/dispatcher-<n>` or `<dir>/timer-<n>`.
    pub dir: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum DurabilityKind {
    /// Answer after the write-ahead log's fdatasync (the default).
    Fsync,
    /// Answer at once, fdatasync every `sync_interval`: a power cut loses up to that much.
    Interval,
    /// Never fdatasync (tests, benchmarks).
    None,
}

impl TryFrom<String> for DurabilityKind {
    type Error = String;

    fn try_from(given: String) -> Result<DurabilityKind, String> {
        let choices = [
            ("fsync", DurabilityKind::Fsync),
            ("interval", DurabilityKind::Interval),
            ("none", DurabilityKind::None),
        ];
        one_of(&given, &choices)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSettings {
    pub durability: DurabilityKind,
    #[serde(with = "serde_duration")]
    pub sync_interval: Duration,
    /// sled's page cache, per store (each dispatcher shard and each timer shard has one).
    #[serde(with = "serde_size")]
    pub cache: u64,
    #[serde(with = "serde_duration")]
    pub checkpoint_interval: Duration,
    #[serde(with = "serde_size")]
    pub checkpoint_bytes: u64,
    /// Close sled and open it again once checkpoints wrote this much into it (counted as the
    /// changes they carried; sled's own log grows a few times faster): a restart after a
    /// crash reads only sled's log written since. 0 (the default): never.
    #[serde(with = "serde_size")]
    pub reopen_bytes: u64,
    /// Live dedup entries per shard at most; the oldest age out first.
    pub dedup_max_entries: u64,
    /// Free space of a shard's filesystem below which it refuses enqueues, updates and
    /// hand-offs (takes, acks, deletes and purges go on): `auto` is 5 %, at most 1 GiB.
    pub min_free_bytes: Watermark,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DispatcherSettings {
    /// The shards this process serves; empty: all of `cluster.shards` (standalone).
    #[serde(deserialize_with = "shard_list")]
    pub shards: Vec<u32>,
    /// How often per-queue stats are published on the bus.
    #[serde(with = "serde_duration")]
    pub stats_interval: Duration,
    /// The longest long-poll `Take` wait granted; longer requests are cut to this.
    #[serde(with = "serde_duration")]
    pub max_take_wait: Duration,
    /// Hand-offs sent per bus request at most.
    pub outbox_batch: u32,
    /// Pause before resending hand-offs a receiver did not acknowledge.
    #[serde(with = "serde_duration")]
    pub outbox_retry: Duration,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimerSettings {
    /// The shards this process serves; empty: all of `cluster.shards` (standalone).
    #[serde(deserialize_with = "shard_list")]
    pub shards: Vec<u32>,
    /// Schedule entries due within this are held in memory; later ones stay on disk.
    #[serde(with = "serde_duration")]
    pub horizon: Duration,
    /// Activations sent per bus request at most.
    pub batch: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngestSettings {
    /// Items per `EnqueueBatch` and completions per `Complete` at most.
    pub max_batch_items: u32,
    /// Largest payload accepted, whatever a queue allows (the bus must carry it).
    #[serde(with = "serde_size")]
    pub max_payload: u64,
    /// Encoded bytes of one `EnqueueBatch` or `Complete` at most (items with their payloads
    /// and headers). The gateway's gRPC limit is the larger of this and `max_payload` with
    /// room for an item's headers, so a request within both is never refused unread.
    #[serde(with = "serde_size")]
    pub max_batch_bytes: u64,
    /// Coalesced bus requests in flight at once per shard and kind (enqueues, completions):
    /// with more than one, the shard works on the next batch while the previous one is made
    /// durable. Requests in flight together carry independent callers, so no order is kept
    /// between them.
    pub requests_in_flight: u32,
}

/// What the cluster holds at most, where its memory, its stats rounds and its `/metrics`
/// grow with the count (docs/operations.md, "Limits").
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// Queues and templates (from `CreateQueue` and pipeline stages) per dispatcher shard;
    /// queues made from a template are not counted.
    pub max_queues: u64,
    /// Pipelines in the cluster.
    pub max_pipelines: u32,
    /// Stages per pipeline.
    pub max_stages: u32,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            name: "default".into(),
            shards: 1,
        }
    }
}

impl BusSettings {
    /// How to reach the NATS server, checked: a `nats://` or `tls://` URL, at most one
    /// kind of credentials, a client certificate with its key.
    pub fn nats(&self) -> Result<NatsConnect, ServiceError> {
        if !["nats://", "tls://"]
            .iter()
            .any(|s| self.url.starts_with(s))
        {
            return Err(ServiceError::setting(
                "bus.url",
                format!(
                    "'{}' is not a nats:// or tls:// URL",
                    cascade_bus::without_credentials(&self.url)
                ),
            ));
        }
        let credentials = match (
            &self.token,
            &self.user,
            &self.password,
            &self.nkey_seed,
            &self.credentials_file,
        ) {
            (None, None, None, None, None) => NatsCredentials::None,
            (Some(token), None, None, None, None) => NatsCredentials::Token(token.expose().into()),
            (None, Some(user), Some(password), None, None) => {
                NatsCredentials::UserPassword(user.clone(), password.expose().into())
            }
            (None, None, None, Some(seed), None) => NatsCredentials::NkeySeed(seed.expose().into()),
            (None, None, None, None, Some(file)) => NatsCredentials::File(file.clone()),
            (None, Some(_), None, None, None) | (None, None, Some(_), None, None) => {
                return Err(ServiceError::setting(
                    "bus.password",
                    "bus.user and bus.password go together",
                ));
            }
            _ => {
                return Err(ServiceError::setting(
                    "bus.token",
                    "give one kind of NATS credentials: bus.token, bus.user with bus.password, bus.nkey_seed, or bus.credentials_file",
                ));
            }
        };
        let client_cert = self
            .tls
            .cert_and_key("bus.tls")?
            .map(|(cert, key)| (cert.to_path_buf(), key.to_path_buf()));
        Ok(NatsConnect {
            url: self.url.clone(),
            credentials,
            ca_file: self.tls.ca_file.clone(),
            client_cert,
        })
    }
}

impl Default for BusSettings {
    fn default() -> Self {
        BusSettings {
            kind: BusKind::Local,
            url: "nats://127.0.0.1:4222".into(),
            request_timeout: Duration::from_secs(10),
            token: None,
            user: None,
            password: None,
            nkey_seed: None,
            credentials_file: None,
            tls: ClientTlsFiles::default(),
        }
    }
}

impl Default for GrpcSettings {
    fn default() -> Self {
        GrpcSettings {
            addr: "127.0.0.1:7700".into(),
            max_connections: 1024,
            max_connections_per_peer: 0,
            max_concurrent_streams: 64,
            handshake_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_requests_in_flight: 4096,
            max_unread_response_bytes: 256 << 20,
            max_unread_response_bytes_per_connection: 32 << 20,
            tls: GrpcTlsSettings::default(),
        }
    }
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            addr: "127.0.0.1:7701".into(),
        }
    }
}

impl Default for StandaloneSettings {
    fn default() -> Self {
        StandaloneSettings {
            stage_workers: true,
        }
    }
}

impl Default for DataSettings {
    fn default() -> Self {
        DataSettings {
            dir: PathBuf::from("./cascade-data"),
        }
    }
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            durability: DurabilityKind::Fsync,
            sync_interval: Duration::from_millis(10),
            cache: 64 << 20,
            checkpoint_interval: Duration::from_secs(30),
            checkpoint_bytes: 256 << 20,
            reopen_bytes: 0,
            dedup_max_entries: 1_000_000,
            min_free_bytes: Watermark::Auto,
        }
    }
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        DispatcherSettings {
            shards: Vec::new(),
            stats_interval: Duration::from_secs(1),
            max_take_wait: Duration::from_secs(60),
            outbox_batch: 4096,
            outbox_retry: Duration::from_millis(500),
        }
    }
}

impl Default for TimerSettings {
    fn default() -> Self {
        TimerSettings {
            shards: Vec::new(),
            horizon: Duration::from_secs(60),
            batch: 1000,
        }
    }
}

impl Default for LimitSettings {
    fn default() -> Self {
        let shard = ShardLimits::default();
        LimitSettings {
            max_queues: shard.max_queues,
            max_pipelines: u32::try_from(shard.max_pipelines).unwrap_or(u32::MAX),
            max_stages: u32::try_from(shard.max_stages).unwrap_or(u32::MAX),
        }
    }
}

impl LimitSettings {
    /// The limits a dispatcher shard enforces (the largest event is the bus's to set).
    pub fn shard(&self) -> ShardLimits {
        ShardLimits {
            max_queues: self.max_queues,
            max_pipelines: self.max_pipelines as usize,
            max_stages: self.max_stages as usize,
            ..ShardLimits::default()
        }
    }
}

impl Default for IngestSettings {
    fn default() -> Self {
        IngestSettings {
            max_batch_items: 1000,
            max_payload: 4 << 20,
            max_batch_bytes: 16 << 20,
            requests_in_flight: 2,
        }
    }
}

/// The environment prefix: `CASCADE__STORE__CACHE` is `store.cache`.
const ENV_PREFIX: &str = "CASCADE";
/// Shards at most: far beyond what one cluster needs, small enough to catch a typo.
const MAX_SHARDS: u32 = 1024;
/// Coalesced requests per shard and kind at most: a few keep a shard's writer busy; many
/// only make each batch smaller.
const MAX_REQUESTS_IN_FLIGHT: u32 = 64;

impl Settings {
    /// Defaults, then `file`, then the environment, then `overrides` (dotted keys, e.g.
    /// `("data.dir", "/var/lib/cascade")`), validated.
    pub fn load(
        file: Option<&Path>,
        overrides: &[(&str, String)],
    ) -> Result<Settings, ServiceError> {
        Settings::load_from(file, overrides, std::env::vars())
    }

    /// `load` with the environment given, for tests.
    pub fn load_from(
        file: Option<&Path>,
        overrides: &[(&str, String)],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ServiceError> {
        let mut settings: Settings = load_layers(file, ENV_PREFIX, overrides, env)?;
        settings.validate()?;
        // An IPv6 address as Kubernetes gives a pod's (`$(POD_IP):7700`), bracketed for binding.
        for addr in [&mut settings.grpc.addr, &mut settings.http.addr] {
            if let Some(parsed) = socket_addr(addr) {
                *addr = parsed.to_string();
            }
        }
        Ok(settings)
    }

    pub fn validate(&self) -> Result<(), ServiceError> {
        cascade_bus::subject::validate_cluster(&self.cluster.name)
            .map_err(|e| ServiceError::setting("cluster.name", e.to_string()))?;
        if !(1..=MAX_SHARDS).contains(&self.cluster.shards) {
            return Err(ServiceError::setting(
                "cluster.shards",
                format!("must be 1 to {MAX_SHARDS}, is {}", self.cluster.shards),
            ));
        }
        for (key, shards) in [
            ("dispatcher.shards", &self.dispatcher.shards),
            ("timer.shards", &self.timer.shards),
        ] {
            if let Some(bad) = shards.iter().find(|&&s| s >= self.cluster.shards) {
                return Err(ServiceError::setting(
                    key,
                    format!(
                        "shard {bad} does not exist: shards are numbered 0 to {} (cluster.shards = {})",
                        self.cluster.shards - 1,
                        self.cluster.shards
                    ),
                ));
            }
        }
        for (key, addr) in [
            ("grpc.addr", &self.grpc.addr),
            ("http.addr", &self.http.addr),
        ] {
            socket_addr(addr).ok_or_else(|| {
                ServiceError::setting(
                    key,
                    format!("'{addr}' is not an address like 127.0.0.1:7700 or [::1]:7700"),
                )
            })?;
        }
        if self.bus.kind == BusKind::Nats {
            self.bus.nats()?;
        }
        for (key, value) in [
            ("grpc.handshake_timeout", self.grpc.handshake_timeout),
            ("grpc.keepalive_interval", self.grpc.keepalive_interval),
            ("grpc.keepalive_timeout", self.grpc.keepalive_timeout),
            ("grpc.idle_timeout", self.grpc.idle_timeout),
            ("bus.request_timeout", self.bus.request_timeout),
            ("store.sync_interval", self.store.sync_interval),
            ("store.checkpoint_interval", self.store.checkpoint_interval),
            ("dispatcher.stats_interval", self.dispatcher.stats_interval),
            ("dispatcher.outbox_retry", self.dispatcher.outbox_retry),
            ("timer.horizon", self.timer.horizon),
        ] {
            if value.is_zero() {
                return Err(ServiceError::setting(key, "must be more than 0"));
            }
        }
        for (key, value) in [
            ("grpc.max_connections", self.grpc.max_connections),
            (
                "grpc.max_requests_in_flight",
                self.grpc.max_requests_in_flight,
            ),
            (
                "grpc.max_concurrent_streams",
                self.grpc.max_concurrent_streams,
            ),
            ("dispatcher.outbox_batch", self.dispatcher.outbox_batch),
            ("timer.batch", self.timer.batch),
            ("ingest.max_batch_items", self.ingest.max_batch_items),
            ("limits.max_pipelines", self.limits.max_pipelines),
            ("limits.max_stages", self.limits.max_stages),
        ] {
            if value == 0 {
                return Err(ServiceError::setting(key, "must be at least 1"));
            }
        }
        if self.limits.max_queues == 0 {
            return Err(ServiceError::setting(
                "limits.max_queues",
                "must be at least 1",
            ));
        }
        if self.store.checkpoint_bytes < 1 << 20 {
            return Err(ServiceError::setting(
                "store.checkpoint_bytes",
                "must be at least 1MiB",
            ));
        }
        if self.store.reopen_bytes != 0 && self.store.reopen_bytes < self.store.checkpoint_bytes {
            return Err(ServiceError::setting(
                "store.reopen_bytes",
                "must be 0 (never) or at least store.checkpoint_bytes",
            ));
        }
        self.validate_pipelines()?;
        security::validate(&self.grpc.tls, &self.auth)?;
        if !(1..=MAX_REQUESTS_IN_FLIGHT).contains(&self.ingest.requests_in_flight) {
            return Err(ServiceError::setting(
                "ingest.requests_in_flight",
                format!(
                    "must be 1 to {MAX_REQUESTS_IN_FLIGHT}, is {}",
                    self.ingest.requests_in_flight
                ),
            ));
        }
        if self.ingest.max_batch_bytes < 1 << 10 {
            return Err(ServiceError::setting(
                "ingest.max_batch_bytes",
                "must be at least 1KiB",
            ));
        }
        if self.ingest.max_payload == 0 {
            return Err(ServiceError::setting(
                "ingest.max_payload",
                "must be more than 0",
            ));
        }
        self.validate_unread_limits()?;
        self.validate_resource_manager()?;
        Ok(())
    }

    /// Each pipeline valid, and within the limits the shards will hold it to.
    fn validate_pipelines(&self) -> Result<(), ServiceError> {
        let limits = self.limits.shard();
        for (i, pipeline) in self.pipelines.iter().enumerate() {
            pipeline
                .validate()
                .and_then(|()| limits.check_pipeline(pipeline, &self.pipelines[..i]))
                .map_err(|e| ServiceError::setting(format!("pipelines[{i}]"), e.to_string()))?;
        }
        Ok(())
    }

    /// A response with the largest payload must fit what one connection may hold unread,
    /// and that what all may.
    fn validate_unread_limits(&self) -> Result<(), ServiceError> {
        let grpc = &self.grpc;
        if grpc.max_unread_response_bytes_per_connection < self.ingest.max_payload {
            return Err(ServiceError::setting(
                "grpc.max_unread_response_bytes_per_connection",
                format!(
                    "must be at least ingest.max_payload ({}), or an event with the largest payload could never be read",
                    format_size(self.ingest.max_payload)
                ),
            ));
        }
        if grpc.max_unread_response_bytes < grpc.max_unread_response_bytes_per_connection {
            return Err(ServiceError::setting(
                "grpc.max_unread_response_bytes",
                "must be at least grpc.max_unread_response_bytes_per_connection",
            ));
        }
        Ok(())
    }

    fn validate_resource_manager(&self) -> Result<(), ServiceError> {
        let rm = &self.resource_manager;
        rm.validate()?;
        // Stats older than three intervals are read as stale, so they must come at least
        // once an interval.
        if rm.interval < self.dispatcher.stats_interval {
            return Err(ServiceError::setting(
                "resource_manager.interval",
                format!(
                    "must be at least dispatcher.stats_interval ({}), got {}",
                    format_duration(self.dispatcher.stats_interval),
                    format_duration(rm.interval)
                ),
            ));
        }
        Ok(())
    }

    /// The dispatcher shards this process serves.
    pub fn dispatcher_shards(&self) -> Vec<u32> {
        own_or_all(&self.dispatcher.shards, self.cluster.shards)
    }

    /// The timer shards this process serves.
    pub fn timer_shards(&self) -> Vec<u32> {
        own_or_all(&self.timer.shards, self.cluster.shards)
    }
}

/// `127.0.0.1:7700`, `[::1]:7700`, or an IPv6 address and port without brackets
/// (`fd00::1:7700`, what `$(POD_IP):7700` makes of an IPv6 pod address).
fn socket_addr(text: &str) -> Option<SocketAddr> {
    if let Ok(addr) = text.parse() {
        return Some(addr);
    }
    let (ip, port) = text.rsplit_once(':')?;
    let ip: std::net::Ipv6Addr = ip.parse().ok()?;
    Some(SocketAddr::new(ip.into(), port.parse().ok()?))
}

/// A list of shard numbers: `[0, 2]` in a file; `0,2` or a single `0` in the environment,
/// where one number arrives as a number, not as a list of one.
fn shard_list<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(u32),
        Many(Vec<u32>),
        Text(String),
    }
    match OneOrMany::deserialize(deserializer)? {
        OneOrMany::One(n) => Ok(vec![n]),
        OneOrMany::Many(v) => Ok(v),
        OneOrMany::Text(t) => t
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                p.parse()
                    .map_err(|_| serde::de::Error::custom(format!("'{p}' is not a shard number")))
            })
            .collect(),
    }
}

fn own_or_all(own: &[u32], shards: u32) -> Vec<u32> {
    match own.is_empty() {
        true => (0..shards).collect(),
        false => own.to_vec(),
    }
}

#[cfg(test)]
mod tests;
