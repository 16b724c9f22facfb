//! The `cascade` command run as a user runs it, against a cluster's gateway: its output in
//! either mode, its exit code, what it wrote to standard error.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::Cluster;
use crate::process::binary;

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `cascade <args>` with `CASCADE_ADDR` set to the cluster's gateway, standard input
/// `stdin`, and `RUST_BACKTRACE=1` (so a test sees if any path still prints a backtrace).
pub fn run(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> Run {
    run_at(&format!("http://{}", cluster.grpc), args, stdin)
}

pub fn run_at(addr: &str, args: &[&str], stdin: Option<&str>) -> Run {
    run_with(addr, args, stdin, &[])
}

/// [`run_at`] with more environment variables (`CASCADE_TOKEN`, say) and no input.
pub fn run_env(addr: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    run_with(addr, args, None, env)
}

/// `cascade <args>` at `addr`, with `stdin` as its input and more environment variables.
pub fn run_with(addr: &str, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(binary("cascade"))
        .args(args)
        .envs(env.iter().copied())
        .env("CASCADE_ADDR", addr)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cascade");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("cascade output");
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `cascade <args> --json`, which must succeed: its lines parsed as JSON.
pub fn json(cluster: &Cluster, args: &[&str]) -> Vec<serde_json::Value> {
    json_with(cluster, args, None)
}

pub fn json_with(cluster: &Cluster, args: &[&str], stdin: Option<&str>) -> Vec<serde_json::Value> {
    let args: Vec<&str> = args.iter().copied().chain(["--json"]).collect();
    let out = run(cluster, &args, stdin);
    assert_eq!(out.code, 0, "cascade {args:?} failed: {}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

/// `cascade <args>` for a person, which must succeed: what it printed.
pub fn text(cluster: &Cluster, args: &[&str]) -> String {
    let out = run(cluster, args, None);
    assert_eq!(out.code, 0, "cascade {args:?} failed: {}", out.stderr);
    out.stdout
}

/// `cascade <args>`, which must fail with `code`: its one line of standard error, checked to
/// have the shape every failure has (`error: …`, no backtrace).
pub fn refused(cluster: &Cluster, args: &[&str], code: i32) -> String {
    failed(run(cluster, args, None), args, code)
}

pub fn failed(out: Run, args: &[&str], code: i32) -> String {
    assert_eq!(
        out.code, code,
        "cascade {args:?}: exit code\nstdout: {}\nstderr: {}",
        out.stdout, out.stderr
    );
    assert!(
        out.stderr.starts_with("error: ") && !out.stderr.contains("stack backtrace"),
        "cascade {args:?}: not one error line: {}",
        out.stderr
    );
    out.stderr
}
