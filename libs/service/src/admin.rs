//! The HTTP admin port every service serves: `/healthz` (the process is up) and `/readyz`
//! (it serves traffic). Services add their own routes (metrics, status page) to the router.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;

use crate::{ServiceError, Shutdown};

/// Whether the service is ready to serve; `/readyz` answers 503 until it is, and again once
/// shutdown begins. A ready service may also be degraded (a shard's disk alarm): `/readyz`
/// still answers 200, since it serves what lets the condition pass (consumers draining a
/// full disk), and lists each condition on a line of its own after `ready`. A condition
/// under which it serves nothing (its bus connection is down) makes it unavailable:
/// `/readyz` answers 503 and names it, until it passes.
#[derive(Clone, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    degraded: Arc<Mutex<BTreeMap<String, String>>>,
    unavailable: Arc<Mutex<BTreeMap<String, String>>>,
}

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// A readiness of its own for a part of the process (one of the services `cascade
    /// standalone` runs), whose conditions show on this one's `/readyz`.
    pub fn part(&self) -> Readiness {
        Readiness {
            ready: Arc::default(),
            degraded: Arc::clone(&self.degraded),
            unavailable: Arc::clone(&self.unavailable),
        }
    }

    /// Raises (`Some(what)`) or clears (`None`) the condition named `key`, e.g.
    /// `dispatcher shard 0`.
    pub fn set_degraded(&self, key: &str, what: Option<String>) {
        set_condition(&self.degraded, key, what);
    }

    /// Raises (`Some(what)`) or clears (`None`) the condition named `key` (`bus`) under which
    /// the process serves nothing.
    pub fn set_unavailable(&self, key: &str, what: Option<String>) {
        set_condition(&self.unavailable, key, what);
    }

    /// The `/readyz` answer.
    fn answer(&self) -> (StatusCode, String) {
        if !self.is_ready() {
            return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into());
        }
        let unavailable = self
            .unavailable
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !unavailable.is_empty() {
            let mut body = String::from("not ready\n");
            for (key, what) in unavailable.iter() {
                body.push_str(&format!("unavailable: {key}: {what}\n"));
            }
            return (StatusCode::SERVICE_UNAVAILABLE, body);
        }
        let degraded = self.degraded.lock().unwrap_or_else(PoisonError::into_inner);
        let mut body = String::from("ready\n");
        for (key, what) in degraded.iter() {
            body.push_str(&format!("degraded: {key}: {what}\n"));
        }
        (StatusCode::OK, body)
    }
}

fn set_condition(conditions: &Mutex<BTreeMap<String, String>>, key: &str, what: Option<String>) {
    let mut conditions = conditions.lock().unwrap_or_else(PoisonError::into_inner);
    match what {
        Some(what) => conditions.insert(key.to_owned(), what),
        None => conditions.remove(key),
    };
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
                let answer = readiness.answer();
                async move { answer }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_condition_makes_a_ready_process_not_ready_and_says_why() {
        let readiness = Readiness::default();
        readiness.set(true);
        readiness.set_degraded("dispatcher shard 0", Some("disk alarm".into()));
        assert_eq!(
            readiness.answer(),
            (
                StatusCode::OK,
                "ready\ndegraded: dispatcher shard 0: disk alarm\n".into()
            )
        );
        readiness
            .part()
            .set_unavailable("bus", Some("not connected".into()));
        assert_eq!(
            readiness.answer(),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready\nunavailable: bus: not connected\n".into()
            )
        );
        readiness.set_unavailable("bus", None);
        assert_eq!(readiness.answer().0, StatusCode::OK);
    }
}
