//! `Pipeline` both ways, validated with the domain's rules.
//!
//! Zero fields: a stage's `queue` config follows [`super::queue_config_from_proto`];
//! `max_handlers` 0 is 1; `handler.concurrency` 0 is 1; `handler.timeout` unset or 0 is 30s;
//! an empty `next` is the following stage. `handler` and its kind must be set.

use std::time::Duration;

use cascade_core::{HandlerKind, HandlerSpec, Pipeline, Stage};

use super::queue::{queue_config_from_proto, queue_config_to_proto};
use super::time::{duration_to_proto, optional_duration_from_proto};
use super::{ConvertError, field_at, invalid};
use crate::v1;
use crate::v1::handler_spec::Kind as ProtoKind;

const DEFAULT_HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

pub fn pipeline_from_proto(pipeline: &v1::Pipeline) -> Result<Pipeline, ConvertError> {
    let stages = pipeline
        .stages
        .iter()
        .enumerate()
        .map(|(index, stage)| stage_from_proto(stage, &format!("stages[{index}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let domain = Pipeline {
        name: pipeline.name.clone(),
        stages,
    };
    domain.validate().map_err(|err| {
        // The domain names the handler's oneof `kind`; in the message its members are fields
        // of `handler` itself.
        let field = err.field().replace(".handler.kind.", ".handler.");
        err.with_field(field)
    })?;
    Ok(domain)
}

fn stage_from_proto(stage: &v1::Stage, prefix: &str) -> Result<Stage, ConvertError> {
    let queue = queue_config_from_proto(stage.queue.as_ref(), &field_at(prefix, "queue"))?;
    let handler_field = field_at(prefix, "handler");
    let Some(handler) = &stage.handler else {
        return Err(invalid(
            "",
            &handler_field,
            "must be set: an http, grpc or builtin handler",
        ));
    };
    let kind = match &handler.kind {
        None => {
            return Err(invalid(
                &handler_field,
                "kind",
                "must be one of http, grpc, builtin; got none",
            ));
        }
        Some(ProtoKind::Http(http)) => HandlerKind::Http {
            url: http.url.clone(),
        },
        Some(ProtoKind::Grpc(grpc)) => HandlerKind::Grpc {
            endpoint: grpc.endpoint.clone(),
        },
        Some(ProtoKind::Builtin(name)) => HandlerKind::Builtin(name.clone()),
    };
    let timeout = optional_duration_from_proto(
        handler.timeout.as_ref(),
        &field_at(&handler_field, "timeout"),
    )?
    .unwrap_or(DEFAULT_HANDLER_TIMEOUT);
    Ok(Stage {
        name: stage.name.clone(),
        queue,
        handler: HandlerSpec {
            kind,
            concurrency: handler.concurrency.max(1),
            timeout,
        },
        priority: stage.priority,
        min_handlers: stage.min_handlers,
        max_handlers: stage.max_handlers.max(1),
        next: (!stage.next.is_empty()).then(|| stage.next.clone()),
    })
}

/// The pipeline a `GetPipeline` names, checked like a pipeline's own name.
pub fn get_pipeline_from_proto(request: &v1::GetPipelineRequest) -> Result<String, ConvertError> {
    Pipeline::validate_name(&request.name, "name")?;
    Ok(request.name.clone())
}

pub fn pipeline_to_proto(pipeline: &Pipeline) -> v1::Pipeline {
    v1::Pipeline {
        name: pipeline.name.clone(),
        stages: pipeline.stages.iter().map(stage_to_proto).collect(),
    }
}

fn stage_to_proto(stage: &Stage) -> v1::Stage {
    let kind = match &stage.handler.kind {
        HandlerKind::Http { url } => ProtoKind::Http(v1::HttpHandler { url: url.clone() }),
        HandlerKind::Grpc { endpoint } => ProtoKind::Grpc(v1::GrpcHandler {
            endpoint: endpoint.clone(),
        }),
        HandlerKind::Builtin(name) => ProtoKind::Builtin(name.clone()),
    };
    v1::Stage {
        name: stage.name.clone(),
        queue: Some(queue_config_to_proto(&stage.queue)),
        handler: Some(v1::HandlerSpec {
            kind: Some(kind),
            concurrency: stage.handler.concurrency,
            timeout: Some(duration_to_proto(stage.handler.timeout)),
        }),
        priority: stage.priority,
        min_handlers: stage.min_handlers,
        max_handlers: stage.max_handlers,
        next: stage.next.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str, kind: Option<ProtoKind>) -> v1::Stage {
        v1::Stage {
            name: name.into(),
            handler: Some(v1::HandlerSpec {
                kind,
                ..v1::HandlerSpec::default()
            }),
            ..v1::Stage::default()
        }
    }

    fn builtin(name: &str) -> Option<ProtoKind> {
        Some(ProtoKind::Builtin(name.into()))
    }

    #[test]
    fn pipelines_round_trip_with_defaults_filled_in() {
        let given = v1::Pipeline {
            name: "orders".into(),
            stages: vec![
                stage("validate", builtin("noop")),
                stage("ship", builtin("noop")),
            ],
        };
        let pipeline = pipeline_from_proto(&given).expect("valid");
        assert_eq!(pipeline.first_queue().as_str(), "orders.validate");
        let first = &pipeline.stages[0];
        assert_eq!(first.handler.concurrency, 1);
        assert_eq!(first.handler.timeout, DEFAULT_HANDLER_TIMEOUT);
        assert_eq!(first.max_handlers, 1);
        assert_eq!(first.next, None);
        assert_eq!(
            pipeline_from_proto(&pipeline_to_proto(&pipeline)),
            Ok(pipeline)
        );
    }

    #[test]
    fn get_names_a_valid_pipeline() {
        let get =
            |name: &str| get_pipeline_from_proto(&v1::GetPipelineRequest { name: name.into() });
        assert_eq!(get("orders"), Ok("orders".to_owned()));
        let err = get("").expect_err("empty");
        assert!(
            err.to_string().starts_with("name: must be 1-100 bytes"),
            "{err}"
        );
        assert!(get("orders.validate").is_err());
    }

    #[test]
    fn bad_pipelines_name_the_field() {
        let no_handler = v1::Pipeline {
            name: "p".into(),
            stages: vec![v1::Stage {
                name: "s".into(),
                ..v1::Stage::default()
            }],
        };
        let err = pipeline_from_proto(&no_handler).expect_err("no handler");
        assert!(
            err.to_string()
                .starts_with("stages[0].handler: must be set"),
            "{err}"
        );
        let no_kind = v1::Pipeline {
            name: "p".into(),
            stages: vec![stage("s", None)],
        };
        let err = pipeline_from_proto(&no_kind).expect_err("no kind");
        assert!(
            err.to_string().starts_with("stages[0].handler.kind: "),
            "{err}"
        );
        let bad_url = v1::Pipeline {
            name: "p".into(),
            stages: vec![stage(
                "s",
                Some(ProtoKind::Http(v1::HttpHandler {
                    url: "ftp://x".into(),
                })),
            )],
        };
        let err = pipeline_from_proto(&bad_url).expect_err("bad url");
        assert!(
            err.to_string().starts_with("stages[0].handler.http.url: "),
            "{err}"
        );
        let bad_next = v1::Pipeline {
            name: "p".into(),
            stages: vec![v1::Stage {
                next: "nowhere".into(),
                ..stage("s", builtin("noop"))
            }],
        };
        let err = pipeline_from_proto(&bad_next).expect_err("bad next");
        assert!(err.to_string().starts_with("stages[0].next: "), "{err}");
    }
}
