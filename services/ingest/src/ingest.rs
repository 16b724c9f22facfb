//! The `Ingest` service: `Enqueue`, `EnqueueBatch`, `Get`, `Update`, `Delete`.
//!
//! Enqueues go through the per-shard coalescer: a unary `Enqueue` is a batch of one, an
//! `EnqueueBatch` is split by shard and reassembled in request order. Each item is converted
//! here and reaches its shard as the validated value (a shard in another process converts its
//! message again). An enqueue that names
//! a pipeline goes to its first stage's queue (looked up in the gateway's pipeline cache).
//! An invalid item never leaves the gateway: a unary request fails, a batch item gets its
//! own code and message naming `items[i].<field>` while the valid items go on (as the shard
//! treats them too).

use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::{
    Destination, EnqueueItem, ShardRequest, enqueue_from_proto, event_ref_from_proto,
    update_from_proto,
};
use cascade_proto::v1::{
    DeleteRequest, DeleteResponse, EnqueueBatchRequest, EnqueueBatchResponse, EnqueueRequest,
    EnqueueResponse, EnqueueResult, Event, GetRequest, UpdateRequest, ingest_server::Ingest,
};
use cascade_security::{Caller, Permission};
use cascade_telemetry::attr;
use tonic::{Request, Response, Status};
use tracing::{Instrument, Span};

use crate::IngestError;
use crate::admission::respond;
use crate::auth::caller;
use crate::authorize::{allowed, no_reserved_headers, payload_quota, refuse_whole};
use crate::coalesce::{Batch, Sized};
use crate::gateway::{Gateway, Prepared, place, scatter};
use crate::peer::Peer;
use crate::pipelines::no_such_pipeline;
use crate::route::unexpected;
use crate::trace;

/// Enqueues, coalesced per shard into one request of validated items.
pub(crate) struct EnqueueBatch;

impl Batch for EnqueueBatch {
    type Item = EnqueueItem;
    type Outcome = EnqueueResult;
    const ASKED: &'static str = "an enqueue batch";

    fn request(items: Vec<EnqueueItem>) -> ShardRequest {
        ShardRequest::Enqueue(items)
    }

    fn outcomes(shard: u32, reply: Reply) -> Result<Vec<EnqueueResult>, IngestError> {
        match reply {
            Reply::Enqueue(response) => Ok(response.results),
            other => Err(unexpected(shard, Self::ASKED, &other)),
        }
    }

    fn failed(err: &IngestError) -> EnqueueResult {
        EnqueueResult {
            ok: None,
            code: err.item_code(),
            message: err.to_string(),
            field: err.field().to_owned(),
        }
    }

    const LIST: &'static str = "items";

    fn place(result: &mut EnqueueResult, prefix: impl FnOnce() -> String) {
        place(prefix, &mut result.field, &mut result.message);
    }
}

impl Gateway {
    /// Validates one enqueue, resolves a pipeline to its first stage's queue, checks that
    /// `caller` may produce to it within its payload quota, and finds the shard. Errors name
    /// the item's fields (`queue`); a batch places them under the item (`items[2].queue`).
    async fn prepare_enqueue(
        &self,
        caller: &Caller,
        request: EnqueueRequest,
    ) -> Prepared<EnqueueItem> {
        // Its bytes in the shard's request: as the client sent it, less a pipeline's name and
        // plus its first stage's queue once resolved.
        let mut len = prost::Message::encoded_len(&request);
        let mut item = enqueue_from_proto(request)?;
        no_reserved_headers(item.headers.keys(), "headers")?;
        let queue = match &item.destination {
            Destination::Queue(queue) => queue.clone(),
            Destination::Pipeline(name) => {
                let Some(pipeline) = self.pipelines.get(&self.shards, name).await? else {
                    return Err(no_such_pipeline("pipeline".to_owned(), name));
                };
                // A shard takes a queue name: the first stage's.
                let first = pipeline.first_queue();
                len = len - string_len(name) + string_len(first.as_str());
                item.destination = Destination::Queue(first.clone());
                first
            }
        };
        allowed(caller, Permission::Produce, queue.as_str(), "queue")?;
        let bytes = field_len(len);
        self.limits
            .check_payload("payload", item.payload.len(), bytes)?;
        payload_quota(caller, "payload", item.payload.len())?;
        Ok((self.shards.owner(&queue), Sized { item, bytes }))
    }
}

impl Gateway {
    /// A unary enqueue inside its `ingest.enqueue` span.
    async fn enqueue_one(
        &self,
        caller: &Caller,
        item: EnqueueRequest,
        span: &Span,
    ) -> Result<Response<EnqueueResponse>, Status> {
        let (shard, item) = self.prepare_enqueue(caller, item).await?;
        self.enqueue_quota(caller, 1)?;
        if let Destination::Queue(queue) = &item.item.destination {
            span.record(attr::QUEUE, queue.as_str());
        }
        let result = self
            .enqueue
            .submit(shard, vec![item])
            .instrument(trace::persist_span(Some(shard)))
            .await
            .pop();
        match result {
            Some(EnqueueResult {
                code: 0,
                ok: Some(response),
                ..
            }) => {
                span.record(attr::EVENT_ID, response.id.as_str());
                Ok(Response::new(response))
            }
            Some(EnqueueResult { code: 0, .. }) | None => Err(IngestError::BadReply {
                shard,
                asked: EnqueueBatch::ASKED,
                got: "a result with neither a response nor an error".to_owned(),
            }
            .into()),
            Some(failed) => Err(IngestError::shard(failed.code, failed.message).into()),
        }
    }
}

/// The queue and ID (or the failure) of one batch item, on its own span.
fn record_result(span: &Span, result: &EnqueueResult) {
    match &result.ok {
        Some(ok) if result.code == 0 => {
            span.record(attr::QUEUE, ok.queue.as_str());
            span.record(attr::EVENT_ID, ok.id.as_str());
        }
        _ => {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Bytes an item takes inside a batch message: tag, length and body.
pub(crate) fn item_len(message: &impl prost::Message) -> usize {
    field_len(message.encoded_len())
}

/// Bytes a field of `len` bytes (a string, a message) takes in a message: tag, length, body.
pub(crate) fn field_len(len: usize) -> usize {
    1 + prost::length_delimiter_len(len) + len
}

/// Bytes a string field takes in a message: none when it is empty (proto3 leaves it out).
pub(crate) fn string_len(value: &str) -> usize {
    match value.len() {
        0 => 0,
        len => field_len(len),
    }
}

#[tonic::async_trait]
impl Ingest for Gateway {
    async fn enqueue(
        &self,
        request: Request<EnqueueRequest>,
    ) -> Result<Response<EnqueueResponse>, Status> {
        let caller = caller(&request)?;
        let (metadata, _, mut item) = request.into_parts();
        let span = trace::enqueue_span(&metadata, &mut item);
        let answer = self
            .enqueue_one(&caller, item, &span)
            .instrument(span.clone())
            .await;
        if answer.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        answer
    }

    async fn enqueue_batch(
        &self,
        request: Request<EnqueueBatchRequest>,
    ) -> Result<Response<EnqueueBatchResponse>, Status> {
        let caller = caller(&request)?;
        let (metadata, _, request) = request.into_parts();
        self.limits
            .check_batch_bytes("items", prost::Message::encoded_len(&request))?;
        let mut items = request.items;
        self.limits.check_items("items", items.len())?;
        let (span, item_spans) = trace::enqueue_batch_spans(&metadata, &mut items);
        // One after the other: only an item naming a pipeline may wait, for the pipeline's
        // first lookup; later ones find it cached.
        let preparing = async {
            let mut prepared = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let item = self.prepare_enqueue(&caller, item).await;
                prepared.push(EnqueueBatch::under_item(item, index));
            }
            prepared
        };
        let mut prepared = preparing.instrument(span.clone()).await;
        refuse_whole(&mut prepared)?;
        self.enqueue_quota(&caller, prepared.iter().filter(|p| p.is_ok()).count())?;
        // Created inside the request's span, to be its child.
        let persist = span.in_scope(|| trace::persist_span(None));
        let results = scatter(&self.enqueue, prepared.into_iter().enumerate().collect())
            .instrument(persist)
            .instrument(span)
            .await;
        for (span, result) in item_spans.iter().zip(&results) {
            if let Some(span) = span {
                record_result(span, result);
            }
        }
        Ok(Response::new(EnqueueBatchResponse { results }))
    }

    async fn get(&self, request: Request<GetRequest>) -> Result<Response<Event>, Status> {
        let caller = caller(&request)?;
        let peer = Peer::of(request.extensions()).cloned();
        let request = request.into_inner();
        let event = event_ref_from_proto(&request.queue, &request.id).map_err(IngestError::from)?;
        allowed(&caller, Permission::Produce, event.queue.as_str(), "queue")?;
        let shard = self.shards.owner(&event.queue);
        match self.shards.call(shard, Op::Get(request)).await? {
            Reply::Event(event) => Ok(respond(&self.admission, peer.as_ref(), event)?),
            other => Err(unexpected(shard, "a get", &other).into()),
        }
    }

    async fn update(&self, request: Request<UpdateRequest>) -> Result<Response<Event>, Status> {
        let caller = caller(&request)?;
        let mut request = request.into_inner();
        let payload = request.payload.take();
        let item = update_from_proto(request.clone()).map_err(IngestError::from)?;
        request.payload = payload;
        no_reserved_headers(request.headers.keys(), "headers")?;
        allowed(
            &caller,
            Permission::Produce,
            item.event.queue.as_str(),
            "queue",
        )?;
        if let Some(payload) = &request.payload {
            self.limits
                .check_payload("payload", payload.len(), item_len(&request))?;
            payload_quota(&caller, "payload", payload.len())?;
        }
        let shard = self.shards.owner(&item.event.queue);
        match self.shards.call(shard, Op::Update(request)).await? {
            Reply::Event(event) => Ok(Response::new(event)),
            other => Err(unexpected(shard, "an update", &other).into()),
        }
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let event = event_ref_from_proto(&request.queue, &request.id).map_err(IngestError::from)?;
        allowed(&caller, Permission::Produce, event.queue.as_str(), "queue")?;
        let shard = self.shards.owner(&event.queue);
        match self.shards.call(shard, Op::Delete(request)).await? {
            Reply::Done(_) => Ok(Response::new(DeleteResponse {})),
            other => Err(unexpected(shard, "a delete", &other).into()),
        }
    }
}
