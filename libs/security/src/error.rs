//! The crate's one error type; [`SecurityError::code`] is its mapping to a status code.

use std::time::Duration;

use cascade_core::Code;

use crate::grant::Permission;

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// No credentials, or credentials of no known identity.
    #[error("{0}")]
    Unauthenticated(String),
    /// The caller is known, but no grant of the role needed covers the queue.
    #[error(
        "identity '{identity}' may not {} queue '{queue}': it needs the {} role on a pattern that matches it (its grants: {grants})",
        permission.verb(),
        permission.role_needed()
    )]
    PermissionDenied {
        identity: String,
        permission: Permission,
        queue: String,
        grants: String,
    },
    /// A request that the caller's grants allow, refused by a policy of the cluster.
    #[error("{0}")]
    Forbidden(String),
    /// The caller used up one of its quotas.
    #[error("identity '{identity}' is over its quota: {what}{}", retry_hint(*.retry_after))]
    QuotaExceeded {
        identity: String,
        what: String,
        retry_after: Option<Duration>,
    },
    /// A file (identities, certificate, key) cannot be read or is not what it should be.
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    /// A value of the identities file or of a TLS file is invalid; `field` names it.
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

impl SecurityError {
    pub fn code(&self) -> Code {
        match self {
            SecurityError::Unauthenticated(_) => Code::Unauthenticated,
            SecurityError::PermissionDenied { .. } | SecurityError::Forbidden(_) => {
                Code::PermissionDenied
            }
            SecurityError::QuotaExceeded { .. } => Code::ResourceExhausted,
            SecurityError::File { .. } | SecurityError::Invalid { .. } => Code::InvalidArgument,
        }
    }

    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> SecurityError {
        SecurityError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

fn retry_hint(after: Option<Duration>) -> String {
    match after {
        Some(after) => format!(
            "; retry in {}",
            // Up to the next millisecond: `149ms`, not `148995874ns`.
            cascade_core::units::format_duration(Duration::from_millis(
                u64::try_from(after.as_nanos().div_ceil(1_000_000))
                    .unwrap_or(u64::MAX)
                    .max(1)
            ))
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_retry_hint_is_rounded_up_to_the_millisecond() {
        let hint = |nanos| super::retry_hint(Some(Duration::from_nanos(nanos)));
        assert_eq!(hint(148_995_874), "; retry in 149ms");
        assert_eq!(hint(2_000_000_000), "; retry in 2s");
        assert_eq!(hint(1), "; retry in 1ms");
        assert_eq!(super::retry_hint(None), "");
    }
}
