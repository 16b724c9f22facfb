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
