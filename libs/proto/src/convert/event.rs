//! Events out: domain [`Event`] and leased events to their messages.

use cascade_core::{Event, EventState};
use cascade_store::shard::LeasedEvent;

use super::time::timestamp_to_proto;
use crate::v1;

pub fn event_state_to_proto(state: EventState) -> v1::EventState {
    match state {
        EventState::Delayed => v1::EventState::Delayed,
        EventState::Ready => v1::EventState::Ready,
        EventState::Leased => v1::EventState::Leased,
    }
}

/// `lease_expires_at` is set only while the event is leased.
pub fn event_to_proto(event: &Event) -> v1::Event {
    event_into_proto(event.clone())
}

/// [`event_to_proto`] without copying the payload.
pub fn event_into_proto(event: Event) -> v1::Event {
    v1::Event {
        id: event.id.into(),
        queue: event.queue.into(),
        payload: event.payload,
        headers: event.headers.into_iter().collect(),
        activate_at: Some(timestamp_to_proto(event.activate_at)),
        state: event_state_to_proto(event.state).into(),
        attempts: event.attempts,
        created_at: Some(timestamp_to_proto(event.created_at)),
        version: event.version,
        lease_expires_at: event.lease_expires_at.map(timestamp_to_proto),
    }
}

/// The event with its lease token (16 hex digits) and deadline.
pub fn leased_event_to_proto(leased: &LeasedEvent) -> v1::LeasedEvent {
    leased_event_into_proto(leased.clone())
}

/// [`leased_event_to_proto`] without copying the payload.
pub fn leased_event_into_proto(leased: LeasedEvent) -> v1::LeasedEvent {
    v1::LeasedEvent {
        lease_token: leased.token.to_string(),
        lease_expires_at: Some(timestamp_to_proto(leased.expires_at)),
        event: Some(event_into_proto(leased.event)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cascade_core::{EventId, QueueName, Timestamp};
    use cascade_store::shard::LeaseToken;

    use super::*;

    fn event(state: EventState, lease: Option<Timestamp>) -> Event {
        Event {
            id: EventId::parse("order-1").expect("id"),
            queue: QueueName::parse("jobs").expect("queue"),
            payload: b"hello".to_vec(),
            headers: BTreeMap::from([("traceparent".to_owned(), "00-ab".to_owned())]),
            activate_at: Timestamp::from_micros(2_000_000),
            state,
            attempts: 1,
            created_at: Timestamp::from_micros(1_000_000),
            version: 42,
            lease_expires_at: lease,
        }
    }

    #[test]
    fn events_carry_every_field() {
        let sent = event_to_proto(&event(EventState::Delayed, None));
        assert_eq!(sent.id, "order-1");
        assert_eq!(sent.queue, "jobs");
        assert_eq!(sent.payload, b"hello");
        assert_eq!(
            sent.headers.get("traceparent").map(String::as_str),
            Some("00-ab")
        );
        assert_eq!(sent.state(), v1::EventState::Delayed);
        assert_eq!(sent.activate_at.map(|t| t.seconds), Some(2));
        assert_eq!(sent.created_at.map(|t| t.seconds), Some(1));
        assert_eq!((sent.attempts, sent.version), (1, 42));
        assert_eq!(sent.lease_expires_at, None);
    }

    #[test]
    fn leased_events_carry_token_and_deadline() {
        let deadline = Timestamp::from_micros(3_000_000);
        let leased = LeasedEvent {
            event: event(EventState::Leased, Some(deadline)),
            token: LeaseToken(0xab),
            expires_at: deadline,
        };
        let sent = leased_event_to_proto(&leased);
        assert_eq!(sent.lease_token, "00000000000000ab");
        assert_eq!(sent.lease_expires_at.map(|t| t.seconds), Some(3));
        let inner = sent.event.expect("event");
        assert_eq!(inner.state(), v1::EventState::Leased);
        assert_eq!(inner.lease_expires_at.map(|t| t.seconds), Some(3));
    }
}
