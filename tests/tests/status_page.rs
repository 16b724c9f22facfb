//! The status page of `cascade standalone`, as a browser shows it: headless Chromium (the
//! distribution's package, which `scripts/test.sh` installs) loads `/` and the rendered DOM
//! shows the demo pipeline's stages in order with the counts Admin stats gives, the plain
//! queue, and a template as one row; a stage whose delayed events came due shows their
//! lateness; a screenshot is kept in `target/test-artifacts/`.
//! Without Chromium the test fails, saying how to install it. `cascade-ingest` of a
//! distributed cluster serves the same `/status.json`.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cascade_client::{Client, api};
use cascade_e2e::cluster::SHARDS;
use cascade_e2e::process::{http_body, http_get};
use cascade_e2e::scenarios::{complete, config, create, enqueue, item, seconds, stats, take};
use cascade_e2e::{Cluster, Mode};

const STAGES: [&str; 3] = ["receive", "enrich", "deliver"];
const FLOWING: u64 = 5;
/// Delayed a little, once the others have settled: the first stage's lateness.
const DUE_SOON: u64 = 2;
const WAITING: u64 = 4;
const SETTLE_WITHIN: Duration = Duration::from_secs(60);
const BROWSER_WITHIN: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_shows_stages_and_counts_in_a_browser() {
    // First, so that a machine without Chromium fails at once with the advice.
    let chromium = find_chromium();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/cascade.toml");
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(Mode::Standalone, Some(&example), &[])
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    fill(&c).await;
    settled_stats(&c, FLOWING).await;
    // Events that come due a second from now, just before the page is read: their lateness
    // is shown for a minute.
    for i in 0..DUE_SOON {
        let req = api::EnqueueRequest {
            pipeline: "demo".into(),
            payload: format!("due soon {i}").into_bytes().into(),
            when: Some(api::enqueue_request::When::Delay(seconds(1.0))),
            ..Default::default()
        };
        enqueue(&c, req).await;
    }
    let expected = settled_stats(&c, FLOWING + DUE_SOON).await;
    let http = cluster.http().to_owned();
    wait_for_page_data(&http, &expected).await;

    let url = format!("http://{http}/");
    let dom = tokio::task::spawn_blocking({
        let (chromium, url) = (chromium.clone(), url.clone());
        move || run_chromium(&chromium, &["--dump-dom", &url])
    })
    .await
    .expect("chromium");
    let dumped = artifact_dir().join("status-page.html");
    std::fs::write(&dumped, &dom).unwrap_or_else(|e| panic!("write {}: {e}", dumped.display()));
    check_dom(&dom, &expected);
    check_dead_letters(&http, &chromium, &url).await;

    let shot = artifact_dir().join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = format!("--screenshot={}", shot.display());
    tokio::task::spawn_blocking(move || {
        run_chromium(&chromium, &[&screenshot, "--window-size=1400,1000", &url])
    })
    .await
    .expect("chromium");
    let png =
        std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{} is not a PNG",
        shot.display()
    );
    assert!(
        png.len() > 20_000,
        "{} is only {} bytes: a blank page?",
        shot.display(),
        png.len()
    );
    eprintln!("status page screenshot: {}", shot.display());

    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// `cascade-ingest` of a distributed cluster serves the same data: it follows the stats the
/// dispatcher processes publish over NATS, a template's queues summed under it (and so does
/// `QueueStats` of the template).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_serves_status_json_over_nats() {
    let cluster = tokio::task::spawn_blocking(|| Cluster::start(Mode::Distributed))
        .await
        .expect("start");
    let c = cluster.client().await;
    create(&c, "jobs", config(600.0, 5)).await;
    create(&c, "inbox:*", config(30.0, 5)).await;
    for queue in ["jobs", "jobs", "inbox:a", "inbox:b", "inbox:c", "inbox:d"] {
        enqueue(&c, item(queue, "x")).await;
    }
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        let status = get_json(cluster.http(), "/status.json");
        let queues = status["queues"].as_array().cloned().unwrap_or_default();
        let row = |name: &str| queues.iter().find(|q| q["name"] == name).cloned();
        let inbox = row("inbox:*");
        let summed = inbox
            .as_ref()
            .is_some_and(|q| q["queues"] == 4 && q["ready"] == 4 && q["template"] == true);
        let jobs = row("jobs").is_some_and(|q| q["ready"] == 2);
        let shards_reporting = every_shard_reporting(&status);
        if summed && jobs && shards_reporting {
            assert_eq!(queues.len(), 2, "one row per family: {queues:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/status.json never showed the queues: {status}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The template's stats over gRPC: every shard's share, summed by the gateway.
    let inbox = stats(&c, "inbox:*").await;
    assert_eq!((inbox.ready, inbox.enqueued_total), (4, 4), "{inbox:?}");
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// `/status.json` lists every shard of the cluster, each with recent stats.
fn every_shard_reporting(status: &serde_json::Value) -> bool {
    status["shards"].as_array().is_some_and(|shards| {
        shards.len() == SHARDS as usize
            && shards
                .iter()
                .enumerate()
                .all(|(i, s)| s["shard"] == i && s["stale"] == false && s["stats_age_ms"].is_u64())
    })
}

/// Events that flow through the demo pipeline, events that wait in its first stage for an
/// hour, a plain queue with ready, delayed and leased events, and a template's queues.
async fn fill(c: &Client) {
    let hour = || Some(api::enqueue_request::When::Delay(seconds(3600.0)));
    for i in 0..(FLOWING + WAITING) {
        let mut req = api::EnqueueRequest {
            pipeline: "demo".into(),
            payload: format!("event {i}").into_bytes().into(),
            ..Default::default()
        };
        if i >= FLOWING {
            req.when = hour();
        }
        enqueue(c, req).await;
    }
    create(c, "jobs", config(600.0, 5)).await;
    for i in 0..5 {
        let mut req = item("jobs", &format!("job {i}"));
        if i >= 3 {
            req.when = hour();
        }
        enqueue(c, req).await;
    }
    assert_eq!(take(c, "jobs", 1, 0.0).await.len(), 1);
    // One dead letter, with a reason, for the page's link to a dead-letter queue's contents.
    create(c, "mail", config(600.0, 5)).await;
    enqueue(c, item("mail", "to: bob")).await;
    let taken = take(c, "mail", 1, 0.0).await;
    let dead = api::completion::Outcome::DeadLetter(api::DeadLetter {
        reason: "mailbox full".into(),
    });
    assert_eq!(complete(c, &taken[0], dead).await.code, 0);
    create(c, "inbox:*", config(30.0, 5)).await;
    for user in ["alice", "bob", "alice"] {
        enqueue(c, item(&format!("inbox:{user}"), "hi")).await;
    }
}

/// Admin stats by queue, once `flowed` events have left the pipeline.
async fn settled_stats(c: &Client, flowed: u64) -> HashMap<String, api::QueueStats> {
    let names = [
        "demo.receive",
        "demo.enrich",
        "demo.deliver",
        "jobs",
        "inbox:alice",
        "inbox:bob",
    ];
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        let mut stats = HashMap::new();
        for name in names {
            let got = c
                .admin()
                .queue_stats(api::QueueStatsRequest { name: name.into() })
                .await
                .unwrap_or_else(|e| panic!("stats {name}: {e}"))
                .into_inner();
            stats.insert(name.to_owned(), got);
        }
        let busy = STAGES.iter().any(|s| {
            let q = &stats[&format!("demo.{s}")];
            q.ready + q.leased > 0
        });
        let deliver = &stats["demo.deliver"];
        if !busy && deliver.completed_total + deliver.dead_lettered == flowed {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "the demo pipeline did not settle: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `/status.json` agrees with Admin stats (it follows the shards' published
/// stats, a second or two behind).
async fn wait_for_page_data(http: &str, expected: &HashMap<String, api::QueueStats>) {
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        let status = get_json(http, "/status.json");
        let stages = &status["pipelines"][0]["stages"];
        let stages_agree = STAGES.iter().enumerate().all(|(i, s)| {
            let want = &expected[&format!("demo.{s}")];
            let got = &stages[i];
            got["delayed"] == want.delayed
                && got["ready"] == want.ready
                && got["leased"] == want.leased
                && got["completed_total"] == want.completed_total
                && got["retries_total"] == want.retries_total
                // The resource manager's latest decision for the stage.
                && got["handlers"]["desired"].is_u64()
                && got["handlers"]["running"].is_u64()
        });
        let shard_fresh = every_shard_reporting(&status);
        let queues = status["queues"].as_array().cloned().unwrap_or_default();
        let jobs_agree = queues
            .iter()
            .any(|q| q["name"] == "jobs" && q["ready"] == 2 && q["leased"] == 1);
        let inbox_agrees = queues
            .iter()
            .any(|q| q["name"] == "inbox:*" && q["ready"] == 3);
        // Two samples, so that the charts have a line to draw; each with the totals that
        // rates are drawn from.
        let sampled = stages[0]["history"].as_array().map_or(0, Vec::len) >= 2;
        let rated = stages[0]["history"][0].as_array().map_or(0, Vec::len) == 9;
        // The events delayed by a second came due in the first stage.
        let late = stages[0]["lateness_us"].is_u64();
        if stages_agree && jobs_agree && inbox_agrees && sampled && rated && late && shard_fresh {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/status.json never matched Admin stats {expected:?}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn check_dom(dom: &str, expected: &HashMap<String, api::QueueStats>) {
    // What was rendered, not the page's own scripts (which spell out the same tags).
    let dom = &dom[..dom.find("<script").unwrap_or(dom.len())];
    // Stage boxes, not their parts (`stage-name`, …).
    let stages: Vec<_> = elements(dom, "<div class=\"stage")
        .into_iter()
        .filter(|s| s.contains_key("data-stage"))
        .collect();
    let order: Vec<&str> = stages
        .iter()
        .filter(|s| s["data-pipeline"] == "demo")
        .map(|s| s["data-stage"].as_str())
        .collect();
    assert_eq!(order, STAGES, "stages in the DOM, in order:\n{dom}");
    for (index, stage) in stages.iter().enumerate() {
        let queue = &stage["data-queue"];
        let want = expected
            .get(queue)
            .unwrap_or_else(|| panic!("a stage box for {queue:?}: {stage:?}"));
        assert_eq!(stage["data-index"], index.to_string());
        for (attr, value) in [
            ("data-delayed", want.delayed),
            ("data-ready", want.ready),
            ("data-leased", want.leased),
            ("data-dead-lettered", want.dead_lettered),
        ] {
            assert_eq!(stage[attr], value.to_string(), "{queue} {attr}");
        }
    }
    assert_eq!(stages[0]["data-delayed"], WAITING.to_string());
    assert_eq!(stages[0]["data-next"], "enrich");
    assert_eq!(stages[2]["data-next"], "");
    // What a reader sees: the numbers themselves, not only the attributes.
    assert!(
        dom.contains(&format!("<b data-count=\"delayed\">{WAITING}</b>")),
        "{dom}"
    );
    let charts = elements(dom, "<svg class=\"chart\"");
    assert_eq!(
        charts.len(),
        2 * STAGES.len(),
        "counts and rates, per stage"
    );
    for chart in &charts {
        let points: usize = chart["data-points"].parse().expect("a number of points");
        let least = match chart["data-kind"].as_str() {
            "counts" => 3, // two samples and the current counts
            _ => 2,        // a rate between each two of those
        };
        assert!(points >= least, "{chart:?}");
    }
    let lateness = elements(dom, "<div class=\"lateness\"");
    assert_eq!(
        lateness.len(),
        STAGES.len(),
        "each stage shows its lateness"
    );
    assert!(
        lateness[0]
            .get("data-lateness-us")
            .is_some_and(|us| us.parse::<u64>().is_ok()),
        "the first stage's delayed events came due in the last minute: {lateness:?}"
    );
    for (stage, queue) in [
        ("rates", "data-in"),
        ("handlers", "data-running"),
        ("handlers", "data-desired"),
    ] {
        let found = elements(dom, &format!("<div class=\"{stage}\""));
        assert_eq!(
            found.iter().filter(|e| e.contains_key(queue)).count(),
            STAGES.len(),
            "each stage shows its {stage} ({queue}): {found:?}"
        );
    }
    let links: Vec<String> = elements(dom, "<a href=\"#dlq=")
        .into_iter()
        .map(|a| a["data-dlq"].clone())
        .collect();
    for stage in STAGES {
        assert!(
            links.contains(&format!("demo.{stage}.dlq")),
            "a link to demo.{stage}'s dead letters: {links:?}"
        );
    }
    assert!(links.contains(&"mail.dlq".to_owned()), "{links:?}");
    for shard in 0..SHARDS {
        let chip = elements(
            dom,
            &format!("<span class=\"shard ok\" id=\"shard-{shard}\""),
        );
        assert_eq!(chip.len(), 1, "shard {shard} shown healthy");
    }

    let rows: HashMap<String, HashMap<String, String>> = elements(dom, "<tr id=\"queue-")
        .into_iter()
        .map(|row| (row["data-queue"].clone(), row))
        .collect();
    let jobs = &rows["jobs"];
    let want = &expected["jobs"];
    for (attr, value) in [
        ("data-delayed", want.delayed),
        ("data-ready", want.ready),
        ("data-leased", want.leased),
    ] {
        assert_eq!(jobs[attr], value.to_string(), "jobs {attr}");
    }
    assert_eq!((want.delayed, want.ready, want.leased), (2, 2, 1));
    let inbox = rows
        .get("inbox:*")
        .unwrap_or_else(|| panic!("no row for inbox:*: {rows:?}"));
    let inbox_ready = expected["inbox:alice"].ready + expected["inbox:bob"].ready;
    assert_eq!(inbox["data-template"], "true");
    assert_eq!(inbox["data-queues"], "2");
    assert_eq!(inbox["data-ready"], inbox_ready.to_string());
    assert!(
        !rows
            .keys()
            .any(|name| name.starts_with("inbox:") && name != "inbox:*" && !name.ends_with(".dlq")),
        "a template's queues are not listed one by one: {:?}",
        rows.keys()
    );
    assert!(
        !rows.contains_key("demo.receive"),
        "stages are drawn, not listed"
    );
}

/// The dead-letter queue's contents: `/dead-letters.json` answers what Admin would (and a
/// clear 400 for a name that is not a queue), and the page opened at `#dlq=mail.dlq` shows
/// the event with its reason.
async fn check_dead_letters(http: &str, chromium: &Path, url: &str) {
    let listed = get_json(http, "/dead-letters.json?queue=mail.dlq");
    let events = listed["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{listed}");
    assert_eq!(events[0]["from"], "mail", "{listed}");
    assert_eq!(events[0]["payload"], "to: bob", "{listed}");
    let reason = events[0]["reason"].as_str().unwrap_or_default().to_owned();
    assert!(reason.contains("mailbox full"), "{listed}");
    let id = events[0]["id"].as_str().expect("an id").to_owned();
    let unknown = get_json(http, "/dead-letters.json?queue=nowhere.dlq");
    assert_eq!(unknown["events"], serde_json::json!([]), "{unknown}");
    // Names that are not dead-letter queues: a template, nothing, no name, and a queue whose
    // payloads the admin port does not show.
    for (query, status) in [("inbox:*", 400), ("", 400), ("a%20b", 400), ("jobs", 400)] {
        let answer = http_get(http, &format!("/dead-letters.json?queue={query}"));
        assert_eq!(
            answer.as_ref().map(|(code, _)| *code),
            Some(status),
            "{query:?}: {answer:?}"
        );
    }
    let url = format!("{url}#dlq=mail.dlq");
    let chromium = chromium.to_owned();
    let dom = tokio::task::spawn_blocking(move || run_chromium(&chromium, &["--dump-dom", &url]))
        .await
        .expect("chromium");
    let dom = &dom[..dom.find("<script").unwrap_or(dom.len())];
    assert!(
        dom.contains(&format!("<tr data-id=\"{id}\">")) && dom.contains("mailbox full"),
        "the page at #dlq=mail.dlq lists the dead letter:\n{dom}"
    );
}

/// The attributes of each element whose start tag begins with `open`.
fn elements(dom: &str, open: &str) -> Vec<HashMap<String, String>> {
    dom.match_indices(open)
        .map(|(start, _)| {
            let tag = &dom[start..start + dom[start..].find('>').expect("a closed tag")];
            let mut attrs = HashMap::new();
            let mut rest = tag;
            while let Some(eq) = rest.find("=\"") {
                let key = rest[..eq].rsplit(' ').next().unwrap_or_default().to_owned();
                let after = &rest[eq + 2..];
                let close = after.find('"').expect("a closed attribute");
                attrs.insert(key, after[..close].to_owned());
                rest = &after[close + 1..];
            }
            attrs
        })
        .collect()
}

/// `GET http://addr/path`, its body as JSON.
fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let body = http_body(addr, path).unwrap_or_else(|| panic!("no 200 answer to GET {path}"));
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path} is not JSON ({e}): {body}"))
}

/// The distribution's Chromium; fails the test when there is none.
fn find_chromium() -> PathBuf {
    for name in ["chromium", "chromium-browser"] {
        if let Ok(out) = Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!(
        "Chromium is not installed: the status page test needs a real browser. Install the \
         distribution's package (Debian: `apt-get install chromium`), or run ./scripts/test.sh, \
         which installs it"
    );
}

/// Runs headless Chromium on `args`, with its own profile; returns its stdout.
fn run_chromium(chromium: &Path, args: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", chromium.display()));
    let (mut stdout, mut stderr) = (
        child.stdout.take().expect("stdout"),
        child.stderr.take().expect("stderr"),
    );
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + BROWSER_WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium {args:?} did not finish within {BROWSER_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert!(
        status.success(),
        "chromium {args:?} failed ({status}):\n{err}"
    );
    out
}

/// `target/test-artifacts/` of the workspace.
fn artifact_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}
