//! Every client command of `cascade` end to end against a real `cascade standalone`: the
//! human output and `--json`, the exit codes (0 done, 1 refused, 2 bad usage, 3 cannot
//! connect), and errors that say what happened, why, and what to do.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use cascade_core::error::excerpt;
use cascade_e2e::cli::{self, json, json_with, refused, run, text};
use cascade_e2e::handler_server::{FAILURE_BODY, HandlerServer};
use cascade_e2e::pki::TestCa;
use cascade_e2e::{Cluster, Mode};
use serde_json::Value;

/// The tests take and complete stage events themselves: no stage workers of standalone's own.
fn start() -> Cluster {
    Cluster::start_with(
        Mode::Standalone,
        None,
        &[("CASCADE__STANDALONE__STAGE_WORKERS", "false")],
    )
}

fn field<'a>(record: &'a Value, name: &str) -> &'a str {
    record[name]
        .as_str()
        .unwrap_or_else(|| panic!("no {name} in {record}"))
}

/// Takes one event with `--json`: its ID and lease token.
fn take_one(cluster: &Cluster, queue: &str) -> (String, String) {
    let taken = json(cluster, &["take", queue, "--wait", "10s"]);
    assert_eq!(taken.len(), 1, "{taken:?}");
    (
        field(&taken[0], "id").to_string(),
        field(&taken[0], "lease_token").to_string(),
    )
}

/// The line of a record printed for a person that starts with `name`.
fn line<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no line '{name}' in:\n{output}"))
}

#[test]
fn events_through_every_command_in_both_output_modes() {
    let c = start();
    let created = text(
        &c,
        &[
            "queue",
            "create",
            "jobs",
            "--lease",
            "90s",
            "--max-attempts",
            "3",
        ],
    );
    assert_eq!(
        line(&created, "lease"),
        "lease              1m30s",
        "{created}"
    );
    let config = &json(&c, &["queue", "get", "jobs"])[0];
    assert_eq!(config["lease"], "90s");
    assert_eq!(config["max_attempts"], 3);
    assert_eq!(
        config["dead_letter_queue"], "jobs.dlq",
        "the default, as it applies"
    );
    assert!(
        text(&c, &["queue", "list"])
            .lines()
            .any(|l| l.starts_with("jobs "))
    );

    // enqueue, get, update, delete.
    let sent = json(
        &c,
        &[
            "enqueue", "jobs", "first", "--delay", "1h", "--header", "k=v",
        ],
    );
    let id = field(&sent[0], "id").to_string();
    let got = text(&c, &["get", "jobs", &id]);
    assert_eq!(line(&got, "state"), "state             delayed", "{got}");
    // An hour from the enqueue, less the moments since (seconds are rounded down): "1h"
    // at once, "59m59s" a moment later, less on a slow machine.
    let activate_at = line(&got, "activate at");
    assert!(
        activate_at.ends_with("(in 1h)")
            || (activate_at.contains("(in 59m") && activate_at.ends_with("s)")),
        "{got}"
    );
    assert_eq!(line(&got, "headers"), "headers           k=v");
    let updated = json(
        &c,
        &[
            "update",
            "jobs",
            &id,
            "--payload",
            "changed",
            "--delay",
            "0s",
            "--header",
            "n=2",
        ],
    );
    assert_eq!(updated[0]["state"], "ready");
    assert_eq!(updated[0]["payload"], "changed");
    assert_eq!(updated[0]["headers"]["n"], "2");
    assert_eq!(updated[0]["headers"]["k"], "v");
    let deleted = text(&c, &["delete", "jobs", &id]);
    assert_eq!(deleted.trim(), format!("deleted '{id}' from jobs"));
    assert!(refused(&c, &["get", "jobs", &id], 1).contains("not found"));

    // take for a person; ack.
    json(&c, &["enqueue", "jobs", "second"]);
    let taken = text(&c, &["take", "jobs"]);
    assert_eq!(
        line(&taken, "payload"),
        "payload           second",
        "{taken}"
    );
    assert_eq!(line(&taken, "attempts"), "attempts          1");
    let id = line(&taken, "id")
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string();
    let token = line(&taken, "lease token")
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_string();
    assert_eq!(
        text(&c, &["ack", "jobs", &id, &token]).trim(),
        format!("acked '{id}' in jobs")
    );
    assert_eq!(
        text(&c, &["take", "jobs"]).trim(),
        "no event is ready in jobs"
    );
    assert!(json(&c, &["take", "jobs"]).is_empty());

    // nack: back after its delay; release: ready again at once; extend; reschedule: its
    // attempts start again.
    json(&c, &["enqueue", "jobs", "third"]);
    let (id, token) = take_one(&c, "jobs");
    let nacked = json(&c, &["nack", "jobs", &id, &token, "--delay", "200ms"]);
    assert_eq!(nacked[0]["outcome"], "nack");
    let (again, token) = take_one(&c, "jobs");
    assert_eq!(again, id);
    assert_eq!(json(&c, &["get", "jobs", &id])[0]["attempts"], 2);
    text(&c, &["release", "jobs", &id, &token]);
    let released = &json(&c, &["get", "jobs", &id])[0];
    assert_eq!(released["state"], "ready", "{released}");
    let (_, token) = take_one(&c, "jobs");
    let extended = json(&c, &["extend", "jobs", &id, &token, "--by", "1h"]);
    assert!(
        field(&extended[0], "lease_expires_at")
            > field(&json(&c, &["get", "jobs", &id])[0], "created_at")
    );
    let rescheduled = text(&c, &["reschedule", "jobs", &id, &token, "--delay", "1h"]);
    assert!(
        rescheduled.starts_with(&format!("rescheduled '{id}' in jobs for ")),
        "{rescheduled}"
    );
    let later = &json(&c, &["get", "jobs", &id])[0];
    assert_eq!(later["state"], "delayed");
    assert_eq!(later["attempts"], 0, "{later}");

    // dead-letter, the DLQ listed both ways, redrive by ID and all.
    json(&c, &["update", "jobs", &id, "--delay", "0s"]);
    let (_, token) = take_one(&c, "jobs");
    text(
        &c,
        &["dead-letter", "jobs", &id, &token, "--reason", "bad input"],
    );
    let listed = text(&c, &["dlq", "list", "jobs.dlq"]);
    let mut rows = listed.lines();
    assert_eq!(
        rows.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["ID", "FROM", "ATTEMPTS", "REASON", "PAYLOAD"]
    );
    let row = rows.next().unwrap();
    assert!(
        row.starts_with(&id) && row.contains("jobs") && row.contains("bad input"),
        "{listed}"
    );
    let letters = json(&c, &["dlq", "list", "jobs.dlq"]);
    assert_eq!(letters[0]["from"], "jobs");
    assert_eq!(letters[0]["reason"], "bad input");
    let moved = json(&c, &["dlq", "redrive", "jobs.dlq", &id]);
    assert_eq!(moved[0]["moved"], 1);
    // Named again, it is no longer there: the command says so, and fails.
    let gone = refused(&c, &["dlq", "redrive", "jobs.dlq", &id, &id], 1);
    assert!(gone.contains("sent 0 of the 1 back"), "{gone}");
    refused(&c, &["dlq", "list", "jobs.dlq", "--limit", "0"], 2);
    assert_eq!(
        text(&c, &["dlq", "list", "jobs.dlq"]).trim(),
        "no dead letters in jobs.dlq"
    );
    let (_, token) = take_one(&c, "jobs");
    text(
        &c,
        &["dead-letter", "jobs", &id, &token, "--reason", "again"],
    );
    assert_eq!(
        text(&c, &["dlq", "redrive", "jobs.dlq", "--all"]).trim(),
        "sent 1 events from jobs.dlq back to their queues"
    );

    // --lines, stats, purge.
    let lines = json_with(&c, &["enqueue", "jobs", "--lines"], Some("a\nb\nc\n"));
    assert_eq!(lines.len(), 3);
    let stats = text(&c, &["stats", "jobs"]);
    assert_eq!(line(&stats, "ready"), "ready                 4", "{stats}");
    // Three enqueues and three lines, with the two redrives counted as arrivals.
    assert_eq!(json(&c, &["stats", "jobs"])[0]["enqueued_total"], 8);
    assert_eq!(
        text(&c, &["queue", "purge", "jobs"]).trim(),
        "purged 4 events from jobs"
    );
    assert_eq!(json(&c, &["queue", "purge", "jobs"])[0]["purged"], 0);
    json(&c, &["queue", "delete", "jobs"]);
    c.stop();
}

/// `enqueue --lines` against a gateway whose limits are below its batches: a batch refused
/// whole for its item count or bytes goes again in halves, a line alone goes as a unary call
/// (a line over the batch limit, within the payload limit, is enqueued), and only a line
/// over the payload limit is refused. A wait over the gateway's cap is said to be cut short.
#[test]
fn lines_fit_a_gateway_with_small_batch_limits() {
    let c = Cluster::start_with(
        Mode::Standalone,
        None,
        &[
            ("CASCADE__STANDALONE__STAGE_WORKERS", "false"),
            ("CASCADE__INGEST__MAX_BATCH_ITEMS", "3"),
            ("CASCADE__INGEST__MAX_BATCH_BYTES", "1024"),
            ("CASCADE__INGEST__MAX_PAYLOAD", "1500"),
            ("CASCADE__DISPATCHER__MAX_TAKE_WAIT", "1s"),
        ],
    );
    json(&c, &["queue", "create", "jobs"]);
    // A wait the gateway caps is not reported as waited.
    let cut = text(&c, &["take", "jobs", "--wait", "5m"]);
    assert!(
        cut.starts_with("no event became ready in jobs within ")
            && cut.contains("the gateway answered before the 5m asked for"),
        "{cut}"
    );
    // Nine lines of 200 bytes, but: the fifth of 900 (over the batch limit beside any other
    // line), the seventh of 1,100 (over it alone) and the ninth of 1,600 (over the payload
    // limit).
    let lines: Vec<String> = (0..9)
        .map(|i| match i {
            4 => format!("{i:-<900}"),
            6 => format!("{i:-<1100}"),
            8 => format!("{i:-<1600}"),
            _ => format!("{i:-<200}"),
        })
        .collect();
    let input = lines.join("\n") + "\n";
    let args = ["enqueue", "jobs", "--lines"];
    let out = run(&c, &args, Some(&input));
    assert!(
        out.stdout.contains("enqueued 8 events to jobs"),
        "{}",
        out.stdout
    );
    let error = cli::failed(out, &args, 1);
    assert!(
        error.contains(&format!(
            "cannot enqueue line 9 ({}) to jobs",
            excerpt(&lines[8])
        )) && error.contains("over the limit of 1500 bytes (ingest.max_payload)"),
        "{error}"
    );
    assert_eq!(
        error.lines().count(),
        1,
        "only the one line refused: {error}"
    );
    let taken = json(&c, &["take", "jobs", "--max", "10"]);
    let payloads: Vec<&str> = taken.iter().map(|t| field(t, "payload")).collect();
    assert_eq!(payloads, lines[..8], "every other line, in order");

    // Into a queue that does not exist every line would be refused: the first refusal
    // stops the command, which says from which line on none went.
    let input = "x\n".repeat(7);
    let args = ["enqueue", "nosuch", "--lines"];
    let out = run(&c, &args, Some(&input));
    assert!(out.stdout.contains("enqueued 0 events"), "{}", out.stdout);
    let error = cli::failed(out, &args, 1);
    assert!(
        error.contains("cannot enqueue lines 1 to 7 of 7 to nosuch")
            && error.contains("does not exist"),
        "{error}"
    );
    assert_eq!(error.lines().count(), 1, "one refusal: {error}");
    c.stop();
}

/// The commands the test above runs in one output mode, in the other; `update --at`; and a
/// dead-letter queue's stats once a redrive emptied it.
#[test]
fn each_command_in_its_other_output_mode() {
    let c = start();
    let shown = text(&c, &["queue", "create", "jobs", "--max-attempts", "5"]);
    assert_eq!(
        line(&shown, "max attempts"),
        "max attempts       5",
        "{shown}"
    );
    let got = text(&c, &["queue", "get", "jobs"]);
    assert_eq!(got, shown);

    let id = field(&json(&c, &["enqueue", "jobs", "one"])[0], "id").to_string();
    let updated = text(&c, &["update", "jobs", &id, "--at", "2030-01-01T00:00:00Z"]);
    assert_eq!(
        line(&updated, "state"),
        "state             delayed",
        "{updated}"
    );
    let at = &json(&c, &["get", "jobs", &id])[0];
    assert!(
        field(at, "activate_at").starts_with("2030-01-01T00:00:00"),
        "{at}"
    );
    let deleted = json(&c, &["delete", "jobs", &id]);
    assert_eq!(
        (deleted[0]["deleted"].as_str(), deleted[0]["queue"].as_str()),
        (Some(&*id), Some("jobs"))
    );

    let id = field(&json(&c, &["enqueue", "jobs", "two"])[0], "id").to_string();
    let (_, token) = take_one(&c, "jobs");
    let nacked = text(&c, &["nack", "jobs", &id, &token, "--delay", "100ms"]);
    assert_eq!(
        nacked.trim(),
        format!(
            "'{id}' in jobs will be retried in 100ms, or dead-lettered if that was its last attempt"
        )
    );
    let (_, token) = take_one(&c, "jobs");
    let extended = text(&c, &["extend", "jobs", &id, &token, "--by", "1h"]);
    assert!(
        line(&extended, "lease expires at").contains("(in "),
        "{extended}"
    );
    let rescheduled = json(&c, &["reschedule", "jobs", &id, &token, "--delay", "0s"]);
    assert_eq!(rescheduled[0]["outcome"], "reschedule");
    let (_, token) = take_one(&c, "jobs");
    let lettered = json(&c, &["dead-letter", "jobs", &id, &token, "--reason", "no"]);
    assert_eq!(lettered[0]["outcome"], "dead-letter");
    assert_eq!(json(&c, &["stats", "jobs.dlq"])[0]["ready"], 1);
    json(&c, &["dlq", "redrive", "jobs.dlq", "--all"]);
    let emptied = &json(&c, &["stats", "jobs.dlq"])[0];
    for count in ["ready", "delayed", "leased", "dead_lettered"] {
        assert_eq!(
            emptied[count], 0,
            "{count} of an emptied dead-letter queue: {emptied}"
        );
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("two.toml");
    let stages = "name = \"two\"\n[[stages]]\nname = \"a\"\nhandler = { kind = { builtin = \"noop\" } }\n[[stages]]\nname = \"b\"\nhandler = { kind = { builtin = \"noop\" } }\n";
    std::fs::write(&file, stages).expect("write");
    json(&c, &["pipeline", "apply", file.to_str().unwrap()]);
    json(&c, &["enqueue", "two", "x", "--pipeline"]);
    let (id, token) = take_one(&c, "two.a");
    let advanced = json(&c, &["advance", "two.a", &id, &token]);
    assert_eq!(advanced[0]["outcome"], "advance");
    assert_eq!(take_one(&c, "two.b").0, id);
    c.stop();
}

#[test]
fn pipelines_applied_from_a_file_shown_listed_and_advanced() {
    let c = start();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("orders.toml");
    std::fs::write(
        &file,
        r#"name = "orders"

[[stages]]
name = "check"
handler = { kind = { builtin = "noop" } }
queue = { max_attempts = 4 }

[[stages]]
name = "ship"
handler = { kind = { http = { url = "http://127.0.0.1:9/ship" } }, timeout = "5s" }
"#,
    )
    .expect("write");
    let applied = text(&c, &["pipeline", "apply", file.to_str().unwrap()]);
    assert_eq!(applied.trim(), "applied pipeline orders (2 stages)");
    let listed = text(&c, &["pipeline", "list"]);
    assert!(
        listed.lines().any(|l| l == "orders  check → ship"),
        "{listed}"
    );

    // What `get` prints applies again as it is.
    let shown = text(&c, &["pipeline", "get", "orders"]);
    assert!(
        shown.contains("name = \"orders\"") && shown.contains("max_attempts = 4"),
        "{shown}"
    );
    let again = dir.path().join("shown.toml");
    std::fs::write(&again, &shown).expect("write");
    let reapplied = json(&c, &["pipeline", "apply", again.to_str().unwrap()]);
    assert_eq!(reapplied[0]["applied"], "orders");
    let as_json = json(&c, &["pipeline", "get", "orders"]);
    assert_eq!(
        as_json[0]["stages"][1]["handler"]["kind"]["http"]["url"],
        "http://127.0.0.1:9/ship"
    );
    let json_file = dir.path().join("orders.json");
    std::fs::write(&json_file, as_json[0].to_string()).expect("write");
    json(&c, &["pipeline", "apply", json_file.to_str().unwrap()]);
    // The protobuf JSON of the message, as other languages' clients print it.
    let proto_file = dir.path().join("proto.json");
    let proto = serde_json::json!({
        "name": "orders",
        "stages": [
            {"name": "check", "handler": {"builtin": "noop"}, "queue": {"maxAttempts": 6}},
            {"name": "ship", "handler": {"http": {"url": "http://127.0.0.1:9/ship"}, "timeout": "5s"}}
        ]
    });
    std::fs::write(&proto_file, proto.to_string()).expect("write");
    json(&c, &["pipeline", "apply", proto_file.to_str().unwrap()]);
    let reread = json(&c, &["pipeline", "get", "orders"]);
    assert_eq!(
        reread[0]["stages"][0]["queue"]["max_attempts"], 6,
        "{reread:?}"
    );

    // An event through the stages by hand.
    json(&c, &["enqueue", "orders", "o-1", "--pipeline"]);
    let (id, token) = take_one(&c, "orders.check");
    let advanced = text(
        &c,
        &[
            "advance",
            "orders.check",
            &id,
            &token,
            "--payload",
            "checked",
        ],
    );
    assert_eq!(
        advanced.trim(),
        format!(
            "advanced '{id}' from orders.check to its next stage (acked, at a pipeline's last stage or on a plain queue)"
        )
    );
    let at_ship = json(&c, &["take", "orders.ship", "--wait", "10s"]);
    assert_eq!(at_ship[0]["payload"], "checked");

    // The settings file's pipelines, as the chart's install hook applies them.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/config/cascade.toml");
    let hook = json(
        &c,
        &["pipeline", "apply", "--config", example, "--wait", "30s"],
    );
    assert_eq!(hook[0]["applied"], "demo");
    assert_eq!(hook[0]["stages"], 3);
    assert_eq!(json(&c, &["pipeline", "list"]).len(), 2);
    c.stop();
}

/// A stage whose handler always fails: the dead letter says how many attempts and what the
/// handler said the last time, and `dlq list` shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_keeps_the_handlers_last_failure() {
    let handler = HandlerServer::start(100, 1).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("cascade.toml");
    std::fs::write(
        &config,
        format!(
            r#"[[pipelines]]
name = "fragile"
[[pipelines.stages]]
name = "save"
handler = {{ kind = {{ http = {{ url = "{}" }} }}, timeout = "5s" }}
queue = {{ max_attempts = 2, backoff_initial = "10ms", backoff_max = "10ms" }}
"#,
            handler.url("save")
        ),
    )
    .expect("write the config");
    tokio::task::spawn_blocking(move || {
        let c = Cluster::start_with(Mode::Standalone, Some(&config), &[]);
        let sent = json(&c, &["enqueue", "fragile", "order 1", "--pipeline"]);
        let deadline = Instant::now() + Duration::from_secs(30);
        let letters = loop {
            let letters = json(&c, &["dlq", "list", "fragile.save.dlq"]);
            if !letters.is_empty() {
                break letters;
            }
            assert!(Instant::now() < deadline, "never dead-lettered");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(letters[0]["id"], sent[0]["id"]);
        let expected =
            format!("retry after 2 of 2 attempts; last failure: HTTP 500: {FAILURE_BODY}");
        assert_eq!(letters[0]["reason"], expected.as_str());
        let table = text(&c, &["dlq", "list", "fragile.save.dlq"]);
        assert!(
            table.contains("retry after 2 of 2 attempts; last failure: HTTP…"),
            "{table}"
        );
        c.stop();
    })
    .await
    .expect("the test");
}

/// A port nothing listens on: bound, then let go.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn errors_say_what_why_and_what_to_do_with_their_exit_codes() {
    let c = start();
    // 2: bad usage, nothing sent.
    let bad = refused(&c, &["enqueue", "jobs", "x", "--delay", "5 parsecs"], 2);
    assert!(
        bad.starts_with("error: --delay 5 parsecs: ") && bad.contains("see the command's --help"),
        "{bad}"
    );
    // A negative duration is named as such, not taken for a flag.
    let negative = refused(&c, &["queue", "create", "more", "--lease", "-5s"], 2);
    assert!(
        negative.starts_with("error: --lease -5s: ") && negative.contains("must not be negative"),
        "{negative}"
    );
    // A duration's value left out: the next flag is not taken for it.
    let left_out = refused(&c, &["take", "jobs", "--wait", "--json"], 2);
    assert!(
        left_out.starts_with("error: --wait: needs a value, such as 30s; --json is a flag"),
        "{left_out}"
    );
    refused(&c, &["dlq", "redrive", "jobs.dlq"], 2);
    let bad_header = refused(&c, &["enqueue", "jobs", "x", "--header", "novalue"], 2);
    assert!(
        bad_header.contains("--header novalue: expected NAME=VALUE"),
        "{bad_header}"
    );

    // 3: nothing listens, or the admin port.
    let port = closed_port();
    let args = ["stats", "jobs"];
    let nobody = cli::failed(
        cli::run_at(&format!("http://127.0.0.1:{port}"), &args, None),
        &args,
        3,
    );
    assert_eq!(
        nobody.trim(),
        format!(
            "error: cannot connect to Cascade at http://127.0.0.1:{port}: connection refused; is it running? start it with `cascade standalone`, or point --addr (or CASCADE_ADDR) at a running gateway"
        )
    );
    let admin = cli::failed(
        cli::run_at(&format!("http://{}", c.http()), &args, None),
        &args,
        3,
    );
    assert!(
        admin.contains("this is the admin HTTP port, not gRPC"),
        "{admin}"
    );
    // The admin port's commands alike, and their bad usage.
    let nowhere = format!("127.0.0.1:{port}");
    for args in [
        ["top", "--once", "--http-addr", &nowhere],
        ["rm", "explain", "--http-addr", &nowhere],
    ] {
        let out = cli::failed(cli::run_at("", &args, None), &args, 3);
        assert!(
            out.starts_with(&format!(
                "error: no answer from the admin port at {nowhere}: "
            )) && out.contains("point --http-addr"),
            "{out}"
        );
    }
    let args = ["top", "--interval", "5 parsecs"];
    let bad = cli::failed(cli::run_at("", &args, None), &args, 2);
    assert!(bad.starts_with("error: --interval 5 parsecs: "), "{bad}");
    // A token that cannot go in a header, before anything is sent (the live view too).
    let args = ["top", "--http-addr", &nowhere, "--token", "two words"];
    let bad = cli::failed(cli::run_at("", &args, None), &args, 2);
    assert!(
        bad.starts_with("error: --token (or CASCADE_TOKEN): "),
        "{bad}"
    );

    // 1: refused, with a hint naming a command rather than an RPC.
    let missing = refused(&c, &["enqueue", "nowhere", "x"], 1);
    assert!(
        missing.starts_with("error: cannot enqueue to nowhere: queue 'nowhere' does not exist; create it with `cascade queue create`")
            && !missing.contains("CreateQueue"),
        "{missing}"
    );
    assert_eq!(missing.lines().count(), 1, "{missing}");

    // A stale lease token, told apart from an ID the queue does not hold.
    json(&c, &["queue", "create", "jobs"]);
    json(&c, &["enqueue", "jobs", "x"]);
    let (id, token) = take_one(&c, "jobs");
    json(&c, &["release", "jobs", &id, &token]);
    let stale = refused(&c, &["ack", "jobs", &id, &token], 1);
    assert!(
        stale.contains("is not current")
            && stale.contains("take it again with `cascade take QUEUE`"),
        "{stale}"
    );
    let (_, current) = take_one(&c, "jobs");
    json(&c, &["ack", "jobs", &id, &current]);
    let gone = refused(&c, &["ack", "jobs", &id, &current], 1);
    assert!(
        gone.contains(&format!("event '{id}' is not in queue 'jobs'")),
        "{gone}"
    );
    let unknown = refused(
        &c,
        &["extend", "jobs", "no-such-id", &current, "--by", "1m"],
        1,
    );
    assert!(
        unknown.contains("event 'no-such-id' is not in queue 'jobs'"),
        "{unknown}"
    );
    assert!(run(&c, &["queue", "delete", "jobs"], None).code == 0);
    c.stop();
}

/// `cascade config check` fails where a service would stop at start, telemetry settings
/// included (they are checked when telemetry starts, after the rest).
#[test]
fn config_check_fails_on_what_would_stop_a_service_telemetry_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check_as = |name: &str, text: &str, extra: &[&str]| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write the settings");
        let path = path.to_str().expect("a UTF-8 path").to_owned();
        let mut args = vec!["config", "check", path.as_str()];
        args.extend(extra);
        cli::run_at("http://127.0.0.1:7700", &args, None)
    };
    let check = |name: &str, text: &str, stage_worker: bool| match stage_worker {
        true => check_as(name, text, &["--stage-worker"]),
        false => check_as(name, text, &[]),
    };
    let fine = check("fine.toml", "[telemetry]\nsample_ratio = 0.5\n", false);
    assert_eq!(fine.code, 0, "{}", fine.stderr);
    for (name, text, key) in [
        (
            "zero.toml",
            "[telemetry]\nshutdown_timeout = \"0s\"\n",
            "telemetry.shutdown_timeout",
        ),
        (
            "ratio.toml",
            "[telemetry]\nsample_ratio = 2.0\n",
            "telemetry.sample_ratio",
        ),
        (
            "filter.toml",
            "[telemetry]\nlog_level = \"info,[\"\n",
            "telemetry.log_level",
        ),
    ] {
        let refused = check(name, text, false);
        assert_ne!(refused.code, 0, "{name} passed");
        assert!(refused.stderr.contains(key), "{name}: {}", refused.stderr);
    }
    // The files it names, read as a service reads them at start.
    let ca = TestCa::new("config check");
    let (cert, key) = ca.server().write(dir.path(), "server");
    let (other_cert, _) = ca.server().write(dir.path(), "other");
    let bad_identities = dir.path().join("identities.toml");
    std::fs::write(
        &bad_identities,
        "[[identities]]\nname = \"ops\"\ntoken_sha256 = \"abc\"\n",
    )
    .expect("write the identities");
    let missing = dir.path().join("missing.pem");
    let tls = |cert: &std::path::Path, key: &std::path::Path| {
        format!(
            "[grpc.tls]\ncert_file = {:?}\nkey_file = {:?}\n",
            cert.display().to_string(),
            key.display().to_string()
        )
    };
    let fine = check_as("tls.toml", &tls(&cert, &key), &["--service", "ingest"]);
    assert_eq!(fine.code, 0, "{}", fine.stderr);
    // Without --service only the settings are checked: a dispatcher never reads the
    // gateway's certificate, and one file may serve both.
    let settings_only = check("no-cert-read.toml", &tls(&missing, &key), false);
    assert_eq!(settings_only.code, 0, "{}", settings_only.stderr);
    let dispatcher = check_as(
        "dispatcher.toml",
        &tls(&missing, &key),
        &["--service", "dispatcher"],
    );
    assert_eq!(dispatcher.code, 0, "{}", dispatcher.stderr);
    for (name, text, key) in [
        (
            "no-identities.toml",
            format!(
                "[auth]\nenabled = true\nidentities_file = {:?}\n",
                missing.display().to_string()
            ),
            "auth.identities_file",
        ),
        (
            "bad-identities.toml",
            format!(
                "[auth]\nenabled = true\nidentities_file = {:?}\n",
                bad_identities.display().to_string()
            ),
            "token_sha256",
        ),
        ("no-cert.toml", tls(&missing, &key), "grpc.tls.cert_file"),
        ("wrong-key.toml", tls(&other_cert, &key), "grpc.tls"),
        (
            "no-bus-ca.toml",
            format!("[bus.tls]\nca_file = {:?}\n", missing.display().to_string()),
            "bus.tls.ca_file",
        ),
    ] {
        let refused = check_as(name, &text, &["--service", "ingest"]);
        assert_ne!(refused.code, 0, "{name} passed");
        assert!(refused.stderr.contains(key), "{name}: {}", refused.stderr);
    }
    let worker = check(
        "worker.toml",
        "queue = \"jobs\"\n[handler]\nkind = { builtin = \"noop\" }\n[telemetry]\nsample_ratio = -1.0\n",
        true,
    );
    assert_ne!(worker.code, 0, "the stage worker's file passed");
    assert!(
        worker.stderr.contains("telemetry.sample_ratio"),
        "{}",
        worker.stderr
    );
}

/// Every service binary stops on a bad setting with one line that lists what is valid,
/// and no backtrace (which would name the build's source paths) even with
/// `RUST_BACKTRACE=1`.
#[test]
fn a_bad_setting_stops_every_service_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let services = [
        (
            "cascade-dispatcher",
            "CASCADE__STORE__DURABILITY",
            "fsync, interval, none",
        ),
        (
            "cascade-activation-timer",
            "CASCADE__STORE__DURABILITY",
            "fsync, interval, none",
        ),
        ("cascade-ingest", "CASCADE__BUS__KIND", "local, nats"),
        (
            "cascade-resource-manager",
            "CASCADE__TELEMETRY__LOG_FORMAT",
            "text, json",
        ),
        (
            "cascade-stage-worker",
            "CASCADE__STAGE_WORKER__TELEMETRY__LOG_FORMAT",
            "text, json",
        ),
    ];
    for (service, key, choices) in services {
        let out = std::process::Command::new(cascade_e2e::process::binary(service))
            .env(key, "sometimes")
            .env("RUST_BACKTRACE", "1")
            .env("CASCADE__DATA__DIR", dir.path())
            .env("CASCADE__HTTP__ADDR", "127.0.0.1:0")
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{service}: {stderr}");
        let said = format!("must be one of {choices}, got \"sometimes\"");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(&said),
            "{service}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{service}: {stderr}");
    }
}

/// A reader that closed the output early (`cascade … | head`) ends the command quietly
/// with 141, as a command ended by SIGPIPE, not with a panic (101) and its message.
#[test]
fn a_closed_output_ends_the_command_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = dir.path().join("cascade.toml");
    std::fs::write(&settings, "[cluster]\nshards = 2\n").expect("write the settings");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    // Closed before the command starts: its first write finds no reader, whatever the timing.
    drop(reader);
    let out = std::process::Command::new(cascade_e2e::process::binary("cascade"))
        .args(["config", "check"])
        .arg(&settings)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run cascade");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");

    // `cascade top` into a pipe draws a view per interval (here one saying it cannot read the
    // status): the first it cannot write ends it the same way.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let http_addr = format!("127.0.0.1:{}", closed_port());
    let mut top = std::process::Command::new(cascade_e2e::process::binary("cascade"))
        .args(["top", "--http-addr", &http_addr, "--interval", "100ms"])
        .stdout(writer)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run cascade top");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = top.try_wait().expect("wait for cascade top") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = top.kill();
            panic!("cascade top kept running with no reader");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(141));
}

/// A mistyped command is bad usage (2), like any other the command line cannot use.
#[test]
fn a_mistyped_command_is_bad_usage() {
    let typo = cli::run_at("http://127.0.0.1:7700", &["enqeue", "jobs"], None);
    assert_eq!(typo.code, 2, "{}", typo.stderr);
    assert!(
        typo.stderr
            .starts_with("error: unknown command 'enqeue': cascade has no such command"),
        "{}",
        typo.stderr
    );
}
