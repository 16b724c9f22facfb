//! The gRPC port's TLS: a rustls server config (aws-lc-rs, TLS 1.2 and 1.3, ALPN `h2`)
//! from PEM files — a certificate chain, its private key and, for mutual TLS, the CA whose
//! client certificates are accepted (then every client must present one). A [`Reloading`]
//! config is replaced when its files change; handshakes already done keep theirs, and each
//! new connection gets the current one.

use std::sync::{Arc, PoisonError, RwLock};

use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::SecurityError;

/// A PEM file's contents and the name errors give it (the setting and the path).
#[derive(Clone, Copy)]
pub struct Pem<'a> {
    pub name: &'a str,
    pub bytes: &'a [u8],
}

/// The server config of a certificate chain, its key, and an optional client CA.
pub fn server_config(
    cert: Pem<'_>,
    key: Pem<'_>,
    client_ca: Option<Pem<'_>>,
) -> Result<Arc<ServerConfig>, SecurityError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain = certificates(cert)?;
    let key_der = PrivateKeyDer::from_pem_slice(key.bytes).map_err(|e| SecurityError::File {
        path: key.name.to_owned(),
        reason: format!("no private key in PEM: {e}"),
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| SecurityError::invalid("TLS", e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => builder.with_client_cert_verifier(client_verifier(ca, provider)?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key_der)
        .map_err(|e| SecurityError::File {
            path: format!("{} and {}", cert.name, key.name),
            reason: format!("not a certificate and its key: {e}"),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

fn certificates(pem: Pem<'_>) -> Result<Vec<CertificateDer<'static>>, SecurityError> {
    let chain = CertificateDer::pem_slice_iter(pem.bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SecurityError::File {
            path: pem.name.to_owned(),
            reason: format!("not PEM certificates: {e}"),
        })?;
    if chain.is_empty() {
        return Err(SecurityError::File {
            path: pem.name.to_owned(),
            reason: "holds no PEM certificate".into(),
        });
    }
    Ok(chain)
}

fn client_verifier(
    ca: Pem<'_>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, SecurityError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(ca)? {
        roots.add(cert).map_err(|e| SecurityError::File {
            path: ca.name.to_owned(),
            reason: format!("not a CA certificate: {e}"),
        })?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| SecurityError::File {
            path: ca.name.to_owned(),
            reason: format!("cannot verify clients with it: {e}"),
        })
}

/// A server config that can be replaced while connections are accepted.
pub struct Reloading {
    config: RwLock<Arc<ServerConfig>>,
}

impl Reloading {
    pub fn new(config: Arc<ServerConfig>) -> Reloading {
        Reloading {
            config: RwLock::new(config),
        }
    }

    /// An acceptor with the current config, for one new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(
            &self.config.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }

    pub fn replace(&self, config: Arc<ServerConfig>) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = config;
    }
}

/// The DNS names (subject alternative names) of a verified client certificate: what an
/// identity's `certificate_names` are compared with.
pub fn certificate_names(certificate: &CertificateDer<'_>) -> Vec<String> {
    match webpki::EndEntityCert::try_from(certificate) {
        Ok(cert) => cert.valid_dns_names().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem<'a>(name: &'a str, bytes: &'a [u8]) -> Pem<'a> {
        Pem { name, bytes }
    }

    #[test]
    fn a_certificate_and_its_key_make_a_config_and_names_are_read() {
        let ca = rcgen::generate_simple_self_signed(["ca.test".to_owned()]).expect("ca");
        let leaf =
            rcgen::generate_simple_self_signed(["gw.test".to_owned(), "other.test".to_owned()])
                .expect("leaf");
        let (cert, key) = (leaf.cert.pem(), leaf.signing_key.serialize_pem());
        let ca_pem = ca.cert.pem();
        let config = server_config(
            pem("cert", cert.as_bytes()),
            pem("key", key.as_bytes()),
            Some(pem("ca", ca_pem.as_bytes())),
        )
        .expect("a config");
        assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
        assert_eq!(
            certificate_names(leaf.cert.der()),
            ["gw.test", "other.test"]
        );
    }

    #[test]
    fn files_that_are_not_what_they_should_be_are_named() {
        let leaf = rcgen::generate_simple_self_signed(["gw.test".to_owned()]).expect("leaf");
        let other = rcgen::generate_simple_self_signed(["x.test".to_owned()]).expect("other");
        let cert = leaf.cert.pem();
        let (key, wrong_key) = (
            leaf.signing_key.serialize_pem(),
            other.signing_key.serialize_pem(),
        );
        let cases = [
            (
                pem("grpc.tls.cert_file (c)", b"junk"),
                pem("k", key.as_bytes()),
                "grpc.tls.cert_file (c): holds no PEM certificate",
            ),
            (
                pem("c", cert.as_bytes()),
                pem("grpc.tls.key_file (k)", b"junk"),
                "grpc.tls.key_file (k): no private key in PEM",
            ),
            (
                pem("c", cert.as_bytes()),
                pem("k", wrong_key.as_bytes()),
                "c and k: not a certificate and its key",
            ),
        ];
        for (cert, key, expected) in cases {
            let err = server_config(cert, key, None)
                .expect_err(expected)
                .to_string();
            assert!(err.starts_with(expected), "{err}");
        }
        let err = server_config(
            pem("c", cert.as_bytes()),
            pem("k", key.as_bytes()),
            Some(pem("grpc.tls.client_ca_file (ca)", b"")),
        )
        .expect_err("no CA");
        assert!(
            err.to_string()
                .starts_with("grpc.tls.client_ca_file (ca): holds no PEM certificate"),
            "{err}"
        );
    }
}
