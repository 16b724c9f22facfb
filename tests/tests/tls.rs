//! TLS on the gateway's gRPC port, with real handshakes against a real `cascade standalone`
//! and certificates the test makes: a client with the server's CA and a client certificate
//! of the client CA is served, and its certificate proves its identity; an unknown client
//! certificate, no client certificate and plaintext all fail cleanly (an error, not a hang);
//! the CLI connects with --ca, --cert and --key; and a certificate rotated on disk is what
//! the next connection is shown, without a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cascade_client::{Client, ClientOptions, api};
use cascade_e2e::cli;
use cascade_e2e::pki::{Issued, TestCa};
use cascade_e2e::scenarios::{config, item};
use cascade_e2e::{Cluster, Mode};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;

/// How long a test waits for the server to act: far above what it takes, never a measure.
const WITHIN: Duration = Duration::from_secs(30);

/// One call through a new connection: its outcome, whatever fails (the handshake or the
/// call), and never a hang.
async fn first_call(addr: &str, options: &ClientOptions) -> Result<(), String> {
    let call = async {
        let client = Client::connect_with(addr, options)
            .await
            .map_err(|e| e.to_string())?;
        let request = api::QueueStatsRequest {
            name: "tls.jobs".into(),
        };
        client
            .admin()
            .queue_stats(request)
            .await
            .map(drop)
            .map_err(|status| format!("{status:?}"))
    };
    tokio::time::timeout(WITHIN, call)
        .await
        .expect("a refused connection fails; it does not hang")
}

/// The certificate the gateway shows a new connection (the handshake presents `client`).
async fn presented(gateway: &str, ca_pem: &str, client: &Issued) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA"))
        .expect("a root");
    let chain = vec![CertificateDer::from_pem_slice(client.cert_pem.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("client auth");
    let tcp = TcpStream::connect(gateway).await.expect("connect");
    let name = ServerName::try_from("localhost").expect("a name");
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .expect("handshake");
    let (_, session) = tls.get_ref();
    session.peer_certificates().expect("a certificate")[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_port_speaks_tls_checks_client_certificates_and_reloads_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (server_ca, client_ca, stranger) = (
        TestCa::new("server CA"),
        TestCa::new("client CA"),
        TestCa::new("a stranger's CA"),
    );
    let (cert, key) = server_ca.server().write(dir.path(), "gateway");
    let clients_ca = dir.path().join("clients-ca.crt");
    std::fs::write(&clients_ca, client_ca.cert_pem()).expect("write");
    let worker = client_ca.client(&["worker.test"]);
    let identities = dir.path().join("identities.toml");
    std::fs::write(
        &identities,
        "[[identities]]\nname = \"worker\"\ncertificate_names = [\"worker.test\"]\ngrants = [{ role = \"admin\", queues = [\"tls.*\"] }, { role = \"producer\", queues = [\"tls.*\"] }]\n",
    )
    .expect("write");
    let env: Vec<(String, String)> = [
        ("CASCADE__GRPC__TLS__CERT_FILE", &cert),
        ("CASCADE__GRPC__TLS__KEY_FILE", &key),
        ("CASCADE__GRPC__TLS__CLIENT_CA_FILE", &clients_ca),
        ("CASCADE__AUTH__IDENTITIES_FILE", &identities),
    ]
    .into_iter()
    .map(|(k, path)| (k.to_owned(), path.display().to_string()))
    .chain([
        ("CASCADE__GRPC__TLS__RELOAD_INTERVAL".into(), "100ms".into()),
        ("CASCADE__AUTH__ENABLED".into(), "true".into()),
        ("CASCADE__TELEMETRY__LOG_FORMAT".into(), "json".into()),
    ])
    .collect();
    let cluster = tokio::task::spawn_blocking(move || {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Cluster::start_with(Mode::Standalone, None, &env)
    })
    .await
    .expect("start");
    let addr = format!("https://{}", cluster.gateway());

    // Served, and the client certificate proves the identity: no token.
    let options = ClientOptions {
        ca_pem: Some(server_ca.cert_pem().into_bytes()),
        identity_pem: Some((
            worker.cert_pem.clone().into_bytes(),
            worker.key_pem.clone().into_bytes(),
        )),
        ..ClientOptions::default()
    };
    let client = Client::connect_with(&addr, &options)
        .await
        .expect("a TLS connection");
    let create = api::CreateQueueRequest {
        name: "tls.jobs".into(),
        config: Some(config(30.0, 3)),
    };
    client
        .admin()
        .create_queue(create)
        .await
        .expect("as the certificate's identity");
    client
        .ingest()
        .enqueue(item("tls.jobs", "over TLS"))
        .await
        .expect("enqueue");

    // Refused cleanly: a certificate of another CA, none at all, plaintext.
    let unknown = stranger.client(&["worker.test"]);
    let with_unknown = ClientOptions {
        identity_pem: Some((unknown.cert_pem.into_bytes(), unknown.key_pem.into_bytes())),
        ..options.clone()
    };
    let unknown_refused = first_call(&addr, &with_unknown)
        .await
        .expect_err("an unknown client certificate");
    assert!(
        unknown_refused.contains("transport::Error"),
        "refused by the transport: {unknown_refused}"
    );
    let without = ClientOptions {
        identity_pem: None,
        ..options.clone()
    };
    let no_certificate = first_call(&addr, &without)
        .await
        .expect_err("no client certificate");
    // The server's alert says CertificateRequired, unless the client was still writing
    // when the connection closed (a broken pipe): a transport error either way.
    assert!(
        no_certificate.contains("transport::Error"),
        "refused by the transport: {no_certificate}"
    );
    let plaintext = format!("http://{}", cluster.gateway());
    let plaintext_refused = first_call(&plaintext, &ClientOptions::default())
        .await
        .expect_err("plaintext to a TLS port");
    assert!(
        plaintext_refused.contains("transport::Error"),
        "refused by the transport: {plaintext_refused}"
    );
    first_call(&addr, &options)
        .await
        .expect("the port still serves");

    // The CLI: --ca, --cert, --key.
    let ca_file = dir.path().join("server-ca.crt");
    std::fs::write(&ca_file, server_ca.cert_pem()).expect("write");
    let (worker_cert, worker_key) = worker.write(dir.path(), "worker");
    let files = [&ca_file, &worker_cert, &worker_key].map(|p| p.display().to_string());
    let stats = cli::run_at(
        &addr,
        &[
            "stats", "tls.jobs", "--json", "--ca", &files[0], "--cert", &files[1], "--key",
            &files[2],
        ],
        None,
    );
    assert_eq!(stats.code, 0, "{}", stats.stderr);
    assert!(stats.stdout.contains("\"ready\":1"), "{}", stats.stdout);
    // A CA with a plaintext address: the advice is the https:// one.
    let mixed = cli::run_at(&plaintext, &["stats", "tls.jobs", "--ca", &files[0]], None);
    assert_eq!(mixed.code, 2, "{}", mixed.stderr);
    assert!(
        mixed
            .stderr
            .starts_with("error: cannot set up TLS to http://")
            && mixed.stderr.contains("like https://127.0.0.1:7700"),
        "{}",
        mixed.stderr
    );

    // Rotation: a new certificate on disk is what new connections are shown.
    let before = presented(cluster.gateway(), &server_ca.cert_pem(), &worker).await;
    let rotated = server_ca.server();
    rotate(&rotated, &cert, &key);
    let new_der = CertificateDer::from_pem_slice(rotated.cert_pem.as_bytes())
        .expect("cert")
        .to_vec();
    assert_ne!(before, new_der);
    let deadline = Instant::now() + WITHIN;
    while presented(cluster.gateway(), &server_ca.cert_pem(), &worker).await != new_der {
        assert!(
            Instant::now() < deadline,
            "the rotated certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client
        .ingest()
        .enqueue(item("tls.jobs", "on the old connection"))
        .await
        .expect("an open connection keeps working");
    first_call(&addr, &options).await.expect("a new connection");

    let log = cluster.front_log_once(r#""action":"tls.reload""#, WITHIN);
    cluster.stop();
    assert!(
        log.lines()
            .any(|l| l.contains("\"target\":\"cascade::audit\"")
                && l.contains("tls.reload")
                && l.contains("\"outcome\":\"ok\"")),
        "the reload is audited"
    );
}

/// Writes a new certificate and key over the old files, each in one step (as a Secret's
/// update swaps them): key first, so that a read in between sees a key without its
/// certificate, which the gateway must refuse and then take once both are there.
fn rotate(new: &Issued, cert: &Path, key: &Path) {
    for (path, text) in [(key, &new.key_pem), (cert, &new.cert_pem)] {
        let staged = path.with_extension("new");
        std::fs::write(&staged, text).expect("write");
        std::fs::rename(&staged, path).expect("swap");
    }
}
