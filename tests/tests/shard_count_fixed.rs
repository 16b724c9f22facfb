//! A cluster's shard count is fixed for its life: `cascade standalone` restarted on its data
//! with another `cluster.shards` (or another `cluster.name`) refuses to start, naming both,
//! instead of serving queues whose events now hash to other shards; so does one whose shards'
//! stores were swapped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cascade_e2e::process::{Process, binary, free_port, wait_ready};

fn standalone(data: &Path, name: &str, shards: u32, logs: &Path, log: &str) -> (Process, String) {
    let http = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(binary("cascade"));
    command
        .args(["standalone", "--data-dir"])
        .arg(data)
        .args(["--grpc-addr", &format!("127.0.0.1:{}", free_port())])
        .args(["--http-addr", &http])
        .env("CASCADE__CLUSTER__NAME", name)
        .env("CASCADE__CLUSTER__SHARDS", shards.to_string());
    (Process::start(log, command, logs), http)
}

#[test]
fn a_store_refuses_another_shard_count_or_cluster_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let (mut first, http) = standalone(&data, "orders", 2, dir.path(), "created");
    wait_ready(&mut first, &http, Duration::from_secs(60));
    assert!(first.terminate(Duration::from_secs(30)).success());

    for (name, shards, log) in [("orders", 3, "more-shards"), ("billing", 2, "other-name")] {
        let (mut refused, _) = standalone(&data, name, shards, dir.path(), log);
        let status = refused.wait_exit(Duration::from_secs(60));
        let text = refused.log();
        assert!(!status.success(), "started under {name}/{shards}:\n{text}");
        assert!(
            text.contains("belongs to cluster 'orders' with 2 shards")
                && text.contains(&format!("runs cluster '{name}' with {shards} shards")),
            "the error names neither side:\n{text}"
        );
    }

    // Two shards' stores swapped (a restore under the wrong names): refused, naming both.
    let swap = |a: &str, b: &str| {
        let parked = data.join("parked");
        std::fs::rename(data.join(a), &parked).expect("move");
        std::fs::rename(data.join(b), data.join(a)).expect("move");
        std::fs::rename(&parked, data.join(b)).expect("move");
    };
    swap("dispatcher-0", "dispatcher-1");
    let (mut refused, _) = standalone(&data, "orders", 2, dir.path(), "swapped");
    let status = refused.wait_exit(Duration::from_secs(60));
    let text = refused.log();
    assert!(!status.success(), "started on swapped stores:\n{text}");
    assert!(
        text.contains("is the store of dispatcher-1, but this process opened it as dispatcher-0")
            || text.contains(
                "is the store of dispatcher-0, but this process opened it as dispatcher-1"
            ),
        "the error names neither store:\n{text}"
    );
    swap("dispatcher-0", "dispatcher-1");

    let (mut again, http) = standalone(&data, "orders", 2, dir.path(), "same-again");
    wait_ready(&mut again, &http, Duration::from_secs(60));
    assert!(again.terminate(Duration::from_secs(30)).success());
}
