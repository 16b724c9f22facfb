//! One handler call: the event converted for the handler, the handler run (within its
//! timeout), and whatever went wrong turned into the outcome the queue's rules expect.

use std::sync::Arc;
use std::time::Duration;

use cascade_core::Outcome;
use cascade_proto::convert::event_from_proto;
use cascade_proto::v1;
use tracing::Instrument;

use crate::Handler;

/// Never fails: an error, a timeout or an invalid outcome is logged and becomes a retry
/// with the queue's backoff.
pub(crate) async fn call_handler<H: Handler>(
    handler: Arc<H>,
    event: v1::Event,
    timeout: Option<Duration>,
) -> Outcome {
    let attempt = event.attempts.max(1);
    let span = tracing::info_span!("worker.handle", queue = %event.queue, id = %event.id, attempt);
    async move {
        let event = match event_from_proto(event) {
            Ok(event) => event,
            Err(err) => {
                tracing::error!(error = %err, "worker.event.unreadable");
                return retry();
            }
        };
        let called = handler.handle(&event, attempt);
        let answer = match timeout {
            None => called.await,
            Some(limit) => match tokio::time::timeout(limit, called).await {
                Ok(answer) => answer,
                Err(_) => {
                    tracing::warn!(timeout = ?limit, "worker.handler.timed_out");
                    return retry();
                }
            },
        };
        match answer {
            Ok(outcome) => match outcome.validate() {
                Ok(()) => outcome,
                Err(err) => {
                    tracing::error!(error = %err, "worker.handler.invalid_outcome");
                    retry()
                }
            },
            Err(err) => {
                tracing::warn!(error = %err, "worker.handler.failed");
                retry()
            }
        }
    }
    .instrument(span)
    .await
}

/// A retry with the queue's backoff.
fn retry() -> Outcome {
    Outcome::Retry { delay: None }
}
