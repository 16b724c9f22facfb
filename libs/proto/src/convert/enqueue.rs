//! `EnqueueRequest` → [`EnqueueItem`] (validated, destination and time still to resolve) →
//! the shard's [`EnqueueCmd`]; [`Enqueued`] → `EnqueueResponse`.
//!
//! Two things are left open on purpose: a `pipeline` destination is resolved to its first
//! stage by the gateway (which knows the pipelines), and a `delay` becomes a time only on the
//! shard (`When::resolve` with the shard's clock), so a request that waited in a queue is
//! not activated early.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use cascade_core::{
    EnqueueCmd, Enqueued, EventId, IdempotencyKey, Pipeline, QueueName, Timestamp, validate_headers,
};

use super::time::{
    duration_from_proto, duration_to_proto, timestamp_from_proto, timestamp_to_proto,
};
use super::{ConvertError, headers_from_proto, invalid, payload_from_proto};
use crate::v1;
use crate::v1::enqueue_request::When as ProtoWhen;

/// Where an event goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Queue(QueueName),
    /// The pipeline's first stage: a valid pipeline name, looked up by the gateway.
    Pipeline(String),
}

/// When an event becomes ready.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum When {
    Now,
    At(Timestamp),
    After(Duration),
}

impl When {
    /// The activation time given the shard's `now`; `None` means now.
    pub fn resolve(self, now: Timestamp) -> Option<Timestamp> {
        match self {
            When::Now => None,
            When::At(at) => Some(at),
            When::After(delay) => Some(now.saturating_add(delay)),
        }
    }
}

/// A validated enqueue request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueItem {
    pub destination: Destination,
    pub id: Option<EventId>,
    pub idempotency_key: Option<IdempotencyKey>,
    pub payload: Bytes,
    pub headers: BTreeMap<String, String>,
    pub when: When,
}

impl EnqueueItem {
    /// The shard's command, with a delay resolved against `now`. A pipeline destination not
    /// resolved by the gateway is INVALID_ARGUMENT at `pipeline`.
    pub fn into_command(self, now: Timestamp) -> Result<EnqueueCmd, ConvertError> {
        let queue = match self.destination {
            Destination::Queue(queue) => queue,
            Destination::Pipeline(_) => {
                return Err(invalid(
                    "",
                    "pipeline",
                    "a shard takes a queue name; the gateway resolves a pipeline to its first stage",
                ));
            }
        };
        Ok(EnqueueCmd {
            queue,
            id: self.id,
            idempotency_key: self.idempotency_key,
            payload: self.payload,
            headers: self.headers,
            activate_at: self.when.resolve(now),
        })
    }
}

impl EnqueueItem {
    /// Back to a message: how a gateway's validated item travels to a shard of another
    /// process.
    pub fn into_proto(self) -> v1::EnqueueRequest {
        let (queue, pipeline) = match self.destination {
            Destination::Queue(queue) => (queue.into(), String::new()),
            Destination::Pipeline(pipeline) => (String::new(), pipeline),
        };
        v1::EnqueueRequest {
            queue,
            pipeline,
            id: self.id.map(String::from).unwrap_or_default(),
            idempotency_key: self.idempotency_key.map(String::from).unwrap_or_default(),
            payload: self.payload,
            headers: self.headers.into_iter().collect(),
            when: match self.when {
                When::Now => None,
                When::At(at) => Some(ProtoWhen::ActivateAt(timestamp_to_proto(at))),
                When::After(delay) => Some(ProtoWhen::Delay(duration_to_proto(delay))),
            },
        }
    }
}

/// Validates one request; errors name the request's own fields (`queue`), which a batch's
/// caller places under the item (`items[3].queue`). Exactly one of `queue` and `pipeline`
/// must be set; an empty `id` or `idempotency_key` is none; neither `activate_at` nor `delay`
/// is now. The payload's size is checked by the shard against the queue's
/// `max_payload_bytes`.
pub fn enqueue_from_proto(request: v1::EnqueueRequest) -> Result<EnqueueItem, ConvertError> {
    let destination = match (request.queue.as_str(), request.pipeline.as_str()) {
        ("", "") => {
            return Err(invalid(
                "",
                "queue",
                "must name a queue (or set pipeline instead), got an empty string",
            ));
        }
        (queue, "") => {
            let name = QueueName::parse_field(queue, "queue")?;
            if name.is_template() {
                return Err(invalid(
                    "",
                    "queue",
                    format!("'{name}' is a template; name a queue that matches it"),
                ));
            }
            Destination::Queue(name)
        }
        ("", pipeline) => {
            Pipeline::validate_name(pipeline, "pipeline")?;
            Destination::Pipeline(pipeline.to_owned())
        }
        (_, _) => {
            return Err(invalid(
                "",
                "pipeline",
                "set either queue or pipeline, not both",
            ));
        }
    };
    let id = match request.id.as_str() {
        "" => None,
        id => Some(EventId::parse(id)?),
    };
    let idempotency_key = match request.idempotency_key.as_str() {
        "" => None,
        key => Some(IdempotencyKey::parse(key)?),
    };
    let headers = headers_from_proto(&request.headers);
    validate_headers(&headers)?;
    let when = match &request.when {
        None => When::Now,
        Some(ProtoWhen::ActivateAt(at)) => When::At(timestamp_from_proto(at, "activate_at")?),
        Some(ProtoWhen::Delay(delay)) => When::After(duration_from_proto(delay, "delay")?),
    };
    Ok(EnqueueItem {
        destination,
        id,
        idempotency_key,
        payload: payload_from_proto(request.payload),
        headers,
        when,
    })
}

/// Each item validated on its own, one bad item failing only itself; an error names the
/// field from the item (`id`): whoever numbered the items places it (`items[2].id`).
pub fn enqueue_batch_from_proto(
    request: v1::EnqueueBatchRequest,
) -> Vec<Result<EnqueueItem, ConvertError>> {
    request.items.into_iter().map(enqueue_from_proto).collect()
}

pub fn enqueued_to_proto(enqueued: &Enqueued) -> v1::EnqueueResponse {
    v1::EnqueueResponse {
        id: enqueued.id.to_string(),
        duplicate: enqueued.duplicate,
        queue: enqueued.queue.to_string(),
        activate_at: Some(timestamp_to_proto(enqueued.activate_at)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::convert::COPIED_PAYLOAD_BYTES;

    fn request(queue: &str) -> v1::EnqueueRequest {
        v1::EnqueueRequest {
            queue: queue.into(),
            payload: b"p".to_vec().into(),
            ..v1::EnqueueRequest::default()
        }
    }

    #[test]
    fn a_plain_request_enqueues_now() {
        let item = enqueue_from_proto(request("jobs")).expect("valid");
        assert_eq!(
            item.destination,
            Destination::Queue(QueueName::parse("jobs").expect("name"))
        );
        assert_eq!(
            (&item.id, &item.idempotency_key, item.when),
            (&None, &None, When::Now)
        );
        let cmd = item
            .into_command(Timestamp::from_micros(5))
            .expect("command");
        assert_eq!(cmd.activate_at, None);
        assert_eq!(cmd.payload, &b"p"[..]);
    }

    /// Whether `payload` lies inside `buffer`.
    fn within(payload: &Bytes, buffer: &Bytes) -> bool {
        let (inside, part) = (buffer.as_ptr_range(), payload.as_ptr_range());
        inside.start <= part.start && part.end <= inside.end
    }

    /// The command's payload from a request of `bytes` payload bytes decoded out of one
    /// buffer, and that buffer.
    fn received(bytes: usize) -> (Bytes, Bytes) {
        use prost::Message;
        let mut sent = request("jobs");
        sent.payload = Bytes::from(vec![7u8; bytes]);
        let wire = Bytes::from(sent.encode_to_vec());
        let received = v1::EnqueueRequest::decode(wire.clone()).expect("decodes");
        let item = enqueue_from_proto(received).expect("valid");
        let cmd = item
            .into_command(Timestamp::from_micros(5))
            .expect("command");
        assert_eq!(cmd.payload, vec![7u8; bytes]);
        (cmd.payload, wire)
    }

    #[test]
    fn a_large_payload_reaches_the_command_as_a_view_of_the_buffer_it_arrived_in() {
        let (payload, wire) = received(COPIED_PAYLOAD_BYTES + 1);
        assert!(
            within(&payload, &wire),
            "copied out of the message's buffer"
        );
    }

    #[test]
    fn a_small_payload_is_copied_so_that_the_buffer_goes_with_the_request() {
        let (payload, wire) = received(COPIED_PAYLOAD_BYTES);
        assert!(
            !within(&payload, &wire),
            "still a view of the message's buffer"
        );
    }

    #[test]
    fn ids_keys_headers_and_times_are_kept() {
        let mut req = request("jobs");
        req.id = "order-7".into();
        req.idempotency_key = "pay 7".into();
        req.headers = HashMap::from([("traceparent".to_owned(), "x".to_owned())]);
        req.when = Some(ProtoWhen::Delay(duration_to_proto(Duration::from_secs(2))));
        let item = enqueue_from_proto(req).expect("valid");
        assert_eq!(item.id.as_ref().map(EventId::as_str), Some("order-7"));
        assert_eq!(
            item.idempotency_key.as_ref().map(IdempotencyKey::as_str),
            Some("pay 7")
        );
        let cmd = item
            .into_command(Timestamp::from_micros(1_000_000))
            .expect("command");
        assert_eq!(cmd.activate_at, Some(Timestamp::from_micros(3_000_000)));
        assert_eq!(cmd.headers.len(), 1);

        let mut at = request("jobs");
        at.when = Some(ProtoWhen::ActivateAt(prost_types::Timestamp {
            seconds: 10,
            nanos: 0,
        }));
        let item = enqueue_from_proto(at).expect("valid");
        assert_eq!(item.when, When::At(Timestamp::from_micros(10_000_000)));
    }

    #[test]
    fn bad_items_name_their_field_in_the_batch() {
        let mut bad_id = request("jobs");
        bad_id.id = "a/b".into();
        let mut negative = request("jobs");
        negative.when = Some(ProtoWhen::Delay(prost_types::Duration {
            seconds: -3,
            nanos: 0,
        }));
        let mut bad_header = request("jobs");
        bad_header.headers = HashMap::from([("bad name".to_owned(), String::new())]);
        let batch = v1::EnqueueBatchRequest {
            items: vec![
                request("jobs"),
                request("a b"),
                bad_id,
                negative,
                bad_header,
                request(""),
                request("inbox:*"),
            ],
        };
        let results = enqueue_batch_from_proto(batch);
        assert!(results[0].is_ok());
        let messages: Vec<String> = results[1..]
            .iter()
            .map(|r| r.as_ref().expect_err("invalid").to_string())
            .collect();
        assert!(
            messages[0].starts_with("queue: must be 1-200 bytes"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].starts_with("id: must be 1-128 bytes"),
            "{}",
            messages[1]
        );
        assert!(
            messages[2].starts_with("delay: must not be negative"),
            "{}",
            messages[2]
        );
        assert!(
            messages[3].starts_with("headers: a header name"),
            "{}",
            messages[3]
        );
        assert!(
            messages[4].starts_with("queue: must name a queue"),
            "{}",
            messages[4]
        );
        assert!(
            messages[5].starts_with("queue: 'inbox:*' is a template"),
            "{}",
            messages[5]
        );
    }

    #[test]
    fn items_go_back_to_messages_unchanged() {
        let mut req = request("jobs");
        req.id = "order-7".into();
        req.idempotency_key = "k".into();
        req.headers = HashMap::from([("a".to_owned(), "b".to_owned())]);
        req.when = Some(ProtoWhen::Delay(duration_to_proto(Duration::from_millis(
            1500,
        ))));
        let item = enqueue_from_proto(req.clone()).expect("valid");
        assert_eq!(item.into_proto(), req);
        let pipeline = v1::EnqueueRequest {
            pipeline: "orders".into(),
            when: Some(ProtoWhen::ActivateAt(prost_types::Timestamp {
                seconds: 5,
                nanos: 1000,
            })),
            ..v1::EnqueueRequest::default()
        };
        let item = enqueue_from_proto(pipeline.clone()).expect("valid");
        assert_eq!(item.into_proto(), pipeline);
    }

    #[test]
    fn pipelines_are_left_to_the_gateway() {
        let req = v1::EnqueueRequest {
            pipeline: "orders".into(),
            ..v1::EnqueueRequest::default()
        };
        let item = enqueue_from_proto(req).expect("valid");
        assert_eq!(item.destination, Destination::Pipeline("orders".into()));
        let err = item.into_command(Timestamp::ZERO).expect_err("unresolved");
        assert!(err.to_string().starts_with("pipeline: "), "{err}");
        let both = v1::EnqueueRequest {
            queue: "jobs".into(),
            pipeline: "orders".into(),
            ..v1::EnqueueRequest::default()
        };
        assert!(enqueue_from_proto(both).is_err());
        let bad_name = v1::EnqueueRequest {
            pipeline: "orders.validate".into(),
            ..v1::EnqueueRequest::default()
        };
        let err = enqueue_from_proto(bad_name).expect_err("a queue name");
        assert!(
            err.to_string()
                .starts_with("pipeline: must be 1-100 bytes of [A-Za-z0-9_-]"),
            "{err}"
        );
    }
}
