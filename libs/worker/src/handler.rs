//! What a user implements: [`Handler`] gets a leased event and its attempt number and
//! decides its [`Outcome`]. An `Err` means "retry with the queue's backoff".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cascade_core::{Event, Outcome};

/// Any error a handler returns; it is logged and the event is retried with the queue's
/// backoff (and dead-lettered once it reaches the queue's `max_attempts`).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// One step of work on a leased event.
///
/// `attempt` is 1 on the first delivery at this stage and grows with each redelivery
/// (retries and expired leases). Return [`Outcome::Ack`] when done,
/// [`Outcome::Advance`] to move the event on (without `to`: the next stage),
/// [`Outcome::Retry`], [`Outcome::Reschedule`], [`Outcome::DeadLetter`], or
/// [`Outcome::Release`] to hand it back at once. Implement it with `async fn handle`.
///
/// A handler may run concurrently with itself (up to the worker's concurrency), and may
/// run again for the same event after a crash or an expired lease: make it idempotent.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        &self,
        event: &Event,
        attempt: u32,
    ) -> impl Future<Output = Result<Outcome, HandlerError>> + Send;
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`Handler`] with a boxed future, so that handlers of different types fit one type.
trait ErasedHandler: Send + Sync + 'static {
    fn handle_boxed<'a>(
        &'a self,
        event: &'a Event,
        attempt: u32,
    ) -> BoxFuture<'a, Result<Outcome, HandlerError>>;
}

impl<H: Handler> ErasedHandler for H {
    fn handle_boxed<'a>(
        &'a self,
        event: &'a Event,
        attempt: u32,
    ) -> BoxFuture<'a, Result<Outcome, HandlerError>> {
        Box::pin(self.handle(event, attempt))
    }
}

/// A handler whose type is chosen at run time (a stage picks HTTP, gRPC or Rust from its
/// config). Cheap to clone.
#[derive(Clone)]
pub struct BoxedHandler(Arc<dyn ErasedHandler>);

impl BoxedHandler {
    pub fn new(handler: impl Handler) -> BoxedHandler {
        BoxedHandler(Arc::new(handler))
    }
}

impl Handler for BoxedHandler {
    // An async fn, so the boxed future may borrow `self` and `event` for the shorter of
    // their lifetimes.
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        self.0.handle_boxed(event, attempt).await
    }
}

impl std::fmt::Debug for BoxedHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BoxedHandler")
    }
}

/// A handler from a closure that gets its own copy of the event:
/// `handler_fn(|event, attempt| async move { Ok(Outcome::Ack) })`.
pub fn handler_fn<F, Fut>(function: F) -> HandlerFn<F>
where
    F: Fn(Event, u32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, HandlerError>> + Send + 'static,
{
    HandlerFn(function)
}

/// See [`handler_fn`].
pub struct HandlerFn<F>(F);

impl<F, Fut> Handler for HandlerFn<F>
where
    F: Fn(Event, u32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Outcome, HandlerError>> + Send + 'static,
{
    fn handle(
        &self,
        event: &Event,
        attempt: u32,
    ) -> impl Future<Output = Result<Outcome, HandlerError>> + Send {
        // The closure's future owns its event, so it needs no borrow of the worker's copy.
        (self.0)(event.clone(), attempt)
    }
}
