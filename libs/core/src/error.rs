//! The domain's error type and the closed set of status codes every Cascade error maps to.
//!
//! Other crates keep their own error enums and map them to [`Code`] too; the gateway turns a
//! [`Code`] into a gRPC status once.

/// A status code, one per kind of failure a client can act on.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    ResourceExhausted,
    Unavailable,
    Internal,
    DataLoss,
    PermissionDenied,
    Unauthenticated,
}

impl Code {
    /// The gRPC status number (also used in per-item results).
    pub fn grpc_code(self) -> i32 {
        match self {
            Code::InvalidArgument => 3,
            Code::NotFound => 5,
            Code::AlreadyExists => 6,
            Code::PermissionDenied => 7,
            Code::ResourceExhausted => 8,
            Code::FailedPrecondition => 9,
            Code::Internal => 13,
            Code::Unavailable => 14,
            Code::DataLoss => 15,
            Code::Unauthenticated => 16,
        }
    }

    /// The gRPC name, e.g. `INVALID_ARGUMENT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

/// An error of the domain: a value that fails validation.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A field holds a value outside what is valid; `reason` says what is.
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    /// A payload is larger than its queue allows.
    #[error("payload: {size} bytes is over the queue's limit of {limit} bytes")]
    PayloadTooLarge { size: u64, limit: u64 },
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument { .. } => Code::InvalidArgument,
            Error::PayloadTooLarge { .. } => Code::ResourceExhausted,
        }
    }

    /// The field the error is about.
    pub fn field(&self) -> &str {
        match self {
            Error::InvalidArgument { field, .. } => field,
            Error::PayloadTooLarge { .. } => "payload",
        }
    }

    /// The same error naming another field, e.g. `parse_duration(s)?` reported as `config.lease`.
    pub fn with_field(self, field: impl Into<String>) -> Error {
        match self {
            Error::InvalidArgument { reason, .. } => Error::invalid(field, reason),
            other => other,
        }
    }
}

/// At most `max_bytes` bytes of `text`, cut at a character boundary: a reason or message
/// kept within a limit.
pub fn cut_to(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// An error and every error under it on one line, `what: why: …`, down to the operating
/// system's word for it, each said once: a message that already includes its cause's text
/// (as many do) is not followed by it again.
pub fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let said = next.to_string();
        // Said already where a message says its cause: after a colon (a short cause such as
        // "0" found anywhere in the text would not do).
        if !(text.ends_with(&said) || text.contains(&format!(": {said}"))) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = next.source();
    }
    text
}

/// Quotes user input for an error message: escaped, and cut after 40 characters.
pub fn excerpt(input: &str) -> String {
    const MAX_CHARS: usize = 40;
    match input.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &input[..cut]),
        None => format!("{input:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Wrapped {
        /// Says its cause itself, as most errors here do.
        #[error("cannot listen on 127.0.0.1:7700: {0}")]
        SaysIt(#[source] std::io::Error),
        /// Leaves it to the chain.
        #[error("dispatcher")]
        LeavesIt(#[source] std::io::Error),
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let in_use = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        assert_eq!(
            describe(&Wrapped::SaysIt(in_use())),
            format!("cannot listen on 127.0.0.1:7700: {}", in_use())
        );
    }

    #[test]
    fn a_cause_the_message_leaves_out_follows_it() {
        let missing = std::io::Error::other("must be set");
        assert_eq!(
            describe(&Wrapped::LeavesIt(missing)),
            "dispatcher: must be set"
        );
    }

    #[test]
    fn grpc_numbers() {
        let pairs = [
            (Code::InvalidArgument, 3),
            (Code::NotFound, 5),
            (Code::AlreadyExists, 6),
            (Code::FailedPrecondition, 9),
            (Code::ResourceExhausted, 8),
            (Code::Unavailable, 14),
            (Code::Internal, 13),
            (Code::DataLoss, 15),
        ];
        for (code, number) in pairs {
            assert_eq!(code.grpc_code(), number, "{}", code.as_str());
        }
    }

    #[test]
    fn messages_name_the_field() {
        let err = Error::invalid("queue", "must not be empty");
        assert_eq!(err.to_string(), "queue: must not be empty");
        assert_eq!(err.code(), Code::InvalidArgument);
        let renamed = err.with_field("advance.to");
        assert_eq!(renamed.to_string(), "advance.to: must not be empty");
        let big = Error::PayloadTooLarge { size: 10, limit: 5 };
        assert_eq!(big.code(), Code::ResourceExhausted);
        assert_eq!(
            big.to_string(),
            "payload: 10 bytes is over the queue's limit of 5 bytes"
        );
    }

    #[test]
    fn excerpt_escapes_and_cuts() {
        assert_eq!(excerpt("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(100);
        assert_eq!(excerpt(&long), format!("\"{}\"...", "x".repeat(40)));
    }
}
