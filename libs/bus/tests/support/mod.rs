//! A real `nats-server` process for the tests: started on a free loopback port, killed on drop.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cascade_bus::Bus;
use tokio::time::Instant;

/// How long a freshly started server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(10);

pub struct NatsServer {
    child: Child,
    addr: SocketAddr,
    // Holds the server's log until the server is gone.
    _dir: tempfile::TempDir,
}

impl NatsServer {
    /// Starts a server, retrying on another port if the one picked was taken in the meantime.
    pub async fn start() -> NatsServer {
        let mut failures = Vec::new();
        for _ in 0..3 {
            match NatsServer::try_start().await {
                Ok(server) => return server,
                Err(failure) => failures.push(failure),
            }
        }
        panic!("nats-server did not start:\n{}", failures.join("\n---\n"));
    }

    pub fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    pub async fn connect(&self) -> Bus {
        Bus::connect_nats(
            &cascade_bus::NatsConnect::url(&self.url()),
            "cascade-bus-test",
        )
        .await
        .expect("connect to the test nats-server")
    }

    async fn try_start() -> Result<NatsServer, String> {
        let port = free_port();
        let dir = tempfile::tempdir().expect("temp dir");
        let log_path = dir.path().join("nats-server.log");
        let log = File::create(&log_path).expect("create log file");
        let spawned = Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
                "nats-server is not on PATH: run ./scripts/test.sh, which installs it \
                 (apt-get install -y nats-server)"
            ),
            Err(err) => panic!("could not start nats-server: {err}"),
        };
        let mut server = NatsServer {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _dir: dir,
        };
        server.wait_until_ready(&log_path).await?;
        Ok(server)
    }

    /// Waits until the port accepts connections, or fails early if the process exited.
    async fn wait_until_ready(&mut self, log_path: &Path) -> Result<(), String> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll nats-server") {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                return Err(format!("nats-server exited with {status}; its log:\n{log}"));
            }
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                return Err(format!(
                    "nats-server did not accept connections on {} within {START_DEADLINE:?}; its log:\n{log}",
                    self.addr
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        // Killing an already exited process fails harmlessly; wait() reaps it either way.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that was free a moment ago; the server retries on another if it was taken since.
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}
