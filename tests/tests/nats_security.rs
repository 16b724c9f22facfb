//! The distributed mode over a NATS server that requires TLS and a token, as a shared NATS
//! server should be run: every service connects with the server's CA and the token, events
//! move through queues on both shards; a service with the wrong token does not start, and
//! says why.

use std::process::Command;
use std::time::Duration;

use cascade_e2e::Cluster;
use cascade_e2e::pki::TestCa;
use cascade_e2e::process::binary;
use cascade_e2e::scenarios::{config, create, enqueue, item, names_on_two_shards, take_n};

const TOKEN: &str = "nats-token-6d2a91";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_talk_over_a_nats_server_that_requires_tls_and_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("NATS CA");
    let (cert, key) = ca.server().write(dir.path(), "nats");
    let ca_file = dir.path().join("nats-ca.crt");
    std::fs::write(&ca_file, ca.cert_pem()).expect("write");
    let nats_config = dir.path().join("nats.conf");
    std::fs::write(
        &nats_config,
        format!(
            "authorization {{ token: \"{TOKEN}\" }}\ntls {{ cert_file: \"{}\", key_file: \"{}\" }}\n",
            cert.display(),
            key.display()
        ),
    )
    .expect("write");
    let ca_setting = ca_file.display().to_string();
    let (nats_config_path, ca_env) = (nats_config.clone(), ca_setting.clone());
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with_nats_config(
            None,
            &[
                ("CASCADE__BUS__TOKEN", TOKEN),
                ("CASCADE__BUS__TLS__CA_FILE", &ca_env),
            ],
            &nats_config_path,
        )
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    let (a, b) = names_on_two_shards("secure");
    for queue in [&a, &b] {
        create(&c, queue, config(30.0, 3)).await;
        enqueue(&c, item(queue, "over TLS")).await;
        let taken = take_n(&c, queue, 1, Duration::from_secs(30)).await;
        assert_eq!(taken.len(), 1, "{queue}");
    }

    // The wrong token: the service stops at start, naming the NATS server's refusal.
    let url = cluster.nats_url().expect("a NATS server").to_owned();
    let refused = Command::new(binary("cascade-dispatcher"))
        .env("CASCADE__BUS__KIND", "nats")
        .env("CASCADE__BUS__URL", &url)
        .env("CASCADE__BUS__TOKEN", "wrong")
        .env("CASCADE__BUS__TLS__CA_FILE", &ca_setting)
        .env("CASCADE__HTTP__ADDR", "127.0.0.1:0")
        .env("CASCADE__DATA__DIR", dir.path().join("refused"))
        .output()
        .expect("run");
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    assert!(said.contains("authorization"), "{said}");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
