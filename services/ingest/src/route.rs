//! Which shard owns a queue, and one request to a shard over the bus.
//!
//! A queue lives on `shard_of(queue, cluster.shards)` (jump consistent hash); a template's
//! queues live on every shard, so template admin fans out to all of them. Subjects carry
//! shard numbers only, never queue names.

use std::time::Duration;

use bytes::Bytes;
use cascade_bus::{Bus, Typed};
use cascade_core::{QueueName, shard_of};
use cascade_proto::bus::v1::DispatcherReply;
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::ShardRequest;
use prost::Message;

use crate::IngestError;

/// Bytes around a request's items in its message at most: the tag and length of the request
/// and of its batch.
const REQUEST_FRAMING: usize = 2 * (1 + 5);

pub(crate) struct Shards {
    bus: Bus,
    cluster: String,
    count: u32,
    timeout: Duration,
}

impl Shards {
    pub fn new(bus: Bus, cluster: String, count: u32, timeout: Duration) -> Shards {
        Shards {
            bus,
            cluster,
            count: count.max(1),
            timeout,
        }
    }

    /// The shard that owns `queue`.
    pub fn owner(&self, queue: &QueueName) -> u32 {
        shard_of(queue, self.count)
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// `bus.request_timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// One request to `shard` as its message, answered within `bus.request_timeout`.
    pub async fn call(&self, shard: u32, op: Op) -> Result<Reply, IngestError> {
        let len = op.encoded_len();
        self.send(shard, ShardRequest::Message(op), len, self.timeout)
            .await
    }

    /// One request to `shard`, `items_len` bytes of it besides its envelope (or a bound on
    /// them), answered within `timeout`. An error reply becomes [`IngestError::Shard`] with
    /// the shard's code and message.
    pub async fn send(
        &self,
        shard: u32,
        request: ShardRequest,
        items_len: usize,
        timeout: Duration,
    ) -> Result<Reply, IngestError> {
        let subject = cascade_bus::subject::dispatcher(&self.cluster, shard);
        let name = request.name();
        let encode = |request: ShardRequest| Bytes::from(request.into_proto().encode_to_vec());
        let request = Typed::new(request, items_len + REQUEST_FRAMING, encode);
        let reply: DispatcherReply = self
            .bus
            .call_typed(name, &subject, request, timeout)
            .await
            .map_err(|source| IngestError::Bus { shard, source })?;
        match reply.result {
            Some(Reply::Error(status)) => Err(IngestError::shard(status.code, status.message)),
            Some(result) => Ok(result),
            None => Err(IngestError::BadReply {
                shard,
                asked: "a request",
                got: "an empty reply".to_owned(),
            }),
        }
    }

    /// The same request to every shard at once; answers in shard order.
    pub async fn call_all(&self, op: Op) -> Vec<Result<Reply, IngestError>> {
        let calls = (0..self.count).map(|shard| self.call(shard, op.clone()));
        futures::future::join_all(calls).await
    }
}

/// The error for a reply of the wrong kind to a request for `asked`.
pub(crate) fn unexpected(shard: u32, asked: &'static str, got: &Reply) -> IngestError {
    IngestError::BadReply {
        shard,
        asked,
        got: format!("a {} reply", reply_kind(got)),
    }
}

fn reply_kind(reply: &Reply) -> &'static str {
    match reply {
        Reply::Error(_) => "error",
        Reply::Enqueue(_) => "enqueue",
        Reply::Event(_) => "event",
        Reply::Done(_) => "done",
        Reply::Take(_) => "take",
        Reply::Complete(_) => "complete",
        Reply::Extend(_) => "extend",
        Reply::Queue(_) => "queue",
        Reply::Queues(_) => "queues",
        Reply::Purge(_) => "purge",
        Reply::Stats(_) => "stats",
        Reply::DeadLetters(_) => "dead letters",
        Reply::Redrive(_) => "redrive",
        Reply::Pipeline(_) => "pipeline",
        Reply::Pipelines(_) => "pipelines",
    }
}
