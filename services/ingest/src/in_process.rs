//! How the process that serves the gateway reaches it itself (`cascade standalone`'s stage
//! workers): such callers are the process, so no TLS, no token.
//!
//! - A gRPC channel over in-memory connections, for any stub ([`InProcessConnector::channel`]):
//!   its calls go through the gRPC server and its layers, only not through the TCP port.
//! - The `Worker` service called directly ([`InProcessConnector::worker`]): a worker's takes,
//!   completions and lease extensions reach the gateway's service code as values, with no
//!   HTTP/2 framing and no protobuf encoding on either side. They are not counted by
//!   `grpc.max_requests_in_flight` nor bounded by `grpc.max_concurrent_streams` (the stage
//!   workers' own settings bound them). A direct `Take` still waits its turn when clients
//!   hold the gateway's budget of unread answers (`grpc.max_unread_response_bytes`), but its
//!   own answer is handed over, not held in that budget.

use std::future::Future;
use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError, RwLock, Weak};

use cascade_proto::v1::worker_server::Worker;
use cascade_proto::v1::{
    CompleteRequest, CompleteResponse, ExtendLeaseRequest, ExtendLeaseResponse, TakeRequest,
    TakeResponse,
};
use cascade_security::Caller;
use futures::FutureExt;
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::admission::Reserved;
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

    /// The gateway's `Worker` service, called directly. Before the gateway serves and from
    /// the moment it is told to stop, calls are answered UNAVAILABLE (a worker waits that
    /// out as it does a gateway it cannot reach); the calls in flight then finish.
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

/// The `Worker` service for the process's own workers: each call reaches the gateway as one
/// from an in-process connection would once past the authentication layer, which lets the
/// process do anything.
struct InProcessWorker {
    serving: Serving,
    /// One peer for every call, as one connection would be.
    peer: Peer,
}

impl InProcessWorker {
    fn as_the_process<T>(&self, mut request: Request<T>) -> Request<T> {
        request.extensions_mut().insert(self.peer.clone());
        request.extensions_mut().insert(Caller::Unrestricted);
        request
    }
}

/// A panic in the gateway's code ends the call as it would end a gRPC stream, an error for
/// the worker (which retries or lets the lease run out), not a panic of the worker's task.
async fn unwound<T>(
    call: impl Future<Output = Result<Response<T>, Status>>,
) -> Result<Response<T>, Status> {
    AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(Status::internal("the gateway failed on this call")))
}

#[tonic::async_trait]
impl Worker for InProcessWorker {
    async fn take(&self, request: Request<TakeRequest>) -> Result<Response<TakeResponse>, Status> {
        let gateway = self.serving.gateway()?;
        let mut taken = unwound(gateway.take(self.as_the_process(request))).await?;
        // What the gateway holds for a client that has not read its answer: this one is
        // handed over whole.
        taken.extensions_mut().remove::<Reserved>();
        Ok(taken)
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        let gateway = self.serving.gateway()?;
        unwound(gateway.complete(self.as_the_process(request))).await
    }

    async fn extend_lease(
        &self,
        request: Request<ExtendLeaseRequest>,
    ) -> Result<Response<ExtendLeaseResponse>, Status> {
        let gateway = self.serving.gateway()?;
        unwound(gateway.extend_lease(self.as_the_process(request))).await
    }
}
