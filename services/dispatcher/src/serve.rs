//! The request loop of one shard: every bus request runs in its own task (long polls wait
//! without holding others up), at most `MAX_IN_FLIGHT` at once and as many long polls beside
//! them — beyond, the request is answered RESOURCE_EXHAUSTED at once. Long polls have places
//! of their own: idle consumers, however many gateways they come through, never take the
//! places of enqueues, completions, activations and hand-offs. On stop: no more requests are
//! read, long polls answer what they have, and the loop returns once every request in flight
//! has been answered.

use std::sync::Arc;

use cascade_bus::{BusError, Message, Received, Subscription};
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest, dispatcher_reply};
use cascade_proto::convert::ShardRequest;
use cascade_store::StoreError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::requests;

/// Requests a shard works on at once, long polls apart.
const MAX_IN_FLIGHT: usize = 16_384;
/// Takes that may wait for events, at once.
const MAX_LONG_POLLS: usize = 16_384;

/// Serves until the shard stops or the subscription ends (the shard then reports a failure).
pub(crate) async fn serve(ctx: Arc<ShardContext>, mut requests_in: Subscription) {
    let places = Arc::new(Places {
        requests: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        long_polls: Arc::new(Semaphore::new(MAX_LONG_POLLS)),
    });
    let mut tasks = JoinSet::new();
    loop {
        let message = tokio::select! {
            message = requests_in.next() => message,
            () = ctx.stopping.wait() => break,
        };
        let Some(message) = message else {
            tracing::error!(shard = ctx.shard, "dispatcher.subscription.ended");
            break;
        };
        while let Some(done) = tasks.try_join_next() {
            log_panic(&ctx, done);
        }
        // Decoded in its own task, as it is answered: a message from NATS is protobuf, and
        // this loop reads every request of the shard.
        let places = Arc::clone(&places);
        let ctx = Arc::clone(&ctx);
        tasks.spawn(async move {
            let mut message = message;
            let request = message.take_typed();
            let reply = match places.take(&request) {
                Ok(place) => {
                    let reply = requests::answer(&ctx, request).await;
                    drop(place);
                    reply
                }
                Err(busy) => DispatcherReply {
                    result: Some(dispatcher_reply::Result::Error(busy.to_status())),
                },
            };
            respond(&ctx, message, reply).await;
        });
    }
    // Stop receiving first, so nothing new arrives while the rest drains.
    drop(requests_in);
    ctx.wakeups.wake_all();
    while let Some(done) = tasks.join_next().await {
        log_panic(&ctx, done);
    }
}

/// The shard's places for requests in flight: long polls apart from the rest.
struct Places {
    requests: Arc<Semaphore>,
    long_polls: Arc<Semaphore>,
}

impl Places {
    /// A place for `request`, held until it is answered; `Busy` when its kind has none left.
    fn take(
        &self,
        request: &Result<Received<ShardRequest, DispatcherRequest>, BusError>,
    ) -> Result<OwnedSemaphorePermit, DispatcherError> {
        let (pool, limit, what) = match may_wait(request) {
            true => (&self.long_polls, MAX_LONG_POLLS, "takes waiting for events"),
            false => (&self.requests, MAX_IN_FLIGHT, "requests in flight"),
        };
        Arc::clone(pool).try_acquire_owned().map_err(|_| {
            DispatcherError::Store(StoreError::Busy {
                what: format!("{limit} {what}"),
            })
        })
    }
}

/// Whether `request` is a take that may wait for events (a long poll).
fn may_wait(request: &Result<Received<ShardRequest, DispatcherRequest>, BusError>) -> bool {
    match request {
        Ok(Received::Value(ShardRequest::Take(take, _))) => take.wait.is_some_and(|w| !w.is_zero()),
        Ok(Received::Message(DispatcherRequest {
            op: Some(Op::Take(take)),
        })) => take.wait.is_some_and(|w| w.seconds > 0 || w.nanos > 0),
        _ => false,
    }
}

async fn respond(ctx: &ShardContext, message: Message, reply: DispatcherReply) {
    if let Err(e) = message.respond_with(reply).await {
        // The requester gave up waiting; what was done stays done.
        tracing::debug!(shard = ctx.shard, error = %e, "dispatcher.respond");
    }
}

fn log_panic(ctx: &ShardContext, done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        tracing::error!(shard = ctx.shard, error = %e, "dispatcher.request.panicked");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cascade_core::QueueName;
    use cascade_proto::convert::TakeItem;
    use cascade_proto::v1;

    use super::*;

    fn take(wait: Option<Duration>) -> ShardRequest {
        ShardRequest::Take(
            TakeItem {
                queue: QueueName::parse("jobs").expect("queue"),
                max_events: 1,
                lease: None,
                wait,
                worker_id: String::new(),
            },
            Vec::new(),
        )
    }

    fn message(op: Op) -> Result<Received<ShardRequest, DispatcherRequest>, BusError> {
        Ok(Received::Message(DispatcherRequest { op: Some(op) }))
    }

    /// Only takes that may wait go to the long polls' places, whichever way they travel.
    #[test]
    fn takes_that_may_wait_are_long_polls() {
        let value = |request| Ok(Received::Value(request));
        assert!(may_wait(&value(take(Some(Duration::from_secs(5))))));
        assert!(!may_wait(&value(take(None))));
        assert!(!may_wait(&value(take(Some(Duration::ZERO)))));
        assert!(!may_wait(&value(ShardRequest::Complete(Vec::new()))));
        let waiting = v1::TakeRequest {
            wait: Some(prost_types::Duration {
                seconds: 2,
                nanos: 0,
            }),
            ..v1::TakeRequest::default()
        };
        assert!(may_wait(&message(Op::Take(waiting))));
        assert!(!may_wait(&message(Op::Take(v1::TakeRequest::default()))));
        assert!(!may_wait(&message(Op::Get(v1::GetRequest::default()))));
    }
}
