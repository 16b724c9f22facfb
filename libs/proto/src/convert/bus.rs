//! Messages between services: hand-off deliveries between dispatcher shards, schedule
//! entries for the activation timer, and the timer's activations. The receiver validates
//! them like any input: a peer of another build must not be able to corrupt a store.

use cascade_core::{Delivery, EventId, QueueName, ScheduleEntry, validate_headers};

use super::time::{timestamp_from_proto, timestamp_to_proto};
use super::{
    ConvertError, field_at, headers_from_proto, headers_to_proto, invalid, payload_from_proto,
    under,
};
use crate::bus::v1 as bus;

/// A hand-off of the sender's outbox entry `seq`.
pub fn delivery_to_proto(seq: u64, delivery: &Delivery) -> bus::Delivery {
    bus::Delivery {
        seq,
        queue: delivery.queue.to_string(),
        id: delivery.id.to_string(),
        payload: delivery.payload.clone(),
        headers: headers_to_proto(&delivery.headers),
        activate_at: Some(timestamp_to_proto(delivery.activate_at)),
        created_at: Some(timestamp_to_proto(delivery.created_at)),
    }
}

/// `(seq, delivery)`, fields under `prefix` (`deliveries[i]`). Both times must be set.
pub fn delivery_from_proto(
    delivery: bus::Delivery,
    prefix: &str,
) -> Result<(u64, Delivery), ConvertError> {
    let queue = QueueName::parse_field(&delivery.queue, &field_at(prefix, "queue"))?;
    let id = EventId::parse(&delivery.id).map_err(|e| under(prefix, e))?;
    let headers = headers_from_proto(&delivery.headers);
    validate_headers(&headers).map_err(|e| under(prefix, e))?;
    let required = |at: Option<&prost_types::Timestamp>, name: &str| {
        let field = field_at(prefix, name);
        match at {
            Some(at) => timestamp_from_proto(at, &field),
            None => Err(invalid("", &field, "must be set")),
        }
    };
    let activate_at = required(delivery.activate_at.as_ref(), "activate_at")?;
    let created_at = required(delivery.created_at.as_ref(), "created_at")?;
    let domain = Delivery {
        queue,
        id,
        payload: payload_from_proto(delivery.payload),
        headers,
        activate_at,
        created_at,
    };
    Ok((delivery.seq, domain))
}

pub fn schedule_entry_to_proto(entry: &ScheduleEntry) -> bus::ScheduleEntry {
    bus::ScheduleEntry {
        queue: entry.queue.to_string(),
        id: entry.id.to_string(),
        version: entry.version,
        at: Some(timestamp_to_proto(entry.at)),
    }
}

/// Fields under `prefix` (`entries[i]`); `at` must be set.
pub fn schedule_entry_from_proto(
    entry: &bus::ScheduleEntry,
    prefix: &str,
) -> Result<ScheduleEntry, ConvertError> {
    let queue = QueueName::parse_field(&entry.queue, &field_at(prefix, "queue"))?;
    let id = EventId::parse(&entry.id).map_err(|e| under(prefix, e))?;
    let at_field = field_at(prefix, "at");
    let Some(at) = &entry.at else {
        return Err(invalid("", &at_field, "must be set"));
    };
    Ok(ScheduleEntry {
        at: timestamp_from_proto(at, &at_field)?,
        queue,
        id,
        version: entry.version,
    })
}

pub fn activation_to_proto(queue: &QueueName, id: &EventId, version: u64) -> bus::Activation {
    bus::Activation {
        queue: queue.to_string(),
        id: id.to_string(),
        version,
    }
}

/// `(queue, id, version)`, fields under `prefix` (`activations[i]`).
pub fn activation_from_proto(
    activation: &bus::Activation,
    prefix: &str,
) -> Result<(QueueName, EventId, u64), ConvertError> {
    let queue = QueueName::parse_field(&activation.queue, &field_at(prefix, "queue"))?;
    let id = EventId::parse(&activation.id).map_err(|e| under(prefix, e))?;
    Ok((queue, id, activation.version))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cascade_core::Timestamp;

    use super::*;

    #[test]
    fn deliveries_round_trip() {
        let delivery = Delivery {
            queue: QueueName::parse("ship").expect("queue"),
            id: EventId::parse("e1").expect("id"),
            payload: b"p".to_vec().into(),
            headers: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
            activate_at: Timestamp::from_micros(5_000_001),
            created_at: Timestamp::from_micros(1_000_000),
        };
        let sent = delivery_to_proto(17, &delivery);
        assert_eq!(
            delivery_from_proto(sent, "deliveries[0]"),
            Ok((17, delivery))
        );
    }

    /// A dead letter whose own headers fill the event's 64, with its origin and reason on
    /// top, and an advance delayed past what a protobuf time holds: each is a hand-off its
    /// receiver takes, where refusing it would hold up every later one from that sender.
    #[test]
    fn a_full_dead_letter_and_a_far_future_advance_are_received() {
        let mut headers: BTreeMap<String, String> =
            (0..64).map(|i| (format!("h{i}"), "v".to_owned())).collect();
        headers.insert("cascade-dead-letter-from".into(), "jobs".into());
        headers.insert("cascade-dead-letter-reason".into(), "lease expired".into());
        let delivery = Delivery {
            queue: QueueName::parse("jobs.dlq").expect("queue"),
            id: EventId::parse("e1").expect("id"),
            payload: b"p".to_vec().into(),
            headers,
            activate_at: Timestamp::MAX,
            created_at: Timestamp::from_micros(1_000_000),
        };
        let (_, received) = delivery_from_proto(delivery_to_proto(3, &delivery), "deliveries[0]")
            .expect("received");
        assert_eq!(received.headers, delivery.headers);
        assert!(received.activate_at > Timestamp::from_micros(253_402_300_000_000_000));
    }

    #[test]
    fn bad_deliveries_name_the_field() {
        let sent = bus::Delivery {
            seq: 1,
            queue: "ship".into(),
            id: "e1".into(),
            activate_at: None,
            ..bus::Delivery::default()
        };
        let err = delivery_from_proto(sent, "deliveries[2]").expect_err("no time");
        assert_eq!(err.to_string(), "deliveries[2].activate_at: must be set");
        let hostile = bus::Delivery {
            queue: "a.>".into(),
            ..bus::Delivery::default()
        };
        let err = delivery_from_proto(hostile, "deliveries[0]").expect_err("bad queue");
        assert!(
            err.to_string().starts_with("deliveries[0].queue: "),
            "{err}"
        );
    }

    #[test]
    fn schedule_entries_and_activations_round_trip() {
        let entry = ScheduleEntry {
            at: Timestamp::from_micros(3_000_000),
            queue: QueueName::parse("jobs").expect("queue"),
            id: EventId::parse("e1").expect("id"),
            version: 9,
        };
        let sent = schedule_entry_to_proto(&entry);
        assert_eq!(
            schedule_entry_from_proto(&sent, "entries[0]"),
            Ok(entry.clone())
        );
        let missing = bus::ScheduleEntry { at: None, ..sent };
        let err = schedule_entry_from_proto(&missing, "entries[4]").expect_err("no time");
        assert_eq!(err.to_string(), "entries[4].at: must be set");
        let activation = activation_to_proto(&entry.queue, &entry.id, entry.version);
        assert_eq!(
            activation_from_proto(&activation, "activations[0]"),
            Ok((entry.queue, entry.id, 9))
        );
    }
}
