//! `cascade_enqueue_duration_seconds{rpc}`: the `Ingest` service as clients see it, timed
//! from the request to the answer (routing, the bus hop and the shard's durable commit
//! included), around the gateway's own implementation.

use std::sync::Arc;
use std::time::Instant;

use cascade_proto::v1::ingest_server::Ingest;
use cascade_proto::v1::{
    DeleteRequest, DeleteResponse, EnqueueBatchRequest, EnqueueBatchResponse, EnqueueRequest,
    EnqueueResponse, Event, GetRequest, UpdateRequest,
};
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::{EnqueueRpc, Histogram};
use tonic::{Request, Response, Status};

use crate::gateway::Gateway;

pub(crate) struct TimedIngest {
    gateway: Arc<Gateway>,
    enqueue: Histogram,
    enqueue_batch: Histogram,
}

impl TimedIngest {
    pub fn new(gateway: Arc<Gateway>, metrics: &Metrics) -> TimedIngest {
        TimedIngest {
            gateway,
            enqueue: metrics.enqueue_duration_seconds(EnqueueRpc::Enqueue),
            enqueue_batch: metrics.enqueue_duration_seconds(EnqueueRpc::EnqueueBatch),
        }
    }
}

#[tonic::async_trait]
impl Ingest for TimedIngest {
    async fn enqueue(
        &self,
        request: Request<EnqueueRequest>,
    ) -> Result<Response<EnqueueResponse>, Status> {
        let started = Instant::now();
        let answer = self.gateway.enqueue(request).await;
        self.enqueue.observe(started.elapsed().as_secs_f64());
        answer
    }

    async fn enqueue_batch(
        &self,
        request: Request<EnqueueBatchRequest>,
    ) -> Result<Response<EnqueueBatchResponse>, Status> {
        let started = Instant::now();
        let answer = self.gateway.enqueue_batch(request).await;
        self.enqueue_batch.observe(started.elapsed().as_secs_f64());
        answer
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<Event>, Status> {
        self.gateway.get(request).await
    }

    async fn update(&self, request: Request<UpdateRequest>) -> Result<Response<Event>, Status> {
        self.gateway.update(request).await
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        self.gateway.delete(request).await
    }
}
