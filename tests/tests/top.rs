//! `cascade top` as a person sees it: run in a real terminal (a tmux pane, on a tmux server of
//! the test's own), against `cascade standalone` with the example settings. Its screen shows
//! the demo pipeline's stages with their handlers and lateness, a queue with its depth, rates while events
//! arrive, and the shards; it follows changes; Ctrl-C ends it with exit code 0 and gives the
//! terminal back (the view was on the alternate screen).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cascade_client::api;
use cascade_e2e::process::binary;
use cascade_e2e::scenarios::{config, create, enqueue, item, seconds};
use cascade_e2e::{Cluster, Mode};

const SCREEN_WITHIN: Duration = Duration::from_secs(60);

struct Tmux<'a> {
    socket: &'a Path,
}

/// The test's tmux server goes with the test, pass or fail, and `cascade top` with it.
impl Drop for Tmux<'_> {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]).output();
    }
}

impl Tmux<'_> {
    /// `tmux ARGS` on the test's own server.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(self.socket).args(args);
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap_or_else(|e| {
            panic!("cannot run tmux ({e}): install it (Debian: apt-get install tmux)")
        })
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen once `holds` is true of it; fails with the last screen after the deadline.
    async fn wait_for(&self, what: &str, holds: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + SCREEN_WITHIN;
        loop {
            let screen = self.screen();
            if holds(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {what}:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The cells of the screen line whose first cell is `name`.
fn cells<'a>(screen: &'a str, name: &str) -> Vec<&'a str> {
    screen
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_shows_a_live_view_in_a_terminal_and_quits_on_ctrl_c() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/cascade.toml");
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(Mode::Standalone, Some(&example), &[])
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    create(&c, "jobs", config(600.0, 5)).await;
    for i in 0..3 {
        enqueue(&c, item("jobs", &format!("job {i}"))).await;
    }
    // An event that comes due a second from now in the pipeline's first stage: its lateness.
    let due_soon = api::EnqueueRequest {
        pipeline: "demo".into(),
        payload: b"soon".to_vec().into(),
        when: Some(api::enqueue_request::When::Delay(seconds(1.0))),
        ..Default::default()
    };
    enqueue(&c, due_soon).await;

    let dir = tempfile::tempdir().expect("a directory");
    let tmux = Tmux {
        socket: &dir.path().join("tmux.sock"),
    };
    // The admin address as `--addr` takes the gateway's, with its scheme.
    let command = format!(
        "{} top --http-addr http://{}/ --interval 2s; echo \"top exited $?\"; sleep 600",
        binary("cascade").display(),
        cluster.http()
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "160",
        "-y",
        "50",
        "bash",
        "-c",
        &command,
    ]);
    assert!(started.status.success(), "tmux: {started:?}");

    let screen = tmux
        .wait_for(
            "the pipeline, its handlers, the first stage's lateness, the queue and the shards",
            |s| {
                s.contains("PIPELINE demo")
                    && ["receive", "enrich", "deliver"]
                        .iter()
                        .all(|stage| cells(s, stage).get(8).is_some_and(|h| h.contains('/')))
                    && cells(s, "receive")
                        .get(9)
                        .is_some_and(|late| late.ends_with('s'))
                    && cells(s, "jobs").get(1) == Some(&"3")
                    && s.contains("SHARDS  0 ok  1 ok")
            },
        )
        .await;
    assert!(screen.contains("IN/s"), "{screen}");

    // While events keep arriving, every view shows the queue's rate in.
    let feeding = tokio::spawn({
        let c = c.clone();
        async move {
            loop {
                enqueue(&c, item("jobs", "more")).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
    let screen = tmux
        .wait_for("a rate in for jobs", |s| {
            let jobs = cells(s, "jobs");
            jobs.get(4)
                .and_then(|rate| rate.parse::<f64>().ok())
                .is_some_and(|rate| rate > 0.0)
                && jobs.get(1).and_then(|r| r.parse::<u64>().ok()) > Some(3)
        })
        .await;
    feeding.abort();
    eprintln!("cascade top:\n{screen}");

    let sent = tmux.run(&["send-keys", "-t", "top", "C-c"]);
    assert!(sent.status.success(), "tmux send-keys: {sent:?}");
    let screen = tmux
        .wait_for("top's exit", |s| s.contains("top exited"))
        .await;
    assert!(screen.contains("top exited 0"), "{screen}");
    assert!(
        !screen.contains("PIPELINE demo"),
        "the terminal is given back without the view:\n{screen}"
    );
    drop(tmux);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
