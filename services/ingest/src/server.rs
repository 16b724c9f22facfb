//! The gRPC server: `Ingest`, `Worker` and `Admin` on one port, with gRPC health and server
//! reflection (v1), and a graceful stop. Connections are bounded before HTTP/2 sees them
//! (`incoming`), go through TLS when `grpc.tls` is set (`tls`), and each HTTP/2 connection
//! is bounded by the `grpc.*` settings: streams advertised in `SETTINGS`, keepalive pings.
//! Every call is authenticated before a service sees it (`auth`).
//!
//! Shutdown order: health turns NOT_SERVING (and health `Watch` streams end), the server
//! stops accepting connections and streams, in-flight RPCs finish (a long-poll `Take` at
//! most `dispatcher.max_take_wait` plus `bus.request_timeout`; streams still open after that
//! are cut), then the coalescers' tasks end after answering what they hold. The process's
//! own workers' direct calls (`in_process`) stop being taken with the streams; those in
//! flight end within their own poll (`cascade standalone` stops its stage workers first).

use std::sync::Arc;
use std::time::Duration;

use cascade_proto::v1::admin_server::AdminServer;
use cascade_proto::v1::ingest_server::IngestServer;
use cascade_proto::v1::worker_server::WorkerServer;
use cascade_service::{Deps, Settings, Shutdown};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tonic::server::NamedService;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::IngestError;
use crate::admission::AdmissionLayer;
use crate::audit::AuditedAdmin;
use crate::auth::AuthLayer;
use crate::client_errors;
use crate::gateway::Gateway;
use crate::incoming::{ConnectionLimits, Listeners, incoming};
use crate::limits::TAKE_POLL_SLICE;
use crate::timed::TimedIngest;
use crate::tls::Tls;

/// Added to the longest RPC (a `Take` that waits) before the drain gives up on open streams.
const DRAIN_SLACK: Duration = Duration::from_secs(1);

/// Cascade's services on this port (not `Handler`, which users implement and stage workers
/// call); reflection lists them beside health and itself.
const SERVED: [&str; 3] = [
    <IngestServer<Gateway> as NamedService>::NAME,
    <WorkerServer<Gateway> as NamedService>::NAME,
    <AdminServer<Gateway> as NamedService>::NAME,
];

/// The health service's calls: open to probes whatever the credentials, never shed.
pub(crate) fn is_health_check(path: &str) -> bool {
    path.starts_with("/grpc.health.v1.Health/")
}

/// Reflection: a session any identity may hold open for as long as it likes, so it must not
/// hold one of the places every client's requests share.
pub(crate) fn is_reflection(path: &str) -> bool {
    path.starts_with("/grpc.reflection.")
}

/// Binds `grpc.addr` and serves until `shutdown`; see [`serve`].
pub async fn run(settings: Settings, deps: Deps, shutdown: Shutdown) -> Result<(), IngestError> {
    let listener = bind(&settings).await?;
    if let Ok(addr) = listener.local_addr() {
        warn_when_open(&settings, addr, "ingest");
    }
    serve(listener, settings, deps, shutdown).await
}

/// Says at start (as `<who>.open`) when authentication is off and the gRPC port at `addr`
/// listens beyond loopback: anyone who reaches it may do anything. Whether it listens beyond
/// loopback.
pub fn warn_when_open(settings: &Settings, addr: std::net::SocketAddr, who: &str) -> bool {
    if settings.auth.enabled || addr.ip().is_loopback() {
        return false;
    }
    tracing::warn!(
        %addr,
        "{who}.open: authentication is off and the gRPC port listens beyond loopback: anyone who reaches it may read, change and delete every queue; set auth.enabled and auth.identities_file"
    );
    true
}

/// Binds `grpc.addr`.
pub async fn bind(settings: &Settings) -> Result<TcpListener, IngestError> {
    let addr = settings.grpc.addr.clone();
    TcpListener::bind(&addr)
        .await
        .map_err(|source| IngestError::Listen { addr, source })
}

/// Serves on an already bound listener (port 0 in tests, `cascade standalone`; and the
/// process's in-process connections) until `shutdown`, then drains: returns once every
/// accepted RPC has been answered. Ready from the start (a bound port queues connections
/// until they are accepted) until `shutdown`; enqueues are timed
/// (`cascade_enqueue_duration_seconds`) into `deps.metrics`; callers are authenticated by
/// `deps.auth`.
pub async fn serve(
    listeners: impl Into<Listeners>,
    settings: Settings,
    deps: Deps,
    shutdown: Shutdown,
) -> Result<(), IngestError> {
    let Deps {
        bus,
        readiness,
        metrics,
        auth,
    } = deps;
    let listeners: Listeners = listeners.into();
    let local = listeners.tcp.local_addr().ok();
    let serving_in_process = listeners.in_process.as_ref().map(|l| l.serving());
    let request_limit = crate::limits::request_limit(&settings);
    let reflection = reflection_service()?;
    let tls = Tls::load(&settings.grpc.tls)?;
    let mut tasks = JoinSet::new();
    let gateway = Arc::new(Gateway::start(
        &settings,
        bus,
        shutdown.clone(),
        &mut tasks,
    )?);
    if let Some(serving) = &serving_in_process {
        serving.publish(&gateway);
    }
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::Serving).await;

    let stopping = {
        let serving_in_process = serving_in_process.clone();
        let health = health.clone();
        let shutdown = shutdown.clone();
        let readiness = readiness.clone();
        async move {
            shutdown.wait().await;
            // The server takes no new stream from here, and the gateway no new direct call.
            if let Some(serving) = &serving_in_process {
                serving.withdraw();
            }
            readiness.set(false);
            tracing::info!("ingest.stopping");
            stop_health(health).await;
        }
    };
    let grpc = &settings.grpc;
    let limits = ConnectionLimits::new(
        grpc.max_connections,
        grpc.max_connections_per_peer,
        grpc.handshake_timeout,
        grpc.idle_timeout,
    );
    let tls_config = tls.as_ref().map(|tls| Arc::clone(&tls.config));
    if let Some(tls) = tls {
        tasks.spawn(tls.watch(shutdown.clone()));
    }
    readiness.set(true);
    tracing::info!(
        addr = ?local,
        tls = tls_config.is_some(),
        mutual_tls = settings.grpc.tls.client_ca_file.is_some(),
        authentication = auth.is_enabled(),
        max_connections = limits.max_connections,
        cluster = %settings.cluster.name,
        shards = settings.cluster.shards,
        "ingest.listening"
    );
    let mut server = Box::pin(
        Server::builder()
            .max_concurrent_streams(grpc.max_concurrent_streams)
            .http2_keepalive_interval(Some(grpc.keepalive_interval))
            .http2_keepalive_timeout(Some(grpc.keepalive_timeout))
            .layer(client_errors::layer(request_limit))
            .layer(AuthLayer::new(auth))
            .layer(AdmissionLayer::new(Arc::clone(&gateway.admission)))
            .add_service(health_service)
            .add_service(reflection)
            .add_service(
                IngestServer::new(TimedIngest::new(Arc::clone(&gateway), &metrics))
                    .max_decoding_message_size(request_limit),
            )
            .add_service(
                WorkerServer::from_arc(Arc::clone(&gateway))
                    .max_decoding_message_size(request_limit),
            )
            .add_service(
                AdminServer::new(AuditedAdmin::new(gateway))
                    .max_decoding_message_size(request_limit),
            )
            .serve_with_incoming_shutdown(incoming(listeners, limits, tls_config), stopping),
    );
    // Every unary RPC ends within one Take poll once stopping; a stream a client keeps
    // open (a reflection session) must not hold the process forever.
    let poll = TAKE_POLL_SLICE.min(settings.dispatcher.max_take_wait);
    let drain = poll + settings.bus.request_timeout + DRAIN_SLACK;
    let deadline = async {
        shutdown.wait().await;
        tokio::time::sleep(drain).await;
    };
    let served = tokio::select! {
        served = &mut server => served,
        () = deadline => {
            tracing::warn!(after = ?drain, "ingest.drain.cut: connections still open; no longer waiting for them");
            tasks.abort_all();
            Ok(())
        }
    };
    // Dropping the server drops the services, whose coalescers' inboxes then close, and the
    // coalescer tasks end once they have answered what they hold: the last direct call must
    // not keep the gateway alive past its own end.
    if let Some(serving) = &serving_in_process {
        serving.withdraw();
    }
    drop(server);
    while tasks.join_next().await.is_some() {}
    tracing::info!("ingest.stopped");
    Ok(served?)
}

/// Reflection v1 over our descriptors and health's, listing only what this port serves.
fn reflection_service() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    IngestError,
> {
    let mut builder = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(cascade_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection");
    for name in SERVED {
        builder = builder.with_service_name(name);
    }
    Ok(builder.build_v1()?)
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    for name in std::iter::once("").chain(SERVED) {
        health.set_service_status(name, status).await;
    }
}

/// NOT_SERVING, then the statuses are removed: that ends every `Watch` stream (after it has
/// sent NOT_SERVING), which would otherwise keep its connection, and the drain, open.
async fn stop_health(mut health: HealthReporter) {
    set_health(&health, ServingStatus::NotServing).await;
    for name in std::iter::once("").chain(SERVED) {
        health.clear_service_status(name).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_port_is_one_beyond_loopback_without_authentication() {
        let mut settings = Settings::default();
        let (anywhere, loopback) = (
            "0.0.0.0:7700".parse().expect("addr"),
            "127.0.0.1:7700".parse().expect("addr"),
        );
        assert!(warn_when_open(&settings, anywhere, "ingest"));
        assert!(!warn_when_open(&settings, loopback, "ingest"));
        settings.auth.enabled = true;
        assert!(!warn_when_open(&settings, anywhere, "ingest"));
    }
}
