//! How the process that serves the gateway reaches it itself (`cascade standalone`'s stage
//! workers): such callers are the process, so no TLS, no token.
//!
//! - A gRPC channel over in-memory connections, for any stub ([`InProcessConnector::channel`]).
//! - The `Worker` service called directly ([`InProcessConnector::worker`]): a worker's takes
//!   and completions reach the gateway as values, with no HTTP/2 framing and no protobuf
//!   encoding on either side. These calls are not counted by the port's admission limits
//!   (`grpc.max_requests_in_flight`): the stage workers' own settings bound them.

use std::io;
use std::sync::{Arc, PoisonError, RwLock, Weak};

use cascade_proto::v1::worker_server::Worker;
use cascade_proto::v1::{
    CompleteRequest, CompleteResponse, ExtendLeaseRequest, ExtendLeaseResponse, TakeRequest,
    TakeResponse,
};
use cascade_security::Caller;
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::gateway::Gateway;
use crate::incoming::ACCEPTED_QUEUE;
use crate::peer::Peer;

/// Bytes an in-process connection buffers each way.
const IN_PROCESS_BUFFER: usize = 256 << 10;

/// The client end: in-memory connections and direct calls to this process's gateway.
#[derive(Clone)]
pub struct InProcessConnector {
    streams: mpsc::Sender<DuplexStream>,
    serving: Serving,
}

/// The gateway's end.
pub struct InProcessListener {
    streams: mpsc::Receiver<DuplexStream>,
    serving: Serving,
}

/// A connector and the listener it reaches.
pub fn in_process() -> (InProcessConnector, InProcessListener) {
    let (streams, accepted) = mpsc::channel(ACCEPTED_QUEUE);
    let serving = Serving::default();
    (
        InProcessConnector {
            streams,
            serving: serving.clone(),
        },
        InProcessListener {
            streams: accepted,
            serving,
        },
    )
}

impl InProcessConnector {
    /// A channel whose connections are made on first use and again after a failure.
    pub fn channel(&self) -> Channel {
        let streams = self.streams.clone();
        let connect = tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let streams = streams.clone();
            async move {
                let (client, server) = tokio::io::duplex(IN_PROCESS_BUFFER);
                streams.send(server).await.map_err(|_| {
                    io::Error::new(io::ErrorKind::ConnectionRefused, "the gateway has stopped")
                })?;
                Ok::<_, io::Error>(TokioIo::new(client))
            }
        });
        Endpoint::from_static("http://in-process.cascade").connect_with_connector_lazy(connect)
    }

    /// The gateway's `Worker` service, called directly. Before the gateway serves and once
    /// it is stopping, calls are answered UNAVAILABLE, as a refused connection would be.
    pub fn worker(&self) -> Arc<dyn Worker> {
        Arc::new(InProcessWorker {
            serving: self.serving.clone(),
            peer: Peer::in_process(),
        })
    }
}

impl InProcessListener {
    /// Where `serve` says which gateway answers the direct calls.
    pub(crate) fn serving(&self) -> Serving {
        self.serving.clone()
    }

    pub(crate) fn into_streams(self) -> mpsc::Receiver<DuplexStream> {
        self.streams
    }
}

/// The gateway that answers direct calls while it serves. Held weakly: when `serve` drops
/// the gateway, its coalescers end, whoever still holds a connector.
#[derive(Clone, Default)]
pub(crate) struct Serving(Arc<RwLock<Weak<Gateway>>>);

impl Serving {
    pub fn publish(&self, gateway: &Arc<Gateway>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::downgrade(gateway);
    }

    /// No new direct call reaches the gateway; the calls in flight finish.
    pub fn withdraw(&self) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Weak::new();
    }

    fn gateway(&self) -> Result<Arc<Gateway>, Status> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .upgrade()
            .ok_or_else(|| Status::unavailable("the gateway is not serving"))
    }
}

/// The `Worker` service for the process's own workers: each call reaches the gateway as
/// one from an in-process connection would, past the authentication layer.
struct InProcessWorker {
    serving: Serving,
    /// One peer for every call, as one connection would be.
    peer: Peer,
}

impl InProcessWorker {
    fn own<T>(&self, mut request: Request<T>) -> Request<T> {
        request.extensions_mut().insert(self.peer.clone());
        request.extensions_mut().insert(Caller::Unrestricted);
        request
    }
}

#[tonic::async_trait]
impl Worker for InProcessWorker {
    async fn take(&self, request: Request<TakeRequest>) -> Result<Response<TakeResponse>, Status> {
        let gateway = self.serving.gateway()?;
        gateway.take(self.own(request)).await
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        let gateway = self.serving.gateway()?;
        gateway.complete(self.own(request)).await
    }

    async fn extend_lease(
        &self,
        request: Request<ExtendLeaseRequest>,
    ) -> Result<Response<ExtendLeaseResponse>, Status> {
        let gateway = self.serving.gateway()?;
        gateway.extend_lease(self.own(request)).await
    }
}
