//! The protobuf JSON mapping of `cascade.v1.Pipeline`, the shape other languages' clients
//! print (`json_format.MessageToJson`, `protojson`): lowerCamelCase names (the proto's own
//! snake_case names are accepted too), durations as strings of seconds (`"1.5s"`), 64-bit
//! numbers as strings or numbers, a handler's kind as one of `http`, `grpc`, `builtin`.
//! Unknown fields are refused, as the mapping's parsers do by default.

use cascade_client::api;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Pipeline {
    #[serde(default)]
    name: String,
    #[serde(default)]
    stages: Vec<Stage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Stage {
    #[serde(default)]
    name: String,
    queue: Option<QueueConfig>,
    handler: Option<HandlerSpec>,
    #[serde(default)]
    priority: u32,
    #[serde(default, alias = "min_handlers")]
    min_handlers: u32,
    #[serde(default, alias = "max_handlers")]
    max_handlers: u32,
    #[serde(default)]
    next: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct QueueConfig {
    lease: Option<Duration>,
    #[serde(default, alias = "max_attempts")]
    max_attempts: u32,
    #[serde(alias = "backoff_initial")]
    backoff_initial: Option<Duration>,
    #[serde(alias = "backoff_max")]
    backoff_max: Option<Duration>,
    #[serde(default, alias = "dead_letter_queue")]
    dead_letter_queue: String,
    #[serde(default, alias = "max_payload_bytes")]
    max_payload_bytes: Uint64,
    #[serde(default)]
    priority: u32,
    #[serde(alias = "dedup_window")]
    dedup_window: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HandlerSpec {
    http: Option<HttpHandler>,
    grpc: Option<GrpcHandler>,
    builtin: Option<String>,
    #[serde(default)]
    concurrency: u32,
    timeout: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpHandler {
    #[serde(default)]
    url: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrpcHandler {
    #[serde(default)]
    endpoint: String,
}

/// `google.protobuf.Duration` in JSON: `"30s"`, `"1.5s"`, `"0.000001s"`.
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Duration(prost_types::Duration);

impl TryFrom<String> for Duration {
    type Error = String;

    fn try_from(text: String) -> Result<Duration, String> {
        let bad = || format!("{text:?} is not a protobuf JSON duration such as \"1.5s\"");
        let number = text.strip_suffix('s').ok_or_else(bad)?;
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 9 {
            return Err(bad());
        }
        let seconds = whole.parse().map_err(|_| bad())?;
        let nanos = match fraction {
            "" => 0,
            f => format!("{f:0<9}").parse().map_err(|_| bad())?,
        };
        Ok(Duration(prost_types::Duration { seconds, nanos }))
    }
}

/// A `uint64` in JSON: a number, or a string of one.
#[derive(Default, Deserialize)]
#[serde(try_from = "serde_json::Value")]
struct Uint64(u64);

impl TryFrom<serde_json::Value> for Uint64 {
    type Error = String;

    fn try_from(value: serde_json::Value) -> Result<Uint64, String> {
        let parsed = match &value {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::String(s) => s.parse().ok(),
            _ => None,
        };
        parsed
            .map(Uint64)
            .ok_or_else(|| format!("{value} is not an unsigned 64-bit number"))
    }
}

/// A pipeline in the protobuf JSON mapping, as the message it maps.
pub fn pipeline_from_json(value: serde_json::Value) -> Result<api::Pipeline, String> {
    let pipeline: Pipeline = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let stages = pipeline
        .stages
        .into_iter()
        .map(stage)
        .collect::<Result<_, _>>()?;
    Ok(api::Pipeline {
        name: pipeline.name,
        stages,
    })
}

fn stage(stage: Stage) -> Result<api::Stage, String> {
    let handler = match stage.handler {
        Some(spec) => Some(handler(spec, &stage.name)?),
        None => None,
    };
    Ok(api::Stage {
        name: stage.name,
        queue: stage.queue.map(queue_config),
        handler,
        priority: stage.priority,
        min_handlers: stage.min_handlers,
        max_handlers: stage.max_handlers,
        next: stage.next,
    })
}

fn queue_config(config: QueueConfig) -> api::QueueConfig {
    let proto = |d: Option<Duration>| d.map(|Duration(d)| d);
    api::QueueConfig {
        lease: proto(config.lease),
        max_attempts: config.max_attempts,
        backoff_initial: proto(config.backoff_initial),
        backoff_max: proto(config.backoff_max),
        dead_letter_queue: config.dead_letter_queue,
        max_payload_bytes: config.max_payload_bytes.0,
        priority: config.priority,
        dedup_window: proto(config.dedup_window),
    }
}

fn handler(spec: HandlerSpec, stage: &str) -> Result<api::HandlerSpec, String> {
    use api::handler_spec::Kind;
    let kind = match (spec.http, spec.grpc, spec.builtin) {
        (Some(http), None, None) => Some(Kind::Http(api::HttpHandler { url: http.url })),
        (None, Some(grpc), None) => Some(Kind::Grpc(api::GrpcHandler {
            endpoint: grpc.endpoint,
        })),
        (None, None, Some(name)) => Some(Kind::Builtin(name)),
        (None, None, None) => None,
        _ => {
            return Err(format!(
                "stage {stage:?}: a handler has one of http, grpc and builtin, not several"
            ));
        }
    };
    Ok(api::HandlerSpec {
        kind,
        concurrency: spec.concurrency,
        timeout: spec.timeout.map(|Duration(d)| d),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_other_languages_print_reads_as_the_message() {
        let json = serde_json::json!({
            "name": "orders",
            "stages": [
                {
                    "name": "check",
                    "queue": {"maxAttempts": 4, "lease": "1.5s", "maxPayloadBytes": "1024"},
                    "handler": {"builtin": "noop", "timeout": "10s"},
                    "minHandlers": 1
                },
                {"name": "ship", "handler": {"http": {"url": "http://h/ship"}}, "max_handlers": 3}
            ]
        });
        let pipeline = pipeline_from_json(json).expect("a pipeline");
        let check = &pipeline.stages[0];
        let queue = check.queue.as_ref().expect("a queue config");
        assert_eq!(queue.max_attempts, 4);
        assert_eq!(queue.max_payload_bytes, 1024);
        let lease = queue.lease.expect("a lease");
        assert_eq!((lease.seconds, lease.nanos), (1, 500_000_000));
        assert_eq!(check.min_handlers, 1);
        let ship = &pipeline.stages[1];
        assert_eq!(ship.max_handlers, 3);
        assert!(matches!(
            ship.handler.as_ref().and_then(|h| h.kind.as_ref()),
            Some(api::handler_spec::Kind::Http(h)) if h.url == "http://h/ship"
        ));
    }

    #[test]
    fn what_the_mapping_does_not_allow_is_refused() {
        let twice = serde_json::json!({"name": "p", "stages": [
            {"name": "s", "handler": {"builtin": "noop", "http": {"url": "http://h"}}}
        ]});
        assert!(
            pipeline_from_json(twice)
                .unwrap_err()
                .contains("not several")
        );
        let unknown = serde_json::json!({"name": "p", "stagez": []});
        assert!(pipeline_from_json(unknown).unwrap_err().contains("stagez"));
        for bad in ["10", "1m", "-1s", "1.0000000001s", ".5s"] {
            assert!(Duration::try_from(bad.to_owned()).is_err(), "{bad}");
        }
    }
}
