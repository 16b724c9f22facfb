//! The worker's side: `TakeRequest`, `Completion` (with its outcome), `ExtendLeaseRequest`,
//! and a handler's `HandleResponse` outcome.

use std::time::Duration;

use cascade_core::{EventId, LeaseToken, Outcome, QueueConfig, QueueName, units::format_duration};

use super::queue::queue_name_from_proto;
use super::time::{
    duration_from_proto, duration_to_proto, optional_duration_from_proto, timestamp_from_proto,
    timestamp_to_proto,
};
use super::{ConvertError, field_at, headers_from_proto, invalid, payload_from_proto, under};
use crate::v1;
use crate::v1::completion::Outcome as ProtoOutcome;
use crate::v1::handle_response::Outcome as HandleOutcome;

/// The most events one `Take` may ask for.
pub const MAX_TAKE_EVENTS: u32 = 10_000;
/// The longest `worker_id` kept (it only labels logs).
const MAX_WORKER_ID_BYTES: usize = 256;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakeItem {
    pub queue: QueueName,
    /// 1 to [`MAX_TAKE_EVENTS`]; a request's 0 means 1.
    pub max_events: usize,
    /// `None`: the queue's lease.
    pub lease: Option<Duration>,
    /// How long to wait for events when none is ready; `None`: answer at once. The shard
    /// cuts it to its `max_take_wait`.
    pub wait: Option<Duration>,
    pub worker_id: String,
}

/// `max_events` 0 is 1; `lease` unset or 0 is the queue's, else 100ms to 24h; `wait` unset
/// or 0 is no wait.
pub fn take_from_proto(request: &v1::TakeRequest) -> Result<TakeItem, ConvertError> {
    let queue = event_queue(&request.queue, "queue")?;
    if request.max_events > MAX_TAKE_EVENTS {
        return Err(invalid(
            "",
            "max_events",
            format!(
                "must be at most {MAX_TAKE_EVENTS}, got {}",
                request.max_events
            ),
        ));
    }
    let lease = optional_duration_from_proto(request.lease.as_ref(), "lease")?;
    if let Some(lease) = lease {
        check_lease("", "lease", lease)?;
    }
    let wait = optional_duration_from_proto(request.wait.as_ref(), "wait")?;
    if request.worker_id.len() > MAX_WORKER_ID_BYTES {
        return Err(invalid(
            "",
            "worker_id",
            format!(
                "must be at most {MAX_WORKER_ID_BYTES} bytes, got {}",
                request.worker_id.len()
            ),
        ));
    }
    Ok(TakeItem {
        queue,
        max_events: request.max_events.max(1) as usize,
        lease,
        wait,
        worker_id: request.worker_id.clone(),
    })
}

impl TakeItem {
    /// Back to a message, with the completions it carries.
    pub fn into_proto(self, completions: Vec<CompletionItem>) -> v1::TakeRequest {
        v1::TakeRequest {
            queue: self.queue.into(),
            // At most MAX_TAKE_EVENTS.
            max_events: u32::try_from(self.max_events).unwrap_or(MAX_TAKE_EVENTS),
            lease: self.lease.map(duration_to_proto),
            wait: self.wait.map(duration_to_proto),
            worker_id: self.worker_id,
            completions: completions
                .into_iter()
                .map(CompletionItem::into_proto)
                .collect(),
        }
    }
}

/// A validated completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionItem {
    pub queue: QueueName,
    pub id: EventId,
    pub token: LeaseToken,
    pub outcome: Outcome,
}

impl CompletionItem {
    /// Back to a message: how a gateway's validated completion travels to a shard of another
    /// process.
    pub fn into_proto(self) -> v1::Completion {
        v1::Completion {
            queue: self.queue.into(),
            id: self.id.into(),
            lease_token: self.token.to_string(),
            outcome: Some(outcome_to_proto(self.outcome)),
        }
    }
}

/// The completion of the lease `token` on event `id` of `queue`, as a worker sends it.
pub fn completion_to_proto(queue: &str, id: &str, token: &str, outcome: Outcome) -> v1::Completion {
    v1::Completion {
        queue: queue.to_owned(),
        id: id.to_owned(),
        lease_token: token.to_owned(),
        outcome: Some(outcome_to_proto(outcome)),
    }
}

/// An outcome as a completion's `oneof`.
pub fn outcome_to_proto(outcome: Outcome) -> ProtoOutcome {
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
        Outcome::Retry { delay, reason } => ProtoOutcome::Retry(v1::Retry {
            delay: delay.map(duration_to_proto),
            reason: reason.unwrap_or_default(),
        }),
        Outcome::Reschedule { activate_at } => ProtoOutcome::Reschedule(v1::Reschedule {
            activate_at: Some(timestamp_to_proto(activate_at)),
        }),
        Outcome::Release => ProtoOutcome::Release(v1::Release {}),
        Outcome::DeadLetter { reason } => ProtoOutcome::DeadLetter(v1::DeadLetter { reason }),
    }
}

/// Validates one completion; errors name the completion's own fields (`lease_token`), which
/// a request's caller places under the item (`completions[2].lease_token`).
pub fn completion_from_proto(completion: v1::Completion) -> Result<CompletionItem, ConvertError> {
    let queue = event_queue(&completion.queue, "queue")?;
    let id = EventId::parse(&completion.id)?;
    let token = lease_token(&completion.lease_token)?;
    let outcome = outcome_from_proto(completion.outcome, "")?;
    Ok(CompletionItem {
        queue,
        id,
        token,
        outcome,
    })
}

/// Each completion validated on its own (see [`completion_from_proto`]).
pub fn completions_from_proto(
    completions: Vec<v1::Completion>,
) -> Vec<Result<CompletionItem, ConvertError>> {
    completions.into_iter().map(completion_from_proto).collect()
}

/// A completion's outcome; unset is INVALID_ARGUMENT at `<prefix>.outcome`. An `advance`
/// with an empty `to` means the next stage (the gateway resolves it); `retry.delay` unset
/// is the queue's backoff, while a set 0 retries at once.
pub fn outcome_from_proto(
    outcome: Option<ProtoOutcome>,
    prefix: &str,
) -> Result<Outcome, ConvertError> {
    let outcome = match outcome {
        None => {
            return Err(invalid(
                prefix,
                "outcome",
                "must be one of ack, advance, retry, reschedule, release, dead_letter; got none",
            ));
        }
        Some(ProtoOutcome::Ack(_)) => Outcome::Ack,
        Some(ProtoOutcome::Advance(advance)) => Outcome::Advance {
            to: (!advance.to.is_empty()).then_some(advance.to),
            payload: advance.payload.map(payload_from_proto),
            headers: headers_from_proto(&advance.headers),
            delay: optional_duration_from_proto(
                advance.delay.as_ref(),
                &field_at(prefix, "advance.delay"),
            )?,
        },
        Some(ProtoOutcome::Retry(retry)) => Outcome::Retry {
            delay: match &retry.delay {
                None => None,
                Some(delay) => Some(duration_from_proto(
                    delay,
                    &field_at(prefix, "retry.delay"),
                )?),
            },
            reason: (!retry.reason.is_empty()).then(|| retry.reason.clone()),
        },
        Some(ProtoOutcome::Reschedule(reschedule)) => {
            let field = field_at(prefix, "reschedule.activate_at");
            let Some(at) = &reschedule.activate_at else {
                return Err(invalid(
                    "",
                    &field,
                    "must be set to the next activation time",
                ));
            };
            Outcome::Reschedule {
                activate_at: timestamp_from_proto(at, &field)?,
            }
        }
        Some(ProtoOutcome::Release(_)) => Outcome::Release,
        Some(ProtoOutcome::DeadLetter(dead)) => Outcome::DeadLetter {
            reason: dead.reason,
        },
    };
    outcome.validate().map_err(|e| under(prefix, e))?;
    Ok(outcome)
}

/// A handler's answer (`HandleResponse.outcome`), validated like a completion's.
pub fn handle_outcome_from_proto(
    outcome: Option<HandleOutcome>,
    prefix: &str,
) -> Result<Outcome, ConvertError> {
    let as_completion = outcome.map(|given| match given {
        HandleOutcome::Ack(ack) => ProtoOutcome::Ack(ack),
        HandleOutcome::Advance(advance) => ProtoOutcome::Advance(advance),
        HandleOutcome::Retry(retry) => ProtoOutcome::Retry(retry),
        HandleOutcome::Reschedule(reschedule) => ProtoOutcome::Reschedule(reschedule),
        HandleOutcome::DeadLetter(dead) => ProtoOutcome::DeadLetter(dead),
    });
    outcome_from_proto(as_completion, prefix)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendItem {
    pub queue: QueueName,
    pub id: EventId,
    pub token: LeaseToken,
    /// The new deadline is `now + extend_by`; `None`: the queue's lease.
    pub extend_by: Option<Duration>,
}

/// `extend_by` unset or 0 is the queue's lease, else 100ms to 24h.
pub fn extend_from_proto(request: &v1::ExtendLeaseRequest) -> Result<ExtendItem, ConvertError> {
    let queue = event_queue(&request.queue, "queue")?;
    let id = EventId::parse(&request.id)?;
    let token = lease_token(&request.lease_token)?;
    let extend_by = optional_duration_from_proto(request.extend_by.as_ref(), "extend_by")?;
    if let Some(by) = extend_by {
        check_lease("", "extend_by", by)?;
    }
    Ok(ExtendItem {
        queue,
        id,
        token,
        extend_by,
    })
}

/// A queue that holds events: a name, not a template.
fn event_queue(name: &str, field: &str) -> Result<QueueName, ConvertError> {
    let queue = queue_name_from_proto(name, field)?;
    if queue.is_template() {
        return Err(invalid(
            "",
            field,
            format!("'{queue}' is a template; name a queue that matches it"),
        ));
    }
    Ok(queue)
}

fn lease_token(token: &str) -> Result<LeaseToken, ConvertError> {
    LeaseToken::parse(token).map_err(|_| {
        invalid(
            "",
            "lease_token",
            format!(
                "must be the 16 hex digits returned by Take, got {} bytes",
                token.len()
            ),
        )
    })
}

fn check_lease(prefix: &str, field: &str, lease: Duration) -> Result<(), ConvertError> {
    if (QueueConfig::MIN_LEASE..=QueueConfig::MAX_LEASE).contains(&lease) {
        return Ok(());
    }
    Err(invalid(
        prefix,
        field,
        format!(
            "must be between 100ms and 24h (or unset for the queue's lease), got {}",
            format_duration(lease)
        ),
    ))
}

#[cfg(test)]
mod tests;
