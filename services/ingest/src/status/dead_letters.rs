//! `/dead-letters.json?queue=Q`: the first events of a dead-letter queue, for the status page's
//! link from a stage's dead-letter count — each with its ID, attempts, why it was
//! dead-lettered, where from, its last failure and the start of its payload. Read-only: the
//! same request `cascade dlq list` sends, checked the same way.

use cascade_core::event::{DEAD_LETTER_FROM, DEAD_LETTER_REASON, LAST_FAILURE};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::convert::list_dead_letters_from_proto;
use cascade_proto::v1::{Event, ListDeadLettersRequest};
use serde::Serialize;

use crate::IngestError;
use crate::admin::events_queue;
use crate::route::{Shards, unexpected};

/// Events shown at most: the page points to `cascade dlq list` for the rest.
pub(crate) const SHOWN: u32 = 50;
/// Characters of a payload shown.
const PAYLOAD_CHARS: usize = 200;

#[derive(Debug, Serialize)]
pub(crate) struct DeadLetters {
    pub queue: String,
    pub events: Vec<DeadLetter>,
    /// More events than shown.
    pub more: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct DeadLetter {
    pub id: String,
    pub attempts: u32,
    pub reason: Option<String>,
    pub from: Option<String>,
    pub last_failure: Option<String>,
    pub payload_bytes: usize,
    /// The payload's first characters, as text (invalid UTF-8 replaced).
    pub payload: String,
}

impl DeadLetter {
    fn of(event: Event) -> DeadLetter {
        let header = |name: &str| event.headers.get(name).cloned();
        let text = String::from_utf8_lossy(&event.payload);
        DeadLetter {
            reason: header(DEAD_LETTER_REASON),
            from: header(DEAD_LETTER_FROM),
            last_failure: header(LAST_FAILURE),
            payload_bytes: event.payload.len(),
            payload: text.chars().take(PAYLOAD_CHARS).collect(),
            attempts: event.attempts,
            id: event.id,
        }
    }
}

/// The first [`SHOWN`] events of dead-letter queue `queue`.
pub(crate) async fn first_page(shards: &Shards, queue: String) -> Result<DeadLetters, IngestError> {
    let request = ListDeadLettersRequest {
        queue,
        page_size: SHOWN,
        page_token: String::new(),
    };
    let (name, _) = list_dead_letters_from_proto(&request)?;
    let shard = shards.owner(&events_queue(name.as_str(), "queue")?);
    let queue = request.queue.clone();
    match shards.call(shard, Op::ListDeadLetters(request)).await? {
        Reply::DeadLetters(page) => Ok(DeadLetters {
            queue,
            more: !page.next_page_token.is_empty(),
            events: page.events.into_iter().map(DeadLetter::of).collect(),
        }),
        other => Err(unexpected(shard, "a dead-letter list", &other)),
    }
}
