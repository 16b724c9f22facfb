//! Events: domain [`Event`] and leased events to their messages, and an event as a worker
//! receives it back to the domain's [`Event`].

use cascade_core::{Event, EventId, EventState, LeasedEvent, QueueName};

use super::time::{timestamp_from_proto, timestamp_to_proto};
use super::{ConvertError, invalid};
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

/// An event as the gateway delivered it to a worker; an error names the field (`event.…`)
/// that is not valid.
pub fn event_from_proto(event: v1::Event) -> Result<Event, ConvertError> {
    let state = match v1::EventState::try_from(event.state) {
        Ok(v1::EventState::Delayed) => EventState::Delayed,
        Ok(v1::EventState::Ready) => EventState::Ready,
        Ok(v1::EventState::Leased) => EventState::Leased,
        Ok(v1::EventState::Unspecified) | Err(_) => {
            return Err(invalid(
                "event",
                "state",
                format!("must be delayed, ready or leased, got {}", event.state),
            ));
        }
    };
    let time = |at: Option<&prost_types::Timestamp>, field: &str| match at {
        Some(at) => timestamp_from_proto(at, field),
        None => Err(invalid("", field, "must be set")),
    };
    let lease_expires_at = match &event.lease_expires_at {
        Some(at) => Some(time(Some(at), "event.lease_expires_at")?),
        None => None,
    };
    Ok(Event {
        id: EventId::parse(&event.id).map_err(|e| e.with_field("event.id"))?,
        queue: QueueName::parse_field(&event.queue, "event.queue")?,
        activate_at: time(event.activate_at.as_ref(), "event.activate_at")?,
        created_at: time(event.created_at.as_ref(), "event.created_at")?,
        payload: event.payload,
        headers: event.headers.into_iter().collect(),
        state,
        attempts: event.attempts,
        version: event.version,
        lease_expires_at,
    })
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

    use cascade_core::{LeaseToken, Timestamp};

    use super::*;

    fn event(state: EventState, lease: Option<Timestamp>) -> Event {
        Event {
            id: EventId::parse("order-1").expect("id"),
            queue: QueueName::parse("jobs").expect("queue"),
            payload: b"hello".to_vec().into(),
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
        assert_eq!(sent.payload, &b"hello"[..]);
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
    fn events_round_trip_through_the_gateways_message() {
        let original = event(EventState::Leased, Some(Timestamp::from_micros(3_000_000)));
        assert_eq!(event_from_proto(event_to_proto(&original)), Ok(original));
    }

    #[test]
    fn bad_events_name_the_field() {
        let field = |sent: v1::Event| match event_from_proto(sent) {
            Err(ConvertError::Invalid(err)) => err.field().to_owned(),
            other => panic!("not invalid: {other:?}"),
        };
        let mut sent = event_to_proto(&event(EventState::Ready, None));
        sent.activate_at = None;
        assert_eq!(field(sent), "event.activate_at");
        let mut sent = event_to_proto(&event(EventState::Ready, None));
        sent.state = 0;
        assert_eq!(field(sent), "event.state");
        let mut sent = event_to_proto(&event(EventState::Ready, None));
        sent.id = String::new();
        assert_eq!(field(sent), "event.id");
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
