//! Loading and checking a stage worker's settings.

use std::io::Write;

use cascade_core::{QueueConfig, Stage};

use super::*;

fn load(
    file: Option<&str>,
    overrides: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Result<StageWorkerConfig, StageWorkerError> {
    let mut written = tempfile::NamedTempFile::new().expect("temp file");
    if let Some(text) = file {
        written.write_all(text.as_bytes()).expect("write");
    }
    let overrides: Vec<(&str, String)> = overrides
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .collect();
    let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    StageWorkerConfig::load_from(file.map(|_| written.path()), &overrides, env)
}

fn key_of(result: Result<StageWorkerConfig, StageWorkerError>) -> String {
    match result {
        Err(StageWorkerError::Setting { key, .. }) => key,
        Err(StageWorkerError::Worker(cascade_worker::WorkerError::Config { field, .. })) => field,
        other => panic!("expected a setting error, got {other:?}"),
    }
}

#[test]
fn flags_alone_make_a_plain_queue_worker() {
    let config = load(
        None,
        &[
            ("queue", "emails"),
            ("handler", "builtin:log"),
            ("concurrency", "4"),
        ],
        &[],
    )
    .expect("valid");
    let plan = config.plan().expect("plan");
    assert_eq!(config.gateway, DEFAULT_GATEWAY);
    assert_eq!(plan.stage.queue.as_str(), "emails");
    assert!(plan.stage.last, "a plain queue has no next stage");
    assert_eq!(plan.worker.concurrency, 4);
    assert_eq!(plan.worker.batch, 16);
    assert_eq!(plan.worker.handler_timeout, Some(Duration::from_secs(30)));
    assert_eq!(plan.handler.kind, HandlerKind::Builtin("log".into()));
}

#[test]
fn file_then_environment_then_flags() {
    let file = r#"
        gateway = "http://gateway:7700"
        pipeline = "orders"
        stage = "ship"
        batch = 8
        lease = "2s"
        poll_wait = "1s"
        [handler]
        kind = { http = { url = "http://shipper/ship" } }
        concurrency = 3
        timeout = "5s"
    "#;
    let config = load(
        Some(file),
        &[("batch", "64"), ("handler", "grpc://shipper:50051")],
        &[
            ("CASCADE__STAGE_WORKER__BATCH", "32"),
            ("CASCADE__STAGE_WORKER__LAST_STAGE", "true"),
            ("CASCADE__UNRELATED", "ignored"),
        ],
    )
    .expect("valid");
    let plan = config.plan().expect("plan");
    assert_eq!(config.gateway, "http://gateway:7700");
    assert_eq!(plan.stage.queue.as_str(), "orders.ship");
    assert_eq!(plan.stage.pipeline.as_deref(), Some("orders"));
    assert!(plan.stage.last, "from the environment");
    assert_eq!(plan.worker.batch, 64, "flags win");
    assert_eq!(plan.worker.lease, Some(Duration::from_secs(2)));
    assert_eq!(plan.worker.concurrency, 3, "the handler's concurrency");
    assert_eq!(
        plan.handler.kind,
        HandlerKind::Grpc {
            endpoint: "http://shipper:50051".into()
        },
        "the flag's kind, the file's timeout"
    );
    assert_eq!(plan.handler.timeout, Duration::from_secs(5));
}

#[test]
fn bad_settings_name_their_key() {
    assert_eq!(
        key_of(load(None, &[("handler", "builtin:log")], &[])),
        "queue"
    );
    assert_eq!(key_of(load(None, &[("queue", "q")], &[])), "handler");
    assert_eq!(
        key_of(load(None, &[("queue", "q"), ("handler", "ftp://x")], &[])),
        "handler"
    );
    assert_eq!(
        key_of(load(
            None,
            &[("queue", "a b"), ("handler", "builtin:log")],
            &[]
        )),
        "queue"
    );
    assert_eq!(
        key_of(load(
            None,
            &[("pipeline", "p"), ("handler", "builtin:log")],
            &[]
        )),
        "stage"
    );
    assert_eq!(
        key_of(load(
            None,
            &[("queue", "q"), ("handler", "builtin:log"), ("batch", "0")],
            &[]
        )),
        "batch"
    );
    assert_eq!(
        key_of(load(
            None,
            &[
                ("queue", "q"),
                ("handler", "builtin:log"),
                ("lease", "10ms")
            ],
            &[]
        )),
        "lease"
    );
    let unknown = load(Some("queue = \"q\"\nbogus = 1\n"), &[], &[]);
    assert!(
        matches!(&unknown, Err(StageWorkerError::ConfigFile { reason, .. }) if reason.contains("bogus")),
        "{unknown:?}"
    );
}

#[test]
fn handler_specs_from_the_command_line() {
    let cases = [
        (
            "http://h/p",
            HandlerKind::Http {
                url: "http://h/p".into(),
            },
        ),
        (
            "https://h/p",
            HandlerKind::Http {
                url: "https://h/p".into(),
            },
        ),
        (
            "grpc://h:1",
            HandlerKind::Grpc {
                endpoint: "http://h:1".into(),
            },
        ),
        (
            "grpcs://h:1",
            HandlerKind::Grpc {
                endpoint: "https://h:1".into(),
            },
        ),
        ("builtin:sleep:5", HandlerKind::Builtin("sleep:5".into())),
    ];
    for (spec, kind) in cases {
        assert_eq!(parse_handler_kind(spec).expect(spec), kind);
    }
    for bad in ["", "grpc://", "grpcs://", "builtin:", "h:1", "tcp://h"] {
        assert!(parse_handler_kind(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_pipelines_stage_gives_queue_handler_lease_and_place() {
    let stage = |name: &str| Stage {
        name: name.into(),
        queue: QueueConfig {
            lease: Duration::from_secs(7),
            ..QueueConfig::default()
        },
        handler: default_spec(HandlerKind::Builtin("noop".into())),
        priority: 0,
        min_handlers: 0,
        max_handlers: 1,
        next: None,
    };
    let pipeline = Pipeline {
        name: "orders".into(),
        stages: vec![stage("validate"), stage("ship")],
    };
    let first = StageWorkerConfig::for_stage(&pipeline, "validate").expect("stage");
    let plan = first.plan().expect("plan");
    assert_eq!(plan.stage.queue.as_str(), "orders.validate");
    assert!(!plan.stage.last);
    assert_eq!(plan.worker.lease, Some(Duration::from_secs(7)));
    let last = StageWorkerConfig::for_stage(&pipeline, "ship").expect("stage");
    assert!(last.plan().expect("plan").stage.last);
    assert!(StageWorkerConfig::for_stage(&pipeline, "nope").is_err());
}
