//! The bus's one error type. Each variant says what failed and on which subject, and maps to one
//! status code ([`BusError::code`]) so the gateway can turn it into a gRPC status once.

use std::time::Duration;

use cascade_core::Code;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    #[error(
        "no responders on subject '{subject}': the service that owns it is not running or not subscribed yet"
    )]
    NoResponders { subject: String },
    #[error("request on subject '{subject}' timed out after {after:?} without a reply")]
    Timeout { subject: String, after: Duration },
    #[error(
        "payload of {size} bytes is over the bus's max_payload of {max} bytes: split it into smaller messages"
    )]
    TooLarge { size: usize, max: usize },
    #[error("protobuf message on subject '{subject}' failed to decode: {reason}")]
    Decode { subject: String, reason: String },
    #[error("the bus is closed: the process is shutting down")]
    Closed,
    #[error("nats {op}: {reason}")]
    Nats { op: &'static str, reason: String },
    /// A subject or subscription pattern that NATS would reject or read differently. Subjects
    /// are built by our own code, so this is a bug, not bad user input.
    #[error("invalid subject '{subject}': {reason}")]
    InvalidSubject {
        subject: String,
        reason: &'static str,
    },
    /// A cluster name from the config that cannot be one token of a subject.
    #[error("cluster: {cluster} is not a valid cluster name: {reason}")]
    InvalidCluster {
        cluster: String,
        reason: &'static str,
    },
    /// `respond` on a message that was published, not requested.
    #[error(
        "cannot respond to the message on subject '{subject}': it was published, not requested"
    )]
    NoReply { subject: String },
}

impl BusError {
    pub fn code(&self) -> Code {
        match self {
            BusError::NoResponders { .. }
            | BusError::Timeout { .. }
            | BusError::Closed
            | BusError::Nats { .. } => Code::Unavailable,
            BusError::TooLarge { .. } => Code::ResourceExhausted,
            BusError::Decode { .. }
            | BusError::InvalidSubject { .. }
            | BusError::NoReply { .. } => Code::Internal,
            BusError::InvalidCluster { .. } => Code::InvalidArgument,
        }
    }
}

/// Quotes a string for an error message, cut after 64 characters so hostile input stays short.
pub(crate) fn excerpt(input: &str) -> String {
    const MAX_CHARS: usize = 64;
    match input.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &input[..cut]),
        None => format!("{input:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        let subject = || "cascade.c.dispatcher.1".to_owned();
        let pairs = [
            (
                BusError::NoResponders { subject: subject() },
                Code::Unavailable,
            ),
            (
                BusError::Timeout {
                    subject: subject(),
                    after: Duration::from_secs(1),
                },
                Code::Unavailable,
            ),
            (BusError::Closed, Code::Unavailable),
            (
                BusError::Nats {
                    op: "publish",
                    reason: "x".into(),
                },
                Code::Unavailable,
            ),
            (
                BusError::TooLarge { size: 2, max: 1 },
                Code::ResourceExhausted,
            ),
            (
                BusError::Decode {
                    subject: subject(),
                    reason: "x".into(),
                },
                Code::Internal,
            ),
        ];
        for (err, code) in pairs {
            assert_eq!(err.code(), code, "{err}");
        }
    }

    #[test]
    fn messages_say_where() {
        let err = BusError::Timeout {
            subject: "cascade.c.timer.3".into(),
            after: Duration::from_millis(250),
        };
        assert_eq!(
            err.to_string(),
            "request on subject 'cascade.c.timer.3' timed out after 250ms without a reply"
        );
    }

    #[test]
    fn excerpt_cuts_long_input() {
        assert_eq!(excerpt("a.b"), "\"a.b\"");
        assert_eq!(
            excerpt(&"x".repeat(100)),
            format!("\"{}\"...", "x".repeat(64))
        );
    }
}
