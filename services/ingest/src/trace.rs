//! The gateway's part of "one trace per event" (docs/tracing.md): the producer's context
//! (W3C `traceparent` in the request's metadata) is continued by an `ingest.enqueue` span,
//! whose context is written into the event's headers, so every later span of the event
//! (activation, each stage's handler, advance) descends from it. An advance whose headers
//! carry the handler span's context gets an `ingest.advance` span, whose context the next
//! stage's event carries on.
//!
//! Cost: spans are made only when the process exports traces
//! ([`cascade_telemetry::is_recording`]); otherwise a producer's `traceparent` is copied
//! into the event's headers unchanged (a hop that does not take part forwards it), which
//! is one metadata lookup per request.

use cascade_proto::v1::completion::Outcome as ProtoOutcome;
use cascade_proto::v1::{Completion, EnqueueRequest, LeasedEvent};
use cascade_telemetry::{
    Context, add_link_from_headers, attr, context_from_headers, context_from_metadata,
    has_valid_span, inject_into_headers, is_recording, link_to, set_parent, span_context,
};
use tonic::metadata::MetadataMap;
use tracing::{Span, field};

/// The span of a unary `Enqueue`, child of the producer's context (the request's metadata,
/// else a `traceparent` the item's headers already carry, else a new trace); its context
/// is stamped into the item's headers.
pub(crate) fn enqueue_span(metadata: &MetadataMap, item: &mut EnqueueRequest) -> Span {
    let incoming = context_from_metadata(metadata);
    if !is_recording() {
        inject_into_headers(&incoming, &mut item.headers);
        return Span::none();
    }
    let span = event_span();
    let parent = if has_valid_span(&incoming) {
        incoming
    } else {
        context_from_headers(&item.headers)
    };
    join(&span, parent.clone());
    if !item.pipeline.is_empty() {
        span.record(attr::PIPELINE, item.pipeline.as_str());
    }
    inject_into_headers(&context_of(&span, parent), &mut item.headers);
    span
}

/// The spans of an `EnqueueBatch`: one for the request (child of the metadata's context),
/// and one `ingest.enqueue` per item that is to be a trace of its own, linked to the
/// request's span: an item whose headers carry a context (the producer traced it: its
/// child), and every item when the request carries none (a new trace each: one trace per
/// event). Every item's headers get the context of its span; with a context in the
/// metadata, the items without one of their own are in the producer's trace, under the
/// request's span.
pub(crate) fn enqueue_batch_spans(
    metadata: &MetadataMap,
    items: &mut [EnqueueRequest],
) -> (Span, Vec<Option<Span>>) {
    let incoming = context_from_metadata(metadata);
    let producer_traced = has_valid_span(&incoming);
    if !is_recording() {
        if producer_traced {
            // Items without a context of their own (as below, when spans are made).
            for item in items
                .iter_mut()
                .filter(|i| !has_valid_span(&context_from_headers(&i.headers)))
            {
                inject_into_headers(&incoming, &mut item.headers);
            }
        }
        return (Span::none(), Vec::new());
    }
    let batch = tracing::info_span!("ingest.enqueue_batch", items = items.len());
    join(&batch, incoming.clone());
    let batch_context = context_of(&batch, incoming);
    let mut spans = Vec::with_capacity(items.len());
    for item in items.iter_mut() {
        let own = context_from_headers(&item.headers);
        if producer_traced && !has_valid_span(&own) {
            inject_into_headers(&batch_context, &mut item.headers);
            spans.push(None);
            continue;
        }
        // Not inside the request's span: without a context of its own, a new trace.
        let span = event_span();
        join(&span, own.clone());
        link_to(&span, &batch_context);
        if !item.pipeline.is_empty() {
            span.record(attr::PIPELINE, item.pipeline.as_str());
        }
        inject_into_headers(&context_of(&span, own), &mut item.headers);
        spans.push(Some(span));
    }
    (batch, spans)
}

/// `ingest.persist`: the bus request to the owning shard (`None`: to each shard a batch
/// touches), answered once the shard's commit is durable. A child of the current span.
pub(crate) fn persist_span(shard: Option<u32>) -> Span {
    if !is_recording() {
        return Span::none();
    }
    let span = tracing::info_span!("ingest.persist", cascade.shard = field::Empty);
    if let Some(shard) = shard {
        span.record("cascade.shard", shard);
    }
    span
}

/// One `ingest.advance` span per advance whose headers carry a context (the handler's
/// span): its child, covering the resolution of the target and the shard's commit; its
/// context replaces the one in the headers, so the next stage's event descends from it.
pub(crate) fn advance_spans(completions: &mut [Completion]) -> Vec<Span> {
    if !is_recording() {
        return Vec::new();
    }
    let mut spans = Vec::new();
    for completion in completions.iter_mut() {
        let Some(ProtoOutcome::Advance(advance)) = &mut completion.outcome else {
            continue;
        };
        let parent = context_from_headers(&advance.headers);
        if !has_valid_span(&parent) {
            continue;
        }
        let span = tracing::info_span!(
            "ingest.advance",
            cascade.queue = completion.queue.as_str(),
            cascade.event_id = completion.id.as_str(),
            cascade.outcome = "advance",
        );
        join(&span, parent);
        inject_into_headers(&span_context(&span), &mut advance.headers);
        spans.push(span);
    }
    spans
}

/// `ingest.take`, made when a `Take` handed out events (a long poll that brings nothing
/// makes no span), linked to the context of each taken event.
pub(crate) fn record_take(queue: &str, events: &[LeasedEvent]) {
    if events.is_empty() || !is_recording() {
        return;
    }
    let span = tracing::info_span!("ingest.take", cascade.queue = queue, events = events.len());
    for event in events.iter().filter_map(|e| e.event.as_ref()) {
        add_link_from_headers(&span, &event.headers);
    }
}

fn event_span() -> Span {
    tracing::info_span!(
        "ingest.enqueue",
        cascade.queue = field::Empty,
        cascade.pipeline = field::Empty,
        cascade.event_id = field::Empty,
        otel.status_code = field::Empty,
    )
}

/// The context to store in an event: `span`'s, or `parent` when the log filter disabled
/// the span (`log_level` above info), so that the producer's trace is still forwarded.
fn context_of(span: &Span, parent: Context) -> Context {
    if span.is_disabled() {
        parent
    } else {
        span_context(span)
    }
}

fn join(span: &Span, parent: Context) {
    if let Err(err) = set_parent(span, parent) {
        // Only if the span was entered already: a bug here, not a reason to fail a request.
        tracing::debug!(error = %err, "ingest.trace.parent_not_set");
    }
}

#[cfg(test)]
mod tests {
    //! Without trace export (no `init` in unit tests) the producer's context is forwarded
    //! unchanged; with export, the e2e test `trace_per_event` checks the spans.

    use super::*;

    const PRODUCER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OWN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn metadata(traceparent: Option<&str>) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        if let Some(value) = traceparent {
            metadata.insert("traceparent", value.parse().expect("ascii"));
        }
        metadata
    }

    fn item(traceparent: Option<&str>) -> EnqueueRequest {
        let mut item = EnqueueRequest::default();
        if let Some(value) = traceparent {
            item.headers.insert("traceparent".into(), value.into());
        }
        item
    }

    #[test]
    fn the_producers_context_is_forwarded_into_the_event() {
        let mut unary = item(None);
        let span = enqueue_span(&metadata(Some(PRODUCER)), &mut unary);
        assert!(span.is_none());
        assert_eq!(unary.headers["traceparent"], PRODUCER);

        let mut untraced = item(None);
        enqueue_span(&metadata(None), &mut untraced);
        assert!(untraced.headers.is_empty());

        let mut items = vec![item(None), item(Some(OWN))];
        let (batch, spans) = enqueue_batch_spans(&metadata(Some(PRODUCER)), &mut items);
        assert!(batch.is_none() && spans.is_empty());
        assert_eq!(items[0].headers["traceparent"], PRODUCER);
        assert_eq!(
            items[1].headers["traceparent"], OWN,
            "an item's own context wins"
        );
    }

    #[test]
    fn no_span_is_made_without_export() {
        assert!(persist_span(Some(1)).is_none());
        let mut completions = vec![Completion::default()];
        assert!(advance_spans(&mut completions).is_empty());
    }
}
