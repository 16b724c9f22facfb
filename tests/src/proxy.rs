//! A TCP proxy of the test's own, put between the services and NATS to play network
//! faults: added latency, a stall (bytes held, as when packets are lost and TCP keeps
//! retransmitting), and a cut of every open connection (as when a link or a NAT entry goes
//! away). Connections made after a cut are served again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy does to the bytes it forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    Pass,
    /// Each chunk is forwarded this late (in order).
    Delay(Duration),
    /// Nothing is forwarded until the condition changes; what was read waits.
    Stall,
}

pub struct Proxy {
    addr: String,
    condition: watch::Sender<Condition>,
    /// Bumped by [`Proxy::cut`]: each connection ends when it changes.
    cuts: watch::Sender<u64>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let addr = listener.local_addr().expect("bound address").to_string();
        let (condition, _) = watch::channel(Condition::Pass);
        let (cuts, _) = watch::channel(0);
        let upstream = upstream.to_owned();
        let (conditions, cut_seen) = (condition.clone(), cuts.clone());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue; // The upstream is down: the client sees its connection close.
                };
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(forward(
                    client,
                    server,
                    conditions.subscribe(),
                    cut_seen.subscribe(),
                ));
            }
        });
        Proxy {
            addr,
            condition,
            cuts,
            accepted,
            task,
        }
    }

    /// The proxy's `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Connections made through to the upstream so far (a cut is followed by reconnections).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn set(&self, condition: Condition) {
        self.condition.send_replace(condition);
    }

    /// Closes every connection open now.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Pumps both ways until either side closes or a cut comes.
async fn forward(
    client: TcpStream,
    server: TcpStream,
    condition: watch::Receiver<Condition>,
    mut cuts: watch::Receiver<u64>,
) {
    // Subscribed at accept: a cut from then on ends this connection too.
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pump(client_read, server_write, condition.clone()) => {}
        () = pump(server_read, client_write, condition) => {}
        _ = cuts.changed() => {}
    }
}

/// Reads chunks as they come and writes each once the condition lets it: with a delay,
/// `delay` after it was read (so latency is added, not a limit on throughput).
async fn pump(
    mut from: impl AsyncReadExt + Unpin + Send + 'static,
    mut to: impl AsyncWriteExt + Unpin,
    mut condition: watch::Receiver<Condition>,
) {
    let (chunks, mut read) = mpsc::channel::<(Instant, Vec<u8>)>(1024);
    let _reader = AbortOnDrop(tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buffer).await {
            if chunks
                .send((Instant::now(), buffer[..n].to_vec()))
                .await
                .is_err()
            {
                return;
            }
        }
    }));
    while let Some((read_at, chunk)) = read.recv().await {
        loop {
            let now = *condition.borrow_and_update();
            match now {
                Condition::Pass => break,
                Condition::Delay(by) => {
                    tokio::time::sleep_until(read_at + by).await;
                    break;
                }
                Condition::Stall => {
                    if condition.changed().await.is_err() {
                        break;
                    }
                }
            }
        }
        if to.write_all(&chunk).await.is_err() {
            break;
        }
    }
}

/// Ends the reader (and closes its half of the socket) when the pump ends or is dropped
/// by a cut.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
