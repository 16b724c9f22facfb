//! One child process of a test: its log goes to a file (printed when the test fails), it is
//! SIGKILLed when dropped so a failing test never leaves servers behind.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The path of a workspace binary of this crate's own profile: the debug build for the tests
/// (`cargo build --bins`), the release build for the benchmarks (`cargo build --release
/// --bins`), so that a benchmark never measures unoptimised servers.
pub fn binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let (profile, build) = match cfg!(debug_assertions) {
        true => ("debug", "cargo build --bins`; scripts/test.sh does"),
        false => ("release", "cargo build --release --bins`"),
    };
    let path = target.join(profile).join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first (`{build})",
        path.display()
    );
    path
}

/// The name (field 2) and utime + stime (fields 14 and 15, in clock ticks) of a
/// `/proc/…/stat` line.
pub fn stat_ticks(stat: &str) -> Option<(String, u64)> {
    // The name is in parentheses and may hold spaces; the fields after it are plain.
    let (head, after_name) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

/// Clock ticks (USER_HZ) per second, the unit of [`cpu_ticks`] on Linux.
pub const TICKS_PER_SECOND: f64 = 100.0;

/// The CPU time process `pid` has used, in clock ticks (USER_HZ, 100 a second on Linux).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_ticks(&stat).map(|(_, ticks)| ticks)
}

/// The resident memory of process `pid`, in bytes (Linux).
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

/// A loopback port nothing listens on right now, for a child process to listen on later.
///
/// Picked below the kernel's ephemeral range (`ip_local_port_range`): between the pick and the
/// child's bind, any outgoing loopback connection (the tests open many) may be given an
/// ephemeral port, and did take one once ("Address already in use"). Picks go round the range
/// from a random start, so the tests of one process never pick the same port twice.
pub fn free_port() -> u16 {
    const LOWEST: u32 = 10_000;
    /// How many ports lie below the ephemeral range, and the next pick.
    static PICKS: OnceLock<(u32, AtomicU32)> = OnceLock::new();
    let (span, next) = PICKS.get_or_init(|| {
        let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768);
        let span = ephemeral_low.saturating_sub(LOWEST);
        (span, AtomicU32::new(fastrand::u32(..span.max(1))))
    });
    let span = *span;
    for _ in 0..span {
        let port = LOWEST + next.fetch_add(1, Ordering::Relaxed) % span;
        if let Ok(port) = u16::try_from(port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
    // No room below the ephemeral range on this machine: take an ephemeral port after all.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The first of `count` consecutive free ports (as [`free_port`] picks them), for a program
/// that numbers its ports from one base.
pub fn free_port_run(count: u16) -> u16 {
    for _ in 0..1_000 {
        let first = free_port();
        if (1..count).all(|offset| free_port() == first.wrapping_add(offset)) {
            return first;
        }
    }
    panic!("no {count} consecutive free loopback ports");
}

pub struct Process {
    pub name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `command` with its stdout and stderr appended to `log_dir/<name>.log` (a
    /// restarted process's log follows its previous run's).
    pub fn start(name: &str, mut command: Command, log_dir: &Path) -> Process {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open the log file");
        let err = out.try_clone().expect("clone the log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Process {
            name: name.to_string(),
            child: Some(child),
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits up to `grace` for the exit.
    pub fn terminate(&mut self, grace: Duration) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.name);
        let deadline = Instant::now() + grace;
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {grace:?} of SIGTERM; log:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: a crash, nothing flushed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `within` for it to exit on its own.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                started.elapsed() < within,
                "{} still running after {within:?}; log:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("---- log of {} ----\n{}", self.name, self.log());
        }
        self.kill();
    }
}

/// GETs `http://addr/path` (HTTP/1.0, so the body ends with the connection) and returns
/// the status code and the body, or `None` if nothing answers within 5 s.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    http_get_with(addr, path, &[]).map(|(status, _, body)| (status, body))
}

/// `GET http://addr/path` with extra request `headers`: the status, the response's head
/// (status line and headers) and its body.
pub fn http_get_with(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, head.to_owned(), body.to_owned()))
}

/// The body of `GET http://addr/path` if it answers 200.
pub fn http_body(addr: &str, path: &str) -> Option<String> {
    http_get(addr, path).and_then(|(status, body)| (status == 200).then_some(body))
}

/// The status code of `GET http://addr/path`, or `None` if nothing answers.
pub fn http_status(addr: &str, path: &str) -> Option<u16> {
    http_get(addr, path).map(|(status, _)| status)
}

/// Waits until `addr` answers 200 on `/readyz`.
pub fn wait_ready(process: &mut Process, http_addr: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if http_status(http_addr, "/readyz") == Some(200) {
            return started.elapsed();
        }
        if let Some(status) = process.exited() {
            panic!(
                "{} exited ({status}) before it was ready; log:\n{}",
                process.name,
                process.log()
            );
        }
        assert!(
            started.elapsed() < within,
            "{} not ready within {within:?}; log:\n{}",
            process.name,
            process.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
