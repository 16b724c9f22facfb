//! Authentication in a process: the identities file loaded at start (a process whose file
//! is missing or invalid does not start), read again every `auth.reload_interval` (a new
//! file that does not parse is refused, logged and audited, and the identities in force
//! stay), and the admin port's guard.
//!
//! The admin port keeps `/healthz`, `/readyz` and `/metrics` open for probes and Prometheus;
//! what shows the cluster's data (the status page, `/status.json`, dead letters, the
//! resource manager's explanations) needs, when authentication is on, the token of an
//! identity with the admin role on every queue (`*`): as `Authorization: Bearer <token>`,
//! or as the password of HTTP Basic, which a browser asks a person for.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use cascade_security::{Authenticator, Caller, Credentials, FileSet, Identities};

use crate::settings::AuthSettings;
use crate::watch::watch_files;
use crate::{ServiceError, Shutdown};

/// The identities file, watched for changes.
pub struct IdentitiesWatch {
    authenticator: Arc<Authenticator>,
    file: FileSet,
    interval: Duration,
}

/// The process's authenticator (disabled unless `auth.enabled`), and the watch of its file.
pub fn load(
    settings: &AuthSettings,
) -> Result<(Arc<Authenticator>, Option<IdentitiesWatch>), ServiceError> {
    let Some(path) = settings
        .identities_file
        .clone()
        .filter(|_| settings.enabled)
    else {
        return Ok((Arc::new(Authenticator::disabled()), None));
    };
    let mut file = FileSet::new(vec![path.clone()]);
    let bad = |reason: String| {
        ServiceError::setting(
            "auth.identities_file",
            format!("{}: {reason}", path.display()),
        )
    };
    let contents = file
        .changed()
        .map_err(|(_, e)| bad(e.to_string()))?
        .expect("a first read returns the contents");
    let identities = parse(&contents[0]).map_err(bad)?;
    tracing::info!(file = %path.display(), identities = identities.len(), "auth.enabled");
    let authenticator = Arc::new(Authenticator::enabled(identities));
    let watch = IdentitiesWatch {
        authenticator: Arc::clone(&authenticator),
        file,
        interval: settings.reload_interval,
    };
    Ok((authenticator, Some(watch)))
}

fn parse(bytes: &[u8]) -> Result<Identities, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_owned())?;
    Identities::parse(text).map_err(|e| e.to_string())
}

impl IdentitiesWatch {
    /// Reads the file every interval until `shutdown`; a changed file that parses replaces
    /// the identities. Each change is an audit line (`credentials.reload`).
    pub async fn run(self, shutdown: Shutdown) {
        let authenticator = self.authenticator;
        watch_files(
            self.file,
            self.interval,
            shutdown,
            "credentials.reload",
            |contents| {
                // What a file caught half-written (truncated, then filled) reads as: applied,
                // it would lock out every client, operators included, until the next read. A
                // file that says something (a comment will do) and names no one is applied.
                if contents[0].iter().all(u8::is_ascii_whitespace) {
                    return Err(
                        "it is empty, as a file caught while it is rewritten in place \
                                is: the identities in force stay (write the file whole, to a \
                                temporary file renamed over it; to refuse everyone, leave a \
                                comment in it)"
                            .to_owned(),
                    );
                }
                let identities = parse(&contents[0])?;
                let count = identities.len();
                authenticator.replace(identities);
                Ok(format!("{count} identities in force"))
            },
        )
        .await;
    }
}

/// `router`'s pages for operators only, when authentication is on (see the module docs).
pub fn operators_only(router: axum::Router, authenticator: Arc<Authenticator>) -> axum::Router {
    router.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let authenticator = Arc::clone(&authenticator);
            async move {
                match refusal(&authenticator, &request) {
                    None => next.run(request).await,
                    Some(refusal) => refusal,
                }
            }
        },
    ))
}

/// Why `request` may not see an operator's page, if it may not: 401 without credentials of
/// an identity (a browser then asks for them), 403 for an identity that is no cluster admin.
fn refusal(authenticator: &Authenticator, request: &Request) -> Option<Response> {
    if !authenticator.is_enabled() {
        return None;
    }
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let basic = header.and_then(cascade_security::basic_password);
    let bearer = header
        .and_then(cascade_security::bearer_token)
        .or(basic.as_deref());
    let credentials = Credentials {
        bearer,
        certificate_names: &[],
    };
    match authenticator.authenticate(credentials) {
        Err(e) => {
            // Said in HTTP's words: the gRPC port's advice (metadata, a client certificate)
            // does not apply here.
            let why = match bearer {
                Some(_) => e.to_string(),
                None => "no credentials: this page needs the token of an identity with the admin role on * (every queue), as `Authorization: Bearer <token>` or as the password of HTTP Basic (a browser asks for it); the cascade command's --token or CASCADE_TOKEN".to_owned(),
            };
            let mut refusal = (StatusCode::UNAUTHORIZED, format!("{why}\n")).into_response();
            refusal.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"cascade\", charset=\"UTF-8\""),
            );
            Some(refusal)
        }
        Ok(Caller::Identity(identity)) if !identity.admin_patterns().any(|p| p.is_everything()) => {
            Some(
                (
                    StatusCode::FORBIDDEN,
                    format!(
                        "identity '{}' may not read this page: it shows every queue, and needs the admin role on * (every queue)\n",
                        identity.name
                    ),
                )
                    .into_response(),
            )
        }
        Ok(_) => None,
    }
}
