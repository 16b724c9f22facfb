//! The gRPC port's connections, before HTTP/2 sees them, bounded so that one client cannot
//! take what every other client and the process itself need:
//! - at most `grpc.max_connections` at once, and never so many that the process runs out of
//!   file descriptors: the cap stays [`FD_RESERVE`] below the descriptor limit (raised to
//!   its hard maximum at start), which leaves the admin port (health checks, metrics), the
//!   bus and the store theirs. A connection past the cap is closed at once, rather than left
//!   waiting in the kernel's queue where it would only time out;
//! - a connection that sends nothing within `grpc.handshake_timeout` (not even the HTTP/2
//!   preface) is closed, so idle sockets cannot hold the places.
//!
//! What an HTTP/2 connection may then cost is bounded by the server's settings
//! (`server.rs`): streams per connection, message size, keepalive.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// File descriptors kept for everything but client connections.
pub(crate) const FD_RESERVE: u64 = 256;
/// After a failed accept (out of descriptors, say), before the next.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// One warning per this many connections refused, so a flood does not flood the log.
const WARN_EVERY: u64 = 1000;

/// The connection limits of the gRPC port.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionLimits {
    pub max_connections: usize,
    pub handshake_timeout: Duration,
}

impl ConnectionLimits {
    /// `grpc.max_connections`, lowered to fit the process's descriptor limit (raised first
    /// to its hard maximum).
    pub fn new(wanted: u32, handshake_timeout: Duration) -> ConnectionLimits {
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
            handshake_timeout,
        }
    }
}

/// The accepted connections of `listener`, within `limits`.
pub(crate) fn incoming(
    listener: TcpListener,
    limits: ConnectionLimits,
) -> impl Stream<Item = io::Result<Guarded>> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let refused = Arc::new(AtomicU64::new(0));
    futures::stream::unfold(listener, move |listener| {
        let (permits, refused) = (Arc::clone(&permits), Arc::clone(&refused));
        async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "ingest.accept_failed");
                        tokio::time::sleep(ACCEPT_PAUSE).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                    if refused.fetch_add(1, Ordering::Relaxed) % WARN_EVERY == 0 {
                        tracing::warn!(
                            max_connections = limits.max_connections,
                            peer = ?stream.peer_addr().ok(),
                            refused = refused.load(Ordering::Relaxed),
                            "ingest.connections.full: closing a new connection"
                        );
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let guarded = Guarded::new(stream, permit, limits.handshake_timeout);
                return Some((Ok(guarded), listener));
            }
        }
    })
}

/// A client connection: holds its place under the cap until dropped, and fails its reads
/// once the handshake timeout passes with nothing received.
pub(crate) struct Guarded {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    /// Until the first bytes arrive.
    handshake: Option<Pin<Box<Sleep>>>,
}

impl Guarded {
    fn new(stream: TcpStream, permit: OwnedSemaphorePermit, timeout: Duration) -> Guarded {
        Guarded {
            stream,
            _permit: permit,
            handshake: Some(Box::pin(tokio::time::sleep_until(Instant::now() + timeout))),
        }
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
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
