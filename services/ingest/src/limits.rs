//! The sizes the gateway enforces before anything reaches a shard: items per request
//! (`ingest.max_batch_items`), bytes per payload (`ingest.max_payload`), bytes per batch
//! (`ingest.max_batch_bytes`), and bytes per bus message (the bus's `max_payload` less room
//! for the envelope). The transport's own limit ([`request_limit`]) is derived from them, so
//! that a request these checks accept is never refused before they run.

use std::time::Duration;

use cascade_core::event::EVENT_ROOM;
use cascade_core::{MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES, MAX_HEADERS};
use cascade_proto::{ITEM_RESULT_BYTES, RefusedWhole};
use cascade_service::Settings;

use crate::IngestError;

/// Kept free in every bus message for what wraps the items: the request envelope, a batch's
/// framing and the transport's headers. Items are packed until the rest is used.
const BUS_ENVELOPE_ROOM: usize = 4096;

/// The longest a shard holds one `Take` poll: a longer wait is several polls, so that a
/// gateway told to stop answers a long poll within this (see `worker`). An idle consumer
/// costs one bus request per slice.
pub(crate) const TAKE_POLL_SLICE: Duration = Duration::from_secs(2);

/// What one item may carry besides its payload: its headers at their limits, plus room for
/// its queue, IDs, times and a dead-letter reason, with their protobuf framing.
const ITEM_ROOM: usize =
    MAX_HEADERS * (MAX_HEADER_NAME_BYTES + MAX_HEADER_VALUE_BYTES + 8) + (64 << 10);

/// The largest request the gRPC transport reads: one item with the largest payload, or the
/// largest batch, whichever is larger. A larger one is refused before it is decoded.
pub(crate) fn request_limit(settings: &Settings) -> usize {
    let largest_item = to_usize(settings.ingest.max_payload).saturating_add(ITEM_ROOM);
    largest_item.max(to_usize(settings.ingest.max_batch_bytes))
}

fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// `ingest.max_payload`.
    pub max_payload: u64,
    /// Bytes of items one bus request may carry.
    pub bus_room: usize,
    /// Bytes one event's message may take of it: less, by the room a stored event needs
    /// beside what it was sent with (`cascade_core::event::EVENT_ROOM`), so that it can
    /// always be taken and handed on whole.
    pub event_room: usize,
    /// `ingest.max_batch_items`: items per client request and per coalesced bus request.
    pub max_batch_items: usize,
    /// `ingest.max_batch_bytes`: encoded bytes of one batch request.
    pub max_batch_bytes: u64,
    /// `ingest.requests_in_flight`: coalesced bus requests per shard and kind at once.
    pub requests_in_flight: usize,
    /// `bus.request_timeout`.
    pub request_timeout: Duration,
    /// `dispatcher.max_take_wait`: the shard cuts a longer wait to this.
    pub max_take_wait: Duration,
}

impl Limits {
    pub fn new(settings: &Settings, bus_max_payload: usize) -> Limits {
        Limits {
            max_payload: settings.ingest.max_payload,
            bus_room: bus_max_payload.saturating_sub(BUS_ENVELOPE_ROOM),
            event_room: bus_max_payload.saturating_sub(BUS_ENVELOPE_ROOM + EVENT_ROOM),
            max_batch_items: usize::try_from(settings.ingest.max_batch_items).unwrap_or(usize::MAX),
            max_batch_bytes: settings.ingest.max_batch_bytes,
            requests_in_flight: usize::try_from(settings.ingest.requests_in_flight)
                .unwrap_or(usize::MAX),
            request_timeout: settings.bus.request_timeout,
            max_take_wait: settings.dispatcher.max_take_wait,
        }
    }

    /// Items one coalesced bus request carries at most: `ingest.max_batch_items`, and no
    /// more than the bus message has room for the results of (`ITEM_RESULT_BYTES` each),
    /// so that its reply fits one bus message whatever each item's outcome.
    pub fn bus_items(&self) -> usize {
        self.max_batch_items
            .min(self.bus_room / ITEM_RESULT_BYTES)
            .max(1)
    }

    /// INVALID_ARGUMENT when a request carries more than `ingest.max_batch_items` items.
    pub fn check_items(&self, field: &str, count: usize) -> Result<(), IngestError> {
        if count <= self.max_batch_items {
            return Ok(());
        }
        Err(IngestError::invalid(
            field,
            format!(
                "at most {} per request (ingest.max_batch_items), got {count}; split the request",
                self.max_batch_items
            ),
        )
        .refusing_whole(RefusedWhole::TooManyItems))
    }

    /// RESOURCE_EXHAUSTED when a batch request (`encoded_len` bytes) is over
    /// `ingest.max_batch_bytes`; `field` names its items.
    pub fn check_batch_bytes(&self, field: &str, encoded_len: usize) -> Result<(), IngestError> {
        let size = encoded_len as u64;
        if size <= self.max_batch_bytes {
            return Ok(());
        }
        Err(IngestError::TooLarge {
            field: field.to_owned(),
            size,
            limit: self.max_batch_bytes,
            why: "ingest.max_batch_bytes; split the request".to_owned(),
        }
        .refusing_whole(RefusedWhole::TooLarge))
    }

    /// RESOURCE_EXHAUSTED when the payload in `field` is over `ingest.max_payload`, or when the
    /// message holding it (`message_len` bytes encoded, payload included) would not fit in one
    /// bus message. The limit named is the payload size that would have fitted.
    pub fn check_payload(
        &self,
        field: &str,
        payload_len: usize,
        message_len: usize,
    ) -> Result<(), IngestError> {
        let size = payload_len as u64;
        if size > self.max_payload {
            return Err(IngestError::TooLarge {
                field: field.to_owned(),
                size,
                limit: self.max_payload,
                why: "ingest.max_payload".to_owned(),
            });
        }
        if message_len > self.event_room {
            let rest = message_len.saturating_sub(payload_len);
            return Err(IngestError::TooLarge {
                field: field.to_owned(),
                size,
                limit: self.event_room.saturating_sub(rest) as u64,
                why: format!(
                    "an event may take {} bytes of one bus message, and the rest of this one takes {rest}",
                    self.event_room
                ),
            });
        }
        Ok(())
    }

    /// How long in all a `Take` that asks to wait `wait` for events may wait.
    pub fn take_wait(&self, wait: Option<Duration>) -> Duration {
        wait.unwrap_or_default().min(self.max_take_wait)
    }

    /// How long to wait for a shard's answer to one poll that may wait `poll` for events.
    pub fn take_timeout(&self, poll: Duration) -> Duration {
        poll.saturating_add(self.request_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_payload: 1000,
            bus_room: 2000,
            event_room: 2000,
            max_batch_items: 3,
            max_batch_bytes: 5000,
            requests_in_flight: 2,
            request_timeout: Duration::from_secs(2),
            max_take_wait: Duration::from_secs(30),
        }
    }

    #[test]
    fn a_bus_request_carries_no_more_items_than_its_reply_has_room_for() {
        assert_eq!(
            limits().bus_items(),
            1,
            "2,000 bytes hold one result of 1,024"
        );
        let roomy = Limits {
            bus_room: 1 << 20,
            ..limits()
        };
        assert_eq!(roomy.bus_items(), 3, "ingest.max_batch_items");
        let middle = Limits {
            bus_room: 10 * ITEM_RESULT_BYTES,
            max_batch_items: 1000,
            ..limits()
        };
        assert_eq!(middle.bus_items(), 10);
    }

    #[test]
    fn payload_over_the_gateway_limit_names_size_and_limit() {
        let err = limits()
            .check_payload("items[1].payload", 1001, 1100)
            .expect_err("too large");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            err.to_string(),
            "items[1].payload: 1001 bytes is over the limit of 1000 bytes (ingest.max_payload)"
        );
        assert!(limits().check_payload("payload", 1000, 1100).is_ok());
    }

    #[test]
    fn payload_over_what_the_bus_carries_names_what_would_fit() {
        let mut small_bus = limits();
        small_bus.event_room = 500;
        let err = small_bus
            .check_payload("payload", 900, 1000)
            .expect_err("too large for the bus");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert!(
            err.to_string()
                .starts_with("payload: 900 bytes is over the limit of 400 bytes"),
            "{err}"
        );
    }

    #[test]
    fn batch_bytes_over_the_limit_name_it() {
        let err = limits()
            .check_batch_bytes("items", 5001)
            .expect_err("too large");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            err.to_string(),
            "items: 5001 bytes is over the limit of 5000 bytes (ingest.max_batch_bytes; split the request)"
        );
        assert_eq!(refused_whole(err), Some("too-large".to_owned()));
        assert!(limits().check_batch_bytes("items", 5000).is_ok());
    }

    #[test]
    fn the_transport_limit_fits_the_largest_item_and_the_largest_batch() {
        let mut settings = Settings::default();
        settings.ingest.max_payload = 4 << 20;
        settings.ingest.max_batch_bytes = 1 << 20;
        assert_eq!(request_limit(&settings), (4 << 20) + ITEM_ROOM);
        settings.ingest.max_batch_bytes = 64 << 20;
        assert_eq!(request_limit(&settings), 64 << 20);
    }

    /// The value of the status's refused-whole marker, as a client reads it.
    fn refused_whole(err: IngestError) -> Option<String> {
        let status = tonic::Status::from(err);
        let value = status.metadata().get(cascade_proto::REFUSED_WHOLE_KEY)?;
        Some(value.to_str().expect("ASCII").to_owned())
    }

    #[test]
    fn item_count_and_take_timeout() {
        let err = limits().check_items("items", 4).expect_err("too many");
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(
            err.to_string().starts_with("items: at most 3 per request"),
            "{err}"
        );
        assert_eq!(refused_whole(err), Some("too-many-items".to_owned()));
        assert!(limits().check_items("items", 3).is_ok());
        assert_eq!(limits().take_wait(None), Duration::ZERO);
        let long = limits().take_wait(Some(Duration::from_secs(600)));
        assert_eq!(long, Duration::from_secs(30));
        let timeout = limits().take_timeout(Duration::from_secs(1));
        assert_eq!(timeout, Duration::from_secs(3));
    }
}
