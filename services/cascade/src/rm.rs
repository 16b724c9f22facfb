//! The resource manager inside `cascade standalone`: the same service loop a cluster runs,
//! over the in-process bus, with the [`LocalExecutor`] turning the stage workers' knobs and
//! `resource_manager.total_handlers` as the budget. Its latest decisions are served on the
//! admin port as `GET /rm/explain`, which `cascade rm explain` prints.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use cascade_bus::Bus;
use cascade_core::SystemClock;
use cascade_resource_manager::{
    Board, Deps, EXPLAIN_PATH, ExecutorKind, ResourceManagerError, Stages, StagesFeed,
};
use cascade_service::{Settings, Shutdown};
use cascade_telemetry::Metrics;

use crate::local_executor::LocalExecutor;
use crate::stages::Managed;

/// The manager's pieces in this process: made before the admin port (which serves its
/// board), then shared between the stage supervisor (which feeds the stages and registers
/// the workers) and the manager.
pub struct Local {
    enabled: bool,
    board: Board,
    executor: LocalExecutor,
    feed: StagesFeed,
    stages: Stages,
}

impl Local {
    /// `enabled` is `resource_manager.enabled`.
    pub fn new(enabled: bool) -> Local {
        let (feed, stages) = Stages::feed();
        Local {
            enabled,
            board: Board::new(),
            executor: LocalExecutor::new(),
            feed,
            stages,
        }
    }

    /// `GET /rm/explain`: the latest decisions with why, as plain text; 404 when the
    /// manager is off.
    pub fn explain_route(&self) -> Router {
        if self.enabled {
            return self.board.router();
        }
        Router::new().route(
            EXPLAIN_PATH,
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    "the resource manager is off here (resource_manager.enabled = false, or \
                     standalone.stage_workers = false)\n",
                )
            }),
        )
    }

    /// What the stage supervisor reports to, and the manager to run until `stopping`
    /// (`None` when it is off).
    pub fn split(
        self,
        settings: &Settings,
        bus: Bus,
        metrics: Metrics,
        stopping: Shutdown,
    ) -> (
        Managed,
        Option<impl Future<Output = Result<(), ResourceManagerError>> + use<>>,
    ) {
        let managed = Managed {
            stages: self.feed,
            executor: self.executor.clone(),
            metrics: metrics.clone(),
        };
        if self.enabled && settings.resource_manager.executor != ExecutorKind::Local {
            tracing::warn!(
                executor = ?settings.resource_manager.executor,
                "resource_manager.executor is for cascade-resource-manager: standalone \
                 turns its own stage workers"
            );
        }
        let manager = self.enabled.then(|| {
            let deps = Deps {
                bus,
                stages: self.stages,
                executor: self.executor,
                metrics,
                board: self.board,
                clock: Arc::new(SystemClock),
                timer_shards: settings.cluster.shards,
            };
            cascade_resource_manager::run(
                settings.cluster.name.clone(),
                settings.resource_manager.clone(),
                deps,
                async move { stopping.wait().await },
            )
        });
        (managed, manager)
    }
}

#[cfg(test)]
mod tests {
    use cascade_service::{Readiness, serve_admin, shutdown_channel};

    use super::*;
    use crate::rm_client::http_get;

    async fn explain(enabled: bool) -> (u16, String) {
        let (_stop, stopping) = shutdown_channel();
        let route = Local::new(enabled).explain_route();
        let (addr, _server) = serve_admin("127.0.0.1:0", Readiness::default(), route, stopping)
            .await
            .expect("serve");
        http_get(&addr.to_string(), EXPLAIN_PATH, None)
            .await
            .expect("GET /rm/explain")
    }

    #[tokio::test]
    async fn explain_answers_the_table_or_that_the_manager_is_off() {
        let (status, text) = explain(true).await;
        assert_eq!(
            (status, text.starts_with("no decision yet")),
            (200, true),
            "{text}"
        );
        let (status, text) = explain(false).await;
        assert_eq!(status, 404);
        assert!(text.contains("resource_manager.enabled = false"), "{text}");
    }
}
