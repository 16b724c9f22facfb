use std::time::Duration;

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    std::fs::write(f.path(), text).expect("write");
    f
}

#[test]
fn defaults_are_valid() {
    let s = Settings::load_from(None, &[], env(&[])).expect("defaults");
    assert_eq!(s.grpc.addr, "127.0.0.1:7700");
    assert_eq!(s.http.addr, "127.0.0.1:7701");
    assert_eq!(s.store.durability, DurabilityKind::Fsync);
    assert_eq!(s.dispatcher_shards(), vec![0]);
}

#[test]
fn file_then_environment_then_overrides() {
    let f = file(
        "[store]\ndurability = \"interval\"\nsync_interval = \"50ms\"\n[cluster]\nshards = 4\n",
    );
    let s = Settings::load_from(
        Some(f.path()),
        &[("data.dir", "/srv/cascade".to_string())],
        env(&[
            ("CASCADE__STORE__SYNC_INTERVAL", "5ms"),
            ("CASCADE__DISPATCHER__SHARDS", "1,3"),
            ("OTHER__STORE__SYNC_INTERVAL", "9s"),
        ]),
    )
    .expect("load");
    assert_eq!(s.store.durability, DurabilityKind::Interval);
    assert_eq!(s.store.sync_interval, Duration::from_millis(5));
    assert_eq!(s.cluster.shards, 4);
    assert_eq!(s.dispatcher_shards(), vec![1, 3]);
    assert_eq!(s.timer_shards(), vec![0, 1, 2, 3]);
    assert_eq!(s.data.dir, PathBuf::from("/srv/cascade"));
}

/// Environment values are read as their fields' types from the text as given: a secret
/// that looks like a number or a boolean stays as it was, numbers and booleans still parse,
/// and a stage worker's variables in the same environment are not Cascade's keys.
#[test]
fn environment_values_keep_their_text() {
    let s = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__BUS__KIND", "nats"),
            ("CASCADE__BUS__USER", "0123"),
            ("CASCADE__BUS__PASSWORD", "1e5"),
            ("CASCADE__CLUSTER__SHARDS", "3"),
            ("CASCADE__DISPATCHER__SHARDS", "2"),
            ("CASCADE__RESOURCE_MANAGER__ENABLED", "TRUE"),
            ("CASCADE__STAGE_WORKER__TOKEN", "the stage worker's"),
        ]),
    )
    .expect("load");
    assert_eq!(s.bus.user.as_deref(), Some("0123"));
    let password = s.bus.password.as_ref().expect("a password");
    assert_eq!(password.expose(), "1e5");
    assert_eq!(s.cluster.shards, 3);
    assert_eq!(s.dispatcher_shards(), vec![2]);
    assert!(s.resource_manager.enabled);
}

#[test]
fn a_json_file_reads_like_toml() {
    let f = tempfile::Builder::new()
        .suffix(".json")
        .tempfile()
        .expect("temp file");
    std::fs::write(
        f.path(),
        r#"{"cluster": {"name": "orders", "shards": 4}, "store": {"cache": "64MiB"}}"#,
    )
    .expect("write");
    let s = Settings::load_from(Some(f.path()), &[], env(&[])).expect("load");
    assert_eq!((s.cluster.name.as_str(), s.cluster.shards), ("orders", 4));
    assert_eq!(s.store.cache, 64 << 20);
    std::fs::write(f.path(), r#"{"cluster": {"shards": "four"}}"#).expect("write");
    let err = Settings::load_from(Some(f.path()), &[], env(&[])).expect_err("not a number");
    assert!(err.to_string().contains("cluster.shards"), "{err}");
}

#[test]
fn one_shard_from_the_environment_is_a_list_of_one() {
    let s = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__CLUSTER__SHARDS", "2"),
            ("CASCADE__DISPATCHER__SHARDS", "1"),
        ]),
    )
    .expect("load");
    assert_eq!(s.dispatcher_shards(), vec![1]);
}

#[test]
fn sizes_and_durations_are_human() {
    let s = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__STORE__CACHE", "64MiB"),
            ("CASCADE__BUS__REQUEST_TIMEOUT", "2s"),
        ]),
    )
    .expect("load");
    assert_eq!(s.store.cache, 64 << 20);
    assert_eq!(s.bus.request_timeout, Duration::from_secs(2));
}

fn error_of(text: &str, env_pairs: &[(&str, &str)]) -> String {
    let f = file(text);
    Settings::load_from(Some(f.path()), &[], env(env_pairs))
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn a_bad_value_from_the_environment_is_not_blamed_on_a_good_file() {
    let e = error_of(
        "[store]\ndurability = \"none\"\n",
        &[("CASCADE__BUS__KIND", "kafka")],
    );
    assert!(
        e.starts_with("setting from the environment (CASCADE__… variables)")
            && e.contains("must be one of local, nats, got \"kafka\""),
        "{e}"
    );
    // Both wrong (the environment mending the file's value and adding one of its own): the
    // file is named, with what is wrong in it, then what is wrong with the environment over it.
    let e = error_of(
        "[store]\ndurability = \"sometimes\"\n",
        &[
            ("CASCADE__STORE__DURABILITY", "fsync"),
            ("CASCADE__BUS__KIND", "kafka"),
        ],
    );
    assert!(
        e.starts_with("settings file")
            && e.contains("got \"sometimes\" for key `store.durability`; and with the environment (CASCADE__… variables) and flags over it: ")
            && e.contains("got \"kafka\""),
        "{e}"
    );
    let e = error_of("", &[("CASCADE__STORE__DURABILTY", "none")]);
    assert!(
        e.starts_with("setting from the environment") && e.contains("durabilty"),
        "{e}"
    );
}

#[test]
fn errors_name_the_key() {
    let e = error_of("[store]\ndurabilty = \"none\"\n", &[]);
    assert!(e.contains("durabilty"), "{e}");
    let e = error_of("[store]\nsync_interval = \"soon\"\n", &[]);
    assert!(e.contains("sync_interval") || e.contains("soon"), "{e}");
    let e = error_of("", &[("CASCADE__CLUSTER__SHARDS", "0")]);
    assert!(e.contains("cluster.shards"), "{e}");
    let e = error_of("[cluster]\nshards = 2\n[dispatcher]\nshards = [2]\n", &[]);
    assert!(
        e.contains("dispatcher.shards") && e.contains("0 to 1"),
        "{e}"
    );
    let e = error_of("[grpc]\naddr = \"localhost\"\n", &[]);
    assert!(e.contains("grpc.addr"), "{e}");
    let e = error_of("[cluster]\nname = \"a.b\"\n", &[]);
    assert!(e.contains("cluster.name"), "{e}");
    let e = error_of("[store]\ndurability = \"sometimes\"\n", &[]);
    assert!(
        e.starts_with("settings file")
            && e.contains("must be one of fsync, interval, none, got \"sometimes\""),
        "{e}"
    );
    let e = error_of("[store]\nreopen_bytes = \"100MiB\"\n", &[]);
    assert!(
        e.contains("store.reopen_bytes") && e.contains("at least store.checkpoint_bytes"),
        "{e}"
    );
    let e = error_of("", &[("CASCADE__INGEST__REQUESTS_IN_FLIGHT", "0")]);
    assert!(
        e.contains("ingest.requests_in_flight") && e.contains("1 to 64"),
        "{e}"
    );
}

#[test]
fn the_config_files_pipelines_keep_to_the_limits() {
    let pipeline = |name: &str, stages: usize| {
        let mut text = format!("[[pipelines]]\nname = \"{name}\"\n");
        for s in 0..stages {
            text.push_str(&format!(
                "[[pipelines.stages]]\nname = \"s{s}\"\nhandler = {{ kind = {{ builtin = \"noop\" }} }}\n"
            ));
        }
        text
    };
    let limits = "[limits]\nmax_pipelines = 1\nmax_stages = 2\n";
    let e = error_of(&format!("{limits}{}", pipeline("wide", 3)), &[]);
    assert!(
        e.contains("pipelines[0]") && e.contains("3 stages is more than limits.max_stages (2)"),
        "{e}"
    );
    let two = format!("{limits}{}{}", pipeline("a", 1), pipeline("b", 1));
    let e = error_of(&two, &[]);
    assert!(
        e.contains("pipelines[1]") && e.contains("limits.max_pipelines (1)"),
        "{e}"
    );
}

#[test]
fn a_missing_file_is_an_error() {
    let e = Settings::load_from(Some(Path::new("/nonexistent/cascade.toml")), &[], env(&[]))
        .expect_err("missing");
    assert!(e.to_string().contains("/nonexistent/cascade.toml"), "{e}");
}

#[test]
fn the_resource_manager_section_is_read_and_checked() {
    let s = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__RESOURCE_MANAGER__TOTAL_HANDLERS", "6"),
            ("CASCADE__RESOURCE_MANAGER__ENABLED", "false"),
            ("CASCADE__RESOURCE_MANAGER__SCALE_DOWN_AFTER", "30s"),
        ]),
    )
    .expect("load");
    assert_eq!(s.resource_manager.total_handlers, 6);
    assert!(!s.resource_manager.enabled);
    assert_eq!(s.resource_manager.scale_down_after, Duration::from_secs(30));
    let s = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__RESOURCE_MANAGER__EXECUTOR", "kubernetes"),
            ("CASCADE__RESOURCE_MANAGER__KUBERNETES__NAMESPACE", "jobs"),
        ]),
    )
    .expect("load");
    assert_eq!(
        s.resource_manager.executor,
        crate::settings::ExecutorKind::Kubernetes
    );
    assert_eq!(s.resource_manager.kubernetes.namespace, "jobs");
    let e = error_of("[resource_manager]\nexecutor = \"k8s\"\n", &[]);
    assert!(e.contains("k8s"), "{e}");
    let e = error_of("", &[("CASCADE__RESOURCE_MANAGER__TOTAL_HANDLERS", "0")]);
    assert!(
        e.starts_with("setting resource_manager.total_handlers: must be 1 to"),
        "{e}"
    );
    let e = error_of("[resource_manager]\nintervall = \"1s\"\n", &[]);
    assert!(e.contains("intervall"), "{e}");
    let e = error_of(
        "[dispatcher]\nstats_interval = \"2s\"\n[resource_manager]\ninterval = \"1s\"\n",
        &[],
    );
    assert!(
        e.contains("resource_manager.interval: must be at least dispatcher.stats_interval (2s)"),
        "{e}"
    );
}

#[test]
fn kubernetes_deployment_overrides_keep_their_dotted_stage_names() {
    let f = file(
        "[resource_manager]\nexecutor = \"kubernetes\"\n\
         [resource_manager.kubernetes]\n\
         deployments = { \"Orders.ship\" = \"shipper\" }\n",
    );
    let s = Settings::load_from(Some(f.path()), &[], env(&[])).expect("load");
    let deployments = &s.resource_manager.kubernetes.deployments;
    assert_eq!(
        deployments.get("Orders.ship").map(String::as_str),
        Some("shipper"),
        "{deployments:?}"
    );
    let e = error_of(
        "[resource_manager.kubernetes]\ndeployments = { \"orders.ship\" = \"\" }\n",
        &[],
    );
    assert!(
        e.contains("resource_manager.kubernetes.deployments.\"orders.ship\": must not be empty"),
        "{e}"
    );
}

#[test]
fn security_and_limit_settings_are_checked_together() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let nats = "[bus]\nkind = \"nats\"\n";
    let cases: [Case; 11] = [
        (
            nats,
            &[("CASCADE__BUS__URL", "http://nats:4222")],
            "bus.url: 'http://nats:4222' is not a nats:// or tls:// URL",
        ),
        (
            nats,
            &[
                ("CASCADE__BUS__TOKEN", "t"),
                ("CASCADE__BUS__NKEY_SEED", "SU"),
            ],
            "give one kind of NATS credentials",
        ),
        (
            nats,
            &[("CASCADE__BUS__USER", "u")],
            "bus.password: bus.user and bus.password go together",
        ),
        (
            nats,
            &[("CASCADE__BUS__TLS__CERT_FILE", "/c")],
            "bus.tls.key_file: must be set with cert_file",
        ),
        (
            "[grpc.tls]\ncert_file = \"/c\"\n",
            &[],
            "grpc.tls.key_file: must be set with grpc.tls.cert_file",
        ),
        (
            "[grpc.tls]\nkey_file = \"/k\"\n",
            &[],
            "grpc.tls.cert_file: must be set with grpc.tls.key_file",
        ),
        (
            "[grpc.tls]\nclient_ca_file = \"/ca\"\n",
            &[],
            "grpc.tls.client_ca_file: needs grpc.tls.cert_file",
        ),
        (
            "[auth]\nenabled = true\n",
            &[],
            "auth.identities_file: must name the identities file",
        ),
        (
            "[auth]\nhandler_url_prefixes = [\"ftp://handlers.svc/\"]\n",
            &[],
            "auth.handler_url_prefixes",
        ),
        (
            "",
            &[(
                "CASCADE__GRPC__MAX_UNREAD_RESPONSE_BYTES_PER_CONNECTION",
                "1MiB",
            )],
            "grpc.max_unread_response_bytes_per_connection: must be at least ingest.max_payload (4MiB)",
        ),
        (
            "",
            &[("CASCADE__GRPC__MAX_UNREAD_RESPONSE_BYTES", "16MiB")],
            "grpc.max_unread_response_bytes: must be at least grpc.max_unread_response_bytes_per_connection",
        ),
    ];
    for (text, env_pairs, expected) in cases {
        let e = error_of(text, env_pairs);
        assert!(e.contains(expected), "{text} {env_pairs:?}: {e}");
    }
    let listed = Settings::load_from(
        None,
        &[],
        env(&[(
            "CASCADE__AUTH__HANDLER_URL_PREFIXES",
            "http://a.svc/, https://b.svc:8443/",
        )]),
    )
    .expect("a list from the environment");
    assert_eq!(
        listed.auth.handler_url_prefixes,
        ["http://a.svc/", "https://b.svc:8443/"]
    );
    let secured = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__BUS__KIND", "nats"),
            ("CASCADE__BUS__URL", "tls://nats:4222"),
            ("CASCADE__BUS__USER", "cascade"),
            ("CASCADE__BUS__PASSWORD", "s3cret"),
        ]),
    )
    .expect("valid");
    let nats = secured.bus.nats().expect("valid");
    assert_eq!(format!("{:?}", nats.credentials), "UserPassword(cascade)");
    assert!(
        !format!("{secured:?}").contains("s3cret"),
        "secrets are never printed"
    );
}

#[test]
fn a_pods_ipv6_address_is_bracketed_for_binding() {
    let s = Settings::load_from(
        None,
        &[],
        env(&[
            ("CASCADE__GRPC__ADDR", "fd00::1:7700"),
            ("CASCADE__HTTP__ADDR", "10.1.2.3:7701"),
        ]),
    )
    .expect("valid");
    assert_eq!(s.grpc.addr, "[fd00::1]:7700");
    assert_eq!(s.http.addr, "10.1.2.3:7701");
    let e = error_of("[grpc]\naddr = \"fd00::1\"\n", &[]);
    assert!(e.contains("grpc.addr"), "{e}");
}
