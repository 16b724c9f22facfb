//! The `Worker` service: `Take`, `Complete`, `ExtendLease`.
//!
//! `Take` with `wait` is a long poll (cut to `dispatcher.max_take_wait`) that the gateway
//! makes of shard polls of at most [`TAKE_POLL_SLICE`] each, which the shard holds until
//! events come or the slice ends. A gateway told to stop answers after the poll in flight
//! (with what it brought, usually nothing), so a long poll never holds its shutdown longer
//! than one slice; a shard that answers a poll early and empty (it is stopping) is not asked
//! again at once. A client that goes away mid-poll (its deadline, a cancel) does not leave
//! the poll's events leased to nobody until their lease ends: each poll runs on a task of its
//! own, which releases what it took if no one is left to answer.
//! `Complete` is split by shard, coalesced like enqueues, and answered per item in order; an
//! advance reaches its shard with its target resolved (`advance`). A `Take` may carry
//! completions too (`carried`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cascade_core::{Outcome, QueueName};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::{
    CompletionItem, ShardRequest, TakeItem, completion_from_proto, extend_from_proto,
    take_from_proto,
};
use cascade_proto::v1::completion::Outcome as ProtoOutcome;
use cascade_proto::v1::{
    CompleteRequest, CompleteResponse, Completion, CompletionResult, ExtendLeaseRequest,
    ExtendLeaseResponse, TakeRequest, TakeResponse, worker_server::Worker,
};
use cascade_security::{Caller, Permission};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::IngestError;
use crate::abandoned::{ReleaseTo, Unanswered};
use crate::admission::{Place, with_reservation};
use crate::advance::Target;
use crate::auth::caller;
use crate::authorize::{allowed, no_reserved_headers, payload_quota, refuse_whole};
use crate::carried::Carried;
use crate::client_deadline;
use crate::coalesce::{Batch, Sized};
use crate::gateway::{Gateway, Prepared, place, scatter};
use crate::ingest::{field_len, string_len};
use crate::limits::TAKE_POLL_SLICE;
use crate::peer::Peer;
use crate::route::unexpected;
use crate::trace;

/// Completions, coalesced per shard into one request of validated completions.
pub(crate) struct CompleteBatch;

impl Batch for CompleteBatch {
    type Item = CompletionItem;
    type Outcome = CompletionResult;
    const ASKED: &'static str = "a complete batch";

    fn request(completions: Vec<CompletionItem>) -> ShardRequest {
        ShardRequest::Complete(completions)
    }

    fn outcomes(shard: u32, reply: Reply) -> Result<Vec<CompletionResult>, IngestError> {
        match reply {
            Reply::Complete(response) => Ok(response.results),
            other => Err(unexpected(shard, Self::ASKED, &other)),
        }
    }

    fn failed(err: &IngestError) -> CompletionResult {
        CompletionResult {
            code: err.item_code(),
            message: err.to_string(),
            field: err.field().to_owned(),
        }
    }

    const LIST: &'static str = "completions";

    fn place(result: &mut CompletionResult, prefix: impl FnOnce() -> String) {
        place(prefix, &mut result.field, &mut result.message);
    }
}

impl Gateway {
    /// Validates one completion, checks that `caller` may consume from its queue (and, for an
    /// advance out of its pipeline, produce to the target), resolves an advance's target (see
    /// `advance`), and finds the shard. Errors name the completion's fields (`queue`).
    async fn prepare_completion(
        &self,
        caller: &Caller,
        completion: Completion,
        targets: &mut Targets,
    ) -> Prepared<CompletionItem> {
        // Its bytes in the shard's request, as the client sent it; an advance's below, once
        // its target is resolved.
        let len = prost::Message::encoded_len(&completion);
        let advance_len = match &completion.outcome {
            Some(ProtoOutcome::Advance(advance)) => prost::Message::encoded_len(advance),
            _ => 0,
        };
        let mut item = completion_from_proto(completion)?;
        allowed(caller, Permission::Consume, item.queue.as_str(), "queue")?;
        let Outcome::Advance {
            to,
            payload,
            headers,
            ..
        } = &mut item.outcome
        else {
            let bytes = field_len(len);
            return Ok((self.shards.owner(&item.queue), Sized { item, bytes }));
        };
        no_reserved_headers(headers.keys(), "advance.headers")?;
        let payload_len = payload.as_ref().map(Bytes::len);
        if let Some(payload_len) = payload_len {
            self.limits
                .check_payload("advance.payload", payload_len, field_len(len))?;
            payload_quota(caller, "advance.payload", payload_len)?;
        }
        let client_to = string_len(to.as_deref().unwrap_or_default());
        let target = targets
            .resolve(self, caller, &item.queue, to.as_deref())
            .await?;
        let resolved = match target {
            Target::Ack => None,
            Target::Stage(stage) => Some(stage),
            Target::Queue(queue) => {
                allowed(caller, Permission::Produce, &queue, "advance.to")?;
                Some(queue)
            }
        };
        let bytes = resized_advance(len, advance_len, client_to, resolved.as_deref());
        match resolved {
            None => item.outcome = Outcome::Ack,
            Some(target) => {
                // Again with the target: a longer `to` may no longer fit one bus message.
                if let Some(payload_len) = payload_len {
                    self.limits
                        .check_payload("advance.payload", payload_len, bytes)?;
                }
                *to = Some(target);
            }
        }
        Ok((self.shards.owner(&item.queue), Sized { item, bytes }))
    }
}

/// The advance targets one request's completions resolved, by queue and `to`, or why they
/// could not be: resolving one may ask a shard whether a queue exists, and a request's
/// advances to one target ask once, even when the shard does not answer.
#[derive(Default)]
struct Targets(HashMap<(QueueName, Option<String>), Result<Target, IngestError>>);

impl Targets {
    async fn resolve(
        &mut self,
        gateway: &Gateway,
        caller: &Caller,
        queue: &QueueName,
        to: Option<&str>,
    ) -> Result<Target, IngestError> {
        let resolved = match self.0.entry((queue.clone(), to.map(str::to_owned))) {
            Entry::Occupied(found) => found.into_mut(),
            Entry::Vacant(slot) => slot.insert(
                gateway
                    .advance_target(caller, queue, to, "advance.to")
                    .await,
            ),
        };
        match resolved {
            Ok(target) => Ok(target.clone()),
            Err(err) => Err(repeated(err)),
        }
    }
}

/// A failed target lookup, for another advance that met it: the same code, message and
/// field. A lookup fails only with an invalid `to` (the one error that names a field) or
/// with what a shard or the bus answered.
fn repeated(err: &IngestError) -> IngestError {
    match err {
        IngestError::Invalid(invalid) => IngestError::Invalid(invalid.clone()),
        other => IngestError::shard(other.item_code(), other.to_string()),
    }
}

/// The bytes of a completion as an item of a batch, `len` bytes as the client sent it with an
/// advance of `advance_len` bytes whose `to` took `client_to`: once `to` is `target`, or once
/// it is an ack (an empty message in place of the advance) when there is none.
fn resized_advance(
    len: usize,
    advance_len: usize,
    client_to: usize,
    target: Option<&str>,
) -> usize {
    let advance = target.map_or(0, |target| advance_len - client_to + string_len(target));
    field_len(len - field_len(advance_len) + field_len(advance))
}

impl Gateway {
    /// Each completion of a request prepared (see `prepare_completion`) under
    /// `completions[i]`; the whole request is refused if one is outside the caller's grants
    /// or if there are too many. The spans returned cover the advances' commits: keep them
    /// until the shards answered.
    async fn prepare_completions(
        &self,
        caller: &Caller,
        mut completions: Vec<Completion>,
    ) -> Result<(Vec<tracing::Span>, Vec<Prepared<CompletionItem>>), IngestError> {
        self.limits.check_items("completions", completions.len())?;
        let advances = trace::advance_spans(&mut completions);
        // One after the other: only an advance may wait (for its target), and a request's
        // advances share their targets. A future per completion, joined, cost more in moving
        // those futures about than the preparing itself.
        let mut targets = Targets::default();
        let mut prepared = Vec::with_capacity(completions.len());
        for (index, completion) in completions.into_iter().enumerate() {
            let item = self
                .prepare_completion(caller, completion, &mut targets)
                .await;
            prepared.push(CompleteBatch::under_item(item, index));
        }
        refuse_whole(&mut prepared)?;
        Ok((advances, prepared))
    }
}

/// One shard poll of a `Take`, on a task of its own that holds the request's `place` among
/// those in flight until the poll ends. If the client goes away while the shard holds the
/// poll, tonic drops the RPC's future, not this task, and the events the poll brings are
/// released at once: they travel to the RPC in an [`Unanswered`], which releases them if it
/// is dropped unread, in the channel included.
async fn poll_shard(
    to: &ReleaseTo,
    place: Option<Place>,
    ask: Sized<ShardRequest>,
    timeout: Duration,
) -> Result<Unanswered, IngestError> {
    let (answer, answered) = oneshot::channel();
    let to = to.clone();
    tokio::spawn(async move {
        let shard = to.shard;
        let taken = match to.shards.send(shard, ask.item, ask.bytes, timeout).await {
            Ok(Reply::Take(taken)) => Ok(Unanswered::hold(&to, taken)),
            Ok(other) => Err(unexpected(shard, "a take", &other)),
            Err(e) => Err(e),
        };
        // Unsent (no one is left to answer), its events go back before the place is given up.
        if let Err(Ok(unanswered)) = answer.send(taken) {
            unanswered.release().await;
        }
        drop(place);
    });
    // The task ends without answering only when the runtime shuts down.
    answered.await.unwrap_or(Err(IngestError::ShuttingDown))
}

#[tonic::async_trait]
impl Worker for Gateway {
    async fn take(&self, request: Request<TakeRequest>) -> Result<Response<TakeResponse>, Status> {
        // The wait, and the client's deadline, count from here: the completions carried may
        // take a while to prepare.
        let arrived = Instant::now();
        let caller = caller(&request)?;
        let peer = Peer::of(request.extensions()).cloned();
        let place = request.extensions().get::<Place>().cloned();
        let client_wait = client_deadline::wait_within(request.metadata());
        let mut request = request.into_inner();
        let item = take_from_proto(&request).map_err(IngestError::from)?;
        allowed(&caller, Permission::Consume, item.queue.as_str(), "queue")?;
        self.limits
            .check_batch_bytes("completions", prost::Message::encoded_len(&request))?;
        let completions = std::mem::take(&mut request.completions);
        let (mut advances, prepared) = self.prepare_completions(&caller, completions).await?;
        // Checked before any event is leased: a refusal after the poll would cost the
        // events an attempt.
        self.admission.room(peer.as_ref())?;
        let shard = self.shards.owner(&item.queue);
        let release_to = ReleaseTo {
            shards: Arc::clone(&self.shards),
            shard,
            per_request: self.limits.bus_items(),
        };
        // The take's own bytes in its bus message, measured as the client sent them.
        let take_len = prost::Message::encoded_len(&request);
        let room = self.limits.bus_room.saturating_sub(take_len);
        let mut carried = Carried::split(shard, prepared, room);
        let wait = self.limits.take_wait(item.wait);
        let deadline = arrived + client_wait.map_or(wait, |within| wait.min(within));
        loop {
            let asked_at = Instant::now();
            // A first poll that still has completions to send, or advances whose spans should
            // end with their commit, does not wait; the next ones wait as asked.
            let poll = match carried.sends_elsewhere() || !advances.is_empty() {
                true => Duration::ZERO,
                false => deadline
                    .saturating_duration_since(asked_at)
                    .min(TAKE_POLL_SLICE),
            };
            let (completions, completions_len) = carried.for_poll();
            let ask = TakeItem {
                wait: (!poll.is_zero()).then_some(poll),
                ..item.clone()
            };
            let ask = Sized {
                item: ShardRequest::Take(ask, completions),
                bytes: take_len + completions_len,
            };
            let timeout = self.limits.take_timeout(poll);
            let mut taken = match poll_shard(&release_to, place.clone(), ask, timeout).await {
                Ok(taken) => taken,
                // The completions were applied and their results are owed: a later poll that
                // fails ends the take empty instead.
                Err(err) if carried.owed() => {
                    tracing::debug!(shard, error = %err, "take.poll_failed_after_completions");
                    let results = carried.into_results();
                    return Ok(Response::new(TakeResponse {
                        events: Vec::new(),
                        completions: results,
                    }));
                }
                Err(err) => return Err(err.into()),
            };
            let answered = taken.completion_results();
            carried
                .poll_answered(shard, answered, &self.complete)
                .await?;
            // Every completion is applied: their advances' spans end here, not with the wait.
            advances.clear();
            let now = Instant::now();
            // A shard answers empty before the poll's wait is over only when it is stopping
            // (or caps waits lower than this gateway): asking it again would spin, so the
            // client gets the empty answer and polls again, maybe elsewhere.
            let early = now < asked_at + poll;
            if taken.has_events() || now >= deadline || early || self.stopping.is_triggered() {
                let mut taken = taken.answered();
                trace::record_take(item.queue.as_str(), &taken.events);
                taken.completions = carried.into_results();
                let size = prost::Message::encoded_len(&taken);
                let reserved = self.admission.reserve_anyway(peer.as_ref(), size);
                return Ok(with_reservation(taken, reserved));
            }
        }
    }

    async fn complete(
        &self,
        request: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        self.limits
            .check_batch_bytes("completions", prost::Message::encoded_len(&request))?;
        let (_advances, prepared) = self
            .prepare_completions(&caller, request.completions)
            .await?;
        let results = scatter(&self.complete, prepared.into_iter().enumerate().collect()).await;
        Ok(Response::new(CompleteResponse { results }))
    }

    async fn extend_lease(
        &self,
        request: Request<ExtendLeaseRequest>,
    ) -> Result<Response<ExtendLeaseResponse>, Status> {
        let caller = caller(&request)?;
        let request = request.into_inner();
        let item = extend_from_proto(&request).map_err(IngestError::from)?;
        allowed(&caller, Permission::Consume, item.queue.as_str(), "queue")?;
        let shard = self.shards.owner(&item.queue);
        match self.shards.call(shard, Op::Extend(request)).await? {
            Reply::Extend(extended) => Ok(Response::new(extended)),
            other => Err(unexpected(shard, "an extend", &other).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use cascade_proto::v1::{Advance, Completion};

    use super::*;
    use crate::ingest::item_len;

    #[test]
    fn a_resolved_advance_is_measured_as_it_goes_to_its_shard() {
        let advance = |to: &str| Completion {
            queue: "orders.charge".into(),
            id: "e-1".into(),
            lease_token: "00000000000000ff".into(),
            outcome: Some(ProtoOutcome::Advance(Advance {
                to: to.into(),
                payload: Some(vec![7; 300].into()),
                headers: [("k".to_owned(), "v".to_owned())].into(),
                delay: None,
            })),
        };
        let ack = Completion {
            outcome: Some(ProtoOutcome::Ack(cascade_proto::v1::Ack {})),
            ..advance("")
        };
        for client_to in ["", "ship", &"x".repeat(200)] {
            let sent = advance(client_to);
            let Some(ProtoOutcome::Advance(proto)) = &sent.outcome else {
                panic!("an advance");
            };
            let (len, advance_len) = (
                prost::Message::encoded_len(&sent),
                prost::Message::encoded_len(proto),
            );
            let to = string_len(client_to);
            for target in ["orders.ship", &"y".repeat(300)] {
                assert_eq!(
                    resized_advance(len, advance_len, to, Some(target)),
                    item_len(&advance(target)),
                    "{client_to} -> {target}"
                );
            }
            assert_eq!(resized_advance(len, advance_len, to, None), item_len(&ack));
        }
    }
}
