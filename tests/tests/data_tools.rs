//! `cascade data export|import|repair|verify` on the stores of a real `cascade standalone`:
//! every shard's stores exported while it is stopped, imported into a new data directory, and
//! the cluster started on the imports serves the same events, the delayed one included (its
//! timer's store came along). A running shard's store is refused, and so is a damaged export.

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

/// The schedules an export says it wrote (`…, 1 schedules (…`).
fn exported_schedules(text: &str) -> u64 {
    let before = text
        .split(" schedules")
        .next()
        .unwrap_or_else(|| panic!("no schedules in {text}"));
    let count = before.rsplit(' ').next().unwrap_or_default();
    count
        .parse()
        .unwrap_or_else(|e| panic!("{count:?} in {text}: {e}"))
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
    assert!(text.contains("could not acquire lock"), "{text}");

    let mut schedules = 0;
    let mut moved = |data_dir: &Path| {
        for (store, name) in stores(data_dir).iter().zip(&names) {
            let file = exports.path().join(format!("{name}.export"));
            let (code, text) = data(&[
                "export",
                store.to_str().expect("utf-8"),
                file.to_str().expect("utf-8"),
            ]);
            assert_eq!(code, 0, "{text}");
            assert!(text.starts_with("exported "), "{text}");
            if name.starts_with("timer-") {
                schedules += exported_schedules(&text);
            }
        }
        let aside = data_dir.with_file_name("data-before-move");
        std::fs::rename(data_dir, &aside).expect("move the old data aside");
        for name in &names {
            let file = exports.path().join(format!("{name}.export"));
            let store = data_dir.join(name);
            let (code, text) = data(&[
                "import",
                file.to_str().expect("utf-8"),
                store.to_str().expect("utf-8"),
            ]);
            assert_eq!(code, 0, "{text}");
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

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
