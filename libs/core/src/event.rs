//! The event and its states: delayed (activation time in the future) → ready → leased → gone.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::{Error, excerpt};
use crate::id::EventId;
use crate::queue::QueueName;
use crate::text::is_header_char;
use crate::time::Timestamp;

pub const MAX_HEADERS: usize = 64;

/// The prefix of the headers Cascade itself sets (below): a client may not set them, or a
/// redrive could be sent to a queue of its choosing.
pub const RESERVED_HEADER_PREFIX: &str = "cascade-";

/// Whether `name` is one of Cascade's own headers, in any case: an HTTP handler gets header
/// names in lower case, so `Cascade-Dead-Letter-From` would reach it as the real one.
pub fn is_reserved_header(name: &str) -> bool {
    name.get(..RESERVED_HEADER_PREFIX.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(RESERVED_HEADER_PREFIX))
}
/// Headers the shard sets on a dead letter: the queue it left, and why.
pub const DEAD_LETTER_FROM: &str = "cascade-dead-letter-from";
pub const DEAD_LETTER_REASON: &str = "cascade-dead-letter-reason";
/// The W3C trace context an event's headers carry (docs/tracing.md).
pub const TRACE_CONTEXT_HEADERS: [&str; 2] = ["traceparent", "tracestate"];
/// Set on an event by a retry that said why it failed; its dead-letter reason repeats it.
pub const LAST_FAILURE: &str = "cascade-last-failure";
pub const MAX_HEADER_NAME_BYTES: usize = 128;
pub const MAX_HEADER_VALUE_BYTES: usize = 4096;

/// What a stored event may come to carry beyond the payload and headers it was sent with,
/// in every message that carries it whole (a take's answer, a hand-off to another shard):
/// Cascade's own headers (a last failure of up to 1 KiB, a dead letter's reason of up to
/// 2 KiB and its origin) and its ID, queue, times, attempts and lease. An event sent, or
/// grown by an update or an advance, is kept this much under what one message carries, so
/// that it can always be taken and handed on.
pub const EVENT_ROOM: usize = 4096;

/// The bytes of an event's payload and its own headers, as an encoded message holds them
/// (each header's name and value with a few bytes of framing). Cascade's own headers are
/// left out: [`EVENT_ROOM`] is kept for them.
pub fn event_bytes(payload_len: usize, headers: &BTreeMap<String, String>) -> usize {
    headers
        .iter()
        .filter(|(name, _)| !is_reserved_header(name))
        .map(|(name, value)| name.len() + value.len() + 6)
        .sum::<usize>()
        + payload_len
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventState {
    /// Waiting for `activate_at`.
    Delayed,
    /// Deliverable, in `(activate_at, insertion sequence)` order.
    Ready,
    /// Taken, awaiting an outcome until `lease_expires_at`.
    Leased,
}

impl EventState {
    /// Lowercase name for logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            EventState::Delayed => "delayed",
            EventState::Ready => "ready",
            EventState::Leased => "leased",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub id: EventId,
    pub queue: QueueName,
    pub payload: Bytes,
    /// Carries the W3C `traceparent` among others.
    pub headers: BTreeMap<String, String>,
    pub activate_at: Timestamp,
    pub state: EventState,
    /// Takes at the current stage: the first take makes it 1, an advance resets it to 0.
    pub attempts: u32,
    pub created_at: Timestamp,
    /// Bumped by every change, so stale timer firings and hand-offs can be recognised.
    pub version: u64,
    /// Set while leased.
    pub lease_expires_at: Option<Timestamp>,
}

/// The headers that count against [`MAX_HEADERS`]: all but Cascade's own (`cascade-*`, which
/// clients may not set), so that an event whose own headers fill it still takes a dead
/// letter's origin and reason, or a last failure, and can still be handed on.
pub fn own_header_count(headers: &BTreeMap<String, String>) -> usize {
    headers
        .keys()
        .filter(|name| !is_reserved_header(name))
        .count()
}

/// Checks headers given in the field `headers`.
pub fn validate_headers(headers: &BTreeMap<String, String>) -> Result<(), Error> {
    validate_headers_at(headers, "headers")
}

/// At most 64 headers of the event's own; names 1-128 bytes of `[A-Za-z0-9_.-]`; values at
/// most 4096 bytes.
pub fn validate_headers_at(headers: &BTreeMap<String, String>, field: &str) -> Result<(), Error> {
    let own = own_header_count(headers);
    if own > MAX_HEADERS {
        return Err(Error::invalid(
            field,
            format!("must hold at most {MAX_HEADERS} headers, got {own}"),
        ));
    }
    for (name, value) in headers {
        let name_is_valid = !name.is_empty()
            && name.len() <= MAX_HEADER_NAME_BYTES
            && name.chars().all(is_header_char);
        if !name_is_valid {
            return Err(Error::invalid(
                field,
                format!(
                    "a header name must be 1-128 bytes of [A-Za-z0-9_.-], got {}",
                    excerpt(name)
                ),
            ));
        }
        if value.len() > MAX_HEADER_VALUE_BYTES {
            return Err(Error::invalid(
                field,
                format!(
                    "the value of header {name} must be at most {MAX_HEADER_VALUE_BYTES} bytes, got {}",
                    value.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    #[test]
    fn valid_headers() {
        assert_eq!(validate_headers(&BTreeMap::new()), Ok(()));
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            validate_headers(&headers(&[("traceparent", traceparent), ("x.y_z-1", "")])),
            Ok(())
        );
        let long_value = "v".repeat(MAX_HEADER_VALUE_BYTES);
        assert_eq!(
            validate_headers(&headers(&[(&"n".repeat(128), &long_value)])),
            Ok(())
        );
        let many: BTreeMap<String, String> =
            (0..64).map(|i| (format!("h{i}"), String::new())).collect();
        assert_eq!(validate_headers(&many), Ok(()));
    }

    /// Cascade's own headers (a dead letter's origin and reason, a last failure) come on
    /// top of the 64 an event may hold of its own.
    #[test]
    fn cascades_own_headers_do_not_count_against_the_limit() {
        let mut headers: BTreeMap<String, String> =
            (0..64).map(|i| (format!("h{i}"), "v".to_owned())).collect();
        for name in [DEAD_LETTER_FROM, DEAD_LETTER_REASON, LAST_FAILURE] {
            headers.insert(name.into(), "x".into());
        }
        assert_eq!(validate_headers(&headers), Ok(()));
        headers.insert("h64".into(), "v".into());
        let err = validate_headers(&headers).expect_err("65 of its own");
        assert!(
            err.to_string().contains("at most 64 headers, got 65"),
            "{err}"
        );
    }

    #[test]
    fn invalid_headers_say_what_is_valid() {
        let too_many: BTreeMap<String, String> =
            (0..65).map(|i| (format!("h{i}"), String::new())).collect();
        assert_eq!(
            validate_headers(&too_many).expect_err("65").to_string(),
            "headers: must hold at most 64 headers, got 65"
        );
        assert_eq!(
            validate_headers(&headers(&[("bad name", "v")]))
                .expect_err("space")
                .to_string(),
            "headers: a header name must be 1-128 bytes of [A-Za-z0-9_.-], got \"bad name\""
        );
        assert!(validate_headers(&headers(&[("", "v")])).is_err());
        assert!(validate_headers(&headers(&[("a:b", "v")])).is_err());
        assert!(validate_headers(&headers(&[(&"n".repeat(129), "v")])).is_err());
        let err = validate_headers_at(&headers(&[("big", &"v".repeat(4097))]), "advance.headers")
            .expect_err("long value");
        assert_eq!(
            err.to_string(),
            "advance.headers: the value of header big must be at most 4096 bytes, got 4097"
        );
    }

    #[test]
    fn state_names() {
        let names =
            [EventState::Delayed, EventState::Ready, EventState::Leased].map(EventState::name);
        assert_eq!(names, ["delayed", "ready", "leased"]);
    }
}
