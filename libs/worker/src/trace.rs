//! The worker's span besides the handler call (`call`): `worker.take`, made when a `Take`
//! brought events, linked to the context of each (they belong to other traces: one per
//! event). A long poll that brings nothing makes no span (an idle worker would otherwise
//! send one trace per poll). Made only when the process exports traces; otherwise nothing
//! is parsed per event.

use cascade_proto::v1;
use cascade_telemetry::{add_link_from_headers, is_recording};

pub(crate) fn record_take(queue: &str, taken: &v1::TakeResponse) {
    if taken.events.is_empty() || !is_recording() {
        return;
    }
    let span = tracing::info_span!(
        "worker.take",
        cascade.queue = queue,
        events = taken.events.len()
    );
    for event in taken.events.iter().filter_map(|e| e.event.as_ref()) {
        add_link_from_headers(&span, &event.headers);
    }
}
