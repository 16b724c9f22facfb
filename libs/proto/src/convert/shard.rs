//! What a gateway asks a dispatcher shard. The requests that carry events (enqueues, takes,
//! completions) go as the values the gateway validated: in one process the shard takes them
//! as they are, and across NATS they travel as the `DispatcherRequest` they convert to, which
//! the shard validates again (the bus is not a trust boundary between processes). Other
//! requests go as their message.

use crate::bus::v1::DispatcherRequest;
use crate::bus::v1::dispatcher_request::Op;
use crate::v1;

use super::{CompletionItem, EnqueueItem, TakeItem};

/// One request to a dispatcher shard.
#[derive(Clone, Debug, PartialEq)]
pub enum ShardRequest {
    /// Each to a queue the shard owns (a pipeline resolved to its first stage's queue).
    Enqueue(Vec<EnqueueItem>),
    /// A take, and the completions it carries for the shard's own queues.
    Take(TakeItem, Vec<CompletionItem>),
    Complete(Vec<CompletionItem>),
    /// Any other request, as its message.
    Message(Op),
}

impl ShardRequest {
    /// The name of its operation (as [`Op::name`]).
    pub fn name(&self) -> &'static str {
        match self {
            ShardRequest::Enqueue(_) => "enqueue",
            ShardRequest::Take(..) => "take",
            ShardRequest::Complete(_) => "complete",
            ShardRequest::Message(op) => op.name(),
        }
    }

    /// The message it travels as between processes.
    pub fn into_proto(self) -> DispatcherRequest {
        let op = match self {
            ShardRequest::Enqueue(items) => Op::Enqueue(v1::EnqueueBatchRequest {
                items: items.into_iter().map(EnqueueItem::into_proto).collect(),
            }),
            ShardRequest::Take(take, completions) => Op::Take(take.into_proto(completions)),
            ShardRequest::Complete(completions) => Op::Complete(v1::CompleteRequest {
                completions: completions
                    .into_iter()
                    .map(CompletionItem::into_proto)
                    .collect(),
            }),
            ShardRequest::Message(op) => op,
        };
        DispatcherRequest { op: Some(op) }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cascade_core::{Outcome, QueueName};

    use super::*;
    use crate::convert::{
        completions_from_proto, enqueue_batch_from_proto, enqueue_from_proto, take_from_proto,
    };

    fn enqueue(json: &str) -> EnqueueItem {
        let request = v1::EnqueueRequest {
            queue: "jobs".into(),
            id: "e-1".into(),
            payload: json.as_bytes().to_vec().into(),
            headers: [("kind".to_owned(), "test".to_owned())].into(),
            when: Some(v1::enqueue_request::When::Delay(prost_types::Duration {
                seconds: 3,
                nanos: 0,
            })),
            ..v1::EnqueueRequest::default()
        };
        enqueue_from_proto(request).expect("valid")
    }

    fn completion(outcome: Outcome) -> CompletionItem {
        CompletionItem {
            queue: QueueName::parse("jobs").expect("name"),
            id: cascade_core::EventId::parse("e-1").expect("id"),
            token: cascade_core::LeaseToken(42),
            outcome,
        }
    }

    #[test]
    fn a_request_between_processes_converts_back_to_the_same_values() {
        let items = vec![enqueue("{}"), enqueue("[1]")];
        let Some(Op::Enqueue(batch)) = ShardRequest::Enqueue(items.clone()).into_proto().op else {
            panic!("an enqueue");
        };
        let back: Vec<EnqueueItem> = enqueue_batch_from_proto(batch)
            .into_iter()
            .map(|item| item.expect("valid"))
            .collect();
        assert_eq!(back, items);

        let completions = vec![
            completion(Outcome::Ack),
            completion(Outcome::Retry {
                delay: Some(Duration::from_secs(2)),
                reason: Some("later".into()),
            }),
        ];
        let take = TakeItem {
            queue: QueueName::parse("jobs").expect("name"),
            max_events: 100,
            lease: Some(Duration::from_secs(30)),
            wait: Some(Duration::from_secs(2)),
            worker_id: "w-1".into(),
        };
        let request = ShardRequest::Take(take.clone(), completions.clone());
        assert_eq!(request.name(), "take");
        let Some(Op::Take(proto)) = request.into_proto().op else {
            panic!("a take");
        };
        assert_eq!(take_from_proto(&proto).expect("valid"), take);
        let carried: Vec<CompletionItem> = completions_from_proto(proto.completions)
            .into_iter()
            .map(|item| item.expect("valid"))
            .collect();
        assert_eq!(carried, completions);

        let Some(Op::Complete(proto)) = ShardRequest::Complete(completions.clone()).into_proto().op
        else {
            panic!("a complete");
        };
        let back: Vec<CompletionItem> = completions_from_proto(proto.completions)
            .into_iter()
            .map(|item| item.expect("valid"))
            .collect();
        assert_eq!(back, completions);
    }
}
