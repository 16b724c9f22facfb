//! `/dead-letters.json?queue=Q`: the first events of a dead-letter queue, for the status page's
//! link from a stage's dead-letter count — each with its ID, attempts, where from, why it was
//! dead-lettered (the last failure included) and the start of its payload. Read-only: the
//! same request `cascade dlq list` sends, checked the same way; and only for dead-letter
//! queues (`<queue>.dlq`, or a pipeline stage's `dead_letter_queue`), so that the admin port
//! does not show the payloads of the queues events are working in.

use std::sync::Arc;

use cascade_core::event::{DEAD_LETTER_FROM, DEAD_LETTER_REASON};
use cascade_core::{Pipeline, QueueName};
use cascade_proto::v1::{Event, ListDeadLettersRequest};
use serde::Serialize;

use crate::IngestError;
use crate::admin::list_dead_letters;
use crate::route::Shards;

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
    /// The payload's first characters, as text (invalid UTF-8 replaced).
    pub payload: String,
    /// More payload than shown.
    pub truncated: bool,
}

impl DeadLetter {
    fn of(event: Event) -> DeadLetter {
        let header = |name: &str| event.headers.get(name).cloned();
        let text = String::from_utf8_lossy(&event.payload);
        DeadLetter {
            reason: header(DEAD_LETTER_REASON),
            from: header(DEAD_LETTER_FROM),
            truncated: text.chars().nth(PAYLOAD_CHARS).is_some(),
            payload: text.chars().take(PAYLOAD_CHARS).collect(),
            attempts: event.attempts,
            id: event.id,
        }
    }
}

/// The first [`SHOWN`] events of dead-letter queue `queue`; INVALID_ARGUMENT for a name that
/// is not one.
pub(crate) async fn first_page(
    shards: &Shards,
    pipelines: &[Arc<Pipeline>],
    queue: String,
) -> Result<DeadLetters, IngestError> {
    let name = QueueName::parse_field(&queue, "queue")?;
    let configured = pipelines
        .iter()
        .flat_map(|p| &p.stages)
        .any(|stage| stage.queue.dead_letter_queue.as_ref() == Some(&name));
    // A stage named `dlq` works in `<pipeline>.dlq`: a name, not a dead-letter queue.
    let a_stage = pipelines.iter().any(|p| {
        p.stages
            .iter()
            .any(|stage| p.stage_queue(&stage.name) == name)
    });
    if a_stage || (!name.is_default_dead_letter() && !configured) {
        return Err(IngestError::invalid(
            "queue",
            format!(
                "'{queue}' is not a dead-letter queue: the status page lists only those (<queue>.dlq, or a stage's dead_letter_queue); use `cascade dlq list` for others"
            ),
        ));
    }
    let request = ListDeadLettersRequest {
        queue: queue.clone(),
        page_size: SHOWN,
        page_token: String::new(),
    };
    let page = list_dead_letters(shards, request).await?;
    Ok(DeadLetters {
        queue,
        more: !page.next_page_token.is_empty(),
        events: page.events.into_iter().map(DeadLetter::of).collect(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cascade_bus::Bus;
    use cascade_core::{HandlerKind, HandlerSpec, QueueConfig, Stage};

    use super::*;

    /// A stage named `dlq` works in `<pipeline>.dlq`: the page shows no payloads of it, and
    /// refuses before asking any shard.
    #[tokio::test]
    async fn a_stage_queue_named_like_a_dead_letter_queue_is_refused() {
        let stage = |name: &str| Stage {
            name: name.into(),
            queue: QueueConfig::default(),
            handler: HandlerSpec {
                kind: HandlerKind::Builtin("noop".into()),
                concurrency: 1,
                timeout: Duration::from_secs(10),
            },
            priority: 0,
            min_handlers: 0,
            max_handlers: 1,
            next: None,
        };
        let pipeline = Arc::new(Pipeline {
            name: "mail".into(),
            stages: vec![stage("send"), stage("dlq")],
        });
        // No shard answers on this bus: a refusal must come first.
        let shards = Shards::new(Bus::local(), "test".into(), 1, Duration::from_secs(1));
        let refused = first_page(&shards, &[pipeline], "mail.dlq".into())
            .await
            .expect_err("a stage's queue");
        assert!(
            refused.to_string().contains("is not a dead-letter queue"),
            "{refused}"
        );
    }
}
