//! The request loop of one shard: every bus request runs in its own task (long polls wait
//! without holding others up), at most `MAX_IN_FLIGHT` at once — beyond, the request is
//! answered RESOURCE_EXHAUSTED at once. On stop: no more requests are read, long polls answer
//! what they have, and the loop returns once every request in flight has been answered.

use std::sync::Arc;

use cascade_bus::{Message, Subscription};
use cascade_proto::bus::v1::{DispatcherReply, dispatcher_reply};
use cascade_store::StoreError;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::DispatcherError;
use crate::context::ShardContext;
use crate::requests;

/// Requests a shard works on at once, long polls included.
const MAX_IN_FLIGHT: usize = 16_384;

/// Serves until the shard stops or the subscription ends (the shard then reports a failure).
pub(crate) async fn serve(ctx: Arc<ShardContext>, mut requests_in: Subscription) {
    let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
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
        match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => {
                let ctx = Arc::clone(&ctx);
                let mut message = message;
                tasks.spawn(async move {
                    let reply = requests::answer(&ctx, message.take_typed()).await;
                    respond(&ctx, message, reply).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let ctx = Arc::clone(&ctx);
                tasks.spawn(async move {
                    let busy = DispatcherError::Store(StoreError::Busy {
                        what: format!("{MAX_IN_FLIGHT} requests in flight"),
                    });
                    let reply = DispatcherReply {
                        result: Some(dispatcher_reply::Result::Error(busy.to_status())),
                    };
                    respond(&ctx, message, reply).await;
                });
            }
        }
    }
    // Stop receiving first, so nothing new arrives while the rest drains.
    drop(requests_in);
    ctx.wakeups.wake_all();
    while let Some(done) = tasks.join_next().await {
        log_panic(&ctx, done);
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
