use super::*;

fn stage(name: &str) -> Stage {
    Stage {
        name: name.to_owned(),
        queue: QueueConfig::default(),
        handler: HandlerSpec {
            kind: HandlerKind::Builtin("noop".to_owned()),
            concurrency: 1,
            timeout: Duration::from_secs(30),
        },
        priority: 0,
        min_handlers: 0,
        max_handlers: 1,
        next: None,
    }
}

fn pipeline(stages: &[&str]) -> Pipeline {
    Pipeline {
        name: "orders".to_owned(),
        stages: stages.iter().map(|name| stage(name)).collect(),
    }
}

fn error_of(change: impl FnOnce(&mut Pipeline)) -> String {
    let mut p = pipeline(&["validate", "charge", "ship"]);
    change(&mut p);
    p.validate().expect_err("invalid pipeline").to_string()
}

#[test]
fn a_valid_chain() {
    let p = pipeline(&["validate", "charge", "ship"]);
    assert_eq!(p.validate(), Ok(()));
    assert_eq!(p.first_queue().as_str(), "orders.validate");
    assert_eq!(p.stage_queue("ship").as_str(), "orders.ship");
    assert_eq!(
        p.next_stage("validate").map(|s| s.name.as_str()),
        Some("charge")
    );
    assert_eq!(
        p.next_stage("charge").map(|s| s.name.as_str()),
        Some("ship")
    );
    assert!(p.next_stage("ship").is_none());
    assert!(p.next_stage("unknown").is_none());
    assert_eq!(p.stage("charge").map(|s| s.name.as_str()), Some("charge"));
    let queue = QueueName::parse("orders.charge").expect("valid");
    assert_eq!(
        p.stage_for_queue(&queue).map(|s| s.name.as_str()),
        Some("charge")
    );
    let other = QueueName::parse("ordersx.charge").expect("valid");
    assert!(p.stage_for_queue(&other).is_none());
}

#[test]
fn next_overrides_the_order() {
    let mut p = pipeline(&["a", "b", "c"]);
    p.stages[0].next = Some("c".to_owned());
    p.stages[2].next = Some("a".to_owned());
    assert_eq!(p.validate(), Ok(()));
    assert_eq!(p.next_stage("a").map(|s| s.name.as_str()), Some("c"));
    assert_eq!(p.next_stage("c").map(|s| s.name.as_str()), Some("a"));
}

#[test]
fn invalid_pipelines_name_the_field() {
    assert_eq!(
        error_of(|p| p.name = "a.b".to_owned()),
        "name: must be 1-100 bytes of [A-Za-z0-9_-], got '.' at byte 1"
    );
    assert_eq!(
        error_of(|p| p.stages.clear()),
        "stages: must hold at least 1 stage, got 0"
    );
    assert_eq!(
        error_of(|p| p.stages[1].name = String::new()),
        "stages[1].name: must be 1-100 bytes of [A-Za-z0-9_-], got an empty string"
    );
    assert_eq!(
        error_of(|p| p.stages[2].name = "validate".to_owned()),
        "stages[2].name: stage validate is defined twice"
    );
    assert_eq!(
        error_of(|p| p.stages[2].next = Some("nowhere".to_owned())),
        "stages[2].next: must name a stage of this pipeline (validate, charge, ship), got \"nowhere\""
    );
    assert_eq!(
        error_of(|p| p.stages[0].min_handlers = 2),
        "stages[0].min_handlers: must be at most max_handlers (1), got 2"
    );
    assert_eq!(
        error_of(|p| p.stages[1].handler.concurrency = 0),
        "stages[1].handler.concurrency: must be at least 1, got 0"
    );
    assert_eq!(
        error_of(|p| p.stages[1].handler.timeout = Duration::ZERO),
        "stages[1].handler.timeout: must be between 1ms and 24h, got 0s"
    );
    assert_eq!(
        error_of(|p| p.stages[0].queue.lease = Duration::from_millis(1)),
        "stages[0].queue.lease: must be between 100ms and 24h, got 1ms"
    );
    assert!(
        error_of(|p| p.stages[0].handler.kind = HandlerKind::Http {
            url: "ftp://x".to_owned()
        })
        .starts_with("stages[0].handler.kind.http.url: must be an http:// or https:// URL")
    );
}

#[test]
fn long_names_must_still_form_queue_names() {
    let mut p = pipeline(&[&"s".repeat(100)]);
    p.name = "p".repeat(100);
    let err = p.validate().expect_err("201-byte queue name");
    assert_eq!(err.field(), "stages[0].name");
    p.name = "p".repeat(96);
    let err = p.validate().expect_err("201-byte dead-letter queue name");
    assert_eq!(err.field(), "stages[0].name");
    p.stages[0].queue.dead_letter_queue = Some(QueueName::parse("graveyard").expect("valid"));
    assert_eq!(p.validate(), Ok(()));
}

#[test]
fn stage_queue_names_split_into_pipeline_and_stage() {
    assert_eq!(
        Pipeline::split_stage_queue("orders.ship"),
        Some(("orders", "ship"))
    );
    for not_a_stage in [
        "orders",
        "orders.ship.dlq",
        ".ship",
        "orders.",
        "inbox:a.b",
        "a.b*",
    ] {
        assert_eq!(
            Pipeline::split_stage_queue(not_a_stage),
            None,
            "{not_a_stage}"
        );
    }
    assert_eq!(pipeline(&["a", "b"]).stage_names(), "a, b");
    let err = Pipeline::validate_name("a.b", "pipeline").expect_err("dot");
    assert_eq!(err.field(), "pipeline");
}
