//! TLS on the gRPC port (`grpc.tls.*`): the certificate, its key and the client CA read at
//! start (the gateway does not start with files it cannot use) and again every
//! `grpc.tls.reload_interval`. A changed set that makes a valid config applies to new
//! connections (a rotated certificate, a new CA); one that does not (a key written before
//! its certificate, say) is logged and audited, and the config in force stays.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cascade_security::tls::{Pem, Reloading, server_config};
use cascade_security::{FileSet, SecurityError};
use cascade_service::settings::GrpcTlsSettings;
use cascade_service::watch::watch_files;
use cascade_service::{ServiceError, Shutdown};

use crate::IngestError;

/// The TLS config in force and the files it is read from.
pub struct Tls {
    pub config: Arc<Reloading>,
    files: FileSet,
    keys: Vec<&'static str>,
    interval: Duration,
}

impl Tls {
    /// The port's TLS, if `settings` turn it on.
    pub fn load(settings: &GrpcTlsSettings) -> Result<Option<Tls>, IngestError> {
        let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) else {
            return Ok(None);
        };
        let mut paths: Vec<PathBuf> = vec![cert.clone(), key.clone()];
        let mut keys = vec!["grpc.tls.cert_file", "grpc.tls.key_file"];
        if let Some(ca) = &settings.client_ca_file {
            paths.push(ca.clone());
            keys.push("grpc.tls.client_ca_file");
        }
        let mut files = FileSet::new(paths);
        let contents = files
            .changed()
            .map_err(|(path, e)| {
                let key = keys[files.paths().iter().position(|p| *p == path).unwrap_or(0)];
                ServiceError::setting(key, format!("{}: {e}", path.display()))
            })?
            .expect("a first read returns the contents");
        let config = build(files.paths(), &keys, &contents)
            .map_err(|e| ServiceError::setting("grpc.tls", e.to_string()))?;
        Ok(Some(Tls {
            config: Arc::new(Reloading::new(config)),
            files,
            keys,
            interval: settings.reload_interval,
        }))
    }

    /// Whether the files make a TLS config the gateway would start with (`cascade config
    /// check`).
    pub fn check(settings: &GrpcTlsSettings) -> Result<(), IngestError> {
        Tls::load(settings).map(|_| ())
    }

    /// Reads the files every interval until `shutdown`, replacing the config when they
    /// changed and make a valid one. Each change is an audit line (`tls.reload`).
    pub async fn watch(self, shutdown: Shutdown) {
        let Tls {
            config,
            files,
            keys,
            interval,
        } = self;
        let paths = files.paths().to_vec();
        watch_files(files, interval, shutdown, "tls.reload", move |contents| {
            let new = build(&paths, &keys, contents).map_err(|e| e.to_string())?;
            config.replace(new);
            Ok("new connections use the new certificate".to_owned())
        })
        .await;
    }
}

fn build(
    paths: &[PathBuf],
    keys: &[&'static str],
    contents: &[Vec<u8>],
) -> Result<Arc<rustls::ServerConfig>, SecurityError> {
    let names: Vec<String> = keys
        .iter()
        .zip(paths)
        .map(|(key, path)| format!("{key} ({})", path.display()))
        .collect();
    let pem = |i: usize| Pem {
        name: &names[i],
        bytes: &contents[i],
    };
    server_config(pem(0), pem(1), (contents.len() > 2).then(|| pem(2)))
}
