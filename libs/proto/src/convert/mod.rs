//! The one place where protobuf messages become validated domain types, and domain types
//! become messages. The gateway converts what a client sends before it routes it. An
//! enqueue, a take or a completion then reaches its shard as those values in one process
//! ([`ShardRequest`]); a message from another process, and any other request, the shard
//! converts again, since the bus between processes is not a trust boundary we rely on.
//! Domain and store code never see prost types.
//!
//! Failure policy: a conversion either yields a fully valid value or a
//! [`ConvertError::Invalid`] (INVALID_ARGUMENT) whose field is the dotted path of the bad
//! field in the message, e.g. `queue` or `advance.delay`, and whose reason says what would be
//! valid. An item of a batch is converted on its own; whoever numbered the items places its
//! error under it (`items[3].queue`, with [`field_at`]).
//!
//! Unset and zero values: proto3 cannot tell an unset number from 0, so each function
//! documents what 0 means (usually "the default"). Times are microseconds in the domain:
//! the nanoseconds of a protobuf `Timestamp` or `Duration` below a microsecond are dropped.

use bytes::Bytes;

mod bus;
mod enqueue;
mod error;
mod event;
mod lookup;
mod pipeline;
mod queue;
mod shard;
mod status;
mod time;
mod worker;

pub use bus::{
    activation_from_proto, activation_to_proto, delivery_from_proto, delivery_to_proto,
    schedule_entry_from_proto, schedule_entry_to_proto,
};
pub use enqueue::{
    Destination, EnqueueItem, When, enqueue_batch_from_proto, enqueue_from_proto, enqueued_to_proto,
};
pub use error::ConvertError;
pub use event::{
    event_from_proto, event_into_proto, event_state_to_proto, event_to_proto,
    leased_event_into_proto, leased_event_to_proto,
};
pub use lookup::{
    DEFAULT_PAGE_SIZE, EventRef, MAX_PAGE_SIZE, PageRequest, UpdateItem, event_ref_from_proto,
    list_dead_letters_from_proto, list_queues_from_proto, redrive_from_proto, update_from_proto,
};
pub use pipeline::{get_pipeline_from_proto, pipeline_from_proto, pipeline_to_proto};
pub use queue::{
    create_queue_from_proto, family_stats_to_proto, queue_config_from_proto, queue_config_to_proto,
    queue_name_from_proto, queue_stats_from_proto, queue_stats_to_proto, queue_to_proto,
};
pub use shard::ShardRequest;
pub use status::{code_from_grpc, status};
pub use time::{
    duration_from_proto, duration_to_proto, optional_duration_from_proto, timestamp_from_proto,
    timestamp_to_proto,
};
pub use worker::{
    CompletionItem, ExtendItem, MAX_TAKE_EVENTS, TakeItem, completion_from_proto,
    completion_to_proto, completions_from_proto, extend_from_proto, handle_outcome_from_proto,
    outcome_from_proto, outcome_to_proto, take_from_proto,
};

/// `field` under `prefix`: `("items[3]", "queue")` → `items[3].queue`; an empty prefix
/// leaves the field as it is.
pub fn field_at(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (true, _) => field.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{field}"),
    }
}

/// Moves a domain error under `prefix` (see [`field_at`]); errors that name no request field
/// (a payload over the queue's limit) are kept.
pub(crate) fn under(prefix: &str, err: cascade_core::Error) -> cascade_core::Error {
    match err {
        cascade_core::Error::InvalidArgument { field, reason } => {
            cascade_core::Error::invalid(field_at(prefix, &field), reason)
        }
        other => other,
    }
}

/// INVALID_ARGUMENT for `prefix.field`.
pub(crate) fn invalid(prefix: &str, field: &str, reason: impl Into<String>) -> ConvertError {
    ConvertError::Invalid(cascade_core::Error::invalid(
        field_at(prefix, field),
        reason,
    ))
}

/// Payloads up to this size are copied out of the message they arrived in; larger ones stay
/// views of its buffer. tonic reads each request into a buffer of 8 KiB or more, and a view
/// holds all of it until the shard has written the event: 4,096 unary enqueues in flight (the
/// gateway's default bound) of 100 bytes each would hold 32 MiB instead of 400 KiB.
pub(crate) const COPIED_PAYLOAD_BYTES: usize = 4096;

/// A received payload as the domain keeps it: see [`COPIED_PAYLOAD_BYTES`].
pub(crate) fn payload_from_proto(payload: Bytes) -> Bytes {
    if payload.len() <= COPIED_PAYLOAD_BYTES {
        Bytes::copy_from_slice(&payload)
    } else {
        payload
    }
}

/// Proto maps are hash maps; the domain keeps headers ordered.
pub(crate) fn headers_from_proto(
    headers: &std::collections::HashMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

pub(crate) fn headers_to_proto(
    headers: &std::collections::BTreeMap<String, String>,
) -> std::collections::HashMap<String, String> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_nest_under_their_prefix() {
        assert_eq!(field_at("", "queue"), "queue");
        assert_eq!(field_at("items[3]", "queue"), "items[3].queue");
        assert_eq!(field_at("items[3]", ""), "items[3]");
        let err = under(
            "completions[1]",
            cascade_core::Error::invalid("advance.to", "bad"),
        );
        assert_eq!(err.to_string(), "completions[1].advance.to: bad");
        let big = cascade_core::Error::PayloadTooLarge { size: 2, limit: 1 };
        assert_eq!(under("items[0]", big.clone()), big);
    }
}
