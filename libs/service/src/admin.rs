//! The HTTP admin port every service serves: `/healthz` (the process is up) and `/readyz`
//! (it serves traffic). Services add their own routes (metrics, status page) to the router.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

use crate::{ServiceError, Shutdown};

/// Whether the service is ready to serve; `/readyz` answers 503 until it is, and again once
/// shutdown begins.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Binds `addr` and serves `/healthz`, `/readyz` and `extra` until `shutdown`. Returns the
/// bound address (useful with port 0) and the server task.
pub async fn serve_admin(
    addr: &str,
    readiness: Readiness,
    extra: Router,
    shutdown: Shutdown,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), ServiceError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServiceError::Listen {
            addr: addr.to_string(),
            source,
        })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServiceError::Listen {
            addr: addr.to_string(),
            source,
        })?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || {
                let ready = readiness.is_ready();
                async move {
                    match ready {
                        true => (StatusCode::OK, "ready\n"),
                        false => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
                    }
                }
            }),
        )
        .merge(extra);
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.wait().await })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "admin.http");
        }
    });
    tracing::info!(addr = %bound, "admin.http.listening");
    Ok((bound, task))
}
