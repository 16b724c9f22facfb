//! Scaling ahead of a known wave: with nothing ready, the delayed events that the timer
//! shards say come due within `target_drain` are work, so the loop staffs the stage before
//! they activate. The timer shard is played by the test on the in-process bus.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cascade_bus::{Bus, subject};
use cascade_core::{Clock, SystemClock};
use cascade_proto::bus::v1::{
    DueBucket, DueCounts, QueueDue, ShardStats, TimerReply, TimerRequest, timer_reply,
    timer_request,
};
use cascade_proto::convert::timestamp_to_proto;
use cascade_proto::v1::QueueStats;
use cascade_resource_manager::{
    Board, Current, Decision, Deps, Executor, ResourceManagerError, ResourceManagerSettings,
    Stages, run,
};
use cascade_telemetry::Metrics;
use common::{spec, stage};
use prost::Message as _;

const CLUSTER: &str = "rmdue";
const DEADLINE: Duration = Duration::from_secs(20);

/// Runs what it is told at once and keeps every round.
#[derive(Clone, Default)]
struct Executed(Arc<Mutex<(Vec<Vec<Decision>>, Current)>>);

impl Executor for Executed {
    async fn apply(&self, decisions: &[Decision]) -> Result<(), ResourceManagerError> {
        let mut state = self.0.lock().expect("not poisoned");
        for decision in decisions {
            state.1.set(decision.stage.clone(), decision.handlers);
        }
        state.0.push(decisions.to_vec());
        Ok(())
    }

    fn current(&self) -> Current {
        self.0.lock().expect("not poisoned").1.clone()
    }
}

/// A stage with nothing ready, leased or arriving.
fn quiet_stats() -> Bytes {
    let stats = ShardStats {
        shard: 0,
        at: Some(timestamp_to_proto(SystemClock.now())),
        queues: vec![QueueStats {
            name: "orders.charge".into(),
            delayed: 500,
            ..QueueStats::default()
        }],
        ..ShardStats::default()
    };
    Bytes::from(stats.encode_to_vec())
}

/// Answers every `due_counts` with 500 events of `orders.charge` due by the first bound;
/// keeps the bounds asked for.
async fn play_timer(bus: Bus, asked: Arc<Mutex<Vec<usize>>>) {
    let mut requests = bus
        .subscribe(&subject::timer(CLUSTER, 0))
        .await
        .expect("subscribe as timer shard 0");
    while let Some(message) = requests.next().await {
        let request: TimerRequest = message.decode().expect("a timer request");
        let Some(timer_request::Op::DueCounts(counts)) = request.op else {
            panic!("only due_counts is expected, got {request:?}");
        };
        assert_eq!(counts.queues, ["orders.charge"], "the managed stages only");
        asked
            .lock()
            .expect("not poisoned")
            .push(counts.bounds.len());
        let reply = TimerReply {
            result: Some(timer_reply::Result::DueCounts(DueCounts {
                queues: vec![QueueDue {
                    queue: "orders.charge".into(),
                    buckets: vec![DueBucket {
                        until: counts.bounds.first().cloned(),
                        count: 500,
                    }],
                }],
            })),
        };
        message.respond_with(reply).await.expect("reply");
    }
}

#[tokio::test]
async fn delayed_events_due_within_target_drain_are_staffed_before_they_activate() {
    let bus = Bus::local();
    let executor = Executed::default();
    executor
        .0
        .lock()
        .expect("not poisoned")
        .1
        .set(stage("orders.charge"), 1);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let timer = tokio::spawn(play_timer(bus.clone(), asked.clone()));
    let settings = ResourceManagerSettings {
        interval: Duration::from_millis(100),
        target_drain: Duration::from_secs(1),
        throughput_window: Duration::from_secs(1),
        ..ResourceManagerSettings::default()
    };
    let deps = Deps {
        bus: bus.clone(),
        stages: Stages::fixed(vec![spec("orders.charge", 1, 0, 4)]),
        executor: executor.clone(),
        metrics: Metrics::new(),
        board: Board::new(),
        clock: Arc::new(SystemClock),
        timer_shards: 1,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let manager = tokio::spawn(run(CLUSTER.to_owned(), settings, deps, async move {
        let _ = stopped.await;
    }));
    let stats_subject = subject::stats(CLUSTER, 0);
    let publisher_bus = bus.clone();
    let shard = tokio::spawn(async move {
        loop {
            publisher_bus
                .publish(&stats_subject, quiet_stats())
                .await
                .expect("publish stats");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });

    let give_up = tokio::time::Instant::now() + DEADLINE;
    let last = loop {
        let rounds = executor.0.lock().expect("not poisoned").0.clone();
        if let Some(round) = rounds.last()
            && round[0].handlers == 4
        {
            break round[0].clone();
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the wave is never staffed: {rounds:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(last.explanation.inputs.ready, 0);
    assert_eq!(last.explanation.inputs.due_soon, 500.0);
    assert!(
        asked.lock().expect("not poisoned").iter().all(|&n| n == 8),
        "eight buckets up to target_drain"
    );

    shard.abort();
    timer.abort();
    stop.send(()).expect("the manager runs");
    let ended = tokio::time::timeout(DEADLINE, manager)
        .await
        .expect("the manager stops")
        .expect("no panic");
    assert_eq!(ended, Ok(()));
}
