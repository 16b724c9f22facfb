//! `deploy/cluster/local-cluster.sh`, the example distributed cluster of docs/operations.md, run
//! as a person runs it (with the test's binaries and free ports): it starts NATS, a dispatcher
//! and an activation timer per shard, the gateway, the demo pipeline's stage workers and the
//! resource manager; events go through queues on both shards and through the pipeline; SIGTERM
//! stops every process it started, the script exits 0, and `cascade data verify` finds each
//! stopped store whole.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cascade_e2e::cli::run_at;
use cascade_e2e::process::{binary, free_port, free_port_run};

const SHARDS: u16 = 2;
/// Admin ports: the gateway, a dispatcher and a timer per shard, three stage workers and the
/// resource manager.
const ADMIN_PORTS: u16 = 1 + 2 * SHARDS + 3 + 1;
const START_WITHIN: Duration = Duration::from_secs(120);
const FLOW_WITHIN: Duration = Duration::from_secs(60);
const STOP_WITHIN: Duration = Duration::from_secs(60);
const PIPELINE_EVENTS: u64 = 20;

struct Script {
    child: Child,
    lines: mpsc::Receiver<String>,
    printed: Vec<String>,
    stderr: PathBuf,
}

/// A test that fails half-way still stops the cluster: SIGTERM to the script (which stops
/// what it started, in order), SIGKILL if it has not ended within [`STOP_WITHIN`].
impl Drop for Script {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if self.terminate().is_ok() && self.exit_within(STOP_WITHIN).is_some() {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Script {
    /// SIGTERM: the script stops what it started, then exits.
    fn terminate(&self) -> std::io::Result<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status()
    }

    /// How the script exited, if it did within `within`.
    fn exit_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Lines printed until one contains `marker`; panics with what it printed and its errors
    /// if the script ends or `within` passes first.
    fn wait_for(&mut self, marker: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(marker);
                    self.printed.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!(
                    "the script did not print {marker:?} within {within:?}; it printed:\n{}\nerrors:\n{}",
                    self.printed.join("\n"),
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                ),
            }
        }
    }
}

fn cli_ok(addr: &str, args: &[&str], stdin: Option<&str>) -> String {
    let out = run_at(addr, args, stdin);
    assert_eq!(out.code, 0, "cascade {args:?}: {}", out.stderr);
    out.stdout
}

fn stat(addr: &str, queue: &str, field: &str) -> u64 {
    let out = cli_ok(addr, &["stats", queue, "--json"], None);
    let stats: serde_json::Value = serde_json::from_str(out.trim()).expect("stats as JSON");
    stats[field].as_u64().unwrap_or(0)
}

#[test]
fn the_example_cluster_script_runs_a_working_cluster() {
    let repository = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin_dir = binary("cascade").parent().expect("a directory").to_owned();
    let dir = tempfile::tempdir().expect("a directory");
    let (nats, grpc, admin) = (free_port(), free_port(), free_port_run(ADMIN_PORTS));
    let stderr = dir.path().join("script.stderr");
    let mut child = Command::new("bash")
        .arg(repository.join("deploy/cluster/local-cluster.sh"))
        .env("CASCADE_BIN_DIR", &bin_dir)
        .env("CASCADE_CLUSTER_DIR", dir.path().join("cluster"))
        .env("SHARDS", SHARDS.to_string())
        .env("NATS_PORT", nats.to_string())
        .env("GRPC_PORT", grpc.to_string())
        .env("ADMIN_PORT", admin.to_string())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("run the script");
    let (send, lines) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = send.send(line);
        }
    });
    let mut script = Script {
        child,
        lines,
        printed: Vec::new(),
        stderr,
    };
    script.wait_for("Cascade is running", START_WITHIN);

    let addr = format!("http://127.0.0.1:{grpc}");
    // Queues spread over both shards by name: each takes an event and acks it.
    for queue in ["a", "b", "c", "d", "e", "f"] {
        cli_ok(&addr, &["queue", "create", queue], None);
        cli_ok(&addr, &["enqueue", queue, "x"], None);
        let lease = cli_ok(&addr, &["take", queue, "--quiet"], None);
        let lease: Vec<&str> = lease.split_whitespace().collect();
        assert_eq!(lease.len(), 2, "take --quiet prints ID TOKEN: {lease:?}");
        cli_ok(&addr, &["ack", queue, lease[0], lease[1]], None);
    }
    // The pipeline's stage workers carry events to the end (or, rarely, to a dead letter).
    let input: String = (1..=PIPELINE_EVENTS).map(|n| format!("{n}\n")).collect();
    cli_ok(
        &addr,
        &["enqueue", "demo", "--pipeline", "--lines"],
        Some(&input),
    );
    let deadline = Instant::now() + FLOW_WITHIN;
    loop {
        let through = stat(&addr, "demo.deliver", "completed_total")
            + ["demo.receive", "demo.enrich", "demo.deliver"]
                .iter()
                .map(|stage| stat(&addr, stage, "dead_lettered"))
                .sum::<u64>();
        if through == PIPELINE_EVENTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{through} of {PIPELINE_EVENTS} events through the pipeline within {FLOW_WITHIN:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let killed = script.terminate();
    assert!(killed.is_ok_and(|s| s.success()), "kill -TERM the script");
    script.wait_for("stopped; data kept", STOP_WITHIN);
    let status = script
        .exit_within(STOP_WITHIN)
        .expect("the script exits once it has stopped the cluster");
    assert!(status.success(), "the script exited with {status}");
    // The stopped stores are whole: what a backup copies and checks.
    let data = dir.path().join("cluster/data");
    for shard in 0..SHARDS {
        for store in [format!("dispatcher-{shard}"), format!("timer-{shard}")] {
            let store = data.join(store).display().to_string();
            let report = cli_ok(&addr, &["data", "verify", &store], None);
            assert!(report.contains("0 problem"), "{store}: {report}");
        }
    }
    // Every process it started is gone: their ports are free again.
    for port in [nats, grpc].into_iter().chain(admin..admin + ADMIN_PORTS) {
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_ok(),
            "port {port} is still taken after the script stopped"
        );
    }
}
