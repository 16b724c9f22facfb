//! The gRPC port's connections, before HTTP/2 sees them, bounded so that one client cannot
//! take what every other client and the process itself need:
//! - at most `grpc.max_connections` at once, and never so many that the process runs out of
//!   file descriptors: the cap stays [`FD_RESERVE`] below the descriptor limit (raised to
//!   its hard maximum at start), which leaves the admin port (health checks, metrics), the
//!   bus and the store theirs. A connection past the cap is closed at once, rather than left
//!   waiting in the kernel's queue where it would only time out;
//! - when `grpc.max_connections_per_peer` is set, at most that many from one IP address,
//!   closed at once likewise ([`PeerSlots`]);
//! - a connection that sends nothing within `grpc.handshake_timeout` (not even the HTTP/2
//!   preface) is closed, so idle sockets cannot hold the places; with TLS, its handshake
//!   must end within that time too, and runs on a task of its own;
//! - a client's connection with no request in flight for `grpc.idle_timeout` is closed
//!   (keepalive pings answered do not count as requests).
//!
//! Each connection tells its requests who is at the other end ([`Peer`]): its address and
//! the names of a client certificate the handshake verified. `cascade standalone`'s own
//! clients reach the gateway without leaving the process ([`mod@crate::in_process`]).
//!
//! What an HTTP/2 connection may then cost is bounded by the server's settings
//! (`server.rs`): streams per connection, message size, keepalive.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use cascade_security::tls;
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::{Instant, Sleep};
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

use crate::in_process::InProcessListener;
use crate::peer::Peer;
use crate::peer_slots::{PeerSlot, PeerSlots};

/// File descriptors kept for everything but client connections.
pub(crate) const FD_RESERVE: u64 = 256;
/// After a failed accept (out of descriptors, say), before the next.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// One warning per this many connections refused, so a flood does not flood the log.
const WARN_EVERY: u64 = 1000;
/// Connections accepted (handshakes done) and not yet taken by the server.
pub(crate) const ACCEPTED_QUEUE: usize = 64;

/// The connection limits of the gRPC port.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    pub max_connections: usize,
    /// 0: none of its own.
    pub max_per_peer: usize,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ConnectionLimits {
    /// `grpc.max_connections`, lowered to fit the process's descriptor limit (raised first
    /// to its hard maximum).
    pub fn new(
        wanted: u32,
        per_peer: u32,
        handshake_timeout: Duration,
        idle_timeout: Duration,
    ) -> ConnectionLimits {
        let descriptors = raise_descriptor_limit();
        let fit = descriptors.saturating_sub(FD_RESERVE).max(1);
        let max_connections = u64::from(wanted).min(fit);
        if max_connections < u64::from(wanted) {
            tracing::warn!(
                descriptors,
                wanted,
                max_connections,
                "ingest.connections.capped: the descriptor limit allows fewer client connections than grpc.max_connections"
            );
        }
        ConnectionLimits {
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            max_per_peer: usize::try_from(per_peer).unwrap_or(usize::MAX),
            handshake_timeout,
            idle_timeout,
        }
    }
}

/// Where the gateway's connections come from: its TCP port and, in `cascade standalone`,
/// the process's own clients.
pub struct Listeners {
    pub tcp: TcpListener,
    pub in_process: Option<InProcessListener>,
}

impl From<TcpListener> for Listeners {
    fn from(tcp: TcpListener) -> Listeners {
        Listeners {
            tcp,
            in_process: None,
        }
    }
}

/// The connections of `listeners`: TCP within `limits`, through a TLS handshake when `tls`
/// is set (each on a task of its own, so a slow one holds no other back).
pub(crate) fn incoming(
    listeners: Listeners,
    limits: ConnectionLimits,
    tls: Option<Arc<tls::Reloading>>,
) -> impl Stream<Item = io::Result<Connection>> {
    let (accepted, connections) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(accept_tcp(listeners.tcp, limits, tls, accepted.clone()));
    if let Some(mut streams) = listeners.in_process.map(InProcessListener::into_streams) {
        tokio::spawn(async move {
            while let Some(stream) = streams.recv().await {
                let connection =
                    Connection::new(Transport::InProcess(stream), Peer::in_process(), None);
                if accepted.send(connection).await.is_err() {
                    return;
                }
            }
        });
    }
    futures::stream::unfold(connections, |mut connections| async move {
        let connection = connections.recv().await?;
        Some((Ok(connection), connections))
    })
}

/// Accepts TCP connections until the server stops taking them.
async fn accept_tcp(
    listener: TcpListener,
    limits: ConnectionLimits,
    tls: Option<Arc<tls::Reloading>>,
    accepted: mpsc::Sender<Connection>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let peer_slots = (limits.max_per_peer > 0).then(|| PeerSlots::new(limits.max_per_peer));
    let (mut refused, mut refused_per_peer): (u64, u64) = (0, 0);
    loop {
        let stream = tokio::select! {
            () = accepted.closed() => return,
            result = listener.accept() => match result {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "ingest.accept_failed");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            if refused.is_multiple_of(WARN_EVERY) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    peer = ?stream.peer_addr().ok(),
                    refused = refused + 1,
                    "ingest.connections.full: closing a new connection"
                );
            }
            refused += 1;
            continue;
        };
        let slot = match (&peer_slots, stream.peer_addr()) {
            (Some(slots), Ok(addr)) => match slots.take(addr.ip()) {
                Some(slot) => Some(slot),
                None => {
                    if refused_per_peer.is_multiple_of(WARN_EVERY) {
                        tracing::warn!(
                            max_connections_per_peer = slots.max(),
                            peer = %addr.ip(),
                            refused = refused_per_peer + 1,
                            "ingest.connections.peer_full: closing a new connection"
                        );
                    }
                    refused_per_peer += 1;
                    continue;
                }
            },
            _ => None,
        };
        let _ = stream.set_nodelay(true);
        let guarded = Guarded::new(stream, permit, slot, limits.handshake_timeout);
        match &tls {
            None => {
                let peer = Peer::remote(guarded.stream.peer_addr().ok(), Vec::new());
                let connection =
                    Connection::new(Transport::Tcp(guarded), peer, Some(limits.idle_timeout));
                if accepted.send(connection).await.is_err() {
                    return;
                }
            }
            Some(tls) => {
                let handshake = tls.acceptor().accept(guarded);
                let (accepted, timeout) = (accepted.clone(), limits.handshake_timeout);
                let idle = limits.idle_timeout;
                tokio::spawn(async move {
                    match tokio::time::timeout(timeout, handshake).await {
                        Ok(Ok(stream)) => {
                            let peer = tls_peer(&stream);
                            let connection =
                                Connection::new(Transport::Tls(Box::new(stream)), peer, Some(idle));
                            let _ = accepted.send(connection).await;
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "ingest.tls.handshake_failed"),
                        Err(_) => tracing::debug!("ingest.tls.handshake_timed_out"),
                    }
                });
            }
        }
    }
}

/// The peer of a TLS connection: its address and the names of the client certificate the
/// handshake verified.
fn tls_peer(stream: &TlsStream<Guarded>) -> Peer {
    let (guarded, session) = stream.get_ref();
    let names = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(tls::certificate_names)
        .unwrap_or_default();
    Peer::remote(guarded.stream.peer_addr().ok(), names)
}

/// A connection of the gateway: its stream, who is at the other end, and, for a client's,
/// the time it may stay without a request before it is closed.
pub(crate) struct Connection {
    stream: Transport,
    peer: Peer,
    idle: Option<(Duration, Pin<Box<Sleep>>)>,
}

enum Transport {
    Tcp(Guarded),
    Tls(Box<TlsStream<Guarded>>),
    InProcess(DuplexStream),
}

impl Connection {
    fn new(stream: Transport, peer: Peer, idle_timeout: Option<Duration>) -> Connection {
        let idle = idle_timeout.map(|timeout| {
            let sleep = Box::pin(tokio::time::sleep(timeout));
            (timeout, sleep)
        });
        Connection { stream, peer, idle }
    }

    /// Whether the connection has had no request for its idle timeout; if not, the timer is
    /// set to when it could have. A request starts on the task that reads the connection
    /// (HTTP/2 hands it to the service right after reading it), so none can start while this
    /// runs; one that ends meanwhile only makes the connection idler.
    fn idle_too_long(&mut self, cx: &mut Context<'_>) -> bool {
        let Some((timeout, sleep)) = &mut self.idle else {
            return false;
        };
        while sleep.as_mut().poll(cx).is_ready() {
            match self.peer.idle_since() {
                Some(since) if since + *timeout <= Instant::now() => return true,
                Some(since) => sleep.as_mut().reset(since + *timeout),
                // A request in flight: look again a timeout later.
                None => sleep.as_mut().reset(Instant::now() + *timeout),
            }
        }
        false
    }
}

impl Connected for Connection {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

/// `$self`'s stream, whatever the kind of connection, pinned for an I/O call.
macro_rules! each {
    ($self:ident, $stream:ident => $call:expr) => {
        match &mut $self.get_mut().stream {
            Transport::Tcp($stream) => $call,
            Transport::Tls($stream) => $call,
            Transport::InProcess($stream) => $call,
        }
    };
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // The server always waits to read, so this runs when the timer fires.
        if self.idle_too_long(cx) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no request within grpc.idle_timeout",
            )));
        }
        each!(self, stream => Pin::new(stream).poll_read(cx, buf))
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        each!(self, stream => Pin::new(stream).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, stream => Pin::new(stream).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, stream => Pin::new(stream).poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self, stream => Pin::new(stream).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Transport::Tcp(stream) => stream.is_write_vectored(),
            Transport::Tls(stream) => stream.is_write_vectored(),
            Transport::InProcess(stream) => stream.is_write_vectored(),
        }
    }
}

/// A client connection: holds its place under the cap until dropped, and fails its reads
/// once the handshake timeout passes with nothing received.
pub(crate) struct Guarded {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    _peer_slot: Option<PeerSlot>,
    /// Until the first bytes arrive.
    handshake: Option<Pin<Box<Sleep>>>,
}

impl Guarded {
    fn new(
        stream: TcpStream,
        permit: OwnedSemaphorePermit,
        peer_slot: Option<PeerSlot>,
        timeout: Duration,
    ) -> Guarded {
        Guarded {
            stream,
            _permit: permit,
            _peer_slot: peer_slot,
            handshake: Some(Box::pin(tokio::time::sleep_until(Instant::now() + timeout))),
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        let Some(deadline) = self.handshake.as_mut() else {
            return read;
        };
        match read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.handshake = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "nothing received within grpc.handshake_timeout",
                )))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Raises the soft limit on open files to the hard one; returns the limit now in force.
fn raise_descriptor_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum
        && limit.current.is_some_and(|soft| soft < hard)
    {
        limit.current = Some(hard);
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %e, "ingest.descriptor_limit.raise_failed");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
