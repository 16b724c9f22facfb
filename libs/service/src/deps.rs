//! What a service's `run(settings, deps, shutdown)` works with besides its settings: the
//! process's bus, readiness flag, metrics registry and authenticator, so that `cascade
//! standalone` can hand every composed service the same bus, the same `/metrics` and the same
//! identities.

use std::sync::Arc;

use cascade_bus::Bus;
use cascade_security::Authenticator;
use cascade_telemetry::Metrics;

use crate::Readiness;

#[derive(Clone)]
pub struct Deps {
    pub bus: Bus,
    /// Set by the service once it serves, cleared when it stops.
    pub readiness: Readiness,
    /// The process's registry (`/metrics`).
    pub metrics: Metrics,
    /// Who may call the process's public ports (see `auth`).
    pub auth: Arc<Authenticator>,
}

impl Deps {
    /// A service on `bus` with a readiness flag and a registry of its own, and
    /// authentication off (tests, tools).
    pub fn new(bus: Bus) -> Deps {
        Deps {
            bus,
            readiness: Readiness::default(),
            metrics: Metrics::new(),
            auth: Arc::new(Authenticator::disabled()),
        }
    }
}
