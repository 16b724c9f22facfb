//! The gateway on a loopback port 0 against `Bus::local()`, with the test playing the
//! dispatcher shards: each fake shard records what reached it and answers from a closure.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cascade_bus::{Bus, Received};
use cascade_ingest::{InProcessListener, IngestError, Listeners};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest, Empty, Status};
use cascade_proto::convert::ShardRequest;
use cascade_proto::v1::admin_client::AdminClient;
use cascade_proto::v1::ingest_client::IngestClient;
use cascade_proto::v1::worker_client::WorkerClient;
use cascade_proto::v1::{
    CompleteResponse, CompletionResult, EnqueueBatchResponse, EnqueueResponse, EnqueueResult,
    Event, ExtendLeaseResponse, LeasedEvent, ListDeadLettersResponse, ListPipelinesResponse,
    ListQueuesResponse, PurgeQueueResponse, Queue, QueueStats, RedriveResponse, TakeResponse,
};
use cascade_service::{Deps, Settings, ShutdownTrigger, shutdown_channel};
use futures::future::BoxFuture;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

pub const CLUSTER: &str = "test";

/// Settings for a test cluster of `shards`: small limits, so tests can reach them.
pub fn settings(shards: u32) -> Settings {
    let mut settings = Settings::default();
    settings.cluster.name = CLUSTER.to_owned();
    settings.cluster.shards = shards;
    settings.bus.request_timeout = Duration::from_secs(2);
    settings.ingest.max_batch_items = 50;
    settings.ingest.max_payload = 1024;
    settings.dispatcher.max_take_wait = Duration::from_secs(5);
    settings
}

pub struct Gateway {
    pub addr: SocketAddr,
    trigger: ShutdownTrigger,
    served: JoinHandle<Result<(), IngestError>>,
}

impl Gateway {
    pub async fn start(settings: Settings, bus: &Bus) -> Gateway {
        Gateway::start_with(settings, Deps::new(bus.clone()), None).await
    }

    /// The gateway with `deps` (authentication, readiness) and the process's own
    /// connections from `in_process`.
    pub async fn start_with(
        settings: Settings,
        deps: Deps,
        in_process: Option<InProcessListener>,
    ) -> Gateway {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind port 0");
        let addr = tcp.local_addr().expect("bound address");
        let (trigger, shutdown) = shutdown_channel();
        let listeners = Listeners { tcp, in_process };
        let served = tokio::spawn(cascade_ingest::serve(listeners, settings, deps, shutdown));
        Gateway {
            addr,
            trigger,
            served,
        }
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("url")
            .connect()
            .await
            .expect("connect to the gateway")
    }

    pub async fn ingest(&self) -> IngestClient<Channel> {
        IngestClient::new(self.channel().await)
    }

    pub async fn worker(&self) -> WorkerClient<Channel> {
        WorkerClient::new(self.channel().await)
    }

    pub async fn admin(&self) -> AdminClient<Channel> {
        AdminClient::new(self.channel().await)
    }

    pub fn trigger_shutdown(&self) {
        self.trigger.trigger();
    }

    /// Shuts down and waits for the drain to end.
    pub async fn stop(self) -> Result<(), IngestError> {
        self.trigger.trigger();
        tokio::time::timeout(Duration::from_secs(10), self.served)
            .await
            .expect("the gateway stops within 10s")
            .expect("the gateway task")
    }
}

/// What reached the fake shards, in arrival order, and whether each came as the gateway's
/// validated values ([`ShardRequest`]) or as a message.
#[derive(Clone, Default)]
pub struct Recorded(Arc<Mutex<Vec<(u32, DispatcherRequest, bool)>>>);

impl Recorded {
    pub fn all(&self) -> Vec<(u32, DispatcherRequest)> {
        let recorded = self.0.lock().expect("recorded");
        recorded
            .iter()
            .map(|(shard, request, _)| (*shard, request.clone()))
            .collect()
    }

    /// Each request's op, and whether it came as values.
    pub fn arrived_as_values(&self) -> Vec<(&'static str, bool)> {
        let recorded = self.0.lock().expect("recorded");
        recorded
            .iter()
            .map(|(_, request, values)| (request.op.as_ref().expect("an op").name(), *values))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.0.lock().expect("recorded").len()
    }

    /// Waits until `count` requests have arrived (at most 5 s).
    pub async fn wait_for(&self, count: usize) {
        wait_until(
            Duration::from_secs(5),
            || self.len() >= count,
            || format!("{} requests arrived, waited for {count}", self.len()),
        )
        .await;
    }
}

/// Checks `done` every few milliseconds until it holds; fails with `failure` after `limit`.
pub async fn wait_until(
    limit: Duration,
    mut done: impl FnMut() -> bool,
    failure: impl Fn() -> String,
) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{}", failure());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub type Answer =
    Arc<dyn Fn(u32, DispatcherRequest) -> BoxFuture<'static, DispatcherReply> + Send + Sync>;

/// Subscribes the fake `shards` on `bus`; each request is recorded, then answered by `answer`
/// in its own task (so a slow answer does not hold the others).
pub async fn fake_shards(
    bus: &Bus,
    shards: impl IntoIterator<Item = u32>,
    answer: Answer,
) -> Recorded {
    let recorded = Recorded::default();
    for shard in shards {
        let subject = cascade_bus::subject::dispatcher(CLUSTER, shard);
        let mut subscription = bus.subscribe(&subject).await.expect("subscribe");
        let recorded = recorded.clone();
        let answer = Arc::clone(&answer);
        tokio::spawn(async move {
            while let Some(mut message) = subscription.next().await {
                let taken = message.take_typed::<ShardRequest, DispatcherRequest>();
                let (request, values) = match taken.expect("a DispatcherRequest") {
                    Received::Value(request) => {
                        let values = !matches!(request, ShardRequest::Message(_));
                        (request.into_proto(), values)
                    }
                    Received::Message(request) => (request, false),
                };
                recorded
                    .0
                    .lock()
                    .expect("recorded")
                    .push((shard, request.clone(), values));
                let reply = answer(shard, request);
                tokio::spawn(async move {
                    let reply = reply.await;
                    let _ = message.respond_with(reply).await;
                });
            }
        });
    }
    recorded
}

/// An answerer from a plain function.
pub fn answer_with(
    answer: impl Fn(u32, DispatcherRequest) -> DispatcherReply + Send + Sync + 'static,
) -> Answer {
    Arc::new(move |shard, request| {
        let reply = answer(shard, request);
        Box::pin(async move { reply })
    })
}

/// What a healthy shard would answer, echoing what it was asked.
pub fn echo(_shard: u32, request: DispatcherRequest) -> DispatcherReply {
    let result = match request.op.expect("an op") {
        Op::Enqueue(batch) => Reply::Enqueue(EnqueueBatchResponse {
            results: batch
                .items
                .into_iter()
                .map(|item| enqueued(&item.queue, &item.id))
                .collect(),
        }),
        Op::Get(get) => Reply::Event(event(&get.queue, &get.id)),
        Op::Update(update) => Reply::Event(event(&update.queue, &update.id)),
        Op::Delete(_) | Op::DeleteQueue(_) => Reply::Done(Empty {}),
        Op::Take(_) => Reply::Take(TakeResponse::default()),
        Op::Complete(complete) => Reply::Complete(CompleteResponse {
            results: complete
                .completions
                .iter()
                .map(|_| CompletionResult::default())
                .collect(),
        }),
        Op::Extend(_) => Reply::Extend(ExtendLeaseResponse {
            lease_expires_at: Some(prost_types::Timestamp {
                seconds: 1,
                nanos: 0,
            }),
        }),
        Op::CreateQueue(create) => Reply::Queue(Queue {
            name: create.name,
            config: create.config,
        }),
        Op::GetQueue(get) => Reply::Queue(Queue {
            name: get.name,
            config: None,
        }),
        Op::ListQueues(_) => Reply::Queues(ListQueuesResponse::default()),
        Op::PurgeQueue(_) => Reply::Purge(PurgeQueueResponse { purged: 0 }),
        Op::QueueStats(stats) => Reply::Stats(QueueStats {
            name: stats.name,
            ..QueueStats::default()
        }),
        Op::ListDeadLetters(_) => Reply::DeadLetters(ListDeadLettersResponse::default()),
        Op::Redrive(_) => Reply::Redrive(RedriveResponse { moved: 0 }),
        Op::ApplyPipeline(pipeline) => Reply::Pipeline(pipeline),
        Op::GetPipeline(get) => {
            return error(5, &format!("pipeline '{}' does not exist", get.name));
        }
        Op::ListPipelines(_) => Reply::Pipelines(ListPipelinesResponse::default()),
        Op::Activate(_) | Op::Deliver(_) => return error(13, "not for the gateway"),
    };
    DispatcherReply {
        result: Some(result),
    }
}

/// A shard's answer to a take: `event`, leased with `token`.
pub fn took(event: Event, token: &str) -> DispatcherReply {
    DispatcherReply {
        result: Some(Reply::Take(TakeResponse {
            events: vec![LeasedEvent {
                event: Some(event),
                lease_token: token.to_owned(),
                lease_expires_at: None,
            }],
            completions: Vec::new(),
        })),
    }
}

pub fn enqueued(queue: &str, id: &str) -> EnqueueResult {
    EnqueueResult {
        ok: Some(EnqueueResponse {
            id: id.to_owned(),
            duplicate: false,
            queue: queue.to_owned(),
            activate_at: None,
        }),
        ..EnqueueResult::default()
    }
}

pub fn event(queue: &str, id: &str) -> Event {
    Event {
        id: id.to_owned(),
        queue: queue.to_owned(),
        ..Event::default()
    }
}

pub fn error(code: i32, message: &str) -> DispatcherReply {
    DispatcherReply {
        result: Some(Reply::Error(Status {
            code,
            message: message.to_owned(),
        })),
    }
}

/// The items of every enqueue batch that reached a shard: (shard, queue, id).
pub fn enqueued_items(recorded: &Recorded) -> Vec<(u32, String, String)> {
    recorded
        .all()
        .into_iter()
        .filter_map(|(shard, request)| match request.op {
            Some(Op::Enqueue(batch)) => Some((shard, batch.items)),
            _ => None,
        })
        .flat_map(|(shard, items)| {
            items
                .into_iter()
                .map(move |item| (shard, item.queue, item.id))
        })
        .collect()
}

/// A started gateway with `shards` fake shards answering with `answer`.
pub async fn cluster(shards: u32, answer: Answer) -> (Gateway, Recorded) {
    let bus = Bus::local();
    let recorded = fake_shards(&bus, 0..shards, answer).await;
    (Gateway::start(settings(shards), &bus).await, recorded)
}
