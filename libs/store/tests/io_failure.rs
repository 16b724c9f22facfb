//! A failed log write stops the shard: nothing is acknowledged after it, the process ends
//! with an error that says why, and on reopen every acknowledged write is there.
//!
//! The failure is a real one from the kernel: the child runs under a file-size limit
//! (`ulimit -f`, with SIGXFSZ ignored so the write returns EFBIG instead of killing it), and
//! its log grows in one segment until a write crosses the limit.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use common::{assert_counters_match, events, ids, reopen};

/// 4 MiB in the 512-byte blocks of POSIX `ulimit -f`.
const LIMIT_BLOCKS: u32 = 8192;

#[test]
fn failed_log_write_stops_the_shard_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store_dir = dir.path().join("shard");
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {LIMIT_BLOCKS} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_store-torture"))
        .arg(&store_dir)
        .arg("t")
        .arg("--one-log-file")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run store-torture under a file-size limit");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the child must stop with an error, not run on or die of a signal: {stderr}"
    );
    let failures: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.contains("tasks failed"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        failures.len(),
        17,
        "each of the 16 writers and the advancer is stopped by the failure: {stderr}"
    );
    for failure in failures {
        assert!(
            failure.contains("shard stopped") && failure.contains("File too large"),
            "every caller is told the store stopped, and why: {failure}"
        );
    }
    let mut acked = BTreeSet::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        match line.split_once(' ') {
            Some(("E" | "A", id)) => {
                acked.insert(id.to_string());
            }
            _ => assert_eq!(line, "READY", "unexpected line from the child"),
        }
    }
    assert!(
        acked.len() > 1000,
        "the limit is reached only after many writes: {}",
        acked.len()
    );

    let shard = reopen(&store_dir).expect("reopen after the failure");
    let stored = ids(&events(&shard, "a"))
        .union(&ids(&events(&shard, "b")))
        .cloned()
        .collect::<BTreeSet<_>>();
    let lost: Vec<_> = acked.difference(&stored).take(5).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert_counters_match(&shard, "a");
    assert_counters_match(&shard, "b");
}
