//! Crash safety: a child process doing group-committed writes (enqueues into `a`, advances
//! from `a` to `b`) is killed with SIGKILL at random moments, 20 times on the same store.
//! After each kill the store reopens, every write the child reported as acknowledged is
//! there with its payload, every event sits in exactly one queue, and the queues' counters
//! agree with their events: no transition is half-applied.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{assert_counters_match, events, ids, reopen};

const CYCLES: usize = 20;

struct Acked {
    enqueued: BTreeSet<String>,
    advanced: BTreeSet<String>,
}

/// Runs the child until a random moment after it is ready, then SIGKILLs it. Returns the
/// writes it acknowledged.
fn run_and_kill(dir: &std::path::Path, tag: &str, rng: &mut fastrand::Rng) -> Acked {
    let mut child = Command::new(env!("CARGO_BIN_EXE_store-torture"))
        .arg(dir)
        .arg(tag)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start store-torture");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("child never got ready");
    assert_eq!(ready, "READY");
    // The random moment starts at the first acknowledgement: on a slow disk the first
    // group commit alone can outlast a fixed delay, and a kill before any acknowledgement
    // proves nothing.
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("child acknowledged nothing within 30 s");
    let kill_at = Instant::now() + Duration::from_millis(rng.u64(20..350));
    while Instant::now() < kill_at {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    reader.join().expect("reader thread");
    let mut acked = Acked {
        enqueued: BTreeSet::new(),
        advanced: BTreeSet::new(),
    };
    for line in std::iter::once(first).chain(rx.try_iter()) {
        match line.split_once(' ') {
            Some(("E", id)) => acked.enqueued.insert(id.to_string()),
            Some(("A", id)) => acked.advanced.insert(id.to_string()),
            _ => panic!("unexpected line from the child: {line:?}"),
        };
    }
    acked
}

#[test]
fn sigkill_loses_no_acknowledged_write_and_half_applies_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_dir = dir.path().join("shard");
    let mut rng = fastrand::Rng::with_seed(0xc7a5);
    let mut enqueued = BTreeSet::new();
    let mut advanced = BTreeSet::new();
    for cycle in 0..CYCLES {
        let acked = run_and_kill(&store_dir, &format!("c{cycle}"), &mut rng);
        assert!(
            !acked.enqueued.is_empty(),
            "cycle {cycle}: the child acknowledged nothing"
        );
        enqueued.extend(acked.enqueued);
        advanced.extend(acked.advanced);

        let shard = reopen(&store_dir).expect("reopen after SIGKILL");
        let in_a = events(&shard, "a");
        let in_b = events(&shard, "b");
        let (ids_a, ids_b) = (ids(&in_a), ids(&in_b));
        assert!(
            ids_a.is_disjoint(&ids_b),
            "cycle {cycle}: an event is in both queues"
        );
        for id in &enqueued {
            assert!(
                ids_a.contains(id) || ids_b.contains(id),
                "cycle {cycle}: acknowledged enqueue {id} is lost"
            );
        }
        for id in &advanced {
            assert!(
                ids_b.contains(id),
                "cycle {cycle}: acknowledged advance {id} is lost"
            );
        }
        for ev in in_a.iter().chain(&in_b) {
            assert_eq!(
                ev.payload,
                ev.id.as_str().repeat(4).into_bytes(),
                "cycle {cycle}: payload of {} differs",
                ev.id
            );
        }
        assert_counters_match(&shard, "a");
        assert_counters_match(&shard, "b");
    }
    assert!(
        advanced.len() > 10,
        "too few advances to prove anything: {}",
        advanced.len()
    );
}
