//! The gateway's `Worker` service as a worker calls it: over the client's connection, or,
//! inside the process that serves the gateway, as a direct call to the service, with the
//! request and answer as values (no HTTP/2, no protobuf). The same service code answers
//! either way; what the direct call skips is the transport and the limits of the gRPC
//! server's connections and streams.

use std::sync::Arc;

use cascade_proto::v1::worker_client::WorkerClient;
use cascade_proto::v1::worker_server::Worker;
use cascade_proto::v1::{
    CompleteRequest, CompleteResponse, ExtendLeaseRequest, ExtendLeaseResponse, TakeRequest,
    TakeResponse,
};
use tonic::{Request, Response, Status};

use crate::Connection;

#[derive(Clone)]
pub enum WorkerCalls {
    Remote(WorkerClient<Connection>),
    /// The service itself, in this process.
    InProcess(Arc<dyn Worker>),
}

impl WorkerCalls {
    pub async fn take(&mut self, request: TakeRequest) -> Result<Response<TakeResponse>, Status> {
        match self {
            WorkerCalls::Remote(client) => client.take(request).await,
            WorkerCalls::InProcess(service) => service.take(Request::new(request)).await,
        }
    }

    pub async fn complete(
        &mut self,
        request: CompleteRequest,
    ) -> Result<Response<CompleteResponse>, Status> {
        match self {
            WorkerCalls::Remote(client) => client.complete(request).await,
            WorkerCalls::InProcess(service) => service.complete(Request::new(request)).await,
        }
    }

    pub async fn extend_lease(
        &mut self,
        request: ExtendLeaseRequest,
    ) -> Result<Response<ExtendLeaseResponse>, Status> {
        match self {
            WorkerCalls::Remote(client) => client.extend_lease(request).await,
            WorkerCalls::InProcess(service) => service.extend_lease(Request::new(request)).await,
        }
    }
}
