//! Requests that address events or pages by name: `Get`/`Delete` (an [`EventRef`]),
//! `Update`, `ListQueues`, `ListDeadLetters`, `Redrive`.
//!
//! Pages: `page_size` 0 is [`DEFAULT_PAGE_SIZE`]; a size above [`MAX_PAGE_SIZE`] is cut to
//! it (the answer's `next_page_token` says there is more). A page token is what the previous
//! page returned: the last name or ID seen.

use std::collections::BTreeMap;

use bytes::Bytes;

use cascade_core::{
    EventId, EventUpdate, QueueName, RedriveSelection, Timestamp, validate_headers,
};

use super::enqueue::When;
use super::queue::queue_name_from_proto;
use super::time::{duration_from_proto, timestamp_from_proto};
use super::{ConvertError, headers_from_proto, invalid, payload_from_proto};
use crate::v1;
use crate::v1::update_request::When as ProtoWhen;

pub const DEFAULT_PAGE_SIZE: usize = 100;
pub const MAX_PAGE_SIZE: usize = 1000;

/// One event by queue and ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRef {
    pub queue: QueueName,
    pub id: EventId,
}

/// The `queue` and `id` fields of a `GetRequest` or `DeleteRequest`.
pub fn event_ref_from_proto(queue: &str, id: &str) -> Result<EventRef, ConvertError> {
    Ok(EventRef {
        queue: queue_name_from_proto(queue, "queue")?,
        id: EventId::parse(id)?,
    })
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateItem {
    pub event: EventRef,
    pub payload: Option<Bytes>,
    /// Merged into the event's headers.
    pub headers: BTreeMap<String, String>,
    /// `None`: the activation time is left as it is.
    pub when: Option<When>,
}

impl UpdateItem {
    /// The shard's update, with a delay resolved against the shard's `now`.
    pub fn into_update(self, now: Timestamp) -> (EventRef, EventUpdate) {
        let activate_at = self.when.map(|when| when.resolve(now).unwrap_or(now));
        let update = EventUpdate {
            payload: self.payload,
            headers: self.headers,
            activate_at,
        };
        (self.event, update)
    }
}

/// An unset `payload` keeps the event's; `headers` are merged; neither `activate_at` nor
/// `delay` keeps the activation time.
pub fn update_from_proto(request: v1::UpdateRequest) -> Result<UpdateItem, ConvertError> {
    let event = event_ref_from_proto(&request.queue, &request.id)?;
    let headers = headers_from_proto(&request.headers);
    validate_headers(&headers)?;
    let when = match &request.when {
        None => None,
        Some(ProtoWhen::ActivateAt(at)) => Some(When::At(timestamp_from_proto(at, "activate_at")?)),
        Some(ProtoWhen::Delay(delay)) => Some(When::After(duration_from_proto(delay, "delay")?)),
    };
    Ok(UpdateItem {
        event,
        payload: request.payload.map(payload_from_proto),
        headers,
        when,
    })
}

/// A page request: how many, and after what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRequest {
    pub size: usize,
    /// Empty: from the start.
    pub token: String,
}

fn page_size(requested: u32) -> usize {
    match requested {
        0 => DEFAULT_PAGE_SIZE,
        n => (n as usize).min(MAX_PAGE_SIZE),
    }
}

/// `(prefix, page)`; the prefix may be empty (every queue) and is otherwise checked like a
/// queue name, the token too.
pub fn list_queues_from_proto(
    request: &v1::ListQueuesRequest,
) -> Result<(String, PageRequest), ConvertError> {
    if !request.prefix.is_empty() {
        queue_name_from_proto(&request.prefix, "prefix")?;
    }
    if !request.page_token.is_empty() {
        queue_name_from_proto(&request.page_token, "page_token")?;
    }
    let page = PageRequest {
        size: page_size(request.page_size),
        token: request.page_token.clone(),
    };
    Ok((request.prefix.clone(), page))
}

/// `(dead-letter queue, page)`; the token is the last event ID seen.
pub fn list_dead_letters_from_proto(
    request: &v1::ListDeadLettersRequest,
) -> Result<(QueueName, PageRequest), ConvertError> {
    let queue = queue_name_from_proto(&request.queue, "queue")?;
    if !request.page_token.is_empty() {
        EventId::parse(&request.page_token).map_err(|e| e.with_field("page_token"))?;
    }
    let page = PageRequest {
        size: page_size(request.page_size),
        token: request.page_token.clone(),
    };
    Ok((queue, page))
}

/// `(dead-letter queue, which)`: either `ids` or `all`, not both, not neither.
pub fn redrive_from_proto(
    request: &v1::RedriveRequest,
) -> Result<(QueueName, RedriveSelection), ConvertError> {
    let queue = queue_name_from_proto(&request.queue, "queue")?;
    let selection = match (request.ids.is_empty(), request.all) {
        (true, false) => {
            return Err(invalid(
                "",
                "ids",
                "name the dead letters to redrive, or set all to redrive every one",
            ));
        }
        (false, true) => {
            return Err(invalid("", "all", "set either ids or all, not both"));
        }
        (true, true) => RedriveSelection::All,
        (false, false) => {
            let ids = request
                .ids
                .iter()
                .enumerate()
                .map(|(index, id)| {
                    EventId::parse(id).map_err(|e| e.with_field(format!("ids[{index}]")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            RedriveSelection::Ids(ids)
        }
    };
    Ok((queue, selection))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::convert::duration_to_proto;

    #[test]
    fn event_refs_are_checked() {
        let ok = event_ref_from_proto("jobs", "e1").expect("valid");
        assert_eq!((ok.queue.as_str(), ok.id.as_str()), ("jobs", "e1"));
        let err = event_ref_from_proto("jobs", "").expect_err("empty id");
        assert!(err.to_string().starts_with("id: "), "{err}");
    }

    #[test]
    fn updates_keep_what_is_unset() {
        let request = v1::UpdateRequest {
            queue: "jobs".into(),
            id: "e1".into(),
            ..v1::UpdateRequest::default()
        };
        let item = update_from_proto(request.clone()).expect("valid");
        let (_, update) = item.into_update(Timestamp::from_micros(9));
        assert_eq!(update, EventUpdate::default());
        let delayed = v1::UpdateRequest {
            payload: Some(b"new".to_vec().into()),
            when: Some(ProtoWhen::Delay(duration_to_proto(Duration::from_secs(1)))),
            ..request
        };
        let (_, update) = update_from_proto(delayed)
            .expect("valid")
            .into_update(Timestamp::from_micros(1_000_000));
        assert_eq!(update.payload.as_deref(), Some(&b"new"[..]));
        assert_eq!(update.activate_at, Some(Timestamp::from_micros(2_000_000)));
    }

    #[test]
    fn pages_default_and_cap() {
        let (prefix, page) =
            list_queues_from_proto(&v1::ListQueuesRequest::default()).expect("valid");
        assert_eq!((prefix.as_str(), page.size), ("", DEFAULT_PAGE_SIZE));
        let big = v1::ListQueuesRequest {
            prefix: "inbox:".into(),
            page_size: 50_000,
            page_token: "inbox:a".into(),
        };
        let (_, page) = list_queues_from_proto(&big).expect("valid");
        assert_eq!((page.size, page.token.as_str()), (MAX_PAGE_SIZE, "inbox:a"));
        let bad = v1::ListQueuesRequest {
            prefix: "a b".into(),
            ..v1::ListQueuesRequest::default()
        };
        assert!(list_queues_from_proto(&bad).is_err());
        let dead = v1::ListDeadLettersRequest {
            queue: "jobs.dlq".into(),
            page_size: 0,
            page_token: "bad token".into(),
        };
        let err = list_dead_letters_from_proto(&dead).expect_err("bad token");
        assert!(err.to_string().starts_with("page_token: "), "{err}");
    }

    #[test]
    fn redrive_takes_ids_or_all() {
        let request = |ids: &[&str], all| v1::RedriveRequest {
            queue: "jobs.dlq".into(),
            ids: ids.iter().map(|s| s.to_string()).collect(),
            all,
        };
        let (_, all) = redrive_from_proto(&request(&[], true)).expect("all");
        assert_eq!(all, RedriveSelection::All);
        let (_, some) = redrive_from_proto(&request(&["a", "b"], false)).expect("ids");
        assert!(matches!(some, RedriveSelection::Ids(ids) if ids.len() == 2));
        assert!(redrive_from_proto(&request(&[], false)).is_err());
        assert!(redrive_from_proto(&request(&["a"], true)).is_err());
        let err = redrive_from_proto(&request(&["a", "b c"], false)).expect_err("bad id");
        assert!(err.to_string().starts_with("ids[1]: "), "{err}");
    }
}
