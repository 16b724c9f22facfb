//! What every service binary does around its `run`: telemetry (logs, traces), the NATS bus,
//! SIGTERM/ctrl-c as the shutdown signal, the identities file when authentication is on
//! (watched for changes), and the admin port with `/healthz`, `/readyz` and `/metrics` (the
//! process's one `Metrics`, which the bus's requests are reported to; the service's `run`
//! gets a clone for its own) and the service's own pages, for operators only. `cascade
//! standalone` does the same with the in-process bus.

use std::sync::Arc;

use std::time::Duration;

use cascade_bus::{Bus, without_credentials};
use cascade_security::Authenticator;
use cascade_telemetry::{Metrics, Telemetry};
use tokio::task::JoinHandle;

use crate::settings::BusKind;
use crate::{Deps, Readiness, ServiceError, Settings, Shutdown, serve_admin, shutdown_channel};

pub struct Process {
    pub bus: Bus,
    pub shutdown: Shutdown,
    pub readiness: Readiness,
    pub metrics: Metrics,
    pub auth: Arc<Authenticator>,
    admin: JoinHandle<()>,
    telemetry: Telemetry,
}

impl Process {
    /// Starts telemetry as `name` (`version`), connects to NATS (a lone service on the
    /// in-process bus would have no one to talk to), and serves the admin port.
    pub async fn start(
        name: &'static str,
        version: &'static str,
        settings: &Settings,
    ) -> Result<Process, ServiceError> {
        Process::start_with_routes(name, version, settings, axum::Router::new()).await
    }

    /// [`Process::start`], with the service's own `routes` on the admin port beside
    /// `/healthz`, `/readyz` and `/metrics`, for operators only (see `auth`).
    pub async fn start_with_routes(
        name: &'static str,
        version: &'static str,
        settings: &Settings,
        routes: axum::Router,
    ) -> Result<Process, ServiceError> {
        let telemetry = cascade_telemetry::init(&settings.telemetry, name, version)?;
        if settings.bus.kind != BusKind::Nats {
            return Err(ServiceError::setting(
                "bus.kind",
                format!(
                    "{name} talks to the other services over NATS: set bus.kind = \"nats\" \
                     (CASCADE__BUS__KIND=nats) and bus.url, or run `cascade standalone` for \
                     every service in one process"
                ),
            ));
        }
        let (auth, identities) = crate::auth::load(&settings.auth)?;
        let bus = Bus::connect_nats(&settings.bus.nats()?, name).await?;
        let (trigger, shutdown) = shutdown_channel();
        tokio::spawn(trigger.on_signal());
        if let Some(identities) = identities {
            tokio::spawn(identities.run(shutdown.clone()));
        }
        let readiness = Readiness::default();
        tokio::spawn(watch_bus(
            bus.clone(),
            without_credentials(&settings.bus.url),
            readiness.clone(),
            shutdown.clone(),
        ));
        let metrics = Metrics::with_queue_series(settings.telemetry.max_queue_series);
        crate::observe::observe_bus(&bus, &metrics);
        let (_, admin) = serve_admin(
            &settings.http.addr,
            readiness.clone(),
            metrics
                .router()
                .merge(crate::auth::operators_only(routes, Arc::clone(&auth))),
            shutdown.clone(),
        )
        .await?;
        Ok(Process {
            bus,
            shutdown,
            readiness,
            metrics,
            auth,
            admin,
            telemetry,
        })
    }

    /// What the service's `run` works with: this process's bus, readiness and metrics.
    pub fn deps(&self) -> Deps {
        Deps {
            bus: self.bus.clone(),
            readiness: self.readiness.clone(),
            metrics: self.metrics.clone(),
            auth: Arc::clone(&self.auth),
        }
    }

    /// After the service's `run` returned: waits for the admin port to close and flushes
    /// telemetry.
    pub async fn finish(self) {
        self.readiness.set(false);
        // A service that ended by itself (it failed) leaves no signal to close the port.
        if !self.shutdown.is_triggered() {
            self.admin.abort();
        }
        if let Err(e) = self.admin.await
            && e.is_panic()
        {
            tracing::error!("the admin port's task panicked");
        }
        self.telemetry.shutdown().await;
    }
}

/// How often the bus connection is looked at for `/readyz`.
const BUS_CHECK: Duration = Duration::from_secs(1);

/// Makes the process unavailable on `/readyz` while its NATS connection is down: nothing it
/// does works without the bus (a gateway's requests would time out), so load balancers and
/// Kubernetes should send nothing to it meanwhile.
async fn watch_bus(bus: Bus, url: String, readiness: Readiness, shutdown: Shutdown) {
    let mut every = tokio::time::interval(BUS_CHECK);
    let mut was_connected = true;
    loop {
        tokio::select! {
            () = shutdown.wait() => return,
            _ = every.tick() => {}
        }
        let connected = bus.is_connected();
        if connected == was_connected {
            continue;
        }
        was_connected = connected;
        let down = (!connected).then(|| {
            format!("not connected to NATS at {url}: nothing reaches the other services until it reconnects, which it keeps trying")
        });
        match &down {
            Some(_) => tracing::warn!(%url, "bus.disconnected"),
            None => tracing::info!(%url, "bus.reconnected"),
        }
        readiness.set_unavailable("bus", down);
    }
}
