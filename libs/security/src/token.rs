//! Bearer tokens: their SHA-256 (what the identities file stores) and reading them from an
//! `authorization` header, as `Bearer <token>`, or as the password of HTTP Basic (what a
//! browser sends for the status page after asking a person).

use aws_lc_rs::digest;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The SHA-256 of a token, in lowercase hexadecimal: what `token_sha256` holds.
pub fn token_sha256(token: &str) -> String {
    sha256(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = digest::digest(&digest::SHA256, bytes);
    let mut hash = [0u8; 32];
    hash.copy_from_slice(digest.as_ref());
    hash
}

/// The token of an `authorization: Bearer <token>` header value.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The password of an `authorization: Basic <base64 user:password>` header value.
pub fn basic_password(header: &str) -> Option<String> {
    let (scheme, encoded) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    (!password.is_empty()).then(|| password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_hash_is_what_sha256sum_prints() {
        // printf %s abc | sha256sum
        assert_eq!(
            token_sha256("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn tokens_are_read_from_bearer_and_basic_headers() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        // "ops:s3cret"
        assert_eq!(
            basic_password("Basic b3BzOnMzY3JldA=="),
            Some("s3cret".into())
        );
        // ":t" (no user name)
        assert_eq!(basic_password("Basic OnQ="), Some("t".into()));
        assert_eq!(basic_password("Basic b3Bz"), None);
        assert_eq!(basic_password("Basic !!!!"), None);
        assert_eq!(basic_password("Bearer b3BzOnMzY3JldA=="), None);
    }
}
