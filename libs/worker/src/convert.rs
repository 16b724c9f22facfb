//! The worker's two conversions that `cascade_proto::convert` does not have yet: a leased
//! event from the gateway into the domain's [`Event`] for the handler, and a handler's
//! [`Outcome`] into a `Completion`. Times and durations go through `cascade_proto::convert`.

use cascade_core::{Error, Event, EventId, EventState, Outcome, QueueName};
use cascade_proto::convert::{duration_to_proto, timestamp_from_proto, timestamp_to_proto};
use cascade_proto::v1;
use cascade_proto::v1::completion::Outcome as ProtoOutcome;

/// An event as the gateway delivered it; an error names the field that is not valid.
pub(crate) fn event_from_proto(event: v1::Event) -> Result<Event, Error> {
    let state = match v1::EventState::try_from(event.state) {
        Ok(v1::EventState::Delayed) => EventState::Delayed,
        Ok(v1::EventState::Ready) => EventState::Ready,
        Ok(v1::EventState::Leased) => EventState::Leased,
        Ok(v1::EventState::Unspecified) | Err(_) => {
            return Err(Error::invalid(
                "event.state",
                format!("must be delayed, ready or leased, got {}", event.state),
            ));
        }
    };
    let time = |at: Option<&prost_types::Timestamp>, field: &str| match at {
        Some(at) => timestamp_from_proto(at, field).map_err(invalid_time),
        None => Err(Error::invalid(field, "must be set")),
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

fn invalid_time(err: cascade_proto::convert::ConvertError) -> Error {
    match err {
        cascade_proto::convert::ConvertError::Invalid(inner) => inner,
        other => Error::invalid("event", other.to_string()),
    }
}

/// The completion of the lease `token` on event `id` of `queue`.
pub(crate) fn completion_to_proto(
    queue: &str,
    id: &str,
    token: &str,
    outcome: Outcome,
) -> v1::Completion {
    v1::Completion {
        queue: queue.to_owned(),
        id: id.to_owned(),
        lease_token: token.to_owned(),
        outcome: Some(outcome_to_proto(outcome)),
    }
}

fn outcome_to_proto(outcome: Outcome) -> ProtoOutcome {
    match outcome {
        Outcome::Ack => ProtoOutcome::Ack(v1::Ack {}),
        Outcome::Advance {
            to,
            payload,
            headers,
            delay,
        } => ProtoOutcome::Advance(v1::Advance {
            to: to.unwrap_or_default(),
            payload,
            headers: headers.into_iter().collect(),
            delay: delay.map(duration_to_proto),
        }),
        Outcome::Retry { delay } => ProtoOutcome::Retry(v1::Retry {
            delay: delay.map(duration_to_proto),
        }),
        Outcome::Reschedule { activate_at } => ProtoOutcome::Reschedule(v1::Reschedule {
            activate_at: Some(timestamp_to_proto(activate_at)),
        }),
        Outcome::Release => ProtoOutcome::Release(v1::Release {}),
        Outcome::DeadLetter { reason } => ProtoOutcome::DeadLetter(v1::DeadLetter { reason }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use cascade_core::Timestamp;
    use cascade_proto::convert::{completion_from_proto, event_to_proto};

    use super::*;

    fn event() -> Event {
        Event {
            id: EventId::parse("order-1").expect("id"),
            queue: QueueName::parse("orders.ship").expect("queue"),
            payload: b"hello".to_vec(),
            headers: BTreeMap::from([("traceparent".to_owned(), "00-ab-cd-01".to_owned())]),
            activate_at: Timestamp::from_micros(2_000_000),
            state: EventState::Leased,
            attempts: 2,
            created_at: Timestamp::from_micros(1_000_000),
            version: 7,
            lease_expires_at: Some(Timestamp::from_micros(3_000_000)),
        }
    }

    #[test]
    fn events_round_trip_through_the_gateways_message() {
        let original = event();
        assert_eq!(event_from_proto(event_to_proto(&original)), Ok(original));
    }

    #[test]
    fn bad_events_name_the_field() {
        let mut sent = event_to_proto(&event());
        sent.activate_at = None;
        let err = event_from_proto(sent).expect_err("no activation time");
        assert_eq!(err.field(), "event.activate_at");
        let mut sent = event_to_proto(&event());
        sent.state = 0;
        assert_eq!(
            event_from_proto(sent).expect_err("no state").field(),
            "event.state"
        );
        let mut sent = event_to_proto(&event());
        sent.id = String::new();
        assert_eq!(
            event_from_proto(sent).expect_err("no id").field(),
            "event.id"
        );
    }

    #[test]
    fn every_outcome_survives_the_gateways_validation() {
        let outcomes = [
            Outcome::Ack,
            Outcome::Advance {
                to: Some("ship".into()),
                payload: Some(b"next".to_vec()),
                headers: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
                delay: Some(Duration::from_millis(1500)),
            },
            Outcome::Advance {
                to: None,
                payload: None,
                headers: BTreeMap::new(),
                delay: None,
            },
            Outcome::Retry { delay: None },
            Outcome::Retry {
                delay: Some(Duration::ZERO),
            },
            Outcome::Reschedule {
                activate_at: Timestamp::from_micros(1_714_564_800_250_001),
            },
            Outcome::Release,
            Outcome::DeadLetter {
                reason: "HTTP 400: bad".into(),
            },
        ];
        for outcome in outcomes {
            let sent = completion_to_proto("jobs", "e1", "000000000000002a", outcome.clone());
            let back = completion_from_proto(sent, "completions[0]").expect("valid");
            assert_eq!(back.outcome, outcome);
        }
    }
}
