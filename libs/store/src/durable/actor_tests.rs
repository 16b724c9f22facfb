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
