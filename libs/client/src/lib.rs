//! A small client for Cascade's gRPC API: one HTTP/2 connection shared by the
//! `Ingest`, `Worker` and `Admin` stubs. The stubs are the generated ones, so every RPC and
//! message of the contract is available as is.

use cascade_proto::v1::admin_client::AdminClient;
use cascade_proto::v1::ingest_client::IngestClient;
use cascade_proto::v1::worker_client::WorkerClient;
use tonic::transport::{Channel, Endpoint};

pub use cascade_proto::v1 as api;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("'{addr}' is not a gRPC address like http://127.0.0.1:7700: {reason}")]
    BadAddress { addr: String, reason: String },
    #[error("cannot connect to Cascade at {addr}: {reason}")]
    Connect { addr: String, reason: String },
}

/// What actually went wrong under a transport error, e.g. "Connection refused (os error 111)":
/// the outer layers only say "transport error".
pub fn innermost_cause(error: &dyn std::error::Error) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[derive(Clone)]
pub struct Client {
    channel: Channel,
}

impl Client {
    /// Connects to a Cascade gateway, e.g. `http://127.0.0.1:7700` (the scheme may be left out).
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        let url = match addr.contains("://") {
            true => addr.to_string(),
            false => format!("http://{addr}"),
        };
        let endpoint = Endpoint::from_shared(url).map_err(|e| ClientError::BadAddress {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
        let channel = endpoint.connect().await.map_err(|e| ClientError::Connect {
            addr: addr.to_string(),
            reason: innermost_cause(&e),
        })?;
        Ok(Client { channel })
    }

    pub fn ingest(&self) -> IngestClient<Channel> {
        IngestClient::new(self.channel.clone())
    }

    pub fn worker(&self) -> WorkerClient<Channel> {
        WorkerClient::new(self.channel.clone())
    }

    pub fn admin(&self) -> AdminClient<Channel> {
        AdminClient::new(self.channel.clone())
    }

    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }
}
