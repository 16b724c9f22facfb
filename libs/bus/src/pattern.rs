//! NATS subject syntax, checked the same way for both buses so that a subject the NATS server
//! would reject or read differently fails identically in standalone mode.
//!
//! A subject is dot-separated non-empty tokens without whitespace. In a subscription pattern a
//! token `*` matches exactly one token and a final `>` matches one or more tokens. Publishing to
//! a subject with a wildcard token is refused: NATS would deliver it literally, which no caller
//! means.

use crate::error::{BusError, excerpt};

/// Checks a subject to publish or request on.
pub(crate) fn validate_subject(subject: &str) -> Result<(), BusError> {
    check_tokens(subject)?;
    if subject.split('.').any(|token| token == "*" || token == ">") {
        return Err(invalid(
            subject,
            "wildcards are only allowed when subscribing",
        ));
    }
    Ok(())
}

/// Checks a subscription pattern.
pub(crate) fn validate_pattern(pattern: &str) -> Result<(), BusError> {
    check_tokens(pattern)?;
    let mut tokens = pattern.split('.').peekable();
    while let Some(token) = tokens.next() {
        if token == ">" && tokens.peek().is_some() {
            return Err(invalid(pattern, "'>' must be the last token"));
        }
    }
    Ok(())
}

/// Whether the subscription `pattern` (already validated) matches the literal `subject`.
pub(crate) fn matches(pattern: &str, subject: &str) -> bool {
    let mut subject_tokens = subject.split('.');
    for pattern_token in pattern.split('.') {
        if pattern_token == ">" {
            return subject_tokens.next().is_some();
        }
        match subject_tokens.next() {
            Some(token) if pattern_token == "*" || pattern_token == token => {}
            _ => return false,
        }
    }
    subject_tokens.next().is_none()
}

/// Whether the pattern has a wildcard token, i.e. cannot be looked up by equality.
pub(crate) fn has_wildcard(pattern: &str) -> bool {
    pattern.split('.').any(|token| token == "*" || token == ">")
}

fn check_tokens(subject: &str) -> Result<(), BusError> {
    if subject.is_empty() {
        return Err(invalid(subject, "must not be empty"));
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            subject,
            "must not contain whitespace or control characters",
        ));
    }
    if subject.split('.').any(str::is_empty) {
        return Err(invalid(subject, "tokens between dots must not be empty"));
    }
    Ok(())
}

fn invalid(subject: &str, reason: &'static str) -> BusError {
    BusError::InvalidSubject {
        subject: excerpt(subject),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_patterns_match_only_themselves() {
        assert!(matches("a.b.c", "a.b.c"));
        assert!(!matches("a.b.c", "a.b"));
        assert!(!matches("a.b", "a.b.c"));
        assert!(!matches("a.b.c", "a.b.cc"));
    }

    #[test]
    fn star_matches_exactly_one_token() {
        assert!(matches("a.*.c", "a.b.c"));
        assert!(matches("a.*", "a.anything"));
        assert!(!matches("a.*", "a"));
        assert!(!matches("a.*", "a.b.c"));
        assert!(matches("*.*", "x.y"));
        assert!(!matches("*", "x.y"));
    }

    #[test]
    fn greater_than_matches_one_or_more_tokens() {
        assert!(matches("a.>", "a.b"));
        assert!(matches("a.>", "a.b.c.d"));
        assert!(!matches("a.>", "a"));
        assert!(!matches("a.>", "b.c"));
        assert!(matches(">", "x"));
        assert!(matches("*.b.>", "a.b.c"));
    }

    #[test]
    fn wildcards_inside_a_token_are_literal() {
        // NATS reads `a*` as a plain token, and so do we.
        assert!(!matches("a.b*", "a.bc"));
        assert!(matches("a.b*", "a.b*"));
        assert!(!has_wildcard("a.b*"));
        assert!(validate_subject("a.b*").is_ok());
    }

    #[test]
    fn subject_validation() {
        for good in ["a", "cascade.c.dispatcher.0", "_INBOX.x-y"] {
            assert!(validate_subject(good).is_ok(), "{good}");
        }
        for bad in [
            "", ".", "a.", ".a", "a..b", "a b", "a\tb", "a\n", "a.*", "a.>", "*",
        ] {
            let err = validate_subject(bad).expect_err(bad);
            assert!(
                matches!(err, BusError::InvalidSubject { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn pattern_validation() {
        for good in ["a", "a.*", "a.>", "*.b.>", ">", "*"] {
            assert!(validate_pattern(good).is_ok(), "{good}");
        }
        for bad in ["", "a..b", "a.>.b", ">.a", "a b"] {
            assert!(validate_pattern(bad).is_err(), "{bad}");
        }
    }
}
