//! The audit log of `cascade standalone`, read from its standard error as a log collector
//! reads it (`log_format = "json"`): one line per administrative change, made with the CLI or
//! from the settings file, accepted or refused, with who, what and the outcome; none for a
//! read; and written even when the log level would hide everything else at info.

use std::path::Path;

use cascade_e2e::cli::{json, refused, text};
use cascade_e2e::{Cluster, Mode};
use serde_json::Value;

/// `(action, resource, outcome, change or reason, peer)` of each audit line, in order.
fn audit_lines(log: &str) -> Vec<(String, String, String, String, String)> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "cascade::audit")
        .map(|line| {
            assert!(line["timestamp"].is_string(), "when: {line}");
            let field = |name: &str| line["fields"][name].as_str().unwrap_or_default().to_owned();
            let detail = match field("outcome").as_str() {
                "ok" => field("change"),
                _ => field("reason"),
            };
            (
                field("action"),
                field("resource"),
                field("outcome"),
                detail,
                field("peer"),
            )
        })
        .collect()
}

#[test]
fn every_administrative_change_is_one_audit_line() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/cascade.toml");
    let c = Cluster::start_with(
        Mode::Standalone,
        Some(&example),
        &[
            ("CASCADE__STANDALONE__STAGE_WORKERS", "false"),
            ("CASCADE__TELEMETRY__LOG_FORMAT", "json"),
            ("RUST_LOG", "warn"),
        ],
    );
    json(&c, &["queue", "create", "jobs"]);
    json(&c, &["enqueue", "jobs", "a"]);
    json(&c, &["enqueue", "jobs", "b"]);
    json(&c, &["queue", "get", "jobs"]);
    json(&c, &["stats", "jobs"]);
    text(&c, &["queue", "purge", "jobs"]);
    refused(&c, &["queue", "delete", "nowhere"], 1);
    json(&c, &["queue", "delete", "jobs"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("orders.toml");
    std::fs::write(
        &file,
        "name = \"orders\"\n\n[[stages]]\nname = \"check\"\nhandler = { kind = { builtin = \"noop\" } }\n",
    )
    .expect("write");
    json(&c, &["pipeline", "apply", file.to_str().expect("utf-8")]);
    json(&c, &["dlq", "redrive", "orders.check.dlq", "--all"]);

    let lines = audit_lines(&c.front_log());
    let (from_settings, from_clients) = lines.split_at(1);
    let what: Vec<(&str, &str, &str, &str)> = from_clients
        .iter()
        .map(|(action, resource, outcome, detail, _)| {
            (
                action.as_str(),
                resource.as_str(),
                outcome.as_str(),
                detail.as_str(),
            )
        })
        .collect();
    assert_eq!(
        what,
        [
            ("queue.create", "jobs", "ok", "created"),
            ("queue.purge", "jobs", "ok", "2 events removed"),
            (
                "queue.delete",
                "nowhere",
                "NotFound",
                what[2].3, // the server's own words, checked below
            ),
            ("queue.delete", "jobs", "ok", "deleted"),
            (
                "pipeline.apply",
                "orders",
                "ok",
                "applied with stages check"
            ),
            (
                "dead_letters.redrive",
                "orders.check.dlq",
                "ok",
                "0 events sent back"
            ),
        ],
        "one line per change, none for reads: {lines:?}"
    );
    assert!(what[2].3.contains("nowhere"), "{lines:?}");
    assert!(
        from_clients
            .iter()
            .all(|line| line.4.starts_with("127.0.0.1:")),
        "who: {lines:?}"
    );
    let (action, resource, outcome, _, peer) = &from_settings[0];
    assert_eq!(
        (
            action.as_str(),
            resource.as_str(),
            outcome.as_str(),
            peer.as_str()
        ),
        ("pipeline.apply", "demo", "ok", "settings"),
        "the settings file's pipeline, applied at start-up"
    );
    // The log level is warn: nothing else at info was written.
    assert!(
        !c.front_log()
            .lines()
            .any(|l| l.contains("\"level\":\"INFO\"") && !l.contains("cascade::audit")),
        "only audit lines at info"
    );
    c.stop();
}
