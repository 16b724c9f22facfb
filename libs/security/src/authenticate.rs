//! Credentials to a caller. With authentication off every caller is unrestricted (a
//! loopback development setup); with it on, a bearer token decides when one is sent
//! (a wrong one is refused even with a good certificate), else a client certificate whose
//! DNS names prove an identity; nothing else gets in.

use std::sync::{Arc, PoisonError, RwLock};

use crate::SecurityError;
use crate::grant::Permission;
use crate::identities::{Identities, Identity};
use crate::token::sha256;

/// Who made a call.
#[derive(Clone, Debug)]
pub enum Caller {
    /// Authentication is off, or the call came from inside the process: anything goes.
    Unrestricted,
    Identity(Arc<Identity>),
}

impl Caller {
    pub fn allows(&self, permission: Permission, queue: &str) -> bool {
        match self {
            Caller::Unrestricted => true,
            Caller::Identity(identity) => identity.allows(permission, queue),
        }
    }

    /// PERMISSION_DENIED unless the caller may do `permission` on `queue`.
    pub fn check(&self, permission: Permission, queue: &str) -> Result<(), SecurityError> {
        match self {
            Caller::Unrestricted => Ok(()),
            Caller::Identity(identity) => identity.check(permission, queue),
        }
    }

    /// The identity, when authentication is on.
    pub fn identity(&self) -> Option<&Arc<Identity>> {
        match self {
            Caller::Unrestricted => None,
            Caller::Identity(identity) => Some(identity),
        }
    }
}

/// What a call brought to prove who made it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Credentials<'a> {
    /// The token of `authorization: Bearer <token>`.
    pub bearer: Option<&'a str>,
    /// The DNS names of the client certificate the TLS handshake verified.
    pub certificate_names: &'a [String],
}

/// Authenticates calls against identities that can be replaced while it serves.
pub struct Authenticator {
    enabled: bool,
    identities: RwLock<Arc<Identities>>,
}

impl Authenticator {
    /// Authentication off: every caller is [`Caller::Unrestricted`].
    pub fn disabled() -> Authenticator {
        Authenticator {
            enabled: false,
            identities: RwLock::default(),
        }
    }

    pub fn enabled(identities: Identities) -> Authenticator {
        Authenticator {
            enabled: true,
            identities: RwLock::new(Arc::new(identities)),
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Calls from now on are authenticated against `identities` (a reloaded file).
    pub fn replace(&self, identities: Identities) {
        *self
            .identities
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(identities);
    }

    pub fn identities(&self) -> Arc<Identities> {
        Arc::clone(
            &self
                .identities
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// The caller `credentials` prove, or UNAUTHENTICATED saying what was wrong.
    pub fn authenticate(&self, credentials: Credentials<'_>) -> Result<Caller, SecurityError> {
        if !self.enabled {
            return Ok(Caller::Unrestricted);
        }
        let identities = self.identities();
        if let Some(token) = credentials.bearer {
            return match identities.by_token_hash(&sha256(token.as_bytes())) {
                Some(identity) => Ok(Caller::Identity(Arc::clone(identity))),
                None => Err(SecurityError::Unauthenticated(
                    "the bearer token is not that of any identity (mistyped, or rotated out of the identities file)".into(),
                )),
            };
        }
        let names = credentials.certificate_names.iter().map(String::as_str);
        if let Some(identity) = identities.by_certificate(names) {
            return Ok(Caller::Identity(Arc::clone(identity)));
        }
        let why = match credentials.certificate_names.is_empty() {
            true => "no credentials",
            false => "the client certificate's names prove no identity, and no token came",
        };
        Err(SecurityError::Unauthenticated(format!(
            "{why}: send a token as `authorization: Bearer <token>` metadata (the cascade command's --token or CASCADE_TOKEN), or connect with a client certificate of a known identity"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::token_sha256;

    fn authenticator() -> Authenticator {
        let text = format!(
            "[[identities]]\nname = \"p\"\ntoken_sha256 = \"{}\"\ncertificate_names = [\"p.example\"]\ngrants = [{{ role = \"producer\", queues = [\"orders.*\"] }}]",
            token_sha256("good")
        );
        Authenticator::enabled(Identities::parse(&text).expect("valid"))
    }

    fn name(caller: Result<Caller, SecurityError>) -> String {
        match caller {
            Ok(Caller::Identity(identity)) => identity.name.clone(),
            Ok(Caller::Unrestricted) => "unrestricted".into(),
            Err(e) => format!("{:?}: {e}", e.code()),
        }
    }

    #[test]
    fn a_token_or_a_certificate_proves_an_identity() {
        let auth = authenticator();
        let token = |bearer| Credentials {
            bearer: Some(bearer),
            certificate_names: &[],
        };
        assert_eq!(name(auth.authenticate(token("good"))), "p");
        let certificate = ["p.example".to_owned()];
        let by_certificate = Credentials {
            bearer: None,
            certificate_names: &certificate,
        };
        assert_eq!(name(auth.authenticate(by_certificate)), "p");
        let bad = name(auth.authenticate(Credentials {
            bearer: Some("bad"),
            certificate_names: &certificate,
        }));
        assert!(
            bad.starts_with("Unauthenticated: the bearer token is not that of any identity"),
            "a wrong token is refused whatever the certificate: {bad}"
        );
        let none = name(auth.authenticate(Credentials::default()));
        assert!(
            none.starts_with("Unauthenticated: no credentials: "),
            "{none}"
        );
        assert_eq!(
            name(Authenticator::disabled().authenticate(Credentials::default())),
            "unrestricted"
        );
    }

    #[test]
    fn replaced_identities_take_effect_for_the_next_call() {
        let auth = authenticator();
        let text = format!(
            "[[identities]]\nname = \"q\"\ntoken_sha256 = \"{}\"",
            token_sha256("new")
        );
        auth.replace(Identities::parse(&text).expect("valid"));
        let token = |bearer| Credentials {
            bearer: Some(bearer),
            certificate_names: &[],
        };
        assert_eq!(name(auth.authenticate(token("new"))), "q");
        assert!(name(auth.authenticate(token("good"))).starts_with("Unauthenticated"));
    }
}
