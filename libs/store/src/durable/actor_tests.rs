//! A bug on a store thread is a visible failure, not a store that answers "stopped" forever.

use std::time::Duration;

use cascade_core::SystemClock;

use super::*;
use crate::wal::WalOptions;

/// A state machine whose maintenance has a bug.
struct PanicsOnTick {
    kv: Kv,
}

impl Maintenance for PanicsOnTick {
    fn kv(&self) -> &Kv {
        &self.kv
    }

    fn kv_mut(&mut self) -> &mut Kv {
        &mut self.kv
    }

    fn take_unlogged(&mut self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn tick(&mut self, _now: Timestamp) -> Result<(), StoreError> {
        panic!("a bug in maintenance");
    }
}

#[test]
fn a_panic_on_the_writer_thread_is_the_store_s_fatal_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("open kv");
    let wal = Wal::open(
        &dir.path().join("wal"),
        WalOptions {
            segment_bytes: 1 << 20,
        },
        0,
    )
    .expect("open the log");
    let options = StoreOptions {
        tick: Duration::from_millis(1),
        ..StoreOptions::default()
    };
    let store = Store::start(PanicsOnTick { kv }, wal, options, Arc::new(SystemClock));
    let started = Instant::now();
    let fatal = loop {
        if let Some(reason) = store.fatal() {
            break reason;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no fatal error"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        fatal,
        "the cascade-writer thread panicked: a bug in maintenance"
    );
    match store.shutdown() {
        Err(StoreError::Stopped { reason }) => assert_eq!(reason, fatal),
        other => panic!("{other:?}"),
    }
}

/// A state whose run begins with a record of its own, and whose operations each write one.
struct Logs {
    kv: Kv,
    unlogged: Vec<Vec<u8>>,
}

impl Maintenance for Logs {
    fn kv(&self) -> &Kv {
        &self.kv
    }

    fn kv_mut(&mut self) -> &mut Kv {
        &mut self.kv
    }

    fn take_unlogged(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.unlogged)
    }

    fn tick(&mut self, _now: Timestamp) -> Result<(), StoreError> {
        Ok(())
    }

    fn begin_run(&mut self) {
        self.unlogged.push(b"begin".to_vec());
    }
}

#[tokio::test]
async fn what_a_run_begins_with_is_logged_before_the_first_operation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("open kv");
    let options = WalOptions {
        segment_bytes: 1 << 20,
    };
    let wal = Wal::open(&dir.path().join("wal"), options.clone(), 0).expect("open the log");
    let state = Logs {
        kv,
        unlogged: Vec::new(),
    };
    let store = Store::start(state, wal, StoreOptions::default(), Arc::new(SystemClock));
    store
        .run_unsynced(|s, _| {
            s.unlogged.push(b"op".to_vec());
            Ok(())
        })
        .await
        .expect("the operation");
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("shut down");
    let wal = Wal::open(&dir.path().join("wal"), options, 0).expect("reopen the log");
    let records: Vec<Vec<u8>> = wal
        .read_after(0)
        .expect("read")
        .map(|record| record.expect("a record").1.to_vec())
        .collect();
    assert_eq!(records, [b"begin".to_vec(), b"op".to_vec()]);
}

/// Writes one 1 KiB value under key `n`, logged.
async fn write_kib(store: &Store<Logs>, n: u32) {
    store
        .run(move |s, _| {
            let mut batch = crate::kv::Batch::default();
            batch.put(n.to_be_bytes().to_vec(), vec![0; 1024]);
            s.unlogged.push(batch.encode());
            s.kv.apply(batch);
            Ok(())
        })
        .await
        .expect("write");
}

async fn dirty_bytes(store: &Store<Logs>) -> usize {
    store
        .run(|s, _| Ok(s.kv.dirty_bytes()))
        .await
        .expect("dirty bytes")
}

/// While another store of the process is being recovered, a store already open holds its
/// checkpoints back, up to twice `checkpoint_bytes`, and takes them up once that one is open.
/// (The writer decides whether to start one after each group of operations, so by the time a
/// later operation runs, the decision after the writes before it is made.)
#[tokio::test]
async fn checkpoints_wait_while_another_store_of_the_process_is_recovered() {
    const LIMIT: usize = 4 << 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("open kv");
    let wal = Wal::open(&dir.path().join("wal"), WalOptions::default(), 0).expect("log");
    let options = StoreOptions {
        checkpoint_bytes: LIMIT,
        ..StoreOptions::default()
    };
    let state = Logs {
        kv,
        unlogged: Vec::new(),
    };
    let store = Store::start(state, wal, options, Arc::new(SystemClock));
    let recovering = crate::durable::recover::Recovering::begin();
    for n in 0..5 {
        write_kib(&store, n).await;
    }
    let held = dirty_bytes(&store).await;
    assert!((LIMIT..2 * LIMIT).contains(&held), "held back: {held}");
    for n in 5..8 {
        write_kib(&store, n).await;
    }
    assert!(
        dirty_bytes(&store).await < LIMIT,
        "twice the limit starts one anyway"
    );
    for n in 8..13 {
        write_kib(&store, n).await;
    }
    drop(recovering);
    // Other tests of this binary may be recovering stores of their own for a moment.
    let started = Instant::now();
    while dirty_bytes(&store).await >= LIMIT {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no checkpoint once nothing was being recovered"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .expect("join")
        .expect("shut down");
}
