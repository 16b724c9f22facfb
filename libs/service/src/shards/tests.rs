use std::sync::{Arc, Mutex};

use super::*;

/// A shard that fails when told to, and records that it stopped.
struct FakeShard {
    shard: u32,
    failing: Arc<Mutex<Option<u32>>>,
    stopped: Arc<Mutex<Vec<u32>>>,
}

impl SupervisedShard for FakeShard {
    type Error = String;

    fn failure(&self) -> Option<String> {
        let failing = *self.failing.lock().expect("failing lock");
        (failing == Some(self.shard)).then(|| format!("shard {} failed", self.shard))
    }

    async fn stop(self) -> Result<(), String> {
        self.stopped.lock().expect("stopped lock").push(self.shard);
        Ok(())
    }
}

struct Fixture {
    failing: Arc<Mutex<Option<u32>>>,
    stopped: Arc<Mutex<Vec<u32>>>,
    readiness: Readiness,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            failing: Arc::default(),
            stopped: Arc::default(),
            readiness: Readiness::default(),
        }
    }

    fn supervisor(&self) -> ShardSupervisor<'static> {
        ShardSupervisor {
            service: "test",
            cluster: "default",
            shards: vec![0, 1, 2],
            readiness: self.readiness.clone(),
            metrics: cascade_telemetry::Metrics::new(),
            store: cascade_telemetry::metrics::StoreKind::Dispatcher,
        }
    }

    /// Starts every shard but `refused`.
    fn start(
        &self,
        refused: Option<u32>,
    ) -> impl FnMut(u32, Shutdown) -> std::future::Ready<Result<FakeShard, String>> + use<> {
        let failing = Arc::clone(&self.failing);
        let stopped = Arc::clone(&self.stopped);
        move |shard, _stopping| {
            std::future::ready(match Some(shard) == refused {
                true => Err(format!("shard {shard} cannot start")),
                false => Ok(FakeShard {
                    shard,
                    failing: Arc::clone(&failing),
                    stopped: Arc::clone(&stopped),
                }),
            })
        }
    }

    fn stopped(&self) -> Vec<u32> {
        self.stopped.lock().expect("stopped lock").clone()
    }

    async fn wait_ready(&self) {
        let ready = async {
            while !self.readiness.is_ready() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), ready)
            .await
            .expect("ready within 5s");
    }
}

#[tokio::test]
async fn shutdown_stops_every_shard_in_order() {
    let fixture = Fixture::new();
    let (trigger, shutdown) = shutdown_channel();
    let run = fixture.supervisor().run(shutdown, fixture.start(None));
    let stop = async {
        fixture.wait_ready().await;
        trigger.trigger();
    };
    let (served, ()) = tokio::join!(run, stop);
    assert_eq!(served, Ok(()));
    assert_eq!(fixture.stopped(), vec![0, 1, 2]);
    assert!(!fixture.readiness.is_ready());
}

#[tokio::test]
async fn the_first_failure_stops_every_shard() {
    let fixture = Fixture::new();
    let (_trigger, shutdown) = shutdown_channel();
    let run = fixture.supervisor().run(shutdown, fixture.start(None));
    let fail = async {
        fixture.wait_ready().await;
        *fixture.failing.lock().expect("failing lock") = Some(1);
    };
    let (served, ()) = tokio::join!(run, fail);
    assert_eq!(served, Err("shard 1 failed".to_owned()));
    assert_eq!(fixture.stopped(), vec![0, 1, 2]);
    assert!(!fixture.readiness.is_ready());
}

#[tokio::test]
async fn a_shard_that_cannot_start_stops_those_started() {
    let fixture = Fixture::new();
    let (_trigger, shutdown) = shutdown_channel();
    let served = fixture
        .supervisor()
        .run(shutdown, fixture.start(Some(2)))
        .await;
    assert_eq!(served, Err("shard 2 cannot start".to_owned()));
    assert_eq!(fixture.stopped(), vec![0, 1]);
    assert!(!fixture.readiness.is_ready());
}

#[tokio::test]
async fn a_task_that_ends_early_fails_its_shard_unless_it_stops() {
    let (trigger, stopping) = shutdown_channel();
    let mut tasks = ShardTasks::new("test", 3);
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    tasks.spawn_request_loop(async {
        let _ = released.await;
    });
    tasks.spawn("outbox pump", async {});
    let ended = async {
        while tasks.failure(None, &stopping).is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .expect("the pump's end seen within 5s");
    let failure = tasks.failure(None, &stopping).expect("failed");
    assert_eq!(
        failure.to_string(),
        "test shard 3 stopped: its outbox pump ended"
    );
    let fatal = tasks.failure(Some("fsync failed".into()), &stopping);
    assert_eq!(
        fatal.map(|e| e.to_string()).as_deref(),
        Some("test shard 3 stopped: fsync failed")
    );
    trigger.trigger();
    assert!(tasks.failure(None, &stopping).is_none());
    release.send(()).expect("request loop waits");
    tasks.join().await;
}
