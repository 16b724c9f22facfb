//! The real activation-timer `run` over the in-process bus with a temporary data directory,
//! a fake dispatcher shard 0 that records the activations it receives and answers as told,
//! and helpers to schedule and cancel like the dispatcher's outbox does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use cascade_activation_timer::TimerError;
use cascade_bus::{Bus, subject};
use cascade_core::{Clock, SystemClock, Timestamp};
use cascade_proto::bus::v1::{
    DispatcherReply, DispatcherRequest, Empty, ScheduleBatch, ScheduleEntry, Status, TimerReply,
    TimerRequest, dispatcher_reply, dispatcher_request, timer_reply, timer_request,
};
use cascade_proto::convert::timestamp_to_proto;
use cascade_service::settings::DurabilityKind;
use cascade_service::{Deps, Readiness, Settings, ShutdownTrigger, shutdown_channel};
use prost::Message;
use tokio::task::JoinHandle;

pub const PATIENCE: Duration = Duration::from_secs(10);

/// An activation the fake dispatcher received: (id, version, when, µs late).
#[derive(Clone, Debug)]
pub struct Fired {
    pub id: String,
    pub version: u64,
    pub late_by: i64,
}

struct Running {
    trigger: ShutdownTrigger,
    timer: JoinHandle<Result<(), TimerError>>,
}

pub struct Harness {
    pub bus: Bus,
    pub settings: Settings,
    /// Every activation received, in order.
    pub fired: Arc<Mutex<Vec<Fired>>>,
    /// Requests the fake dispatcher refuses before it answers OK.
    pub refuse: Arc<Mutex<usize>>,
    /// When each scheduled id is due, to compute lateness.
    due: Arc<Mutex<Vec<(String, Timestamp)>>>,
    _dir: tempfile::TempDir,
    _dispatcher: JoinHandle<()>,
    running: Option<Running>,
}

impl Harness {
    pub async fn start(horizon: Duration) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = Settings::default();
        settings.data.dir = dir.path().to_path_buf();
        settings.store.durability = DurabilityKind::Fsync;
        settings.timer.horizon = horizon;
        settings.bus.request_timeout = Duration::from_secs(2);
        let bus = Bus::local();
        let fired = Arc::new(Mutex::new(Vec::new()));
        let refuse = Arc::new(Mutex::new(0));
        let due = Arc::new(Mutex::new(Vec::new()));
        let dispatcher = fake_dispatcher(&bus, &settings, &fired, &refuse, &due).await;
        let mut harness = Harness {
            bus,
            settings,
            fired,
            refuse,
            due,
            _dir: dir,
            _dispatcher: dispatcher,
            running: None,
        };
        harness.run().await;
        harness
    }

    async fn run(&mut self) {
        let (trigger, shutdown) = shutdown_channel();
        let ready = Readiness::default();
        let deps = Deps {
            readiness: ready.clone(),
            ..Deps::new(self.bus.clone())
        };
        let timer = tokio::spawn(cascade_activation_timer::run(
            self.settings.clone(),
            deps,
            shutdown,
        ));
        wait_until("the timer serves", || ready.is_ready()).await;
        self.running = Some(Running { trigger, timer });
    }

    pub async fn stop(&mut self) {
        let running = self.running.take().expect("running");
        running.trigger.trigger();
        let stopped = tokio::time::timeout(PATIENCE, running.timer)
            .await
            .expect("the timer stops in time")
            .expect("join");
        stopped.expect("the timer stops cleanly");
    }

    /// Starts the timer again after [`Harness::stop`], on the same data directory.
    pub async fn restart_stopped(&mut self) {
        self.run().await;
    }

    /// Schedules `id` (version 1) of queue `jobs` to fire `after` from now (may be negative
    /// with `before`).
    pub async fn schedule(&self, id: &str, after: Duration) {
        self.schedule_at(id, SystemClock.now().saturating_add(after))
            .await;
    }

    pub async fn schedule_at(&self, id: &str, at: Timestamp) {
        self.due.lock().expect("due").push((id.to_owned(), at));
        let entry = entry(id, at);
        self.timer_request(timer_request::Op::Schedule(ScheduleBatch {
            entries: vec![entry],
        }))
        .await;
    }

    /// Cancels the entry `schedule` made for `id`, naming it with its time as a cancel must.
    pub async fn cancel(&self, id: &str) {
        let at = self
            .due
            .lock()
            .expect("due")
            .iter()
            .find(|(scheduled, _)| scheduled == id)
            .map(|(_, at)| *at)
            .expect("scheduled before it is cancelled");
        self.timer_request(timer_request::Op::Cancel(ScheduleBatch {
            entries: vec![entry(id, at)],
        }))
        .await;
    }

    async fn timer_request(&self, op: timer_request::Op) {
        let subject = subject::timer(&self.settings.cluster.name, 0);
        let reply: TimerReply = self
            .bus
            .call(&subject, TimerRequest { op: Some(op) }, PATIENCE)
            .await
            .expect("the timer answers");
        assert!(
            matches!(reply.result, Some(timer_reply::Result::Done(_))),
            "{reply:?}"
        );
    }

    pub fn fired(&self) -> Vec<Fired> {
        self.fired.lock().expect("fired").clone()
    }

    /// Waits until `id` has fired `times` times; returns its firings.
    pub async fn wait_fired(&self, id: &str, times: usize) -> Vec<Fired> {
        let count = || self.fired().into_iter().filter(|f| f.id == id).count();
        wait_until(&format!("{id} fired {times} times"), || count() >= times).await;
        self.fired().into_iter().filter(|f| f.id == id).collect()
    }
}

fn entry(id: &str, at: Timestamp) -> ScheduleEntry {
    ScheduleEntry {
        queue: "jobs".into(),
        id: id.into(),
        version: 1,
        at: Some(timestamp_to_proto(at)),
    }
}

async fn fake_dispatcher(
    bus: &Bus,
    settings: &Settings,
    fired: &Arc<Mutex<Vec<Fired>>>,
    refuse: &Arc<Mutex<usize>>,
    due: &Arc<Mutex<Vec<(String, Timestamp)>>>,
) -> JoinHandle<()> {
    let subject = subject::dispatcher(&settings.cluster.name, 0);
    let mut requests = bus.subscribe(&subject).await.expect("subscribe");
    let (fired, refuse, due) = (Arc::clone(fired), Arc::clone(refuse), Arc::clone(due));
    tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            let now = SystemClock.now();
            let request = message.decode::<DispatcherRequest>().expect("decode");
            let Some(dispatcher_request::Op::Activate(batch)) = request.op else {
                panic!("the timer sends only activations");
            };
            let refused = {
                let mut left = refuse.lock().expect("refuse");
                let refused = *left > 0;
                *left = left.saturating_sub(1);
                refused
            };
            let result = if refused {
                dispatcher_reply::Result::Error(Status {
                    code: 14,
                    message: "not now".into(),
                })
            } else {
                let due = due.lock().expect("due").clone();
                let mut fired = fired.lock().expect("fired");
                for activation in batch.activations {
                    let at = due
                        .iter()
                        .rev()
                        .find(|(id, _)| *id == activation.id)
                        .map_or(now, |(_, at)| *at);
                    let late_by = now.as_micros() as i64 - at.as_micros() as i64;
                    fired.push(Fired {
                        id: activation.id,
                        version: activation.version,
                        late_by,
                    });
                }
                dispatcher_reply::Result::Done(Empty {})
            };
            let reply = DispatcherReply {
                result: Some(result),
            };
            let _ = message.respond(Bytes::from(reply.encode_to_vec())).await;
        }
    })
}

pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
