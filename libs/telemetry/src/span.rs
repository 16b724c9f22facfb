//! Joining `tracing` spans to distributed traces.
//!
//! With trace export on, `init` installs the OpenTelemetry layer and these helpers are thin
//! wrappers over `tracing_opentelemetry::OpenTelemetrySpanExt`. With export off there is no
//! layer (it would cost every span some work for nothing), yet the trace must still reach
//! the next service: `set_parent` then remembers the incoming context on the span, and
//! `span_context` returns it for the span and its children, so the service forwards the
//! producer's `traceparent` unchanged, as W3C asks of a hop that does not participate.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::{OpenTelemetrySpanExt, SetParentError};
use tracing_subscriber::Registry;
use tracing_subscriber::registry::LookupSpan;

use crate::TelemetryError;
use crate::propagation::{HeaderMapLike, context_from_headers, has_valid_span};

/// Span attribute (and `tracing` field) names shared by every service. In the `tracing`
/// macros write them as dotted fields, `cascade.queue = %queue`, or `{ attr::QUEUE } = ..`.
pub mod attr {
    /// The queue's name; per-user names are fine here (traces are sampled, not aggregated).
    pub const QUEUE: &str = "cascade.queue";
    pub const PIPELINE: &str = "cascade.pipeline";
    pub const STAGE: &str = "cascade.stage";
    pub const EVENT_ID: &str = "cascade.event_id";
    /// The attempt at the current stage, 1 on the first take.
    pub const ATTEMPT: &str = "cascade.attempt";
    /// What a handler decided: `ack`, `advance`, `retry`, `reschedule`, `release`,
    /// `dead_letter`.
    pub const OUTCOME: &str = "cascade.outcome";
}

/// Whether `init` installed trace export in this process.
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Whether spans of this process are exported. Services create their per-event spans
/// (`ingest.enqueue`, `worker.take`, `dispatcher.activate`…) only when it is true: without a
/// collector such a span would only cost (an allocation and formatted fields per event),
/// and the trace context is then forwarded unchanged in the events' headers instead.
/// One relaxed atomic load.
pub fn is_recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

pub(crate) fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::Relaxed);
}

/// The incoming context, kept on a span when no OpenTelemetry layer is installed.
#[derive(Clone)]
struct RemoteParent(Context);

/// Makes `span` a child of the remote span in `cx` (from `context_from_headers` and the
/// like). Call it before the span is first entered. A `cx` without a valid span changes
/// nothing: the span keeps its `tracing` parent or starts a new trace.
///
/// Errors only if the span was already entered (its trace is fixed); a disabled span or a
/// process without `init` is not an error, there is just nothing to record.
pub fn set_parent(span: &tracing::Span, cx: Context) -> Result<(), TelemetryError> {
    if !has_valid_span(&cx) {
        return Ok(());
    }
    match span.set_parent(cx.clone()) {
        Ok(()) | Err(SetParentError::SpanDisabled) => Ok(()),
        Err(SetParentError::LayerNotFound) => {
            remember_parent(span, cx);
            Ok(())
        }
        Err(source @ SetParentError::AlreadyStarted) => Err(TelemetryError::SetParent { source }),
    }
}

/// `set_parent` with the context an event's headers carry.
pub fn set_parent_from_headers(
    span: &tracing::Span,
    headers: &impl HeaderMapLike,
) -> Result<(), TelemetryError> {
    set_parent(span, context_from_headers(headers))
}

/// The context to send onwards from inside `span` (inject it into headers or metadata):
/// the span itself when traces are recorded, else the remote parent given to it or to an
/// ancestor, else an empty context.
pub fn span_context(span: &tracing::Span) -> Context {
    let cx = span.context();
    if has_valid_span(&cx) {
        return cx;
    }
    remembered_parent(span).unwrap_or(cx)
}

/// `span_context` of the current span.
pub fn current_context() -> Context {
    span_context(&tracing::Span::current())
}

/// Links `span` to the span an event's headers carry (a `take` of many events links to
/// each); returns whether there was one. The SDK keeps 128 links per span by default
/// (`OTEL_SPAN_LINK_COUNT_LIMIT`).
pub fn add_link_from_headers(span: &tracing::Span, headers: &impl HeaderMapLike) -> bool {
    link_to(span, &context_from_headers(headers))
}

/// Links `span` to the span in `cx` (from `context_from_headers`, `span_context`…); returns
/// whether there was one.
pub fn link_to(span: &tracing::Span, cx: &Context) -> bool {
    let linked = cx.span().span_context().clone();
    if !linked.is_valid() {
        return false;
    }
    span.add_link(linked);
    true
}

fn remember_parent(span: &tracing::Span, cx: Context) {
    span.with_subscriber(|(id, dispatch)| {
        let Some(registry) = dispatch.downcast_ref::<Registry>() else {
            return;
        };
        if let Some(data) = registry.span(id) {
            data.extensions_mut().replace(RemoteParent(cx));
        }
    });
}

fn remembered_parent(span: &tracing::Span) -> Option<Context> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<Registry>()?;
        let data = registry.span(id)?;
        data.scope()
            .find_map(|s| s.extensions().get::<RemoteParent>().map(|p| p.0.clone()))
    })
    .flatten()
}
