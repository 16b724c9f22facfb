//! `/metrics` for the admin port: merge `Metrics::router()` into the router given to
//! `cascade_service::serve_admin`.

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;

use super::Metrics;

/// What `render` produces; Prometheus asks for it and parses it.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Metrics {
    /// `GET /metrics`.
    pub fn router(&self) -> Router {
        let metrics = self.clone();
        Router::new().route(
            "/metrics",
            get(move || {
                let text = metrics.render();
                async move { ([(CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text) }
            }),
        )
    }
}
