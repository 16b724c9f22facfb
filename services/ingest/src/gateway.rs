//! The state the three gRPC services share: the shards, the limits, one coalescer per kind
//! of batched request, and a copy of the pipelines kept for a second. It holds no data of
//! its own: ingest is stateless.

use std::collections::BTreeMap;
use std::sync::Arc;

use cascade_bus::Bus;
use cascade_security::EnqueueRates;
use cascade_service::{Settings, Shutdown};
use tokio::task::JoinSet;

use crate::IngestError;
use crate::admission::Admission;
use crate::authorize::Policy;
use crate::coalesce::{Batch, Coalescer, Sized};
use crate::ingest::EnqueueBatch;
use crate::limits::Limits;
use crate::pipelines::PipelineCache;
use crate::route::Shards;
use crate::worker::CompleteBatch;

pub(crate) struct Gateway {
    pub shards: Arc<Shards>,
    pub limits: Limits,
    pub enqueue: Coalescer<EnqueueBatch>,
    pub complete: Coalescer<CompleteBatch>,
    /// What enqueues by pipeline name and advances between stages resolve through.
    pub pipelines: PipelineCache,
    /// Set when the gateway is told to stop: long polls end after the poll in flight.
    pub stopping: Shutdown,
    /// Quotas and the handler URL allow-list (grants are the callers').
    pub policy: Policy,
    /// Requests in flight and the bytes of responses not yet read.
    pub admission: Arc<Admission>,
}

impl Gateway {
    /// Starts the coalescers' tasks in `tasks`; they end after the gateway is dropped.
    pub fn start(
        settings: &Settings,
        bus: Bus,
        stopping: Shutdown,
        tasks: &mut JoinSet<()>,
    ) -> Result<Gateway, IngestError> {
        let limits = Limits::new(settings, bus.max_payload());
        let shards = Arc::new(Shards::new(
            bus,
            settings.cluster.name.clone(),
            settings.cluster.shards,
            settings.bus.request_timeout,
        ));
        let policy = Policy {
            rates: EnqueueRates::default(),
            handler_urls: settings.auth.handler_urls()?,
        };
        Ok(Gateway {
            enqueue: Coalescer::start(&shards, &limits, tasks),
            complete: Coalescer::start(&shards, &limits, tasks),
            pipelines: PipelineCache::new(),
            stopping,
            shards,
            limits,
            policy,
            admission: Admission::new(settings),
        })
    }
}

/// An item of a client's batch, ready for its shard, or why it is not.
pub(crate) type Prepared<I> = Result<(u32, Sized<I>), IngestError>;

/// One shard's items of a client request, each with its slot among the outcomes and its
/// place in the request.
struct Share<I> {
    slots: Vec<(usize, usize)>,
    items: Vec<Sized<I>>,
}

impl<I> Default for Share<I> {
    fn default() -> Self {
        Share {
            slots: Vec::new(),
            items: Vec::new(),
        }
    }
}

/// Sends the prepared items of one client request (each with its place in the request), each
/// shard's share at once through `coalescer`, and returns the outcomes in the order given,
/// a shard's failures placed under their item: an item that failed to prepare gets its
/// error as its outcome.
pub(crate) async fn scatter<B: Batch>(
    coalescer: &Coalescer<B>,
    prepared: Vec<(usize, Prepared<B::Item>)>,
) -> Vec<B::Outcome> {
    let count = prepared.len();
    let mut outcomes: Vec<Option<B::Outcome>> = (0..count).map(|_| None).collect();
    let mut shares: BTreeMap<u32, Share<B::Item>> = BTreeMap::new();
    for (slot, (place_in_request, item)) in prepared.into_iter().enumerate() {
        match item {
            Ok((shard, sized)) => {
                let share = shares.entry(shard).or_insert_with(Share::default);
                share.slots.push((slot, place_in_request));
                share.items.push(sized);
            }
            Err(err) => outcomes[slot] = Some(B::failed(&err)),
        }
    }
    let sends = shares.into_iter().map(|(shard, share)| async move {
        (share.slots, coalescer.submit(shard, share.items).await)
    });
    for (slots, answers) in futures::future::join_all(sends).await {
        for ((slot, place_in_request), mut answer) in slots.into_iter().zip(answers) {
            B::place_at(&mut answer, place_in_request);
            outcomes[slot] = Some(answer);
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| {
            // `submit` answers every item it is given, so every slot is filled.
            outcome.unwrap_or_else(|| B::failed(&IngestError::ShuttingDown))
        })
        .collect()
}

/// A failure a shard reports for one item names its field from the item (`id: must be…`,
/// field `id`): placed under the item's `prefix` in the client's request (`items[2].id`).
/// The unary calls keep it as it is. The prefix is made only for such a failure: a batch's
/// successes name no field, and formatting a path for each of them took 7 % of the gateway's
/// threads in a profile of take+ack.
pub(crate) fn place(prefix: impl FnOnce() -> String, field: &mut String, message: &mut String) {
    if field.is_empty() || !message.starts_with(field.as_str()) {
        return;
    }
    let prefix = prefix();
    if prefix.is_empty() {
        return;
    }
    *message = format!("{prefix}.{message}");
    *field = format!("{prefix}.{field}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_item_failure_is_placed_in_the_clients_request() {
        let (mut named, mut message) = ("id".to_owned(), "id: must be 1-128 bytes".to_owned());
        place(|| "items[2]".to_owned(), &mut named, &mut message);
        assert_eq!(
            (named.as_str(), message.as_str()),
            ("items[2].id", "items[2].id: must be 1-128 bytes")
        );
        let (mut none, mut plain) = (String::new(), "queue 'jobs' does not exist".to_owned());
        let unused = || panic!("no prefix is made for a failure that names no field");
        place(unused, &mut none, &mut plain);
        assert_eq!(
            (none.as_str(), plain.as_str()),
            ("", "queue 'jobs' does not exist")
        );
        let (mut unary, mut kept) = ("id".to_owned(), "id: must be 1-128 bytes".to_owned());
        place(String::new, &mut unary, &mut kept);
        assert_eq!(kept, "id: must be 1-128 bytes");
    }
}
