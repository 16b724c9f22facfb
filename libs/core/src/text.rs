//! Shared checks for the token-like strings of the domain (names, ids, header names).

use crate::error::Error;

/// `[A-Za-z0-9._:-]`: queue names and client event ids.
pub(crate) fn is_queue_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

/// `[A-Za-z0-9_-]`: pipeline and stage names (no dot, so `p.s` splits unambiguously).
pub(crate) fn is_stage_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-')
}

/// `[A-Za-z0-9_.-]`: header names.
pub(crate) fn is_header_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// Checks `1..=max_bytes` bytes of `allowed` chars; `rule` is the message's "must be ..." part.
pub(crate) fn check_token(
    input: &str,
    field: &str,
    max_bytes: usize,
    allowed: impl Fn(char) -> bool,
    rule: &str,
) -> Result<(), Error> {
    if input.is_empty() {
        return Err(Error::invalid(
            field,
            format!("{rule}, got an empty string"),
        ));
    }
    if input.len() > max_bytes {
        return Err(Error::invalid(
            field,
            format!("{rule}, got {} bytes", input.len()),
        ));
    }
    if let Some((at, bad)) = first_refused(input, allowed) {
        return Err(Error::invalid(
            field,
            format!("{rule}, got {bad:?} at byte {at}"),
        ));
    }
    Ok(())
}

/// The first char `allowed` refuses, with its byte offset. Every id the store reads back is
/// checked again, so this is on the hot path: ASCII text, the usual case, is checked byte by
/// byte without decoding UTF-8.
fn first_refused(input: &str, allowed: impl Fn(char) -> bool) -> Option<(usize, char)> {
    if input.is_ascii() {
        let bytes = input.as_bytes();
        let at = bytes.iter().position(|&b| !allowed(char::from(b)))?;
        return Some((at, char::from(bytes[at])));
    }
    input.char_indices().find(|&(_, c)| !allowed(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_messages() {
        let rule = "must be 1-3 bytes of [a-z]";
        let lower = |c: char| c.is_ascii_lowercase();
        assert_eq!(check_token("abc", "f", 3, lower, rule), Ok(()));
        let empty = check_token("", "f", 3, lower, rule).expect_err("empty");
        assert_eq!(
            empty.to_string(),
            "f: must be 1-3 bytes of [a-z], got an empty string"
        );
        let long = check_token("abcd", "f", 3, lower, rule).expect_err("long");
        assert_eq!(
            long.to_string(),
            "f: must be 1-3 bytes of [a-z], got 4 bytes"
        );
        let bad = check_token("aé", "f", 3, lower, rule).expect_err("bad char");
        assert_eq!(
            bad.to_string(),
            "f: must be 1-3 bytes of [a-z], got 'é' at byte 1"
        );
        let control = check_token("\n", "f", 3, lower, rule).expect_err("control");
        assert_eq!(
            control.to_string(),
            "f: must be 1-3 bytes of [a-z], got '\\n' at byte 0"
        );
        let ascii = check_token("ab-", "f", 3, lower, rule).expect_err("ascii");
        assert_eq!(
            ascii.to_string(),
            "f: must be 1-3 bytes of [a-z], got '-' at byte 2"
        );
    }

    #[test]
    fn the_ascii_path_finds_what_decoding_finds() {
        for input in [
            "abc",
            "a b",
            "a.b:c-d_e",
            "é",
            "aé",
            "a\u{1F600}b",
            "ab\0",
            "~x",
        ] {
            let decoded = input.char_indices().find(|&(_, c)| !is_queue_char(c));
            assert_eq!(first_refused(input, is_queue_char), decoded, "{input:?}");
        }
    }
}
