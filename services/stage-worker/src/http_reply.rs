//! What an HTTP handler's response means, as a pure function of its status, headers and
//! body, so that every rule is a row of a table test.
//!
//! - 2xx: advance (the stage turns it into an ack at the last stage or on a plain queue);
//! - `cascade-outcome` (any status) asks instead for `ack`, `advance`, `advance:<stage>`,
//!   `retry`, `reschedule` or `dead-letter`;
//! - `cascade-delay: <seconds>` (decimals allowed) delays a retry or an advance, and places
//!   a reschedule that has no `cascade-activate-at: <RFC 3339 UTC time>`;
//! - `cascade-payload: replace`: the body becomes the next stage's payload;
//!   `cascade-h-<name>: <value>` sets the header `<name>` for the next stage;
//! - `cascade-reason` gives a dead letter's or a retry's reason (else `HTTP <code>: <start
//!   of body>`), whatever the status;
//! - 429 and 503 retry after `Retry-After` seconds when given, other 4xx dead-letter with
//!   `HTTP <code>: <start of body>`, anything else (5xx, an unfollowed 3xx) retries with
//!   the queue's backoff.
//!
//! A header that cannot be understood is an error: the event is retried like after any
//! failure of the handler, and the error says which header is wrong.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use cascade_core::error::cut_to;
use cascade_core::event::is_reserved_header;
use cascade_core::outcome::MAX_DEAD_LETTER_REASON_BYTES;
use cascade_core::{Outcome, Timestamp};
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::StageWorkerError;

pub const OUTCOME_HEADER: &str = "cascade-outcome";
pub const DELAY_HEADER: &str = "cascade-delay";
pub const ACTIVATE_AT_HEADER: &str = "cascade-activate-at";
pub const PAYLOAD_HEADER: &str = "cascade-payload";
pub const REASON_HEADER: &str = "cascade-reason";
/// Event headers travel as `cascade-h-<name>`, both ways.
pub const EVENT_HEADER_PREFIX: &str = "cascade-h-";

/// Characters of the body quoted in a dead letter's reason.
const BODY_EXCERPT_CHARS: usize = 200;
/// The longest `cascade-delay` accepted: a year.
const MAX_DELAY: Duration = Duration::from_secs(366 * 86_400);

/// A handler's response, as far as its outcome depends on it.
pub struct Reply<'a> {
    pub status: u16,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The outcome `reply` asks for; `now` places a reschedule given by delay.
pub fn outcome_of_reply(reply: &Reply<'_>, now: Timestamp) -> Result<Outcome, StageWorkerError> {
    let delay = delay_header(reply.headers)?;
    if let Some(asked) = text_header(reply.headers, OUTCOME_HEADER)? {
        return asked_outcome(asked.trim(), reply, delay, now);
    }
    Ok(match reply.status {
        200..=299 => advance(None, reply, delay)?,
        429 | 503 => Outcome::Retry {
            delay: delay.or_else(|| retry_after(reply.headers)),
            reason: Some(stated_reason(reply)?),
        },
        400..=499 => Outcome::DeadLetter {
            reason: stated_reason(reply)?,
        },
        _ => Outcome::Retry {
            delay,
            reason: Some(stated_reason(reply)?),
        },
    })
}

fn asked_outcome(
    asked: &str,
    reply: &Reply<'_>,
    delay: Option<Duration>,
    now: Timestamp,
) -> Result<Outcome, StageWorkerError> {
    let (word, target) = match asked.split_once(':') {
        Some((word, target)) => (word.trim(), Some(target.trim())),
        None => (asked, None),
    };
    match (word.to_ascii_lowercase().as_str(), target) {
        ("ack", None) => Ok(Outcome::Ack),
        ("advance", None) => advance(None, reply, delay),
        ("advance", Some(stage)) if !stage.is_empty() => {
            advance(Some(stage.to_owned()), reply, delay)
        }
        ("retry", None) => Ok(Outcome::Retry {
            delay,
            reason: Some(stated_reason(reply)?),
        }),
        ("reschedule", None) => {
            let activate_at = match text_header(reply.headers, ACTIVATE_AT_HEADER)? {
                Some(at) => Timestamp::parse_rfc3339(at.trim())
                    .map_err(|e| bad(ACTIVATE_AT_HEADER, reason_of(e)))?,
                None => match delay {
                    Some(delay) => now.saturating_add(delay),
                    None => {
                        return Err(bad(
                            ACTIVATE_AT_HEADER,
                            "a reschedule needs cascade-activate-at (or cascade-delay)",
                        ));
                    }
                },
            };
            Ok(Outcome::Reschedule { activate_at })
        }
        ("dead-letter" | "dead_letter", None) => Ok(Outcome::DeadLetter {
            reason: stated_reason(reply)?,
        }),
        _ => Err(bad(
            OUTCOME_HEADER,
            format!(
                "must be ack, advance, advance:<stage>, retry, reschedule or dead-letter, got {:?}",
                cut_to(asked, 100)
            ),
        )),
    }
}

fn advance(
    to: Option<String>,
    reply: &Reply<'_>,
    delay: Option<Duration>,
) -> Result<Outcome, StageWorkerError> {
    let payload = match text_header(reply.headers, PAYLOAD_HEADER)? {
        None => None,
        Some(mode) if mode.trim().eq_ignore_ascii_case("replace") => {
            Some(Bytes::copy_from_slice(reply.body))
        }
        Some(other) => {
            return Err(bad(
                PAYLOAD_HEADER,
                format!("must be replace, got {:?}", cut_to(other, 100)),
            ));
        }
    };
    let mut headers = BTreeMap::new();
    for (name, value) in reply.headers {
        let Some(event_header) = name.as_str().strip_prefix(EVENT_HEADER_PREFIX) else {
            continue;
        };
        // Cascade's own (a last failure's reason, a dead letter's origin): the handler got
        // them with the event, and a reply that sends them back leaves them as they are,
        // where the gateway would refuse the advance for setting them.
        if is_reserved_header(event_header) {
            continue;
        }
        let value = std::str::from_utf8(value.as_bytes())
            .map_err(|_| bad(name.as_str(), "must be UTF-8"))?;
        headers.insert(event_header.to_owned(), value.to_owned());
    }
    Ok(Outcome::Advance {
        to,
        payload,
        headers,
        delay,
    })
}

/// A header's value as text; absent is `None`, a value that is not UTF-8 an error.
fn text_header<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, StageWorkerError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => std::str::from_utf8(value.as_bytes())
            .map(Some)
            .map_err(|_| bad(name, "must be UTF-8")),
    }
}

fn delay_header(headers: &HeaderMap) -> Result<Option<Duration>, StageWorkerError> {
    let Some(text) = text_header(headers, DELAY_HEADER)? else {
        return Ok(None);
    };
    let seconds: f64 = text.trim().parse().map_err(|_| {
        bad(
            DELAY_HEADER,
            format!(
                "must be a number of seconds such as 30 or 0.5, got {:?}",
                cut_to(text, 100)
            ),
        )
    })?;
    match Duration::try_from_secs_f64(seconds) {
        Ok(delay) if delay <= MAX_DELAY => Ok(Some(delay)),
        _ => Err(bad(
            DELAY_HEADER,
            format!(
                "must be 0 to {} seconds, got {:?}",
                MAX_DELAY.as_secs(),
                cut_to(text, 100)
            ),
        )),
    }
}

/// `Retry-After` in seconds; an HTTP date or anything else is ignored (the queue's backoff
/// applies then).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_DELAY))
}

/// Why the handler failed: its `cascade-reason` header, else its status and body.
fn stated_reason(reply: &Reply<'_>) -> Result<String, StageWorkerError> {
    Ok(match text_header(reply.headers, REASON_HEADER)? {
        Some(reason) if !reason.trim().is_empty() => {
            cut_to(reason.trim(), MAX_DEAD_LETTER_REASON_BYTES).to_owned()
        }
        _ => status_reason(reply),
    })
}

/// `HTTP <code>: <start of body>`, on one line.
fn status_reason(reply: &Reply<'_>) -> String {
    let text = String::from_utf8_lossy(reply.body);
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.is_empty() {
        return format!("HTTP {}", reply.status);
    }
    match flat.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((end, _)) => format!("HTTP {}: {}...", reply.status, &flat[..end]),
        None => format!("HTTP {}: {flat}", reply.status),
    }
}

fn bad(header: &str, reason: impl Into<String>) -> StageWorkerError {
    StageWorkerError::BadReply {
        header: header.to_owned(),
        reason: reason.into(),
    }
}

fn reason_of(err: cascade_core::Error) -> String {
    match err {
        cascade_core::Error::InvalidArgument { reason, .. } => reason,
        other => other.to_string(),
    }
}

#[cfg(test)]
#[path = "http_reply_tests.rs"]
mod tests;
