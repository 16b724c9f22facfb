//! Who is at the other end of a connection, and what the connection holds, as each request
//! on it sees it: tonic puts a connection's `ConnectInfo` into the extensions of every
//! request it carries, and the connection itself keeps the same [`Peer`] to tell when it
//! has been idle too long.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

#[derive(Clone, Debug)]
pub(crate) struct Peer(Arc<PeerInfo>);

#[derive(Debug)]
struct PeerInfo {
    addr: Option<SocketAddr>,
    /// The DNS names of the client certificate the TLS handshake verified.
    certificate_names: Vec<String>,
    /// A connection from inside this process (`cascade standalone`'s stage workers).
    in_process: bool,
    opened: Instant,
    /// Requests whose responses are not yet all sent.
    in_flight: AtomicUsize,
    /// When a request last started or ended, in milliseconds since `opened`.
    last_active_ms: AtomicU64,
    /// Bytes of responses this connection's client has not read yet.
    unread: AtomicUsize,
}

impl Peer {
    pub fn remote(addr: Option<SocketAddr>, certificate_names: Vec<String>) -> Peer {
        Peer::new(addr, certificate_names, false)
    }

    pub fn in_process() -> Peer {
        Peer::new(None, Vec::new(), true)
    }

    fn new(addr: Option<SocketAddr>, certificate_names: Vec<String>, in_process: bool) -> Peer {
        Peer(Arc::new(PeerInfo {
            addr,
            certificate_names,
            in_process,
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_active_ms: AtomicU64::new(0),
            unread: AtomicUsize::new(0),
        }))
    }

    /// The peer of a request's connection.
    pub fn of(extensions: &tonic::Extensions) -> Option<&Peer> {
        extensions.get::<Peer>()
    }

    pub fn certificate_names(&self) -> &[String] {
        &self.0.certificate_names
    }

    pub fn is_in_process(&self) -> bool {
        self.0.in_process
    }

    /// [`Peer::describe`] of a request's connection, `unknown` without one.
    pub fn describe_of(extensions: &tonic::Extensions) -> String {
        Peer::of(extensions).map_or_else(|| "unknown".to_owned(), Peer::describe)
    }

    /// For logs and the audit log: the address, or `in-process`.
    pub fn describe(&self) -> String {
        match (self.0.in_process, self.0.addr) {
            (true, _) => "in-process".to_owned(),
            (false, Some(addr)) => addr.to_string(),
            (false, None) => "unknown".to_owned(),
        }
    }

    /// A request started on this connection.
    pub fn started(&self) {
        self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
    }

    /// A request's response was sent (or abandoned).
    pub fn finished(&self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.touch();
    }

    fn touch(&self) {
        let ms = self.0.opened.elapsed().as_millis();
        self.0
            .last_active_ms
            .store(u64::try_from(ms).unwrap_or(u64::MAX), Ordering::Release);
    }

    /// Since when the connection has had no request in flight; `None` while it has one.
    pub fn idle_since(&self) -> Option<Instant> {
        if self.0.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let ms = self.0.last_active_ms.load(Ordering::Acquire);
        Some(self.0.opened + Duration::from_millis(ms))
    }

    /// The bytes of responses the client has not read.
    pub fn unread(&self) -> &AtomicUsize {
        &self.0.unread
    }
}
