//! A cluster for the tests: the real dispatcher and activation-timer `run`s over the
//! in-process bus with a temporary data directory, driven with `bus.call` as the gateway
//! drives them, and restartable on the same directory.

use std::time::{Duration, Instant};

use cascade_activation_timer::TimerError;
use cascade_bus::{Bus, subject};
use cascade_core::{QueueName, shard_of};
use cascade_dispatcher::DispatcherError;
use cascade_proto::bus::v1::dispatcher_reply::Result as Answer;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest};
use cascade_proto::v1;
use cascade_service::settings::DurabilityKind;
use cascade_service::{Deps, Readiness, Settings, Shutdown, ShutdownTrigger, shutdown_channel};
use tokio::task::JoinHandle;

/// How long a test waits for anything before it fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

struct Running {
    trigger: ShutdownTrigger,
    shutdown: Shutdown,
    dispatcher: JoinHandle<Result<(), DispatcherError>>,
    timer: Option<JoinHandle<Result<(), TimerError>>>,
}

pub struct Cluster {
    pub bus: Bus,
    pub settings: Settings,
    _dir: tempfile::TempDir,
    running: Option<Running>,
}

impl Cluster {
    pub async fn start(shards: u32) -> Cluster {
        Cluster::start_on(shards, Bus::local()).await
    }

    pub async fn start_on(shards: u32, bus: Bus) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = Settings::default();
        settings.data.dir = dir.path().to_path_buf();
        settings.cluster.shards = shards;
        settings.store.durability = DurabilityKind::Fsync;
        settings.dispatcher.outbox_retry = Duration::from_millis(100);
        settings.dispatcher.stats_interval = Duration::from_millis(100);
        settings.bus.request_timeout = Duration::from_secs(5);
        let mut cluster = Cluster {
            bus,
            settings,
            _dir: dir,
            running: None,
        };
        cluster.run().await;
        cluster
    }

    /// The dispatcher alone, its settings changed by `adjust`: schedules wait in its outbox
    /// until [`Cluster::start_timer`].
    pub async fn start_without_timer(shards: u32, adjust: impl FnOnce(&mut Settings)) -> Cluster {
        let mut cluster = Cluster::start(shards).await;
        cluster.stop().await;
        adjust(&mut cluster.settings);
        cluster.run_dispatcher().await;
        cluster
    }

    async fn run(&mut self) {
        self.run_dispatcher().await;
        self.start_timer().await;
    }

    async fn run_dispatcher(&mut self) {
        let (trigger, shutdown) = shutdown_channel();
        let ready = Readiness::default();
        let dispatcher = tokio::spawn(cascade_dispatcher::run(
            self.settings.clone(),
            self.deps(&ready),
            shutdown.clone(),
        ));
        wait_until("the dispatcher shards serve", || ready.is_ready()).await;
        self.running = Some(Running {
            trigger,
            shutdown,
            dispatcher,
            timer: None,
        });
    }

    /// This cluster's bus, with `ready` to learn when the service serves.
    fn deps(&self, ready: &Readiness) -> Deps {
        Deps {
            readiness: ready.clone(),
            ..Deps::new(self.bus.clone())
        }
    }

    pub async fn start_timer(&mut self) {
        let ready = Readiness::default();
        let deps = self.deps(&ready);
        let running = self.running.as_mut().expect("running");
        running.timer = Some(tokio::spawn(cascade_activation_timer::run(
            self.settings.clone(),
            deps,
            running.shutdown.clone(),
        )));
        wait_until("the timer shards serve", || ready.is_ready()).await;
    }

    /// Graceful shutdown of both services; both must return Ok.
    pub async fn stop(&mut self) {
        let running = self.running.take().expect("running");
        running.trigger.trigger();
        let dispatcher = tokio::time::timeout(PATIENCE, running.dispatcher)
            .await
            .expect("the dispatcher stops in time")
            .expect("join");
        dispatcher.expect("the dispatcher stops cleanly");
        if let Some(timer) = running.timer {
            let timer = tokio::time::timeout(PATIENCE, timer)
                .await
                .expect("the timer stops in time")
                .expect("join");
            timer.expect("the timer stops cleanly");
        }
    }

    pub async fn restart(&mut self) {
        self.stop().await;
        self.run().await;
    }

    pub fn shard_of(&self, queue: &str) -> u32 {
        shard_of(
            &QueueName::parse(queue).expect("queue"),
            self.settings.cluster.shards,
        )
    }

    /// A queue name starting with `prefix` that shard `shard` owns.
    pub fn queue_on(&self, shard: u32, prefix: &str) -> String {
        (0..1000)
            .map(|i| format!("{prefix}{i}"))
            .find(|name| self.shard_of(name) == shard)
            .expect("a name for every shard")
    }

    /// Sends `op` to the shard that owns `queue`, as the gateway routes it.
    pub async fn call(&self, queue: &str, op: Op) -> Answer {
        self.call_shard(self.shard_of(queue), op, PATIENCE).await
    }

    pub async fn call_shard(&self, shard: u32, op: Op, timeout: Duration) -> Answer {
        let subject = subject::dispatcher(&self.settings.cluster.name, shard);
        let request = DispatcherRequest { op: Some(op) };
        let reply: DispatcherReply = self
            .bus
            .call(&subject, request, timeout)
            .await
            .expect("the shard answers");
        reply.result.expect("a reply carries a result")
    }

    pub async fn create_queue(&self, name: &str, config: Option<v1::QueueConfig>) {
        let op = Op::CreateQueue(v1::CreateQueueRequest {
            name: name.into(),
            config,
        });
        match self.call(name, op).await {
            Answer::Queue(queue) => assert_eq!(queue.name, name),
            other => panic!("create_queue {name}: {other:?}"),
        }
    }

    pub async fn enqueue(&self, item: v1::EnqueueRequest) -> v1::EnqueueResult {
        let queue = item.queue.clone();
        let op = Op::Enqueue(v1::EnqueueBatchRequest { items: vec![item] });
        match self.call(&queue, op).await {
            Answer::Enqueue(mut response) => response.results.pop().expect("one result"),
            other => panic!("enqueue into {queue}: {other:?}"),
        }
    }

    /// Enqueues `payload` now and returns the event's id.
    pub async fn enqueue_now(&self, queue: &str, payload: &[u8]) -> String {
        let result = self.enqueue(enqueue_request(queue, payload)).await;
        assert_eq!(result.code, 0, "enqueue: {}", result.message);
        result.ok.expect("a response").id
    }

    pub async fn take(&self, queue: &str, max: u32, wait: Duration) -> Vec<v1::LeasedEvent> {
        self.take_completing(queue, max, wait, Vec::new())
            .await
            .events
    }

    /// A take that carries `completions`.
    pub async fn take_completing(
        &self,
        queue: &str,
        max: u32,
        wait: Duration,
        completions: Vec<v1::Completion>,
    ) -> v1::TakeResponse {
        let op = Op::Take(v1::TakeRequest {
            queue: queue.into(),
            max_events: max,
            lease: None,
            wait: Some(cascade_proto::convert::duration_to_proto(wait)),
            worker_id: "test".into(),
            completions,
        });
        let shard = self.shard_of(queue);
        match self.call_shard(shard, op, wait + PATIENCE).await {
            Answer::Take(response) => response,
            other => panic!("take from {queue}: {other:?}"),
        }
    }

    pub async fn complete(
        &self,
        leased: &v1::LeasedEvent,
        outcome: v1::completion::Outcome,
    ) -> v1::CompletionResult {
        let queue = leased.event.as_ref().expect("an event").queue.clone();
        let op = Op::Complete(v1::CompleteRequest {
            completions: vec![completion(leased, outcome)],
        });
        match self.call(&queue, op).await {
            Answer::Complete(mut response) => response.results.pop().expect("one result"),
            other => panic!("complete: {other:?}"),
        }
    }

    pub async fn stats(&self, queue: &str) -> v1::QueueStats {
        let op = Op::QueueStats(v1::QueueStatsRequest { name: queue.into() });
        match self.call(queue, op).await {
            Answer::Stats(stats) => stats,
            other => panic!("stats of {queue}: {other:?}"),
        }
    }
}

pub fn enqueue_request(queue: &str, payload: &[u8]) -> v1::EnqueueRequest {
    v1::EnqueueRequest {
        queue: queue.into(),
        payload: payload.to_vec().into(),
        ..v1::EnqueueRequest::default()
    }
}

/// The completion of a leased event with `outcome`.
pub fn completion(leased: &v1::LeasedEvent, outcome: v1::completion::Outcome) -> v1::Completion {
    let event = leased.event.as_ref().expect("an event");
    v1::Completion {
        queue: event.queue.clone(),
        id: event.id.clone(),
        lease_token: leased.lease_token.clone(),
        outcome: Some(outcome),
    }
}

pub fn ack() -> v1::completion::Outcome {
    v1::completion::Outcome::Ack(v1::Ack {})
}

pub fn payload_of(leased: &v1::LeasedEvent) -> &[u8] {
    &leased.event.as_ref().expect("an event").payload
}

pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
