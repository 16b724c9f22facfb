//! `cascade data export|import|repair|verify` on the stores of a real `cascade standalone`:
//! every shard's stores exported while it is stopped, imported into a new data directory, and
//! the cluster started on the imports serves the same events, the delayed one included (its
//! timer's store came along). A running shard's store is refused, and so is a damaged export.
//! A store whose log was damaged is refused by verify and rebuilt by repair, after which the
//! cluster starts on it. Both output modes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cascade_client::api;
use cascade_e2e::process::binary;
use cascade_e2e::scenarios::{config, create, enqueue, item, seconds, stats, take_n};
use cascade_e2e::{Cluster, Mode};

/// `cascade data <args>`: its exit code and what it printed (standard output, then error).
fn data(args: &[&str]) -> (i32, String) {
    let out = Command::new(binary("cascade"))
        .arg("data")
        .args(args)
        .output()
        .expect("run cascade data");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().expect("exited"), text)
}

/// `cascade data <args> --json`, which must succeed: the object it printed.
fn data_json(args: &[&str]) -> serde_json::Value {
    let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let (code, text) = data(&args);
    assert_eq!(code, 0, "{args:?}: {text}");
    serde_json::from_str(text.trim_end()).unwrap_or_else(|e| panic!("not JSON: {text}: {e}"))
}

/// Damages the log of a stopped store: a segment of garbage after the others, as a bad disk
/// or a stray copy can leave. Opening refuses the store.
fn damage_log(store: &Path) {
    let segment = store.join("wal").join(format!("{:020}.wal", 1u64 << 40));
    std::fs::write(segment, b"not a log segment, and not a torn write either").expect("write");
}

/// The shards' store directories: `dispatcher-<n>` and `timer-<n>`.
fn stores(data_dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .expect("list the data directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_moved_by_export_and_import_serves_the_same_events() {
    let mut cluster = tokio::task::spawn_blocking(|| {
        Cluster::start_with(
            Mode::Standalone,
            None,
            &[("CASCADE__STANDALONE__STAGE_WORKERS", "false")],
        )
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    create(&c, "jobs", config(600.0, 5)).await;
    for payload in ["one", "two", "three"] {
        enqueue(&c, item("jobs", payload)).await;
    }
    let mut later = item("jobs", "later");
    // Due after the move (which takes a few seconds), from the imported timer's store.
    later.when = Some(api::enqueue_request::When::Delay(seconds(30.0)));
    enqueue(&c, later).await;

    let data_dir = cluster.data_dir();
    let names: Vec<String> = stores(&data_dir)
        .iter()
        .map(|p| {
            p.file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(
        names,
        ["dispatcher-0", "dispatcher-1", "timer-0", "timer-1"]
    );
    let running = data_dir.join("dispatcher-0");
    let exports = tempfile::tempdir().expect("tempdir");
    let (code, text) = data(&[
        "export",
        running.to_str().expect("utf-8"),
        exports.path().join("refused").to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1, "a running shard's store is refused: {text}");
    assert!(
        text.contains("a running service has the store open (sled could not acquire lock on it): stop its shard's service first")
            && !text.contains("Os {"),
        "{text}"
    );

    let mut schedules = 0;
    let mut moved = |data_dir: &Path| {
        for (store, name) in stores(data_dir).iter().zip(&names) {
            let file = exports.path().join(format!("{name}.export"));
            let args = [
                "export",
                store.to_str().expect("utf-8"),
                file.to_str().expect("utf-8"),
            ];
            // Both output modes: a person's line for dispatchers, JSON for timers.
            if name.starts_with("dispatcher-") {
                let (code, text) = data(&args);
                assert_eq!(code, 0, "{text}");
                assert!(text.starts_with("exported "), "{text}");
                continue;
            }
            let exported = data_json(&args);
            assert_eq!(exported["to"], file.to_str().expect("utf-8"));
            schedules += exported["schedules"].as_u64().expect("a count");
        }
        let aside = data_dir.with_file_name("data-before-move");
        std::fs::rename(data_dir, &aside).expect("move the old data aside");
        for name in &names {
            let file = exports.path().join(format!("{name}.export"));
            let store = data_dir.join(name);
            let args = [
                "import",
                file.to_str().expect("utf-8"),
                store.to_str().expect("utf-8"),
            ];
            // The other mode of each than its export's.
            if name.starts_with("dispatcher-") {
                let imported = data_json(&args);
                assert_eq!(imported["to"], store.to_str().expect("utf-8"));
            } else {
                let (code, text) = data(&args);
                assert_eq!(code, 0, "{text}");
                assert!(text.starts_with("imported "), "{text}");
            }
            let (code, text) = data(&["verify", store.to_str().expect("utf-8")]);
            assert_eq!(code, 0, "{text}");
            let (code, text) = data(&["repair", store.to_str().expect("utf-8")]);
            assert_eq!(
                (code, text.trim_end()),
                (
                    0,
                    &*format!("{}: healthy, nothing to repair", store.display())
                )
            );
        }
    };
    tokio::task::block_in_place(|| cluster.restart_standalone_with(|| moved(&data_dir)));
    assert_eq!(
        schedules, 1,
        "the delayed event was still a timer's when it moved"
    );

    let c = cluster.client().await;
    let jobs = stats(&c, "jobs").await;
    assert_eq!(jobs.enqueued_total, 4, "{jobs:?}");
    let taken = take_n(&c, "jobs", 4, Duration::from_secs(90)).await;
    let mut payloads: Vec<String> = taken
        .iter()
        .map(|l| {
            let event = l.event.as_ref().expect("an event");
            String::from_utf8_lossy(&event.payload).into_owned()
        })
        .collect();
    payloads.sort();
    assert_eq!(
        payloads,
        ["later", "one", "three", "two"],
        "the delayed event came due from the imported timer's store"
    );

    // A damaged export is refused whole.
    let file = exports.path().join("dispatcher-0.export");
    let mut bytes = std::fs::read(&file).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&file, &bytes).expect("write");
    let target = exports.path().join("elsewhere");
    let (code, text) = data(&[
        "import",
        file.to_str().expect("utf-8"),
        target.to_str().expect("utf-8"),
    ]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("damaged export"), "{text}");
    assert!(!target.exists(), "nothing made: {text}");

    // A damaged log: verify says so, repair rebuilds the store, and the cluster starts on it.
    let damaged_and_repaired = |data_dir: &Path| {
        for name in ["dispatcher-0", "dispatcher-1"] {
            let store = data_dir.join(name);
            let dir = store.to_str().expect("utf-8");
            damage_log(&store);
            let (code, text) = data(&["verify", dir]);
            assert_eq!(code, 1, "{text}");
            assert!(
                text.contains("problem: ") && text.contains("data repair"),
                "{text}"
            );
            let args = ["verify", dir, "--json"];
            let (code, text) = data(&args);
            assert_eq!(code, 1, "{text}");
            let report: serde_json::Value =
                serde_json::from_str(text.lines().next().expect("a line")).expect("JSON");
            assert_eq!(
                report["problems"].as_array().map(Vec::len),
                Some(1),
                "{report}"
            );
            let repaired = data_json(&["repair", dir]);
            let stopped = repaired["log"]["stopped"].as_str().unwrap_or_default();
            assert!(stopped.contains("missing"), "{repaired}");
            assert_eq!(repaired["dropped_count"], 0, "{repaired}");
            let kept = repaired["damaged"]
                .as_str()
                .expect("where the old store went");
            assert!(Path::new(kept).join("wal").is_dir(), "{repaired}");
            let (code, text) = data(&["verify", dir]);
            assert_eq!(code, 0, "{text}");
        }
    };
    tokio::task::block_in_place(|| {
        cluster.restart_standalone_with(|| damaged_and_repaired(&data_dir));
    });
    let c = cluster.client().await;
    let jobs = stats(&c, "jobs").await;
    assert_eq!(
        (jobs.enqueued_total, jobs.leased + jobs.ready),
        (4, 4),
        "{jobs:?}"
    );

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
