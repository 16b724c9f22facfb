//! Turns a stage's `HandlerSpec` into a handler: HTTP, gRPC, an in-process Rust handler
//! registered by whoever embeds the stage worker, or a built-in demo handler.

use std::collections::HashMap;

use cascade_client::ClientOptions;
use cascade_core::{HandlerKind, HandlerSpec};
use cascade_telemetry::Metrics;
use cascade_worker::{BoxedHandler, Handler};

use crate::StageWorkerError;
use crate::builtin::builtin;
use crate::grpc_handler::GrpcHandler;
use crate::http_handler::HttpHandler;
use crate::stage::{StageContext, StageHandler};
use crate::timed::TimedHandler;

/// In-process Rust handlers by name, for specs of kind `builtin` (`builtin:<name>` on the
/// command line). A registered name hides a built-in handler of the same name.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: HashMap<String, BoxedHandler>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn register(&mut self, name: impl Into<String>, handler: impl Handler) -> &mut Registry {
        self.handlers
            .insert(name.into(), BoxedHandler::new(handler));
        self
    }

    fn resolve(&self, name: &str) -> Result<BoxedHandler, StageWorkerError> {
        if let Some(handler) = self.handlers.get(name) {
            return Ok(handler.clone());
        }
        match builtin(name) {
            Some(Ok(handler)) => Ok(handler),
            Some(Err(why)) => Err(StageWorkerError::setting("handler.kind.builtin", why)),
            None => {
                let mut known: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
                known.sort_unstable();
                known.extend(["log", "noop", "sleep:<ms>", "fail:<percent>"]);
                Err(StageWorkerError::setting(
                    "handler.kind.builtin",
                    format!("no handler named {name:?}; known: {}", known.join(", ")),
                ))
            }
        }
    }

    /// The handler `spec` describes, for `stage`, calling with `credentials` (TLS, a
    /// token) when it is a remote one, its calls timed into `metrics`.
    pub(crate) fn build(
        &self,
        spec: &HandlerSpec,
        stage: &StageContext,
        credentials: &ClientOptions,
        metrics: &Metrics,
    ) -> Result<StageHandler, StageWorkerError> {
        let inner = match &spec.kind {
            HandlerKind::Http { url } => BoxedHandler::new(HttpHandler::new(
                url,
                spec.timeout,
                stage.clone(),
                credentials,
            )?),
            HandlerKind::Grpc { endpoint } => {
                BoxedHandler::new(GrpcHandler::new(endpoint, credentials)?)
            }
            HandlerKind::Builtin(name) => self.resolve(name)?,
        };
        let timed = TimedHandler::new(inner, stage.queue.as_str(), metrics);
        Ok(StageHandler::new(BoxedHandler::new(timed), stage))
    }
}
