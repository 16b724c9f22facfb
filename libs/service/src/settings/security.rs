//! The `[auth]` and `[grpc.tls]` settings: who may call the gateway and over what.
//!
//! ```toml
//! [grpc.tls]
//! cert_file = "/etc/cascade/tls/tls.crt"
//! key_file = "/etc/cascade/tls/tls.key"
//! client_ca_file = "/etc/cascade/tls/ca.crt"   # every client must present a certificate
//! reload_interval = "10s"
//!
//! [auth]
//! enabled = true
//! identities_file = "/etc/cascade/identities/identities.toml"
//! reload_interval = "10s"
//! handler_url_prefixes = ["http://handlers.cascade.svc:8080/"]
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cascade_core::units::serde_duration;
use cascade_security::HandlerUrls;
use serde::{Deserialize, Serialize};

use crate::ServiceError;

/// A secret setting (a token, a password, a seed): read like a string, never printed by
/// `Debug`, so that no log of a settings struct shows it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<secret>\"")
    }
}

/// TLS files of a client: the CA that signed the server's certificate and, for mutual TLS,
/// the client's own certificate and key (PEM).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTlsFiles {
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

impl ClientTlsFiles {
    /// The certificate and key, both or neither; `section` names them in the error.
    pub fn cert_and_key(&self, section: &str) -> Result<Option<(&Path, &Path)>, ServiceError> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Ok(Some((cert, key))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(ServiceError::setting(
                format!("{section}.key_file"),
                "must be set with cert_file: the client certificate's private key",
            )),
            (None, Some(_)) => Err(ServiceError::setting(
                format!("{section}.cert_file"),
                "must be set with key_file: the certificate of that key",
            )),
        }
    }
}

/// TLS on the gateway's gRPC port: off unless a certificate and its key are given.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpcTlsSettings {
    /// PEM certificate chain of the gateway (a Kubernetes TLS Secret's `tls.crt`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of that certificate (`tls.key`).
    pub key_file: Option<PathBuf>,
    /// PEM CA certificates (`ca.crt`); set: every client must present a certificate they
    /// signed (mutual TLS), whose DNS names can also prove an identity.
    pub client_ca_file: Option<PathBuf>,
    /// How often the three files are read again; a change applies to new connections.
    #[serde(with = "serde_duration")]
    pub reload_interval: Duration,
}

impl GrpcTlsSettings {
    pub fn is_enabled(&self) -> bool {
        self.cert_file.is_some()
    }
}

impl Default for GrpcTlsSettings {
    fn default() -> Self {
        GrpcTlsSettings {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            reload_interval: Duration::from_secs(10),
        }
    }
}

/// Authentication and authorization at the gateway and on the admin port.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// Off: every caller may do everything (a development setup on loopback).
    pub enabled: bool,
    /// The identities and their grants (TOML); read again when it changes.
    pub identities_file: Option<PathBuf>,
    /// How often the identities file is read again.
    #[serde(with = "serde_duration")]
    pub reload_interval: Duration,
    /// With authentication on, the URLs a pipeline applied by a client may name as handlers
    /// must start with one of these (none may when it is empty). Pipelines of the settings
    /// file are the operator's own and are not checked. In the environment, a
    /// comma-separated list.
    #[serde(deserialize_with = "string_list")]
    pub handler_url_prefixes: Vec<String>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            enabled: false,
            identities_file: None,
            reload_interval: Duration::from_secs(10),
            handler_url_prefixes: Vec::new(),
        }
    }
}

impl AuthSettings {
    /// The allow-list, checked.
    pub fn handler_urls(&self) -> Result<HandlerUrls, ServiceError> {
        HandlerUrls::new(&self.handler_url_prefixes, "auth.handler_url_prefixes")
            .map_err(|e| ServiceError::setting("auth.handler_url_prefixes", e.to_string()))
    }
}

pub(super) fn validate(tls: &GrpcTlsSettings, auth: &AuthSettings) -> Result<(), ServiceError> {
    match (&tls.cert_file, &tls.key_file) {
        (Some(_), None) => {
            return Err(ServiceError::setting(
                "grpc.tls.key_file",
                "must be set with grpc.tls.cert_file: the certificate's private key",
            ));
        }
        (None, Some(_)) => {
            return Err(ServiceError::setting(
                "grpc.tls.cert_file",
                "must be set with grpc.tls.key_file: the certificate of that key",
            ));
        }
        _ => {}
    }
    if tls.client_ca_file.is_some() && tls.cert_file.is_none() {
        return Err(ServiceError::setting(
            "grpc.tls.client_ca_file",
            "needs grpc.tls.cert_file and grpc.tls.key_file: client certificates are checked in a TLS handshake",
        ));
    }
    if auth.enabled && auth.identities_file.is_none() {
        return Err(ServiceError::setting(
            "auth.identities_file",
            "must name the identities file when auth.enabled is true",
        ));
    }
    for (key, interval) in [
        ("grpc.tls.reload_interval", tls.reload_interval),
        ("auth.reload_interval", auth.reload_interval),
    ] {
        if interval.is_zero() {
            return Err(ServiceError::setting(key, "must be more than 0"));
        }
    }
    auth.handler_urls().map(drop)
}

/// A list of strings: `["a", "b"]` in a file; `a,b` in the environment, where a list
/// arrives as one string.
fn string_list<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        Many(Vec<String>),
        Text(String),
    }
    Ok(match OneOrMany::deserialize(deserializer)? {
        OneOrMany::Many(list) => list,
        OneOrMany::Text(text) => text
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}
