//! Steps of the server's wall clock, forward and back, while producers, consumers and a
//! 3-stage pipeline run with delayed events pending: `cascade standalone` runs under
//! libfaketime (`LD_PRELOAD`), whose offset the test rewrites in a file; the monotonic
//! clock is left alone. Nothing may fire earlier than its time by more than the largest
//! forward step, and nothing may be lost or delivered again after its ack.

use std::path::Path;
use std::time::{Duration, SystemTime};

use cascade_client::Client;
use cascade_e2e::load::{LEASE, Load};
use cascade_e2e::scenarios::{config, create, item};
use cascade_e2e::{Cluster, Mode};
use tokio::time::Instant;

/// Debian's libfaketime, under the machine's multiarch directory.
const LIBFAKETIME: &str = "faketime/libfaketime.so.1";
/// The size of every step; the offsets below go forward by one step, back by two (in two
/// steps) and forward again.
const STEP_S: i64 = 2;
/// Longer than the step, so that an event fired early by more than the step is seen.
const LONGEST_DELAY: Duration = Duration::from_secs(6);
const OFFSETS_S: [i64; 4] = [STEP_S, 0, -STEP_S, 0];
const SEEN_WITHIN: Duration = Duration::from_secs(10);
const PROBE: &str = "clock-probe";

/// The path of libfaketime (`/usr/lib/<arch>-linux-gnu/faketime/…`).
fn libfaketime() -> String {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|arch| arch.path().join(LIBFAKETIME))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("/usr/lib/*/{LIBFAKETIME} is missing: install Debian's faketime (scripts/test.sh does)")
        })
        .display()
        .to_string()
}

/// Writes the offset libfaketime gives the server's wall clock (read on every call).
fn set_offset(file: &Path, seconds: i64) {
    std::fs::write(file, format!("{seconds:+}\n")).expect("write the faketime file");
}

/// The server's clock minus ours, in seconds, read off a probe event's activation time.
async fn server_offset(c: &Client) -> f64 {
    let answer = c
        .ingest()
        .enqueue(item(PROBE, "what time is it"))
        .await
        .expect("enqueue a probe")
        .into_inner();
    let ours = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64();
    let theirs = answer.activate_at.expect("an activation time");
    theirs.seconds as f64 + f64::from(theirs.nanos) / 1e9 - ours
}

/// Waits until the server's clock is `seconds` off ours (the step has taken effect).
async fn wait_for_offset(c: &Client, seconds: i64) {
    let deadline = Instant::now() + SEEN_WITHIN;
    loop {
        let seen = server_offset(c).await;
        if (seen - seconds as f64).abs() < 0.5 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the server's clock is {seen:.3} s off, wanted {seconds} s: is libfaketime working?"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wall_clock_steps_fire_nothing_early_beyond_the_step_and_lose_nothing() {
    let libfaketime = libfaketime();
    let dir = tempfile::tempdir().expect("tempdir");
    let offset_file = dir.path().join("offset");
    set_offset(&offset_file, 0);
    let file = offset_file.display().to_string();
    let mut cluster = tokio::task::spawn_blocking(move || {
        let env = [
            ("LD_PRELOAD", libfaketime.as_str()),
            ("FAKETIME_TIMESTAMP_FILE", file.as_str()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ];
        Cluster::start_with(Mode::Standalone, None, &env)
    })
    .await
    .expect("start the cluster");
    let c = cluster.client().await;
    create(&c, PROBE, config(30.0, 0)).await;
    wait_for_offset(&c, 0).await;
    let load = Load::start_with_delays(&mut cluster, "clock", LONGEST_DELAY).await;
    for seconds in OFFSETS_S {
        // A forward step ends leases early: what the last stage had under lease may be
        // handled again until a lease's length has passed.
        load.play_fault(&mut cluster, LEASE, async |_| {
            set_offset(&offset_file, seconds);
            wait_for_offset(&c, seconds).await;
        })
        .await;
        eprintln!("the server's clock is now {seconds:+} s off");
    }
    let step = Duration::from_secs(STEP_S.unsigned_abs());
    load.check_and_stop(cluster, step).await;
}
