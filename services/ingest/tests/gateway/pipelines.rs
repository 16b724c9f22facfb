//! Pipelines at the gateway: applied on every shard with shard 0 last, read from shard 0 (or
//! the next shard when it is unreachable); an enqueue by pipeline name goes to the first
//! stage's queue; an advance reaches its shard with its target resolved, or is refused
//! naming `completions[i].advance.to`.

use std::sync::{Arc, Mutex};

use cascade_bus::Bus;
use cascade_core::{QueueName, shard_of};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest};
use cascade_proto::v1::completion::Outcome;
use cascade_proto::v1::handler_spec::Kind;
use cascade_proto::v1::{
    Ack, Advance, CompleteRequest, Completion, EnqueueBatchRequest, EnqueueRequest,
    GetPipelineRequest, HandlerSpec, ListPipelinesRequest, ListPipelinesResponse, Pipeline, Queue,
    Stage,
};
use tonic::Code;

use crate::harness::{
    Answer, Gateway, Recorded, answer_with, cluster, echo, enqueued_items, error, fake_shards,
    settings,
};

const SHARDS: u32 = 3;
/// Queues the fake shards say exist, besides what pipelines make.
const EXISTING: [&str; 2] = ["archive", "orders.ship"];

fn stage(name: &str, next: &str) -> Stage {
    Stage {
        name: name.into(),
        handler: Some(HandlerSpec {
            kind: Some(Kind::Builtin("noop".into())),
            ..HandlerSpec::default()
        }),
        next: next.into(),
        ..Stage::default()
    }
}

/// `charge` skips `review`, which only a `to` reaches.
fn orders() -> Pipeline {
    Pipeline {
        name: "orders".into(),
        stages: vec![
            stage("validate", ""),
            stage("charge", "ship"),
            stage("review", ""),
            stage("ship", ""),
        ],
    }
}

/// Shards that keep the pipelines applied to them and know the queues in [`EXISTING`].
fn pipeline_shards() -> Answer {
    let stored: Arc<Mutex<Vec<Pipeline>>> = Arc::default();
    answer_with(move |shard, request: DispatcherRequest| {
        let mut stored = stored.lock().expect("stored");
        let result = match request.op {
            Some(Op::ApplyPipeline(pipeline)) => {
                stored.retain(|p| p.name != pipeline.name);
                stored.push(pipeline.clone());
                Reply::Pipeline(pipeline)
            }
            Some(Op::GetPipeline(get)) => match stored.iter().find(|p| p.name == get.name) {
                Some(pipeline) => Reply::Pipeline(pipeline.clone()),
                None => return error(5, &format!("pipeline '{}' does not exist", get.name)),
            },
            Some(Op::ListPipelines(_)) => Reply::Pipelines(ListPipelinesResponse {
                pipelines: stored.clone(),
            }),
            Some(Op::GetQueue(get)) if EXISTING.contains(&get.name.as_str()) => {
                Reply::Queue(Queue {
                    name: get.name,
                    config: None,
                })
            }
            Some(Op::GetQueue(get)) => {
                return error(5, &format!("queue '{}' does not exist", get.name));
            }
            op => return echo(shard, DispatcherRequest { op }),
        };
        DispatcherReply {
            result: Some(result),
        }
    })
}

fn owner(queue: &str) -> u32 {
    shard_of(&QueueName::parse(queue).expect("name"), SHARDS)
}

/// (shard, op) of what reached the shards, for ops named here.
fn pipeline_ops(recorded: &Recorded) -> Vec<(u32, &'static str)> {
    recorded
        .all()
        .into_iter()
        .filter_map(|(shard, request)| match request.op {
            Some(Op::ApplyPipeline(_)) => Some((shard, "apply")),
            Some(Op::GetPipeline(_)) => Some((shard, "get")),
            Some(Op::ListPipelines(_)) => Some((shard, "list")),
            _ => None,
        })
        .collect()
}

async fn applied(gateway: &Gateway) -> Pipeline {
    gateway
        .admin()
        .await
        .apply_pipeline(orders())
        .await
        .expect("applied")
        .into_inner()
}

#[tokio::test]
async fn apply_reaches_every_shard_with_shard_0_last_and_reads_ask_shard_0() {
    let (gateway, recorded) = cluster(SHARDS, pipeline_shards()).await;
    let stored = applied(&gateway).await;
    assert_eq!(stored.name, "orders");
    assert_eq!(stored.stages[1].max_handlers, 1, "defaults are filled in");
    let ops = pipeline_ops(&recorded);
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[2], (0, "apply"), "shard 0 last: {ops:?}");

    let mut admin = gateway.admin().await;
    let got = admin
        .get_pipeline(GetPipelineRequest {
            name: "orders".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(got, stored);
    let listed = admin
        .list_pipelines(ListPipelinesRequest {})
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.pipelines, [stored]);
    let status = admin
        .get_pipeline(GetPipelineRequest {
            name: "nope".into(),
        })
        .await
        .expect_err("not found");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(
        &pipeline_ops(&recorded)[3..],
        [(0, "get"), (0, "list"), (0, "get")]
    );
}

#[tokio::test]
async fn an_invalid_pipeline_or_name_reaches_no_shard() {
    let (gateway, recorded) = cluster(SHARDS, pipeline_shards()).await;
    let mut admin = gateway.admin().await;
    let mut bad = orders();
    bad.stages[3].next = "nowhere".into();
    let status = admin.apply_pipeline(bad).await.expect_err("invalid");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "stages[3].next: must name a stage of this pipeline (validate, charge, review, ship), got \"nowhere\""
    );
    let status = admin
        .get_pipeline(GetPipelineRequest { name: "a.b".into() })
        .await
        .expect_err("a queue name");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("name: "),
        "{}",
        status.message()
    );
    assert_eq!(recorded.len(), 0);
}

fn by_pipeline(pipeline: &str) -> EnqueueRequest {
    EnqueueRequest {
        pipeline: pipeline.into(),
        payload: b"p".to_vec().into(),
        ..EnqueueRequest::default()
    }
}

#[tokio::test]
async fn an_enqueue_by_pipeline_goes_to_its_first_stage() {
    let (gateway, recorded) = cluster(SHARDS, pipeline_shards()).await;
    let mut ingest = gateway.ingest().await;
    let status = ingest
        .enqueue(by_pipeline("orders"))
        .await
        .expect_err("not applied yet");
    assert_eq!(status.code(), Code::NotFound);
    assert_eq!(
        status.message(),
        "pipeline: no pipeline named \"orders\"; apply it with ApplyPipeline first"
    );
    // Applying through this gateway makes the pipeline visible here at once.
    applied(&gateway).await;
    let lists_before = pipeline_ops(&recorded).len();
    let sends = (0..20).map(|_| {
        let mut ingest = ingest.clone();
        async move { ingest.enqueue(by_pipeline("orders")).await }
    });
    for sent in futures::future::join_all(sends).await {
        assert_eq!(
            sent.expect("enqueued").into_inner().queue,
            "orders.validate"
        );
    }
    let lists = pipeline_ops(&recorded).len() - lists_before;
    assert!(
        lists < 20,
        "{lists} lookups for 20 enqueues: the cache holds the list"
    );

    let items = vec![
        by_pipeline("orders"),
        by_pipeline("nope"),
        EnqueueRequest {
            queue: "jobs".into(),
            ..EnqueueRequest::default()
        },
    ];
    let results = ingest
        .enqueue_batch(EnqueueBatchRequest { items })
        .await
        .expect("a batch answers per item")
        .into_inner()
        .results;
    let codes: Vec<i32> = results.iter().map(|r| r.code).collect();
    assert_eq!(codes, [0, 5, 0]);
    assert!(
        results[1]
            .message
            .starts_with("items[1].pipeline: no pipeline named \"nope\""),
        "{}",
        results[1].message
    );
    let first = owner("orders.validate");
    let staged = enqueued_items(&recorded)
        .into_iter()
        .filter(|(_, queue, _)| queue == "orders.validate")
        .collect::<Vec<_>>();
    assert_eq!(staged.len(), 21);
    assert!(staged.iter().all(|(shard, _, _)| *shard == first));
    let names_a_pipeline = recorded
        .all()
        .into_iter()
        .any(|(_, request)| match request.op {
            Some(Op::Enqueue(batch)) => batch.items.iter().any(|item| !item.pipeline.is_empty()),
            _ => false,
        });
    assert!(!names_a_pipeline, "a shard gets queue names only");
}

fn advance(queue: &str, to: &str) -> Completion {
    Completion {
        queue: queue.into(),
        id: "e1".into(),
        lease_token: "00000000000000ff".into(),
        outcome: Some(Outcome::Advance(Advance {
            to: to.into(),
            payload: Some(b"next".to_vec().into()),
            ..Advance::default()
        })),
    }
}

/// The outcome of each completion that reached a shard, by its queue and original `to`.
fn outcomes(recorded: &Recorded) -> Vec<(String, Option<Outcome>)> {
    recorded
        .all()
        .into_iter()
        .filter_map(|(_, request)| match request.op {
            Some(Op::Complete(batch)) => Some(batch.completions),
            _ => None,
        })
        .flatten()
        .map(|c| (c.queue, c.outcome))
        .collect()
}

#[tokio::test]
async fn advances_reach_their_shard_with_the_target_resolved() {
    let (gateway, recorded) = cluster(SHARDS, pipeline_shards()).await;
    applied(&gateway).await;
    let completions = vec![
        advance("orders.validate", ""),
        advance("orders.charge", ""),
        advance("orders.ship", ""),
        advance("orders.validate", "review"),
        advance("orders.validate", "archive"),
        advance("orders.validate", "shipp"),
        advance("jobs", ""),
        advance("jobs", "done"),
        advance("other.stage", ""),
        advance("orders.review", "orders.ship"),
        // Again: what a request resolved, or failed to, answers its later advances alike.
        advance("orders.validate", "archive"),
        advance("orders.validate", "shipp"),
    ];
    let results = gateway
        .worker()
        .await
        .complete(CompleteRequest { completions })
        .await
        .expect("answered per item")
        .into_inner()
        .results;
    let codes: Vec<i32> = results.iter().map(|r| r.code).collect();
    assert_eq!(codes, [0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3], "{results:?}");
    for at in [5, 11] {
        assert_eq!(
            results[at].message,
            format!(
                "completions[{at}].advance.to: must name a stage of pipeline 'orders' (validate, charge, review, ship) or an existing queue, got \"shipp\""
            )
        );
    }

    let asked: Vec<String> = recorded
        .all()
        .into_iter()
        .filter_map(|(_, request)| match request.op {
            Some(Op::GetQueue(get)) => Some(get.name),
            _ => None,
        })
        .collect();
    for name in ["archive", "shipp"] {
        let times = asked.iter().filter(|asked| *asked == name).count();
        assert_eq!(times, 1, "whether '{name}' exists, asked once: {asked:?}");
    }

    let mut reached: Vec<(String, String)> = outcomes(&recorded)
        .into_iter()
        .map(|(queue, outcome)| {
            let to = match outcome {
                Some(Outcome::Advance(advance)) => {
                    assert_eq!(advance.payload.as_deref(), Some(&b"next"[..]));
                    advance.to
                }
                Some(Outcome::Ack(Ack {})) => "(ack)".to_owned(),
                other => panic!("{other:?}"),
            };
            (queue, to)
        })
        .collect();
    reached.sort();
    // From a queue that is no stage (`jobs`, and `other.stage` of no pipeline) an advance
    // without a target is an ack.
    let expected = [
        ("jobs", "(ack)"),
        ("jobs", "done"),
        ("orders.charge", "orders.ship"),
        ("orders.review", "orders.ship"),
        ("orders.ship", "(ack)"),
        ("orders.validate", "archive"),
        ("orders.validate", "archive"),
        ("orders.validate", "orders.charge"),
        ("orders.validate", "orders.review"),
        ("other.stage", "(ack)"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(q, t)| ((*q).to_owned(), (*t).to_owned()))
        .collect();
    assert_eq!(reached, expected);
}

#[tokio::test]
async fn reads_go_to_the_next_shard_when_shard_0_is_unreachable() {
    let bus = Bus::local();
    // Nobody serves shard 0.
    let recorded = fake_shards(&bus, 1..SHARDS, pipeline_shards()).await;
    let gateway = Gateway::start(settings(SHARDS), &bus).await;
    let mut admin = gateway.admin().await;
    let status = admin
        .apply_pipeline(orders())
        .await
        .expect_err("shard 0 is down");
    assert_eq!(status.code(), Code::Unavailable);
    let got = admin
        .get_pipeline(GetPipelineRequest {
            name: "orders".into(),
        })
        .await
        .expect("shard 1 answers")
        .into_inner();
    assert_eq!(got.name, "orders");
    let reads: Vec<(u32, &str)> = pipeline_ops(&recorded)
        .into_iter()
        .filter(|(_, op)| *op == "get")
        .collect();
    assert_eq!(reads, [(1, "get")]);
}
