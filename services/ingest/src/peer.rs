//! Who is at the other end of a connection, as each request on it sees it: tonic puts a
//! connection's `ConnectInfo` into the extensions of every request it carries.

use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(crate) struct Peer(Arc<PeerInfo>);

#[derive(Debug)]
struct PeerInfo {
    addr: Option<SocketAddr>,
    /// The DNS names of the client certificate the TLS handshake verified.
    certificate_names: Vec<String>,
    /// A connection from inside this process (`cascade standalone`'s stage workers).
    in_process: bool,
}

impl Peer {
    pub fn remote(addr: Option<SocketAddr>, certificate_names: Vec<String>) -> Peer {
        Peer(Arc::new(PeerInfo {
            addr,
            certificate_names,
            in_process: false,
        }))
    }

    pub fn in_process() -> Peer {
        Peer(Arc::new(PeerInfo {
            addr: None,
            certificate_names: Vec::new(),
            in_process: true,
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

    /// For logs and the audit log: the address, or `in-process`.
    pub fn describe(&self) -> String {
        match (self.0.in_process, self.0.addr) {
            (true, _) => "in-process".to_owned(),
            (false, Some(addr)) => addr.to_string(),
            (false, None) => "unknown".to_owned(),
        }
    }
}
