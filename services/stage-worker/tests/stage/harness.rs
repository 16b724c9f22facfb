//! A real Cascade in the test's process: the dispatcher and activation-timer shards and the
//! gateway over `Bus::local()`, on a 127.0.0.1 port 0, with a temporary data directory and
//! no fsync. Plus helpers to create queues, enqueue, inspect, and wait for conditions.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use cascade_bus::Bus;
use cascade_client::{Client, ClientOptions};
use cascade_core::QueueConfig;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest, dispatcher_request};
use cascade_proto::convert::queue_config_to_proto;
use cascade_proto::v1;
use cascade_service::settings::DurabilityKind;
use cascade_service::{Deps, Settings, ShutdownTrigger, shutdown_channel};
use tokio::task::JoinHandle;

pub struct Cascade {
    pub addr: SocketAddr,
    pub client: Client,
    trigger: ShutdownTrigger,
    services: Vec<JoinHandle<Result<(), String>>>,
    _data: tempfile::TempDir,
}

/// What callers may do once authentication is on: an identities file, and the token the
/// harness's own client calls with.
pub struct Auth<'a> {
    pub identities: &'a str,
    pub token: &'a str,
}

impl Cascade {
    pub async fn start() -> Cascade {
        Cascade::start_with(None).await
    }

    /// With authentication on, as `auth` says.
    pub async fn start_with_auth(auth: Auth<'_>) -> Cascade {
        Cascade::start_with(Some(auth)).await
    }

    async fn start_with(auth: Option<Auth<'_>>) -> Cascade {
        let data = tempfile::tempdir().expect("temp dir");
        let mut settings = Settings::default();
        settings.cluster.name = "stagetest".into();
        settings.cluster.shards = 1;
        settings.data.dir = data.path().to_path_buf();
        settings.store.durability = DurabilityKind::None;
        settings.dispatcher.max_take_wait = Duration::from_secs(5);
        settings.bus.request_timeout = Duration::from_secs(5);
        let mut options = ClientOptions::default();
        if let Some(auth) = auth {
            let file = data.path().join("identities.toml");
            std::fs::write(&file, auth.identities).expect("write the identities file");
            settings.auth.enabled = true;
            settings.auth.identities_file = Some(file);
            options.token = Some(auth.token.to_owned());
        }
        let bus = Bus::local();
        let (trigger, shutdown) = shutdown_channel();
        let mut services = Vec::new();
        let (s, b, d) = (settings.clone(), bus.clone(), shutdown.clone());
        services.push(tokio::spawn(async move {
            cascade_dispatcher::run(s, Deps::new(b), d)
                .await
                .map_err(|e| e.to_string())
        }));
        let (s, b, d) = (settings.clone(), bus.clone(), shutdown.clone());
        services.push(tokio::spawn(async move {
            cascade_activation_timer::run(s, Deps::new(b), d)
                .await
                .map_err(|e| e.to_string())
        }));
        wait_for_shard(&bus, &settings).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind port 0");
        let addr = listener.local_addr().expect("bound address");
        let (auth, _watch) = cascade_service::auth::load(&settings.auth).expect("identities");
        let deps = Deps {
            auth,
            ..Deps::new(bus)
        };
        services.push(tokio::spawn(async move {
            cascade_ingest::serve(listener, settings, deps, shutdown)
                .await
                .map_err(|e| e.to_string())
        }));
        let client = Client::connect_with(&format!("http://{addr}"), &options)
            .await
            .expect("connect to the gateway");
        Cascade {
            addr,
            client,
            trigger,
            services,
            _data: data,
        }
    }

    pub fn gateway(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn create_queue(&self, name: &str, config: QueueConfig) {
        self.client
            .admin()
            .create_queue(v1::CreateQueueRequest {
                name: name.into(),
                config: Some(queue_config_to_proto(&config)),
            })
            .await
            .unwrap_or_else(|e| panic!("create queue {name}: {e}"));
    }

    /// Applies pipeline `name` with `stages`, each a no-op stage with the queue's default
    /// config or the one given.
    pub async fn apply_pipeline(&self, name: &str, stages: &[(&str, Option<QueueConfig>)]) {
        let stage = |(stage, queue): &(&str, Option<QueueConfig>)| v1::Stage {
            name: (*stage).into(),
            queue: queue.as_ref().map(queue_config_to_proto),
            handler: Some(v1::HandlerSpec {
                kind: Some(v1::handler_spec::Kind::Builtin("noop".into())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pipeline = v1::Pipeline {
            name: name.into(),
            stages: stages.iter().map(stage).collect(),
        };
        self.client
            .admin()
            .apply_pipeline(pipeline)
            .await
            .unwrap_or_else(|e| panic!("apply pipeline {name}: {e}"));
    }

    pub async fn enqueue(&self, queue: &str, payload: &[u8], headers: &[(&str, &str)]) -> String {
        let headers: HashMap<String, String> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.client
            .ingest()
            .enqueue(v1::EnqueueRequest {
                queue: queue.into(),
                payload: payload.to_vec().into(),
                headers,
                ..v1::EnqueueRequest::default()
            })
            .await
            .unwrap_or_else(|e| panic!("enqueue into {queue}: {e}"))
            .into_inner()
            .id
    }

    pub async fn get(&self, queue: &str, id: &str) -> Result<v1::Event, tonic::Status> {
        self.client
            .ingest()
            .get(v1::GetRequest {
                queue: queue.into(),
                id: id.into(),
            })
            .await
            .map(tonic::Response::into_inner)
    }

    pub async fn stats(&self, queue: &str) -> v1::QueueStats {
        self.client
            .admin()
            .queue_stats(v1::QueueStatsRequest { name: queue.into() })
            .await
            .unwrap_or_else(|e| panic!("stats of {queue}: {e}"))
            .into_inner()
    }

    pub async fn dead_letters(&self, dead_letter_queue: &str) -> Vec<v1::Event> {
        self.client
            .admin()
            .list_dead_letters(v1::ListDeadLettersRequest {
                queue: dead_letter_queue.into(),
                ..v1::ListDeadLettersRequest::default()
            })
            .await
            .unwrap_or_else(|e| panic!("dead letters of {dead_letter_queue}: {e}"))
            .into_inner()
            .events
    }

    /// Waits until `queue` has no event left in any state and `completed` were completed.
    pub async fn wait_for_completed(&self, queue: &str, completed: u64) {
        wait_until(
            &format!("{completed} events of {queue} completed"),
            10,
            || async {
                let stats = self.stats(queue).await;
                stats.completed_total >= completed
                    && stats.ready + stats.delayed + stats.leased == 0
            },
        )
        .await;
    }

    pub async fn stop(self) {
        self.trigger.trigger();
        for service in self.services {
            let stopped = tokio::time::timeout(Duration::from_secs(15), service)
                .await
                .expect("a service stops within 15s")
                .expect("the service's task");
            stopped.expect("the service stops cleanly");
        }
    }
}

/// A queue config for tests: `lease`, and a backoff long enough (10s) that a retry which
/// comes back sooner must have come back for another reason (an asked delay).
pub fn queue_config(lease: Duration) -> QueueConfig {
    QueueConfig {
        lease,
        backoff_initial: Duration::from_secs(10),
        backoff_max: Duration::from_secs(10),
        ..QueueConfig::default()
    }
}

/// Polls `check` every 20 ms until it holds; fails the test after `seconds`.
pub async fn wait_until<F, Fut>(what: &str, seconds: u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited {seconds}s for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The gateway opens only once the shard answers (as `cascade standalone` does).
async fn wait_for_shard(bus: &Bus, settings: &Settings) {
    let probe = DispatcherRequest {
        op: Some(dispatcher_request::Op::GetQueue(v1::GetQueueRequest {
            name: "cascade.startup-probe".into(),
        })),
    };
    let subject = cascade_bus::subject::dispatcher(&settings.cluster.name, 0);
    wait_until("the dispatcher shard answers", 10, || async {
        let answer: Result<DispatcherReply, _> = bus
            .call(&subject, probe.clone(), Duration::from_secs(1))
            .await;
        answer.is_ok()
    })
    .await;
}

/// A stage worker running in the test's process.
pub struct RunningStage {
    pub handle: cascade_worker::WorkerHandle,
    trigger: ShutdownTrigger,
    task: JoinHandle<Result<(), cascade_stage_worker::StageWorkerError>>,
}

impl RunningStage {
    pub fn start(
        config: cascade_stage_worker::StageWorkerConfig,
        registry: &cascade_stage_worker::Registry,
    ) -> RunningStage {
        let stage = cascade_stage_worker::StageWorker::new(
            config,
            registry,
            cascade_telemetry::Metrics::new(),
        )
        .expect("a valid stage");
        let handle = stage.handle();
        let (trigger, shutdown) = shutdown_channel();
        let task = tokio::spawn(stage.run(shutdown));
        RunningStage {
            handle,
            trigger,
            task,
        }
    }

    /// Waits (at most 30 s) for the stage worker to stop without being told to.
    pub async fn stops_by_itself(self) -> Result<(), cascade_stage_worker::StageWorkerError> {
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the stage worker stops by itself within 30s")
            .expect("the stage worker's task")
    }

    /// Shuts down, and waits (at most 15 s) for the drain to end.
    pub async fn stop(self) -> Result<(), cascade_stage_worker::StageWorkerError> {
        self.trigger.trigger();
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("the stage worker stops within 15s")
            .expect("the stage worker's task")
    }
}

/// A stage worker of plain `queue` on `cascade` with the handler `spec` (command-line
/// syntax): 1 s long polls, 5 s of drain, a 10 s handler timeout.
pub fn stage_config(
    cascade: &Cascade,
    queue: &str,
    spec: &str,
) -> cascade_stage_worker::StageWorkerConfig {
    cascade_stage_worker::StageWorkerConfig {
        gateway: cascade.gateway(),
        queue: Some(queue.into()),
        handler: Some(cascade_core::HandlerSpec {
            kind: cascade_stage_worker::parse_handler_kind(spec).expect("a handler spec"),
            concurrency: 1,
            timeout: Duration::from_secs(10),
        }),
        poll_wait: Duration::from_secs(1),
        drain_grace: Duration::from_secs(5),
        ..cascade_stage_worker::StageWorkerConfig::default()
    }
}

/// Counts calls and how many run at once, for handlers the tests write.
#[derive(Default)]
pub struct Gauge {
    now: std::sync::atomic::AtomicUsize,
    max: std::sync::atomic::AtomicUsize,
    calls: std::sync::atomic::AtomicUsize,
}

impl Gauge {
    pub fn enter(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.calls.fetch_add(1, SeqCst);
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.max.fetch_max(now, SeqCst);
    }

    pub fn exit(&self) {
        self.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn now(&self) -> usize {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn max(&self) -> usize {
        self.max.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts measuring the maximum again from what runs now.
    pub fn reset_max(&self) {
        self.max
            .store(self.now(), std::sync::atomic::Ordering::SeqCst);
    }
}

/// A handler that counts itself on `gauge`, sleeps `pause`, then acks.
pub fn sleeping_handler(
    gauge: std::sync::Arc<Gauge>,
    pause: Duration,
) -> cascade_worker::BoxedHandler {
    cascade_worker::BoxedHandler::new(cascade_worker::handler_fn(move |_event, _attempt| {
        let gauge = std::sync::Arc::clone(&gauge);
        async move {
            gauge.enter();
            tokio::time::sleep(pause).await;
            gauge.exit();
            Ok(cascade_worker::Outcome::Ack)
        }
    }))
}
