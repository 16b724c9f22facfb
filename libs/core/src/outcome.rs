//! What a handler decides for a leased event. Each outcome is one atomic transition in the
//! store, applied only with the current lease token.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use crate::error::Error;
use crate::event::validate_headers_at;
use crate::queue::QueueName;
use crate::time::Timestamp;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done: removed.
    Ack,
    /// Removed here and enqueued, exactly once, at the next stage or at `to`.
    Advance {
        /// A stage name or a queue name, resolved by the store; `None`: the next stage.
        to: Option<String>,
        /// Replaces the payload when set.
        payload: Option<Bytes>,
        /// Merged into the event's headers.
        headers: BTreeMap<String, String>,
        delay: Option<Duration>,
    },
    /// Back to delayed after `delay` or the queue's backoff; dead-lettered at `max_attempts`.
    Retry {
        delay: Option<Duration>,
        /// Why the attempt failed: kept on the event, and in its dead-letter reason if its
        /// attempts run out.
        reason: Option<String>,
    },
    /// Back to delayed at `activate_at`, attempts reset (periodic jobs).
    Reschedule {
        activate_at: Timestamp,
    },
    /// Back to ready now.
    Release,
    DeadLetter {
        reason: String,
    },
}

/// The longest reason (a dead letter's, a retry's) accepted, in bytes.
pub const MAX_DEAD_LETTER_REASON_BYTES: usize = 4096;

impl Outcome {
    /// Lowercase name for logs and metrics labels.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Ack => "ack",
            Outcome::Advance { .. } => "advance",
            Outcome::Retry { .. } => "retry",
            Outcome::Reschedule { .. } => "reschedule",
            Outcome::Release => "release",
            Outcome::DeadLetter { .. } => "dead_letter",
        }
    }

    /// Checks what can be checked without the store: `advance.to` is a queue name (stage names
    /// are too) and not a template, `advance.headers` are valid, the reason is not oversize.
    pub fn validate(&self) -> Result<(), Error> {
        match self {
            Outcome::Advance { to, headers, .. } => {
                if let Some(target) = to {
                    let name = QueueName::parse_field(target, "advance.to")?;
                    if name.is_template() {
                        return Err(Error::invalid(
                            "advance.to",
                            "must be a stage or queue name, not a template",
                        ));
                    }
                }
                validate_headers_at(headers, "advance.headers")
            }
            Outcome::DeadLetter { reason } => check_reason(reason, "dead_letter.reason"),
            Outcome::Retry {
                reason: Some(reason),
                ..
            } => check_reason(reason, "retry.reason"),
            _ => Ok(()),
        }
    }
}

fn check_reason(reason: &str, field: &str) -> Result<(), Error> {
    if reason.len() <= MAX_DEAD_LETTER_REASON_BYTES {
        return Ok(());
    }
    Err(Error::invalid(
        field,
        format!(
            "must be at most {MAX_DEAD_LETTER_REASON_BYTES} bytes, got {}",
            reason.len()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advance_to(to: &str) -> Outcome {
        Outcome::Advance {
            to: Some(to.to_owned()),
            payload: None,
            headers: BTreeMap::new(),
            delay: None,
        }
    }

    #[test]
    fn names() {
        let outcomes = [
            Outcome::Ack,
            advance_to("next"),
            Outcome::Retry {
                delay: None,
                reason: None,
            },
            Outcome::Reschedule {
                activate_at: Timestamp::ZERO,
            },
            Outcome::Release,
            Outcome::DeadLetter {
                reason: "bad".to_owned(),
            },
        ];
        let names = outcomes.iter().map(Outcome::name).collect::<Vec<_>>();
        assert_eq!(
            names,
            [
                "ack",
                "advance",
                "retry",
                "reschedule",
                "release",
                "dead_letter"
            ]
        );
    }

    #[test]
    fn validation() {
        assert_eq!(advance_to("ship").validate(), Ok(()));
        assert_eq!(advance_to("orders.ship").validate(), Ok(()));
        assert_eq!(
            advance_to("a b").validate().expect_err("space").field(),
            "advance.to"
        );
        assert_eq!(
            advance_to("inbox:*")
                .validate()
                .expect_err("template")
                .field(),
            "advance.to"
        );
        let bad_headers = Outcome::Advance {
            to: None,
            payload: None,
            headers: BTreeMap::from([("bad name".to_owned(), String::new())]),
            delay: None,
        };
        assert_eq!(
            bad_headers.validate().expect_err("header").field(),
            "advance.headers"
        );
        let long = Outcome::DeadLetter {
            reason: "r".repeat(4097),
        };
        assert_eq!(
            long.validate().expect_err("long").field(),
            "dead_letter.reason"
        );
        let long_retry = Outcome::Retry {
            delay: None,
            reason: Some("r".repeat(4097)),
        };
        assert_eq!(
            long_retry.validate().expect_err("long").field(),
            "retry.reason"
        );
        assert_eq!(Outcome::Ack.validate(), Ok(()));
    }
}
