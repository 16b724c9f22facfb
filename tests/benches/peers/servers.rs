//! The peers' servers, from Debian's packages, started on free loopback ports in a scratch
//! directory and configured for durability as a user comparing them would:
//! - Redis with its append-only file fsynced on every write (`appendfsync always`);
//! - PostgreSQL with `fsync` and `synchronous_commit = on` (the defaults, said explicitly);
//!   run as the `postgres` user when this process is root, as PostgreSQL requires;
//! - NATS JetStream with file storage (the Debian server, 2.9, does not fsync each message).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cascade_e2e::process::{Process, cpu_ticks, free_port};

use crate::BoxError;

/// How long a server may take to accept connections.
const START_WITHIN: Duration = Duration::from_secs(60);

/// A peer's server process and where it listens.
pub struct Server {
    pub process: Process,
    pub port: u16,
    /// Its processes are its children too (PostgreSQL's backends).
    pub with_children: bool,
}

impl Server {
    /// The CPU time of each of the server's processes (for PostgreSQL, its backends too),
    /// in clock ticks, by pid.
    pub fn cpu_ticks(&self) -> Vec<(u32, u64)> {
        let pid = self.process.pid();
        let mut pids = vec![pid];
        if self.with_children {
            pids.extend(children(pid));
        }
        pids.into_iter()
            .filter_map(|pid| Some((pid, cpu_ticks(pid)?)))
            .collect()
    }
}

/// The processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // Field 4, after the parenthesised name: the parent's pid.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            parent == Some(pid)
        })
        .collect()
}

/// Waits until something accepts connections on `port`, or the process exits.
fn wait_listening(process: &mut Process, port: u16, what: &str) -> Result<(), BoxError> {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = process.exited() {
            return Err(format!("{what} exited ({status}):\n{}", process.log()).into());
        }
        if started.elapsed() > START_WITHIN {
            return Err(format!("{what} did not start:\n{}", process.log()).into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `name` on the `PATH`, or an error saying which package brings it.
fn on_path(name: &str, package: &str) -> Result<PathBuf, BoxError> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            format!("{name} is missing: install Debian's {package} (scripts/test.sh does)").into()
        })
}

pub fn start_redis(dir: &Path) -> Result<Server, BoxError> {
    let binary = on_path("redis-server", "redis-server")?;
    let port = free_port();
    let data = dir.join("redis");
    std::fs::create_dir_all(&data)?;
    let mut command = Command::new(binary);
    command.args(["--bind", "127.0.0.1", "--port", &port.to_string()]);
    command.args([
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ]);
    command.arg("--dir").arg(&data);
    let mut process = Process::start("redis-server", command, dir);
    wait_listening(&mut process, port, "redis-server")?;
    Ok(Server {
        process,
        port,
        with_children: false,
    })
}

/// The directory of Debian's PostgreSQL server binaries (the newest installed).
fn postgres_bin() -> Result<PathBuf, BoxError> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "PostgreSQL is missing: install Debian's postgresql (scripts/test.sh does)")?
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions
        .pop()
        .ok_or_else(|| "no PostgreSQL server under /usr/lib/postgresql: install postgresql".into())
}

/// `binary` as the `postgres` user when this process is root (PostgreSQL refuses root):
/// `setpriv` execs it, so the server's pid is the one started.
fn as_postgres_user(binary: &Path, root: bool) -> Command {
    match root {
        true => {
            let mut command = Command::new("setpriv");
            command.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ]);
            command.arg(binary);
            command
        }
        false => Command::new(binary),
    }
}

/// Whether this process runs as root (its real user ID, from `/proc`).
fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        == Some("0")
}

pub fn start_postgres(dir: &Path) -> Result<Server, BoxError> {
    let bin = postgres_bin()?;
    let root = is_root();
    let data = dir.join("postgres");
    let sockets = dir.join("postgres-sockets");
    for made in [&data, &sockets] {
        std::fs::create_dir_all(made)?;
        if root {
            let chown = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(made)
                .status()?;
            if !chown.success() {
                return Err("chown postgres:postgres failed (is there a postgres user?)".into());
            }
        }
    }
    let mut initdb = as_postgres_user(&bin.join("initdb"), root);
    initdb
        .args(["-D"])
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"]);
    let made = initdb.output()?;
    if !made.status.success() {
        return Err(format!("initdb: {}", String::from_utf8_lossy(&made.stderr)).into());
    }
    let port = free_port();
    let mut command = as_postgres_user(&bin.join("postgres"), root);
    command.arg("-D").arg(&data);
    command.args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"]);
    command
        .arg("-c")
        .arg(format!("unix_socket_directories={}", sockets.display()));
    for setting in [
        "fsync=on",
        "synchronous_commit=on",
        "max_connections=400",
        "shared_buffers=256MB",
    ] {
        command.args(["-c", setting]);
    }
    let mut process = Process::start("postgres", command, dir);
    wait_listening(&mut process, port, "postgres")?;
    Ok(Server {
        process,
        port,
        with_children: true,
    })
}

pub fn start_nats_jetstream(dir: &Path) -> Result<Server, BoxError> {
    let binary = on_path("nats-server", "nats-server")?;
    let port = free_port();
    let store = dir.join("jetstream");
    let mut command = Command::new(binary);
    command.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"]);
    command.arg(&store);
    let mut process = Process::start("nats-jetstream", command, dir);
    wait_listening(&mut process, port, "nats-server")?;
    Ok(Server {
        process,
        port,
        with_children: false,
    })
}
