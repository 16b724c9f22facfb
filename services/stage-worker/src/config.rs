//! A stage worker's settings: which queue (or pipeline stage), which handler, how hard to
//! work. Built-in defaults < the `--config` file (TOML) < `CASCADE__STAGE_WORKER__<KEY>`
//! environment variables < command-line flags; checked once at start, errors name the key.
//!
//! ```toml
//! gateway = "http://127.0.0.1:7700"
//! pipeline = "orders"        # with `stage`: the queue is orders.ship
//! stage = "ship"
//! last_stage = false         # true: `advance` is an ack here (so on a plain queue too)
//! # queue = "emails"         # a plain queue instead of a pipeline's stage
//! batch = 32
//! concurrency = 8            # default: handler.concurrency
//! lease = "30s"              # default: the queue's
//! poll_wait = "5s"
//! drain_grace = "25s"
//! http_addr = "127.0.0.1:7702"
//! # token = "..."           # sent to the gateway; better CASCADE__STAGE_WORKER__TOKEN
//! # handler_token = "..."   # sent to the handler as authorization: Bearer
//!
//! # [gateway_tls]           # TLS to the gateway (https://): its CA; cert and key for mTLS
//! # ca_file = "/etc/cascade/tls/ca.crt"
//! # [handler_tls]           # the same for the handler (https:// or TLS gRPC)
//!
//! [handler]
//! kind = { http = { url = "http://127.0.0.1:8080/ship" } }   # or { grpc = { endpoint = "http://127.0.0.1:50051" } } (https:// for TLS), { builtin = "log" }
//! timeout = "10s"
//! ```

use std::path::Path;
use std::time::Duration;

use cascade_client::ClientOptions;
use cascade_core::units::{format_duration, serde_duration};
use cascade_core::{HandlerKind, HandlerSpec, Pipeline, QueueName};
use cascade_service::load_layers;
use cascade_service::settings::{ClientTlsFiles, Secret};
use cascade_worker::WorkerConfig;
use serde::{Deserialize, Serialize};

use crate::StageWorkerError;
use crate::stage::StageContext;

pub const DEFAULT_GATEWAY: &str = "http://127.0.0.1:7700";
/// The environment prefix: `CASCADE__STAGE_WORKER__BATCH=64`, the `stage_worker` section.
pub const ENV_PREFIX: &str = "CASCADE__STAGE_WORKER";
/// The longest handler timeout, as for pipelines' stages.
const MAX_HANDLER_TIMEOUT: Duration = Duration::from_secs(86_400);

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StageWorkerConfig {
    /// The gateway's gRPC address.
    pub gateway: String,
    /// A plain queue to work on; unset when `pipeline` and `stage` are set.
    pub queue: Option<String>,
    pub pipeline: Option<String>,
    pub stage: Option<String>,
    /// Whether this is the pipeline's last stage, where `advance` is an ack. A plain queue
    /// has no next stage: there `advance` is always an ack.
    pub last_stage: bool,
    pub handler: Option<HandlerSpec>,
    /// Handlers at once; unset: `handler.concurrency`.
    pub concurrency: Option<u32>,
    /// Events per take.
    pub batch: u32,
    /// The lease asked for; unset: the queue's.
    #[serde(
        with = "serde_duration::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub lease: Option<Duration>,
    /// How long a take waits on the gateway when no event is ready.
    #[serde(with = "serde_duration")]
    pub poll_wait: Duration,
    /// On SIGTERM, how long running handlers get to finish before their events are
    /// released.
    #[serde(with = "serde_duration")]
    pub drain_grace: Duration,
    /// The HTTP admin address (`/healthz`, `/readyz`, `/metrics`); unset: none.
    pub http_addr: Option<String>,
    /// Names this worker in the gateway's logs; unset: `<queue>-<pid>`.
    pub worker_id: Option<String>,
    /// A bearer token sent to the gateway on every call.
    pub token: Option<Secret>,
    /// TLS to the gateway: the CA of its certificate; a certificate and key for mutual TLS.
    pub gateway_tls: ClientTlsFiles,
    /// A bearer token sent to the handler on every call (HTTP header or gRPC metadata).
    pub handler_token: Option<Secret>,
    /// TLS to the handler: the CA of its certificate; a certificate and key for mutual TLS.
    pub handler_tls: ClientTlsFiles,
    /// Logs and trace export; see `cascade_telemetry`.
    pub telemetry: cascade_telemetry::TelemetrySettings,
}

impl Default for StageWorkerConfig {
    fn default() -> Self {
        StageWorkerConfig {
            gateway: DEFAULT_GATEWAY.to_owned(),
            queue: None,
            pipeline: None,
            stage: None,
            last_stage: false,
            handler: None,
            concurrency: None,
            batch: 16,
            lease: None,
            poll_wait: Duration::from_secs(5),
            drain_grace: Duration::from_secs(25),
            http_addr: None,
            worker_id: None,
            token: None,
            gateway_tls: ClientTlsFiles::default(),
            handler_token: None,
            handler_tls: ClientTlsFiles::default(),
            telemetry: cascade_telemetry::TelemetrySettings::default(),
        }
    }
}

/// What the worker runs, once the settings are checked.
pub(crate) struct Plan {
    /// TLS and the token for the handler's calls.
    pub(crate) handler_credentials: ClientOptions,
    pub(crate) stage: StageContext,
    pub(crate) handler: HandlerSpec,
    pub(crate) worker: WorkerConfig,
    pub(crate) http_addr: Option<String>,
}

impl StageWorkerConfig {
    /// The worker of stage `stage` of `pipeline`: its queue, handler, lease and place in
    /// the chain come from the pipeline's definition.
    pub fn for_stage(
        pipeline: &Pipeline,
        stage: &str,
    ) -> Result<StageWorkerConfig, StageWorkerError> {
        let Some(definition) = pipeline.stage(stage) else {
            return Err(StageWorkerError::setting(
                "stage",
                format!("pipeline {} has no stage {stage:?}", pipeline.name),
            ));
        };
        Ok(StageWorkerConfig {
            pipeline: Some(pipeline.name.clone()),
            stage: Some(stage.to_owned()),
            last_stage: pipeline.next_stage(stage).is_none(),
            handler: Some(definition.handler.clone()),
            lease: Some(definition.queue.lease),
            ..StageWorkerConfig::default()
        })
    }

    /// Defaults < `file` < the environment < `overrides` (dotted keys such as `batch`;
    /// `handler` takes a spec, see [`parse_handler_kind`]).
    pub fn load(
        file: Option<&Path>,
        overrides: &[(&str, String)],
    ) -> Result<StageWorkerConfig, StageWorkerError> {
        StageWorkerConfig::load_from(file, overrides, std::env::vars())
    }

    /// [`StageWorkerConfig::load`] with the environment given, for tests.
    pub fn load_from(
        file: Option<&Path>,
        overrides: &[(&str, String)],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<StageWorkerConfig, StageWorkerError> {
        // `handler` takes a spec, not a table: it is applied after the layers.
        let mut handler_kind = None;
        let mut layered = Vec::with_capacity(overrides.len());
        for (key, value) in overrides {
            match *key {
                "handler" => handler_kind = Some(parse_handler_kind(value)?),
                _ => layered.push((*key, value.clone())),
            }
        }
        let mut loaded: StageWorkerConfig =
            load_layers(file, ENV_PREFIX, &layered, env).map_err(StageWorkerError::from_layers)?;
        if let Some(kind) = handler_kind {
            loaded.handler = Some(match loaded.handler {
                Some(spec) => HandlerSpec { kind, ..spec },
                None => default_spec(kind),
            });
        }
        loaded.plan()?;
        Ok(loaded)
    }

    /// TLS and the token for the gateway.
    pub fn gateway_options(&self) -> Result<ClientOptions, StageWorkerError> {
        credentials("gateway_tls", &self.gateway_tls, self.token.as_ref())
    }

    /// The queue this worker takes from (a pipeline stage's, or the plain queue).
    pub fn queue_name(&self) -> Result<QueueName, StageWorkerError> {
        Ok(self.stage_context()?.queue)
    }

    /// Checks every setting and works out what to run.
    pub(crate) fn plan(&self) -> Result<Plan, StageWorkerError> {
        if self.gateway.trim().is_empty() {
            return Err(StageWorkerError::setting(
                "gateway",
                "must be an address such as http://127.0.0.1:7700",
            ));
        }
        let stage = self.stage_context()?;
        let Some(handler) = self.handler.clone() else {
            return Err(StageWorkerError::setting(
                "handler",
                "must be set, e.g. --handler http://host/path, grpc://host:port or builtin:log",
            ));
        };
        if handler.concurrency == 0 {
            return Err(StageWorkerError::setting(
                "handler.concurrency",
                "must be at least 1",
            ));
        }
        if handler.timeout.is_zero() || handler.timeout > MAX_HANDLER_TIMEOUT {
            return Err(StageWorkerError::setting(
                "handler.timeout",
                format!(
                    "must be between 1ms and 24h, got {}",
                    format_duration(handler.timeout)
                ),
            ));
        }
        let mut worker = WorkerConfig::new(stage.queue.as_str())?
            .batch(self.batch)
            .concurrency(self.concurrency.unwrap_or(handler.concurrency))
            .poll_wait(self.poll_wait)
            .handler_timeout(handler.timeout)
            .drain_grace(self.drain_grace)
            .worker_id(
                self.worker_id
                    .clone()
                    .unwrap_or_else(|| format!("{}-{}", stage.queue, std::process::id())),
            );
        worker.lease = self.lease;
        worker.validate()?;
        Ok(Plan {
            handler_credentials: credentials(
                "handler_tls",
                &self.handler_tls,
                self.handler_token.as_ref(),
            )?,
            stage,
            handler,
            worker,
            http_addr: self.http_addr.clone(),
        })
    }

    fn stage_context(&self) -> Result<StageContext, StageWorkerError> {
        let invalid = |key: &str, err: cascade_core::Error| {
            let reason = match err {
                cascade_core::Error::InvalidArgument { reason, .. } => reason,
                other => other.to_string(),
            };
            StageWorkerError::setting(key, reason)
        };
        match (&self.pipeline, &self.stage, &self.queue) {
            (Some(pipeline), Some(stage), queue) => {
                let name = format!("{pipeline}.{stage}");
                let parsed = QueueName::parse(&name).map_err(|e| invalid("stage", e))?;
                if let Some(queue) = queue
                    && *queue != name
                {
                    return Err(StageWorkerError::setting(
                        "queue",
                        format!(
                            "stage {stage} of pipeline {pipeline} is the queue {name}, not {queue}; leave queue unset"
                        ),
                    ));
                }
                Ok(StageContext {
                    queue: parsed,
                    pipeline: Some(pipeline.clone()),
                    stage: Some(stage.clone()),
                    last: self.last_stage,
                })
            }
            // A queue named like a stage (`orders.check`) may be one, now or once a pipeline
            // is applied: its advances go to the gateway, which knows (the next stage, or an
            // ack on a queue that is no stage). Any other name is done with at an advance.
            (None, None, Some(queue)) => Ok(StageContext {
                queue: QueueName::parse(queue).map_err(|e| invalid("queue", e))?,
                pipeline: None,
                stage: None,
                last: Pipeline::split_stage_queue(queue).is_none(),
            }),
            (None, None, None) => Err(StageWorkerError::setting(
                "queue",
                "must be set (--queue NAME), or pipeline and stage",
            )),
            (Some(_), None, _) => Err(StageWorkerError::setting(
                "stage",
                "must be set with pipeline",
            )),
            (None, Some(_), _) => Err(StageWorkerError::setting(
                "pipeline",
                "must be set with stage",
            )),
        }
    }
}

/// A handler from the command line: `http://…` or `https://…` (HTTP), `grpc://host:port`
/// (gRPC, plaintext), `grpcs://host:port` (gRPC over TLS), `builtin:<name>` (built-in or
/// registered in-process handler).
pub fn parse_handler_kind(spec: &str) -> Result<HandlerKind, StageWorkerError> {
    let spec = spec.trim();
    if spec.starts_with("http://") || spec.starts_with("https://") {
        return Ok(HandlerKind::Http {
            url: spec.to_owned(),
        });
    }
    for (scheme, url_scheme) in [("grpc://", "http"), ("grpcs://", "https")] {
        if let Some(address) = spec.strip_prefix(scheme)
            && !address.is_empty()
        {
            return Ok(HandlerKind::Grpc {
                endpoint: format!("{url_scheme}://{address}"),
            });
        }
    }
    if let Some(name) = spec.strip_prefix("builtin:")
        && !name.is_empty()
    {
        return Ok(HandlerKind::Builtin(name.to_owned()));
    }
    Err(StageWorkerError::setting(
        "handler",
        format!(
            "must be http://…, https://…, grpc://host:port, grpcs://host:port (TLS) or builtin:<name>, got {spec:?}"
        ),
    ))
}

/// A handler spec with the same defaults as a pipeline stage's: concurrency 1, 30s timeout.
fn default_spec(kind: HandlerKind) -> HandlerSpec {
    HandlerSpec {
        kind,
        concurrency: 1,
        timeout: Duration::from_secs(30),
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;

/// The client options of `files` (the `section` of the settings) and `token`, read now.
fn credentials(
    section: &str,
    files: &ClientTlsFiles,
    token: Option<&Secret>,
) -> Result<ClientOptions, StageWorkerError> {
    let cert_and_key = files.cert_and_key(section)?;
    let names = ["ca_file", "cert_file", "key_file"].map(|key| format!("{section}.{key}"));
    ClientOptions::from_files(
        files.ca_file.as_deref(),
        cert_and_key,
        token.map(|t| t.expose().to_owned()),
        [&names[0], &names[1], &names[2]],
    )
    .map_err(|e| StageWorkerError::setting(section, e.to_string()))
}
