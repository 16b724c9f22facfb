//! A running Cascade for one test, in one of the two modes users run:
//! - `Standalone`: `cascade standalone`, one process, in-process bus;
//! - `Distributed`: a real `nats-server`, `cascade-ingest`, and per shard one
//!   `cascade-dispatcher` and one `cascade-activation-timer` process.
//!
//! Both use two shards, so that hand-offs between shards are exercised in both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cascade_client::Client;

use crate::process::{Process, binary, free_port, wait_ready};

pub const SHARDS: u32 = 2;
const READY_WITHIN: Duration = Duration::from_secs(30);
const GRACE: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Standalone,
    Distributed,
}

/// A stateful part of a cluster, to crash and restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The process of dispatcher shard N (standalone: the whole process).
    Dispatcher(u32),
    /// The activation-timer process of shard N (distributed only).
    Timer(u32),
    /// The NATS server (distributed only).
    Nats,
}

/// A service process and the admin address it is checked on.
struct Service {
    process: Process,
    http: String,
    command: Box<dyn Fn() -> Command + Send + Sync>,
    /// Beyond the defaults, how long a restart may take to be ready, and a clean stop to end.
    patience: Duration,
}

impl Service {
    fn start(
        name: &str,
        http: String,
        logs: &Path,
        command: Box<dyn Fn() -> Command + Send + Sync>,
    ) -> Service {
        let mut process = Process::start(name, command(), logs);
        wait_ready(&mut process, &http, READY_WITHIN);
        Service {
            process,
            http,
            command,
            patience: Duration::ZERO,
        }
    }

    fn restart(&mut self, logs: &Path) {
        let name = self.process.name.clone();
        self.process = Process::start(&name, (self.command)(), logs);
        wait_ready(
            &mut self.process,
            &self.http,
            READY_WITHIN.max(self.patience),
        );
    }
}

pub struct Cluster {
    pub mode: Mode,
    pub grpc: String,
    nats: Option<Process>,
    nats_port: Option<u16>,
    /// The NATS server's configuration file, for its restarts.
    nats_config: Option<PathBuf>,
    /// Standalone: the one process. Distributed: ingest.
    front: Service,
    dispatchers: Vec<Service>,
    timers: Vec<Service>,
    /// `cascade-stage-worker` processes started with [`Cluster::start_stage_worker`].
    stage_workers: Vec<Service>,
    /// The standard `OTEL_*` variables given to `start_with`, for stage workers too.
    otel_env: Vec<(String, String)>,
    /// The environment of the cluster's services (distributed: with the NATS URL), for a
    /// `cascade-resource-manager` started later.
    service_env: Vec<(String, String)>,
    /// `cascade-resource-manager`, started with [`Cluster::start_resource_manager`].
    resource_manager: Option<Service>,
    /// Data and logs. Last, so that it is removed after the processes are dropped: a
    /// process dropped during a panic prints its log from here.
    dir: tempfile::TempDir,
}

/// A `cascade-stage-worker` process for one stage of a pipeline.
#[derive(Clone, Debug)]
pub struct StageWorkerSpec {
    pub pipeline: String,
    pub stage: String,
    pub last_stage: bool,
    /// `--handler`: `http://…`, `grpc://…` or `builtin:<name>`.
    pub handler: String,
    pub concurrency: u32,
    pub batch: u32,
}

impl Cluster {
    pub fn start(mode: Mode) -> Cluster {
        Cluster::start_with(mode, None, &[])
    }

    /// `config`: a settings file for every process (`--config`); `env`: extra `CASCADE__…`
    /// settings for every process (they win over the file), and standard `OTEL_*`
    /// variables, which stage workers started later get too.
    pub fn start_with(mode: Mode, config: Option<&Path>, env: &[(&str, &str)]) -> Cluster {
        Cluster::start_routed(mode, config, env, &|url| url.to_owned())
    }

    /// Like [`Cluster::start_with`]; distributed, the services reach NATS at
    /// `route(<the NATS server's URL>)` (a proxy in front of it).
    pub fn start_routed(
        mode: Mode,
        config: Option<&Path>,
        env: &[(&str, &str)],
        route: &dyn Fn(&str) -> String,
    ) -> Cluster {
        Cluster::start_inner(mode, config, env, route, None)
    }

    /// Distributed, over a NATS server started with the configuration file `nats_config`
    /// (its TLS and authorization, say); `env` tells the services how to reach it.
    pub fn start_with_nats_config(
        config: Option<&Path>,
        env: &[(&str, &str)],
        nats_config: &Path,
    ) -> Cluster {
        let route = |url: &str| url.to_owned();
        Cluster::start_inner(Mode::Distributed, config, env, &route, Some(nats_config))
    }

    fn start_inner(
        mode: Mode,
        config: Option<&Path>,
        env: &[(&str, &str)],
        route: &dyn Fn(&str) -> String,
        nats_config: Option<&Path>,
    ) -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = dir.path().to_path_buf();
        let data = dir.path().join("data");
        let grpc = format!("127.0.0.1:{}", free_port());
        // The harness's defaults first: a caller's own settings win.
        let mut defaults: Vec<(String, String)> = vec![
            ("CASCADE__CLUSTER__SHARDS".into(), SHARDS.to_string()),
            ("CASCADE__DATA__DIR".into(), data.display().to_string()),
            ("CASCADE__TELEMETRY__LOG_LEVEL".into(), "info".into()),
        ];
        defaults.retain(|(key, _)| !env.iter().any(|(given, _)| given == key));
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain(defaults)
            .collect();
        let otel_env: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| k.starts_with("OTEL_"))
            .cloned()
            .collect();
        let config: Vec<String> = config
            .map(|p| vec!["--config".to_string(), p.display().to_string()])
            .unwrap_or_default();
        match mode {
            Mode::Standalone => {
                let http = format!("127.0.0.1:{}", free_port());
                let (g, h, f) = (grpc.clone(), http.clone(), config.clone());
                let front = Service::start(
                    "cascade-standalone",
                    http,
                    &logs,
                    command("cascade", &env, move |c| {
                        c.args(["standalone", "--grpc-addr", &g, "--http-addr", &h]);
                        c.args(&f);
                    }),
                );
                Cluster {
                    mode,
                    grpc,
                    dir,
                    nats: None,
                    nats_port: None,
                    nats_config: None,
                    front,
                    dispatchers: Vec::new(),
                    timers: Vec::new(),
                    stage_workers: Vec::new(),
                    otel_env,
                    service_env: env.clone(),
                    resource_manager: None,
                }
            }
            Mode::Distributed => {
                let (nats, url) = start_nats_with(&logs, nats_config);
                let nats_port = url.rsplit(':').next().and_then(|p| p.parse().ok());
                env.push(("CASCADE__BUS__KIND".into(), "nats".into()));
                env.push(("CASCADE__BUS__URL".into(), route(&url)));
                let mut dispatchers = Vec::new();
                let mut timers = Vec::new();
                for shard in 0..SHARDS {
                    for (service, list) in [
                        ("dispatcher", &mut dispatchers),
                        ("activation-timer", &mut timers),
                    ] {
                        let http = format!("127.0.0.1:{}", free_port());
                        let mut env = env.clone();
                        let section = if service == "dispatcher" {
                            "DISPATCHER"
                        } else {
                            "TIMER"
                        };
                        env.push((format!("CASCADE__{section}__SHARDS"), shard.to_string()));
                        env.push(("CASCADE__HTTP__ADDR".into(), http.clone()));
                        let f = config.clone();
                        list.push(Service::start(
                            &format!("{service}-{shard}"),
                            http,
                            &logs,
                            command(&format!("cascade-{service}"), &env, move |c| {
                                c.args(&f);
                            }),
                        ));
                    }
                }
                let http = format!("127.0.0.1:{}", free_port());
                let (g, h, f) = (grpc.clone(), http.clone(), config);
                let front = Service::start(
                    "ingest",
                    http,
                    &logs,
                    command("cascade-ingest", &env, move |c| {
                        c.args(["--grpc-addr", &g, "--http-addr", &h]);
                        c.args(&f);
                    }),
                );
                Cluster {
                    mode,
                    grpc,
                    dir,
                    nats: Some(nats),
                    nats_port,
                    nats_config: nats_config.map(Path::to_path_buf),
                    front,
                    dispatchers,
                    timers,
                    stage_workers: Vec::new(),
                    otel_env,
                    service_env: env.clone(),
                    resource_manager: None,
                }
            }
        }
    }

    /// The HTTP admin address of `cascade standalone` (distributed: of ingest).
    pub fn http(&self) -> &str {
        &self.front.http
    }

    /// Every process's name and HTTP admin address: the front (`cascade-standalone`, or
    /// `ingest`), then `dispatcher-<shard>`, `activation-timer-<shard>` and the stage
    /// workers (`stage-worker-<n>-<stage>`).
    pub fn admin_addrs(&self) -> Vec<(String, String)> {
        std::iter::once(&self.front)
            .chain(&self.dispatchers)
            .chain(&self.timers)
            .chain(&self.stage_workers)
            .map(|s| (s.process.name.clone(), s.http.clone()))
            .collect()
    }

    /// The process ID of standalone, or of the gateway in the distributed mode.
    pub fn front_pid(&self) -> u32 {
        self.front.process.pid()
    }

    /// Every server process of the cluster by name (`cascade-standalone`; `ingest`,
    /// `dispatcher-0`, …, `nats-server`) and process ID, for their CPU time.
    pub fn processes(&self) -> Vec<(String, u32)> {
        let services = std::iter::once(&self.front)
            .chain(&self.dispatchers)
            .chain(&self.timers)
            .map(|s| &s.process);
        services
            .chain(&self.nats)
            .map(|p| (p.name.clone(), p.pid()))
            .collect()
    }

    /// What standalone, or the gateway in the distributed mode, logged so far.
    pub fn front_log(&self) -> String {
        self.front.process.log()
    }

    /// The front process's log once it holds `marker`, waiting for it up to `within`: a
    /// process may log what it did a moment after a client can see it done.
    pub fn front_log_once(&self, marker: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let log = self.front_log();
            if log.contains(marker) {
                return log;
            }
            assert!(Instant::now() < deadline, "never logged {marker:?}:\n{log}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The gateway's gRPC address (`127.0.0.1:<port>`).
    pub fn gateway(&self) -> &str {
        &self.grpc
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.grpc)
            .await
            .expect("connect to the gateway")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Lets the processes that hold state take up to `within` to be ready after a restart,
    /// and to end after a SIGTERM, for benchmarks whose stores are far larger than a test's.
    pub fn set_patience(&mut self, within: Duration) {
        self.front.patience = within;
        for dispatcher in &mut self.dispatchers {
            dispatcher.patience = within;
        }
    }

    /// SIGKILLs the process that owns dispatcher shard `shard` and starts it again on the
    /// same data (standalone: the whole process).
    pub fn crash_and_restart_dispatcher(&mut self, shard: u32) {
        self.kill_dispatcher(shard);
        self.restart_dispatcher(shard);
    }

    /// SIGKILLs the process that owns dispatcher shard `shard` (standalone: the whole
    /// process); [`Cluster::restart_dispatcher`] starts it again.
    pub fn kill_dispatcher(&mut self, shard: u32) {
        self.dispatcher(shard).process.kill();
    }

    /// Starts the process of dispatcher shard `shard` again on the same data, and waits
    /// until it is ready.
    pub fn restart_dispatcher(&mut self, shard: u32) {
        let logs = self.dir.path().to_path_buf();
        self.dispatcher(shard).restart(&logs);
    }

    /// Starts a second `cascade-dispatcher` process for shard `shard` (distributed only), on
    /// a data directory and an admin port of its own, without waiting for it: a
    /// misconfiguration the cluster must refuse.
    pub fn start_second_dispatcher(&self, shard: u32) -> Process {
        let mut command = (self.dispatchers[shard as usize].command)();
        command
            .env("CASCADE__DATA__DIR", self.dir.path().join("second-data"))
            .env("CASCADE__HTTP__ADDR", format!("127.0.0.1:{}", free_port()));
        Process::start(
            &format!("second-dispatcher-{shard}"),
            command,
            self.dir.path(),
        )
    }

    /// The process ID of the process that serves dispatcher shard `shard`.
    pub fn dispatcher_pid(&self, shard: u32) -> u32 {
        match self.mode {
            Mode::Standalone => self.front.process.pid(),
            Mode::Distributed => self.dispatchers[shard as usize].process.pid(),
        }
    }

    fn dispatcher(&mut self, shard: u32) -> &mut Service {
        match self.mode {
            Mode::Standalone => &mut self.front,
            Mode::Distributed => &mut self.dispatchers[shard as usize],
        }
    }

    /// Starts a `cascade-stage-worker` process against the gateway, in either mode, and
    /// waits until it is ready; returns its number for [`Cluster::kill_stage_worker`].
    pub fn start_stage_worker(&mut self, spec: &StageWorkerSpec) -> usize {
        let logs = self.dir.path().to_path_buf();
        let number = self.stage_workers.len();
        let http = format!("127.0.0.1:{}", free_port());
        let env: Vec<(String, String)> = [
            ("PIPELINE", spec.pipeline.clone()),
            ("STAGE", spec.stage.clone()),
            ("LAST_STAGE", spec.last_stage.to_string()),
            // Shutdown waits for a take's long poll to end: keep it short.
            ("POLL_WAIT", "1s".to_string()),
            ("TELEMETRY__LOG_LEVEL", "info".to_string()),
        ]
        .into_iter()
        .map(|(key, value)| (format!("CASCADE__STAGE_WORKER__{key}"), value))
        .chain(self.otel_env.iter().cloned())
        .collect();
        let args = [
            ("--gateway", format!("http://{}", self.grpc)),
            ("--handler", spec.handler.clone()),
            ("--concurrency", spec.concurrency.to_string()),
            ("--batch", spec.batch.to_string()),
            ("--http-addr", http.clone()),
        ];
        let worker = Service::start(
            &format!("stage-worker-{number}-{}", spec.stage),
            http,
            &logs,
            command("cascade-stage-worker", &env, move |c| {
                for (flag, value) in &args {
                    c.args([flag, value.as_str()]);
                }
            }),
        );
        self.stage_workers.push(worker);
        number
    }

    /// Distributed only: starts `cascade-resource-manager` on the cluster's NATS, with the
    /// services' settings and `env` (e.g. `CASCADE__RESOURCE_MANAGER__EXECUTOR=none`), and
    /// waits until it is ready; returns its admin address.
    pub fn start_resource_manager(&mut self, env: &[(&str, &str)]) -> String {
        assert_eq!(self.mode, Mode::Distributed, "standalone runs its own");
        let logs = self.dir.path().to_path_buf();
        let http = format!("127.0.0.1:{}", free_port());
        let mut all = self.service_env.clone();
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        all.push(("CASCADE__HTTP__ADDR".into(), http.clone()));
        let manager = Service::start(
            "resource-manager",
            http.clone(),
            &logs,
            command("cascade-resource-manager", &all, |_| {}),
        );
        self.resource_manager = Some(manager);
        http
    }

    /// The NATS server's URL (distributed only).
    pub fn nats_url(&self) -> Option<&str> {
        self.service_env
            .iter()
            .find(|(key, _)| key == "CASCADE__BUS__URL")
            .map(|(_, url)| url.as_str())
    }

    /// SIGKILLs `part` and starts it again (on the same data, NATS on the same port), and
    /// waits until it is ready.
    pub fn crash_and_restart(&mut self, part: Part) {
        match part {
            Part::Dispatcher(shard) => self.crash_and_restart_dispatcher(shard),
            Part::Timer(shard) => {
                assert_eq!(self.mode, Mode::Distributed, "standalone: use Dispatcher");
                let logs = self.dir.path().to_path_buf();
                let timer = &mut self.timers[shard as usize];
                timer.process.kill();
                timer.restart(&logs);
            }
            Part::Nats => {
                self.kill_nats();
                self.restart_nats();
            }
        }
    }

    /// SIGKILLs the NATS server (distributed only); [`Cluster::restart_nats`] starts it again.
    pub fn kill_nats(&mut self) {
        let mut nats = self.nats.take().expect("distributed: a NATS server");
        nats.kill();
    }

    /// Starts the NATS server again on the same port.
    pub fn restart_nats(&mut self) {
        let port = self.nats_port.expect("a NATS port");
        let config = self.nats_config.clone();
        self.nats = Some(start_nats_on(self.dir.path(), port, config.as_deref()));
    }

    /// SIGKILLs stage worker `number`; [`Cluster::restart_stage_worker`] starts it again.
    pub fn kill_stage_worker(&mut self, number: usize) {
        self.stage_workers[number].process.kill();
    }

    /// The process ID of stage worker `number` (to stop and continue it).
    pub fn stage_worker_pid(&self, number: usize) -> u32 {
        self.stage_workers[number].process.pid()
    }

    /// What stage worker `number` logged so far.
    pub fn stage_worker_log(&self, number: usize) -> String {
        self.stage_workers[number].process.log()
    }

    pub fn restart_stage_worker(&mut self, number: usize) {
        let logs = self.dir.path().to_path_buf();
        self.stage_workers[number].restart(&logs);
    }

    /// SIGTERM to every process, stage workers first (what they release must reach the
    /// shards), then the front; each must exit 0 within the grace period.
    pub fn stop(mut self) {
        for w in &mut self.stage_workers {
            let status = w.process.terminate(GRACE);
            assert!(status.success(), "{} exited with {status}", w.process.name);
        }
        if let Some(manager) = &mut self.resource_manager {
            let status = manager.process.terminate(GRACE);
            assert!(status.success(), "resource-manager exited with {status}");
        }
        let status = self.front.process.terminate(GRACE.max(self.front.patience));
        assert!(
            status.success(),
            "{} exited with {status}",
            self.front.process.name
        );
        for s in self.timers.iter_mut().chain(self.dispatchers.iter_mut()) {
            let status = s.process.terminate(GRACE);
            assert!(status.success(), "{} exited with {status}", s.process.name);
        }
        if let Some(mut nats) = self.nats.take() {
            nats.kill();
        }
    }

    /// Restarts the standalone process cleanly (SIGTERM, then start on the same data).
    pub fn restart_standalone(&mut self) {
        self.restart_standalone_with(|| {});
    }

    /// Like `restart_standalone`, running `while_stopped` between the stop and the start.
    pub fn restart_standalone_with(&mut self, while_stopped: impl FnOnce()) {
        assert_eq!(self.mode, Mode::Standalone);
        let status = self.front.process.terminate(GRACE.max(self.front.patience));
        assert!(status.success(), "standalone exited with {status}");
        while_stopped();
        let logs = self.dir.path().to_path_buf();
        self.front.restart(&logs);
    }
}

fn command(
    bin: &str,
    env: &[(String, String)],
    args: impl Fn(&mut Command) + Send + Sync + 'static,
) -> Box<dyn Fn() -> Command + Send + Sync> {
    let path = binary(bin);
    let env = env.to_vec();
    Box::new(move || {
        let mut c = Command::new(&path);
        c.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        args(&mut c);
        c
    })
}

/// A real `nats-server` on a free loopback port. Fails (never skips) when it is missing.
pub fn start_nats(logs: &Path) -> (Process, String) {
    start_nats_with(logs, None)
}

/// [`start_nats`] with a configuration file, if any.
fn start_nats_with(logs: &Path, config: Option<&Path>) -> (Process, String) {
    let port = free_port();
    (
        start_nats_on(logs, port, config),
        format!("nats://127.0.0.1:{port}"),
    )
}

/// A real `nats-server` on loopback port `port` (its flags win over `config`'s), once it
/// accepts connections.
fn start_nats_on(logs: &Path, port: u16, config: Option<&Path>) -> Process {
    let found = Command::new("nats-server").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "nats-server is not installed: run ./scripts/test.sh, which installs it"
    );
    let mut command = Command::new("nats-server");
    if let Some(config) = config {
        command.arg("-c").arg(config);
    }
    command.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
    let mut nats = Process::start("nats-server", command, logs);
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = nats.exited() {
            panic!("nats-server exited ({status}); log:\n{}", nats.log());
        }
        assert!(
            started.elapsed() < READY_WITHIN,
            "nats-server did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    nats
}
