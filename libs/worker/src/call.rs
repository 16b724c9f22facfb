//! One handler call: the event converted for the handler, the handler run (within its
//! timeout), and whatever went wrong turned into the outcome the queue's rules expect.

use std::sync::Arc;
use std::time::Duration;

use cascade_core::Outcome;
use cascade_core::error::cut_to;
use cascade_core::outcome::MAX_DEAD_LETTER_REASON_BYTES;
use cascade_proto::convert::event_from_proto;
use cascade_proto::v1;
use cascade_telemetry::attr;
use tracing::{Instrument, field};

use crate::Handler;

/// Never fails: an error, a timeout or an invalid outcome is logged and becomes a retry
/// with the queue's backoff.
///
/// The `worker.handle` span is the handler call of one event. When the process exports
/// traces it is a child of the context in the event's headers (so every stage of an event
/// is in one trace), the handler sees it as the current span (an HTTP or gRPC handler sends
/// it on), and an advance carries its context to the next stage's event.
pub(crate) async fn call_handler<H: Handler>(
    handler: Arc<H>,
    event: v1::Event,
    timeout: Option<Duration>,
) -> Outcome {
    let attempt = event.attempts.max(1);
    let span = tracing::info_span!(
        "worker.handle",
        cascade.queue = %event.queue,
        cascade.event_id = %event.id,
        cascade.attempt = attempt,
        cascade.pipeline = field::Empty,
        cascade.stage = field::Empty,
        cascade.outcome = field::Empty,
    );
    if !cascade_telemetry::is_recording() {
        return run(handler, event, attempt, timeout).instrument(span).await;
    }
    // Fails only for a span already entered; this one is new.
    let _ = cascade_telemetry::set_parent_from_headers(&span, &event.headers);
    let mut outcome = run(handler, event, attempt, timeout)
        .instrument(span.clone())
        .await;
    span.record(attr::OUTCOME, outcome.name());
    // A handler that put its own `traceparent` on the advance (one of its spans) wins.
    if let Outcome::Advance { headers, .. } = &mut outcome
        && !headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("traceparent"))
    {
        cascade_telemetry::inject_into_headers(&cascade_telemetry::span_context(&span), headers);
    }
    outcome
}

async fn run<H: Handler>(
    handler: Arc<H>,
    event: v1::Event,
    attempt: u32,
    timeout: Option<Duration>,
) -> Outcome {
    let event = match event_from_proto(event) {
        Ok(event) => event,
        Err(err) => {
            tracing::error!(error = %err, "worker.event.unreadable");
            return retry(format!("the worker could not read the event: {err}"));
        }
    };
    let called = handler.handle(&event, attempt);
    let answer = match timeout {
        None => called.await,
        Some(limit) => match tokio::time::timeout(limit, called).await {
            Ok(answer) => answer,
            Err(_) => {
                tracing::warn!(timeout = ?limit, "worker.handler.timed_out");
                return retry(format!(
                    "the handler timed out after {}",
                    cascade_core::units::format_duration(limit)
                ));
            }
        },
    };
    match answer {
        Ok(outcome) => match outcome.validate() {
            Ok(()) => outcome,
            Err(err) => {
                tracing::error!(error = %err, "worker.handler.invalid_outcome");
                retry(format!("the handler's outcome is invalid: {err}"))
            }
        },
        Err(err) => {
            tracing::warn!(error = %err, "worker.handler.failed");
            retry(err.to_string())
        }
    }
}

/// A retry with the queue's backoff, saying why: a long reason (a handler's error with its
/// stack trace, say) is cut to the most the gateway takes, which would otherwise refuse the
/// outcome and leave the event to wait out its lease.
pub(crate) fn retry(mut reason: String) -> Outcome {
    reason.truncate(cut_to(&reason, MAX_DEAD_LETTER_REASON_BYTES).len());
    Outcome::Retry {
        delay: None,
        reason: Some(reason),
    }
}
