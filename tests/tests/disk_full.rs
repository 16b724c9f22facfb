//! A full disk is an alarm, not an outage: `cascade standalone` on a small filesystem (a
//! 256 MiB tmpfs) refuses enqueues once free space falls below `store.min_free_bytes`, says so
//! on `/readyz` and in its metrics, keeps serving takes and acks so consumers can drain it,
//! starts again in that state after a restart, and clears the alarm by itself once space
//! comes back. Needs `mount` (root, as in CI); elsewhere it says why it did not run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cascade_client::Client;
use cascade_e2e::cli;
use cascade_e2e::process::http_get;
use cascade_e2e::scenarios::{ack, complete, config, create, item, take_n};
use cascade_e2e::{Cluster, Mode};
use tonic::Code;

const MIB: u64 = 1 << 20;
const WATERMARK_MIB: u64 = 64;

/// A tmpfs mounted on a temporary directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size_mib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        match out.status.success() {
            true => Ok(Tmpfs { dir }),
            false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `path` so large that `leave` bytes stay free.
    fn fill(&self, path: &Path, leave: u64) {
        let size = self.available().saturating_sub(leave);
        std::fs::write(path, vec![0u8; size as usize]).expect("write the ballast");
    }

    fn available(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.path())
            .output()
            .expect("df");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().nth(1).expect("df prints a value");
        line.trim().parse().expect("bytes")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

async fn enqueue_big(c: &Client, n: usize) -> Result<(), tonic::Status> {
    let mut request = item("jobs", "");
    request.payload = vec![b'x'; 512 * 1024].into();
    request.idempotency_key = format!("big-{n}");
    c.ingest().enqueue(request).await.map(drop)
}

fn readyz(cluster: &Cluster) -> (u16, String) {
    http_get(cluster.http(), "/readyz").expect("/readyz answers")
}

fn alarm_metric(cluster: &Cluster) -> String {
    let (_, text) = http_get(cluster.http(), "/metrics").expect("/metrics answers");
    text.lines()
        .filter(|l| l.starts_with("cascade_disk_alarm{"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `/readyz` and the gauges report the alarm.
fn alarm_reported(cluster: &Cluster) -> bool {
    let (_, body) = readyz(cluster);
    body.contains("degraded: dispatcher shard") && alarm_metric(cluster).contains("} 1")
}

/// Waits until `/readyz` and the alarm gauges tell `alarm`: the shards report their disks a
/// few times a second, a moment after the store itself noticed.
async fn wait_reported(cluster: &Cluster, alarm: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = readyz(cluster);
        let gauges = alarm_metric(cluster);
        let told = match alarm {
            true => alarm_reported(cluster),
            false => body == "ready\n" && !gauges.is_empty() && !gauges.contains("} 1"),
        };
        assert_eq!(status, 200, "ready throughout: it serves consumers\n{body}");
        if told {
            if alarm {
                assert!(body.contains("disk alarm"), "{body}");
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "alarm={alarm} never reported:\n{body}\n{gauges}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Takes and acks `n` events: consumers drain a full disk.
async fn drain(c: &Client, n: usize) {
    let taken = take_n(c, "jobs", n, Duration::from_secs(20)).await;
    assert_eq!(taken.len(), n, "takes work in the alarm");
    for event in &taken {
        let result = complete(c, event, ack()).await;
        assert_eq!(result.code, 0, "an ack in the alarm: {}", result.message);
    }
}

fn assert_refused(status: &tonic::Status) {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let message = status.message();
    assert!(
        message.contains(&format!(
            "below its watermark of {WATERMARK_MIB}MiB (store.min_free_bytes)"
        )) && message.contains("takes, acks, deletes and purges still work"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_enqueues_serves_consumers_and_clears_by_itself() {
    let fs = match Tmpfs::mount(256) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("NOT RUN: this machine cannot mount a tmpfs here ({why})");
            return;
        }
    };
    let data: PathBuf = fs.path().join("data");
    let data_text = data.display().to_string();
    let watermark = format!("{WATERMARK_MIB}MiB");
    let env = [
        ("CASCADE__DATA__DIR", data_text.as_str()),
        ("CASCADE__STORE__MIN_FREE_BYTES", watermark.as_str()),
    ];
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut cluster = tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Cluster::start_with(Mode::Standalone, None, &env)
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    create(&c, "jobs", config(30.0, 0)).await;
    let (status, body) = readyz(&cluster);
    assert_eq!((status, body.as_str()), (200, "ready\n"));

    // Something else takes most of the disk, and enqueues take the rest: the shards count
    // what they write at once, and what their next checkpoint will need.
    let ballast = fs.path().join("ballast");
    fs.fill(&ballast, (WATERMARK_MIB + 16) * MIB);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut accepted = 0;
    loop {
        match enqueue_big(&c, accepted).await {
            Ok(()) => accepted += 1,
            Err(status) => {
                assert_refused(&status);
                if alarm_reported(&cluster) {
                    break;
                }
                // Counted ahead of a sample that found room after all: more may go.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no steady alarm after {accepted} enqueues"
        );
    }
    assert!(accepted >= 4, "only {accepted} enqueues before the alarm");
    wait_reported(&cluster, true).await;
    // A file of lines stops at the first refusal: every later line would meet it too.
    let lines = "a line\n".repeat(50);
    let gateway = format!("http://{}", cluster.gateway());
    let refused = tokio::task::block_in_place(|| {
        cli::run_at(&gateway, &["enqueue", "jobs", "--lines"], Some(&lines))
    });
    assert_ne!(refused.code, 0, "{}", refused.stderr);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("(store.min_free_bytes)"),
        "{}",
        refused.stderr
    );
    drain(&c, 2).await;

    // A restart on a full disk starts in the alarm, and serves takes and acks.
    let more = fs.path().join("more-ballast");
    tokio::task::block_in_place(|| {
        cluster.restart_standalone_with(|| fs.fill(&more, (WATERMARK_MIB / 2) * MIB))
    });
    let c = cluster.client().await;
    wait_reported(&cluster, true).await;
    assert_refused(&enqueue_big(&c, 1000).await.expect_err("still full"));
    drain(&c, 2).await;
    std::fs::remove_file(&more).expect("remove the ballast");

    // Space comes back: the alarm clears by itself.
    std::fs::remove_file(&ballast).expect("remove the ballast");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 2000;
    while let Err(status) = enqueue_big(&c, n).await {
        assert_refused(&status);
        assert!(Instant::now() < deadline, "the alarm never cleared");
        tokio::time::sleep(Duration::from_millis(100)).await;
        n += 1;
    }
    wait_reported(&cluster, false).await;
    tokio::task::block_in_place(move || cluster.stop());
}
