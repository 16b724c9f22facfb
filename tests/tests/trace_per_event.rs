//! One trace per event: an event enqueued with a producer's
//! `traceparent` into a 3-stage pipeline of HTTP handlers is one trace from the producer
//! through every stage. The test receives Cascade's spans on its own OTLP/gRPC receiver and
//! checks the trace ID, the parent/child structure of docs/tracing.md, the take spans'
//! links, the `cascade.*` attributes, and the `traceparent` each HTTP handler call got; and
//! that each event of a batch sent without a context is a trace of its own.
//! In both modes: standalone (one process) and distributed (ingest, dispatchers, timers
//! and one stage worker process per stage over NATS).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use cascade_client::api;
use cascade_e2e::handler_server::header;
use cascade_e2e::scenarios::{seconds, spread_over_shards};
use cascade_e2e::{Cluster, Mode, StageWorkerSpec};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;

const STAGES: [&str; 3] = ["receive", "transform", "store"];
const PRODUCER_TRACE: &str = "5e1f0a2b3c4d5e6f708192a3b4c5d6e7";
const PRODUCER_SPAN: &str = "a1b2c3d4e5f60718";
const WITHIN: Duration = Duration::from_secs(60);

/// Every span exported to the test.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<Span>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().expect("spans");
        for resource in request.into_inner().resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    fn in_trace(&self, trace: &str) -> Vec<Span> {
        let spans = self.0.lock().expect("spans");
        spans
            .iter()
            .filter(|s| hex(&s.trace_id) == trace)
            .cloned()
            .collect()
    }

    fn all(&self) -> Vec<Span> {
        self.0.lock().expect("spans").clone()
    }
}

async fn start_receiver() -> (String, Receiver) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let addr = listener.local_addr().expect("receiver address");
    let receiver = Receiver::default();
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .expect("the receiver serves");
    });
    (format!("http://{addr}"), receiver)
}

/// Each handler call: the stage (the path), the event ID and the `traceparent` it got.
#[derive(Clone, Default)]
struct Handler(Arc<Mutex<Vec<(String, String, String)>>>);

async fn handle(
    State(handler): State<Handler>,
    Path(stage): Path<String>,
    headers: HeaderMap,
) -> StatusCode {
    let header = |name: &str| header(&headers, name);
    let call = (stage, header("cascade-event-id"), header("traceparent"));
    handler.0.lock().expect("calls").push(call);
    StatusCode::OK
}

async fn start_handler() -> (String, Handler) {
    let handler = Handler::default();
    let app = axum::Router::new()
        .route("/{stage}", post(handle))
        .with_state(handler.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the handler");
    let addr = listener.local_addr().expect("handler address");
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve the handler");
    });
    (format!("http://{addr}"), handler)
}

fn stage(name: &str, url: &str) -> api::Stage {
    api::Stage {
        name: name.into(),
        queue: Some(api::QueueConfig {
            lease: Some(seconds(10.0)),
            ..Default::default()
        }),
        handler: Some(api::HandlerSpec {
            kind: Some(api::handler_spec::Kind::Http(api::HttpHandler {
                url: format!("{url}/{name}"),
            })),
            concurrency: 2,
            timeout: Some(seconds(10.0)),
        }),
        ..Default::default()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|kv| kv.key == key)?;
    Some(match value.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        other => format!("{other:?}"),
    })
}

fn attributes(span: &Span) -> Vec<(String, String)> {
    let pairs = |kv: &KeyValue| (kv.key.clone(), attribute(span, &kv.key).unwrap_or_default());
    span.attributes.iter().map(pairs).collect()
}

fn named<'a>(spans: &'a [Span], name: &str, event: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.name == name && attribute(s, "cascade.event_id").as_deref() == Some(event))
        .collect()
}

fn handle_span<'a>(spans: &'a [Span], event: &str, stage: &str) -> Option<&'a Span> {
    named(spans, "worker.handle", event)
        .into_iter()
        .find(|s| attribute(s, "cascade.stage").as_deref() == Some(stage))
}

fn summary(spans: &[Span]) -> String {
    let lines: Vec<String> = spans
        .iter()
        .map(|s| {
            format!(
                "{} {} parent={} links={:?} {:?}",
                s.name,
                hex(&s.span_id),
                hex(&s.parent_span_id),
                s.links.iter().map(|l| hex(&l.span_id)).collect::<Vec<_>>(),
                attributes(s)
            )
        })
        .collect();
    lines.join("\n")
}

async fn one_trace_per_event(mode: Mode) {
    let (endpoint, receiver) = start_receiver().await;
    let (handler_url, handler) = start_handler().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut cluster = tokio::task::block_in_place(|| Cluster::start_with(mode, None, &env));
    let pipeline = spread_over_shards("traced", &STAGES);
    let c = cluster.client().await;
    c.admin()
        .apply_pipeline(api::Pipeline {
            name: pipeline.clone(),
            stages: STAGES.iter().map(|s| stage(s, &handler_url)).collect(),
        })
        .await
        .expect("apply the pipeline");
    if mode == Mode::Distributed {
        for (i, name) in STAGES.iter().enumerate() {
            let spec = StageWorkerSpec {
                pipeline: pipeline.clone(),
                stage: name.to_string(),
                last_stage: i == STAGES.len() - 1,
                handler: format!("{handler_url}/{name}"),
                concurrency: 2,
                batch: 16,
            };
            tokio::task::block_in_place(|| cluster.start_stage_worker(&spec));
        }
    }

    // The producer's span: its context travels in the request's metadata. A delay, so that
    // the event is activated by the timer.
    let mut request = tonic::Request::new(api::EnqueueRequest {
        pipeline: pipeline.clone(),
        payload: b"{}".to_vec().into(),
        when: Some(api::enqueue_request::When::Delay(seconds(0.3))),
        ..Default::default()
    });
    let traceparent = format!("00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01");
    request.metadata_mut().insert(
        "traceparent",
        traceparent.parse().expect("a metadata value"),
    );
    let id = c
        .ingest()
        .enqueue(request)
        .await
        .expect("enqueue")
        .into_inner()
        .id;

    // A batch without a producer context: each event becomes a trace of its own.
    let batch: Vec<api::EnqueueRequest> = (0..2)
        .map(|_| api::EnqueueRequest {
            pipeline: pipeline.clone(),
            payload: b"{}".to_vec().into(),
            ..Default::default()
        })
        .collect();
    let batch_ids: Vec<String> = c
        .ingest()
        .enqueue_batch(api::EnqueueBatchRequest { items: batch })
        .await
        .expect("enqueue a batch")
        .into_inner()
        .results
        .into_iter()
        .map(|r| r.ok.expect("enqueued").id)
        .collect();

    // Wait until the last stage's handler span arrived (spans end, then are exported in
    // batches every 100 ms).
    let deadline = tokio::time::Instant::now() + WITHIN;
    let spans = loop {
        let spans = receiver.in_trace(PRODUCER_TRACE);
        let everything = receiver.all();
        // Take spans come from other processes' exporters (the workers' in distributed
        // mode): wait for one of each kind per stage linked into the producer's trace.
        let takes_linked = |kind: &str| {
            everything
                .iter()
                .filter(|s| s.name == kind)
                .filter(|s| s.links.iter().any(|l| hex(&l.trace_id) == PRODUCER_TRACE))
                .count()
        };
        let complete = STAGES.iter().all(|s| handle_span(&spans, &id, s).is_some())
            && !named(&spans, "dispatcher.activate", &id).is_empty()
            && takes_linked("worker.take") >= STAGES.len()
            && takes_linked("ingest.take") >= STAGES.len()
            && batch_ids.iter().all(|b| {
                STAGES
                    .iter()
                    .all(|s| handle_span(&everything, b, s).is_some())
            });
        if complete {
            break spans;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the trace of {id} is incomplete after {WITHIN:?}:\n{}\nall spans:\n{}",
            summary(&spans),
            summary(&receiver.all())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let all = receiver.all();
    let trace = summary(&spans);

    // Every span about the event is in the producer's trace.
    for span in all
        .iter()
        .filter(|s| attribute(s, "cascade.event_id").as_deref() == Some(id.as_str()))
    {
        assert_eq!(
            hex(&span.trace_id),
            PRODUCER_TRACE,
            "{} left the trace:\n{trace}",
            span.name
        );
    }

    // ingest.enqueue continues the producer's span; persist and activation are its children.
    let enqueue = named(&spans, "ingest.enqueue", &id);
    assert_eq!(enqueue.len(), 1, "one ingest.enqueue:\n{trace}");
    let enqueue = enqueue[0];
    assert_eq!(hex(&enqueue.parent_span_id), PRODUCER_SPAN, "{trace}");
    let first_queue = format!("{pipeline}.{}", STAGES[0]);
    assert_eq!(
        attribute(enqueue, "cascade.queue").as_deref(),
        Some(first_queue.as_str())
    );
    assert_eq!(
        attribute(enqueue, "cascade.pipeline").as_deref(),
        Some(pipeline.as_str())
    );
    assert!(
        spans
            .iter()
            .any(|s| s.name == "ingest.persist" && s.parent_span_id == enqueue.span_id),
        "ingest.persist under ingest.enqueue:\n{trace}"
    );
    let activate = named(&spans, "dispatcher.activate", &id);
    assert!(
        activate.iter().all(|s| s.parent_span_id == enqueue.span_id),
        "dispatcher.activate under ingest.enqueue:\n{trace}"
    );

    // Each stage's handler span: stage 1 under ingest.enqueue, stage k under the
    // ingest.advance of stage k-1's handler span. Each take that brought the event links
    // to the context it carried then. Each HTTP call's parent is its handler span.
    let calls = handler.0.lock().expect("calls").clone();
    let mut carried = enqueue.span_id.clone();
    for (k, name) in STAGES.iter().enumerate() {
        let handle = handle_span(&spans, &id, name).expect("waited for");
        let queue = format!("{pipeline}.{name}");
        assert_eq!(
            hex(&handle.parent_span_id),
            hex(&carried),
            "stage {name}:\n{trace}"
        );
        assert_eq!(
            attribute(handle, "cascade.queue").as_deref(),
            Some(queue.as_str())
        );
        assert_eq!(
            attribute(handle, "cascade.pipeline").as_deref(),
            Some(pipeline.as_str())
        );
        assert_eq!(attribute(handle, "cascade.attempt").as_deref(), Some("1"));
        let outcome = if k + 1 < STAGES.len() {
            "advance"
        } else {
            "ack"
        };
        assert_eq!(
            attribute(handle, "cascade.outcome").as_deref(),
            Some(outcome)
        );

        let takes: Vec<&Span> = all
            .iter()
            .filter(|s| s.name == "worker.take" || s.name == "ingest.take")
            .filter(|s| {
                s.links
                    .iter()
                    .any(|l| hex(&l.trace_id) == PRODUCER_TRACE && l.span_id == carried)
            })
            .collect();
        assert!(
            takes.iter().any(|s| s.name == "worker.take"),
            "a worker.take linked to the event at {name}:\n{}",
            summary(&all)
        );
        assert!(
            takes.iter().any(|s| s.name == "ingest.take"),
            "an ingest.take linked to the event at {name}:\n{}",
            summary(&all)
        );

        let sent: Vec<&String> = calls
            .iter()
            .filter(|(stage, event, _)| stage == name && *event == id)
            .map(|(_, _, tp)| tp)
            .collect();
        let expected = format!("00-{PRODUCER_TRACE}-{}-01", hex(&handle.span_id));
        assert_eq!(sent, vec![&expected], "traceparent sent to {name}");

        if k + 1 < STAGES.len() {
            let advance = spans
                .iter()
                .find(|s| s.name == "ingest.advance" && s.parent_span_id == handle.span_id)
                .unwrap_or_else(|| panic!("ingest.advance under {name}'s handler:\n{trace}"));
            assert_eq!(
                attribute(advance, "cascade.event_id").as_deref(),
                Some(id.as_str())
            );
            carried = advance.span_id.clone();
        }
    }
    batch_events_are_traces_of_their_own(&all, &batch_ids);
    drop(c);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop the cluster");
}

/// Each event of a batch sent without a context starts its own trace at an `ingest.enqueue`
/// root linked to the request's `ingest.enqueue_batch`, and keeps it through every stage.
fn batch_events_are_traces_of_their_own(all: &[Span], ids: &[String]) {
    let batch = all
        .iter()
        .find(|s| s.name == "ingest.enqueue_batch")
        .unwrap_or_else(|| panic!("an ingest.enqueue_batch:\n{}", summary(all)));
    let mut traces = Vec::new();
    for id in ids {
        let enqueue = named(all, "ingest.enqueue", id);
        assert_eq!(enqueue.len(), 1, "{id}:\n{}", summary(all));
        let enqueue = enqueue[0];
        assert!(
            enqueue.parent_span_id.is_empty(),
            "a root: {}",
            summary(std::slice::from_ref(enqueue))
        );
        assert!(
            enqueue.links.iter().any(|l| l.span_id == batch.span_id),
            "linked to the batch: {}",
            summary(std::slice::from_ref(enqueue))
        );
        for name in STAGES {
            let handle = handle_span(all, id, name).expect("waited for");
            assert_eq!(handle.trace_id, enqueue.trace_id, "{id} at {name}");
        }
        traces.push(hex(&enqueue.trace_id));
    }
    traces.sort();
    traces.dedup();
    assert_eq!(traces.len(), ids.len(), "one trace per event: {traces:?}");
    assert!(!traces.contains(&hex(&batch.trace_id)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_one_trace_per_event() {
    one_trace_per_event(Mode::Standalone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_one_trace_per_event() {
    one_trace_per_event(Mode::Distributed).await;
}
