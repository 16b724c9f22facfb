//! Authentication, per-queue grants and quotas on a real `cascade standalone`, met as its
//! users and a hostile client meet them, over real gRPC clients with bearer tokens: no token
//! and an unknown one are UNAUTHENTICATED; a producer on another queue, a consumer that
//! enqueues or purges, a batch with one forbidden item are PERMISSION_DENIED and change
//! nothing; quotas give RESOURCE_EXHAUSTED while other identities keep working; a pipeline
//! whose handler URL is outside the allow-list is refused; the identities file is reloaded
//! (a token added, one revoked) without a restart; the admin port keeps health and metrics
//! open and the status data for cluster admins; the CLI takes --token and CASCADE_TOKEN;
//! standalone's own stage workers keep working; the audit log names who did each change.

use std::path::Path;
use std::time::{Duration, Instant};

use cascade_client::{Client, ClientOptions, api};
use cascade_e2e::cli;
use cascade_e2e::process::http_get_with;
use cascade_e2e::scenarios::{ack, complete, config, item, noop_pipeline, stats};
use cascade_e2e::{Cluster, Mode};
use cascade_security::token_sha256;
use cascade_worker::{Event, Outcome, Worker, WorkerConfig, handler_fn};
use serde_json::Value;
use tonic::Code;

const ADMIN: &str = "admin-token-3f9a";
const PRODUCER: &str = "producer-token-81c2";
const CONSUMER: &str = "consumer-token-77d0";
const LIMITED: &str = "limited-token-5b1e";
const LATER: &str = "added-later-token-9e44";
/// How long a test waits for the server to act: far above what it takes, never a measure.
const WITHIN: Duration = Duration::from_secs(30);

fn identity(name: &str, token: &str, grants: &str, quotas: &str) -> String {
    format!(
        "[[identities]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ngrants = [{grants}]\n{quotas}\n",
        token_sha256(token)
    )
}

fn identities(with_later: bool) -> String {
    let mut file = [
        identity(
            "ops",
            ADMIN,
            r#"{ role = "admin", queues = ["*"] }, { role = "producer", queues = ["demo.*"] }"#,
            "",
        ),
        identity("orders-producer", PRODUCER, r#"{ role = "producer", queues = ["orders.*"] }"#, ""),
        identity("orders-consumer", CONSUMER, r#"{ role = "consumer", queues = ["orders.*"] }"#, ""),
        identity(
            "limited",
            LIMITED,
            r#"{ role = "producer", queues = ["limited.*"] }, { role = "admin", queues = ["limited.*"] }"#,
            "quotas = { enqueue_rate = 1, max_payload = \"16\", max_queues = 2 }",
        ),
    ]
    .concat();
    if with_later {
        file.push_str(&identity(
            "later",
            LATER,
            r#"{ role = "consumer", queues = ["orders.*"] }"#,
            "",
        ));
    }
    file
}

async fn client(cluster: &Cluster, token: Option<&str>) -> Client {
    let options = ClientOptions {
        token: token.map(str::to_owned),
        ..ClientOptions::default()
    };
    Client::connect_with(cluster.gateway(), &options)
        .await
        .expect("connect")
}

/// The status of a call that must fail.
fn refused<T: std::fmt::Debug>(answer: Result<tonic::Response<T>, tonic::Status>) -> tonic::Status {
    answer.expect_err("refused")
}

/// The reason a status gives for refusing its request whole, if it does, as a client reads it.
fn refused_whole(status: &tonic::Status) -> Option<&'static str> {
    cascade_client::refused_whole_reason(status).map(cascade_client::RefusedWhole::as_str)
}

async fn create_queue(c: &Client, name: &str) -> Result<(), tonic::Status> {
    let request = api::CreateQueueRequest {
        name: name.into(),
        config: Some(config(30.0, 3)),
    };
    c.admin().create_queue(request).await.map(drop)
}

async fn purge(c: &Client, name: &str) -> Result<(), tonic::Status> {
    let request = api::PurgeQueueRequest { name: name.into() };
    c.admin().purge_queue(request).await.map(drop)
}

async fn queue_stats(c: &Client, name: &str) -> Result<(), tonic::Status> {
    let request = api::QueueStatsRequest { name: name.into() };
    c.admin().queue_stats(request).await.map(drop)
}

async fn take_one(c: &Client, queue: &str) -> Result<Vec<api::LeasedEvent>, tonic::Status> {
    let request = api::TakeRequest {
        queue: queue.into(),
        max_events: 1,
        ..Default::default()
    };
    Ok(c.worker().take(request).await?.into_inner().events)
}

async fn enqueue(
    c: &Client,
    queue: &str,
    payload: &str,
) -> Result<tonic::Response<api::EnqueueResponse>, tonic::Status> {
    c.ingest().enqueue(item(queue, payload)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_do_what_their_grants_and_quotas_allow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("identities.toml");
    std::fs::write(&file, identities(false)).expect("write identities");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/cascade.toml");
    let file_setting = file.display().to_string();
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(
            Mode::Standalone,
            Some(&example),
            &[
                ("CASCADE__AUTH__ENABLED", "true"),
                ("CASCADE__AUTH__IDENTITIES_FILE", &file_setting),
                ("CASCADE__AUTH__RELOAD_INTERVAL", "100ms"),
                (
                    "CASCADE__AUTH__HANDLER_URL_PREFIXES",
                    "http://127.0.0.1:9/allowed/",
                ),
                ("CASCADE__TELEMETRY__LOG_FORMAT", "json"),
            ],
        )
    })
    .await
    .expect("start");
    let admin = client(&cluster, Some(ADMIN)).await;
    let producer = client(&cluster, Some(PRODUCER)).await;
    let consumer = client(&cluster, Some(CONSUMER)).await;
    for queue in ["orders.new", "payments"] {
        create_queue(&admin, queue)
            .await
            .expect("an admin creates queues");
    }

    // No credentials, or unknown ones: UNAUTHENTICATED, nothing changed.
    let anonymous = client(&cluster, None).await;
    let status = refused(enqueue(&anonymous, "orders.new", "x").await);
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert!(
        status.message().starts_with("no credentials: "),
        "{status:?}"
    );
    let stranger = client(&cluster, Some("not-a-token")).await;
    let status = purge(&stranger, "orders.new").await.expect_err("refused");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    assert_eq!(stats(&admin, "orders.new").await.enqueued_total, 0);

    // A producer on its own queues, and not on another's.
    enqueue(&producer, "orders.new", "one")
        .await
        .expect("its own queue");
    let status = refused(enqueue(&producer, "payments", "x").await);
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(
        status.message(),
        "queue: identity 'orders-producer' may not produce to queue 'payments': it needs the producer role on a pattern that matches it (its grants: producer on orders.*)"
    );
    assert_eq!(
        stats(&admin, "payments").await.enqueued_total,
        0,
        "payments unchanged"
    );
    // A batch with forbidden items is refused whole, naming the first and listing them all.
    let batch = api::EnqueueBatchRequest {
        items: vec![
            item("orders.new", "two"),
            item("payments", "x"),
            item("orders.new", "three"),
            item("payments", "y"),
        ],
    };
    let status = refused(producer.ingest().enqueue_batch(batch).await);
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(
        status
            .message()
            .starts_with("items[1].queue: identity 'orders-producer'"),
        "{status:?}"
    );
    assert_eq!(refused_whole(&status), Some("forbidden-item"), "{status:?}");
    assert_eq!(
        cascade_client::forbidden_items(&status),
        Some(vec![1, 3]),
        "{status:?}"
    );
    assert_eq!(
        stats(&admin, "orders.new").await.enqueued_total,
        1,
        "nothing of the batch"
    );
    let listed = producer
        .admin()
        .list_queues(api::ListQueuesRequest::default())
        .await
        .expect("list")
        .into_inner();
    let names: Vec<&str> = listed.queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["orders.new"], "only the queues it has a grant on");
    // Paged one by one, every token is a name it may read: paging tells it nothing of the
    // queues outside its grants, not even that they exist.
    create_queue(&admin, "archive.secret")
        .await
        .expect("create");
    let (mut paged, mut token) = (Vec::new(), String::new());
    loop {
        let request = api::ListQueuesRequest {
            page_size: 1,
            page_token: token,
            ..api::ListQueuesRequest::default()
        };
        let page = producer.admin().list_queues(request).await.expect("list");
        let page = page.into_inner();
        paged.extend(page.queues.into_iter().map(|q| q.name));
        if page.next_page_token.is_empty() {
            break;
        }
        assert!(
            page.next_page_token.starts_with("orders."),
            "{}",
            page.next_page_token
        );
        token = page.next_page_token;
    }
    assert_eq!(paged, ["orders.new"]);
    admin
        .admin()
        .delete_queue(api::DeleteQueueRequest {
            name: "archive.secret".into(),
            ..api::DeleteQueueRequest::default()
        })
        .await
        .expect("delete");
    let take = take_one(&producer, "orders.new")
        .await
        .expect_err("refused");
    assert_eq!(take.code(), Code::PermissionDenied);

    // A consumer takes and acks, and can neither enqueue nor purge.
    assert_eq!(
        refused(enqueue(&consumer, "orders.new", "x").await).code(),
        Code::PermissionDenied
    );
    let purged = purge(&consumer, "orders.new").await.expect_err("refused");
    assert_eq!(purged.code(), Code::PermissionDenied);
    assert!(
        purged.message().contains("needs the admin role"),
        "{purged:?}"
    );
    let taken = take_one(&consumer, "orders.new").await.expect("take");
    assert_eq!(taken.len(), 1, "the purge changed nothing");
    let acked = complete(&consumer, &taken[0], ack()).await;
    assert_eq!(acked.code, 0, "{acked:?}");
    // An advance out of a pipeline is an enqueue there: a consumer may not use it to write
    // into a queue it has no producer grant on, however its name starts.
    enqueue(&producer, "orders.new", "to move")
        .await
        .expect("enqueue");
    let taken = take_one(&consumer, "orders.new").await.expect("take");
    let event = taken[0].event.as_ref().expect("an event");
    let advance = api::CompleteRequest {
        completions: vec![api::Completion {
            queue: "orders.new".into(),
            id: event.id.clone(),
            lease_token: taken[0].lease_token.clone(),
            outcome: Some(api::completion::Outcome::Advance(api::Advance {
                to: "orders.other".into(),
                ..Default::default()
            })),
        }],
    };
    let carrying = api::TakeRequest {
        queue: "orders.new".into(),
        max_events: 10,
        completions: advance.completions.clone(),
        ..Default::default()
    };
    let moved = consumer
        .worker()
        .complete(advance)
        .await
        .expect_err("refused");
    assert_eq!(moved.code(), Code::PermissionDenied);
    assert!(moved.message().starts_with("completions[0].advance.to: identity 'orders-consumer' may not produce to queue 'orders.other'"), "{moved:?}");
    // Among others, every forbidden completion is listed, by its place in the request.
    let forbidden = carrying.completions[0].clone();
    let acked = api::Completion {
        outcome: Some(ack()),
        ..forbidden.clone()
    };
    let mixed = api::CompleteRequest {
        completions: vec![acked, forbidden.clone(), forbidden],
    };
    let moved = consumer
        .worker()
        .complete(mixed)
        .await
        .expect_err("refused");
    assert!(
        moved.message().starts_with("completions[1].advance.to"),
        "{moved:?}"
    );
    assert_eq!(
        cascade_client::forbidden_items(&moved),
        Some(vec![1, 2]),
        "{moved:?}"
    );
    // Carried by a take, the same advance refuses the whole take: nothing is leased.
    enqueue(&producer, "orders.new", "still ready")
        .await
        .expect("enqueue");
    let moved = consumer.worker().take(carrying).await.expect_err("refused");
    assert_eq!(moved.code(), Code::PermissionDenied);
    assert!(
        moved.message().starts_with("completions[0].advance.to"),
        "{moved:?}"
    );
    assert_eq!(refused_whole(&moved), Some("forbidden-item"), "{moved:?}");
    assert_eq!(
        cascade_client::forbidden_items(&moved),
        Some(vec![0]),
        "{moved:?}"
    );
    let still = take_one(&consumer, "orders.new").await.expect("take");
    let payload = &still[0].event.as_ref().expect("an event").payload;
    assert_eq!(&payload[..], b"still ready", "the refused take leased it");
    // The headers Cascade sets on dead letters are its own, in any case (an HTTP handler
    // gets header names in lower case).
    for name in ["cascade-dead-letter-from", "Cascade-Dead-Letter-From"] {
        let mut planted = item("orders.new", "x");
        planted.headers.insert(name.into(), "payments".into());
        let reserved = producer
            .ingest()
            .enqueue(planted)
            .await
            .expect_err("refused");
        assert_eq!(reserved.code(), Code::InvalidArgument);
        assert!(
            reserved.message().starts_with(
                "headers: header names starting with cascade-, in any case, are Cascade's own"
            ),
            "{reserved:?}"
        );
    }

    // Quotas: payload, rate, queues; other identities keep working.
    let limited = client(&cluster, Some(LIMITED)).await;
    let big = refused(enqueue(&limited, "limited.a", &"x".repeat(17)).await);
    assert_eq!(big.code(), Code::ResourceExhausted);
    assert!(
        big.message().contains("over its max_payload of 16 bytes"),
        "{big:?}"
    );
    for name in ["limited.a", "limited.b", "limited.a"] {
        create_queue(&limited, name)
            .await
            .expect("within max_queues, and again for one that exists");
    }
    // Its dead letters would be written there: the dead-letter queue must be the caller's.
    let elsewhere = api::CreateQueueRequest {
        name: "limited.x".into(),
        config: Some(api::QueueConfig {
            dead_letter_queue: "payments".into(),
            ..config(30.0, 3)
        }),
    };
    let dlq = limited
        .admin()
        .create_queue(elsewhere)
        .await
        .expect_err("refused");
    assert_eq!(dlq.code(), Code::PermissionDenied);
    assert!(
        dlq.message().starts_with(
            "config.dead_letter_queue: identity 'limited' may not administer queue 'payments'"
        ),
        "{dlq:?}"
    );
    let third = create_queue(&limited, "limited.c")
        .await
        .expect_err("over max_queues");
    assert_eq!(third.code(), Code::ResourceExhausted);
    assert!(third.message().contains("max_queues"), "{third:?}");
    // One event a second, and a batch of 100 passes a full bucket and is paid for.
    let hundred = api::EnqueueBatchRequest {
        items: (0..100)
            .map(|i| item("limited.a", &i.to_string()))
            .collect(),
    };
    limited
        .ingest()
        .enqueue_batch(hundred)
        .await
        .expect("a full bucket");
    let rate = refused(enqueue(&limited, "limited.a", "more").await);
    assert_eq!(rate.code(), Code::ResourceExhausted);
    assert_eq!(
        refused_whole(&rate),
        None,
        "a quota is the caller's, not its items'"
    );
    assert!(
        rate.message()
            .contains("enqueue_rate of 1 events per second; retry in"),
        "{rate:?}"
    );
    enqueue(&producer, "orders.new", "others still work")
        .await
        .expect("another identity");

    // A pipeline's handler URLs must be in the allow-list.
    let pipeline = |url: &str| api::Pipeline {
        name: "hooks".into(),
        stages: vec![api::Stage {
            name: "call".into(),
            handler: Some(api::HandlerSpec {
                kind: Some(api::handler_spec::Kind::Http(api::HttpHandler {
                    url: url.into(),
                })),
                concurrency: 1,
                timeout: None,
            }),
            ..Default::default()
        }],
    };
    let outside = refused(
        admin
            .admin()
            .apply_pipeline(pipeline("http://169.254.169.254/latest/meta-data"))
            .await,
    );
    assert_eq!(outside.code(), Code::PermissionDenied);
    assert!(outside.message().starts_with("stages[0].handler.http.url: handler URL 'http://169.254.169.254/latest/meta-data' starts with none of the prefixes"), "{outside:?}");
    let absent = refused(
        admin
            .admin()
            .get_pipeline(api::GetPipelineRequest {
                name: "hooks".into(),
            })
            .await,
    );
    assert_eq!(absent.code(), Code::NotFound, "not applied");
    admin
        .admin()
        .apply_pipeline(pipeline("http://127.0.0.1:9/allowed/call"))
        .await
        .expect("inside the allow-list");

    // Standalone's own stage workers still move events (in-process, no token).
    admin
        .ingest()
        .enqueue(api::EnqueueRequest {
            pipeline: "demo".into(),
            payload: b"through".to_vec().into(),
            ..Default::default()
        })
        .await
        .expect("into the demo pipeline");
    let deadline = Instant::now() + WITHIN;
    while stats(&admin, "demo.enrich").await.completed_total == 0 {
        assert!(
            Instant::now() < deadline,
            "the stage workers never moved the event"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The admin port: probes and metrics open; the cluster's data for cluster admins.
    let http = cluster.http().to_owned();
    tokio::task::spawn_blocking(move || admin_port(&http))
        .await
        .expect("admin port");
    // The commands that read it: with a cluster admin's token, and refused without one.
    let gateway = format!("http://{}", cluster.gateway());
    for command in [
        &["top", "--once", "--http-addr", cluster.http()][..],
        &["rm", "explain", "--http-addr", cluster.http()],
    ] {
        let refused = cli::run_at(&gateway, command, None);
        assert_eq!(refused.code, 1, "{command:?}: {}", refused.stderr);
        assert!(
            refused.stderr.contains("answered 401"),
            "{}",
            refused.stderr
        );
        let read = cli::run_env(&gateway, command, &[("CASCADE_TOKEN", ADMIN)]);
        assert_eq!(read.code, 0, "{command:?}: {}", read.stderr);
    }
    let top = cli::run_at(
        &gateway,
        &[
            "top",
            "--once",
            "--http-addr",
            cluster.http(),
            "--token",
            ADMIN,
        ],
        None,
    );
    assert_eq!(top.code, 0, "{}", top.stderr);
    let header = top.stdout.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("cascade top — http://") && header.ends_with(" — once"),
        "{}",
        top.stdout
    );

    // The CLI: --token and CASCADE_TOKEN.
    let addr = format!("http://{}", cluster.gateway());
    let without = cli::run_at(&addr, &["stats", "orders.new"], None);
    assert_eq!(without.code, 1, "{}", without.stderr);
    assert!(
        without.stderr.contains("no credentials"),
        "{}",
        without.stderr
    );
    let with_flag = cli::run_at(
        &addr,
        &["stats", "orders.new", "--json", "--token", PRODUCER],
        None,
    );
    assert_eq!(with_flag.code, 0, "{}", with_flag.stderr);
    let from_env = cli::run_env(
        &addr,
        &["stats", "orders.new"],
        &[("CASCADE_TOKEN", PRODUCER)],
    );
    assert_eq!(from_env.code, 0, "{}", from_env.stderr);
    let denied = cli::run_env(
        &addr,
        &["queue", "purge", "orders.new"],
        &[("CASCADE_TOKEN", PRODUCER)],
    );
    assert_eq!(denied.code, 1, "{}", denied.stderr);
    assert!(
        denied.stderr.contains("needs the admin role"),
        "{}",
        denied.stderr
    );
    // Lines outside the caller's grants: refused at the first batch, which is not sent again
    // in parts (every line goes to the same queue), and the command says what did not go.
    let lines = cli::run_with(
        &addr,
        &["enqueue", "payments", "--lines"],
        Some("a\nb\n"),
        &[("CASCADE_TOKEN", PRODUCER)],
    );
    assert_eq!(lines.code, 1, "{}", lines.stderr);
    assert!(
        lines.stdout.contains("enqueued 0 events to payments")
            && lines
                .stderr
                .contains("cannot enqueue lines 1 to 2 of 2 to payments")
            && lines.stderr.contains("may not produce to queue 'payments'"),
        "{}\n{}",
        lines.stdout,
        lines.stderr
    );

    // The identities file is read again: a token added, one revoked, without a restart. It
    // is replaced in one step, as a Secret's update does (a reader never sees half of it).
    let staged = file.with_extension("new");
    let changed = identities(true).replace(&token_sha256(CONSUMER), &token_sha256("revoked"));
    std::fs::write(&staged, changed).expect("write");
    std::fs::rename(&staged, &file).expect("swap");
    let later = client(&cluster, Some(LATER)).await;
    let deadline = Instant::now() + WITHIN;
    while queue_stats(&later, "orders.new").await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the new identity was never loaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let revoked = queue_stats(&consumer, "orders.new")
        .await
        .expect_err("revoked");
    assert_eq!(revoked.code(), Code::Unauthenticated);
    let log = cluster.front_log_once(r#""action":"credentials.reload""#, WITHIN);

    // A file caught empty (rewritten in place, read between its truncation and its write)
    // is refused, and the identities in force stay.
    std::fs::write(&file, "").expect("empty the identities file");
    cluster.front_log_once(
        "it is empty, as a file caught while it is rewritten",
        WITHIN,
    );
    queue_stats(&later, "orders.new")
        .await
        .expect("the identities in force stayed");
    cluster.stop();
    audit(&log);
}

/// The admin port with and without the tokens of a cluster admin.
fn admin_port(http: &str) {
    for open in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(
            http_get_with(http, open, &[]).map(|r| r.0),
            Some(200),
            "{open}"
        );
    }
    for page in [
        "/",
        "/status.json",
        "/dead-letters.json?queue=orders.new.dlq",
        "/rm/explain",
    ] {
        let (status, head, body) = http_get_with(http, page, &[]).expect("an answer");
        assert_eq!(status, 401, "{page} without a token");
        assert!(
            body.starts_with(
                "no credentials: this page needs the token of an identity with the admin role on *"
            ) && !body.contains("metadata"),
            "{page}: {body}"
        );
        assert!(
            head.contains("www-authenticate: Basic realm=\"cascade\""),
            "{page}: {head}"
        );
        let producer = format!("Bearer {PRODUCER}");
        let (status, _, body) =
            http_get_with(http, page, &[("Authorization", &producer)]).expect("an answer");
        assert_eq!(status, 403, "{page} for a producer: {body}");
        let admin = format!("Bearer {ADMIN}");
        assert_eq!(
            http_get_with(http, page, &[("Authorization", &admin)]).map(|r| r.0),
            Some(200),
            "{page}"
        );
    }
    // What a browser sends once a person typed the token as the password ("ops:<token>").
    let basic = format!("Basic {}", base64(&format!("ops:{ADMIN}")));
    assert_eq!(
        http_get_with(http, "/status.json", &[("Authorization", &basic)]).map(|r| r.0),
        Some(200)
    );
}

fn base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The audit lines: each change with the identity that made it, refusals too, and the
/// identities file's reload.
fn audit(log: &str) {
    let lines: Vec<(String, String, String, String)> = log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["target"] == "cascade::audit")
        .map(|line| {
            let field = |name: &str| line["fields"][name].as_str().unwrap_or_default().to_owned();
            (
                field("action"),
                field("identity"),
                field("resource"),
                field("outcome"),
            )
        })
        .collect();
    let seen: Vec<(&str, &str, &str, &str)> = lines
        .iter()
        .map(|(a, i, r, o)| (a.as_str(), i.as_str(), r.as_str(), o.as_str()))
        .collect();
    // Every administrative call of the test, in order, accepted or refused (an
    // unauthenticated one names no queue: its request was never read).
    assert_eq!(
        seen,
        [
            ("pipeline.apply", "operator", "demo", "ok"),
            ("queue.create", "ops", "orders.new", "ok"),
            ("queue.create", "ops", "payments", "ok"),
            ("queue.purge", "unauthenticated", "", "Unauthenticated"),
            ("queue.create", "ops", "archive.secret", "ok"),
            ("queue.delete", "ops", "archive.secret", "ok"),
            (
                "queue.purge",
                "orders-consumer",
                "orders.new",
                "PermissionDenied"
            ),
            ("queue.create", "limited", "limited.a", "ok"),
            ("queue.create", "limited", "limited.b", "ok"),
            ("queue.create", "limited", "limited.a", "ok"),
            ("queue.create", "limited", "limited.x", "PermissionDenied"),
            ("queue.create", "limited", "limited.c", "ResourceExhausted"),
            ("pipeline.apply", "ops", "hooks", "PermissionDenied"),
            ("pipeline.apply", "ops", "hooks", "ok"),
            (
                "queue.purge",
                "orders-producer",
                "orders.new",
                "PermissionDenied"
            ),
            ("credentials.reload", "operator", seen[15].2, "ok"),
        ],
        "{lines:#?}"
    );
    assert!(
        !log.contains(ADMIN) && !log.contains(PRODUCER),
        "tokens never logged"
    );
}

/// A worker whose handler advances some events of a batch outside its grants: a request
/// carrying such an advance is refused whole, and the worker sends the others again without
/// it, so every other event of the batch still goes where its handler sent it, at once, not
/// after its lease runs out.
#[tokio::test]
async fn a_forbidden_advance_fails_only_its_own_event() {
    const STAGE: &str = "stage-token-0c5d";
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("identities.toml");
    let grants = [
        identity(
            "ops",
            ADMIN,
            r#"{ role = "admin", queues = ["*"] }, { role = "producer", queues = ["*"] }"#,
            "",
        ),
        identity(
            "stage",
            STAGE,
            r#"{ role = "consumer", queues = ["jobs.*"] }, { role = "producer", queues = ["jobs.*"] }"#,
            "",
        ),
    ];
    std::fs::write(&file, grants.concat()).expect("write identities");
    let file_setting = file.display().to_string();
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(
            Mode::Standalone,
            None,
            &[
                ("CASCADE__STANDALONE__STAGE_WORKERS", "false"),
                ("CASCADE__AUTH__ENABLED", "true"),
                ("CASCADE__AUTH__IDENTITIES_FILE", &file_setting),
            ],
        )
    })
    .await
    .expect("start");
    let admin = client(&cluster, Some(ADMIN)).await;
    for queue in ["jobs.in", "jobs.done", "payments"] {
        create_queue(&admin, queue).await.expect("create");
    }
    // The events whose number ends in 7 are to go where the stage may not produce.
    let forbidden = |payload: &[u8]| payload.ends_with(b"7");
    let sent: Vec<api::EnqueueRequest> = (0..40).map(|i| item("jobs.in", &i.to_string())).collect();
    let allowed = sent.iter().filter(|e| !forbidden(&e.payload)).count() as u64;
    admin
        .ingest()
        .enqueue_batch(api::EnqueueBatchRequest { items: sent })
        .await
        .expect("enqueue");

    // Leases far longer than the wait below: an event whose completion failed would only
    // come back after it.
    let config = WorkerConfig::new("jobs.in")
        .expect("config")
        .batch(40)
        .concurrency(40)
        .lease(Duration::from_secs(600));
    let handler = handler_fn(move |event: Event, _attempt| async move {
        let to = match forbidden(&event.payload) {
            true => "payments",
            false => "jobs.done",
        };
        Ok(Outcome::Advance {
            to: Some(to.to_owned()),
            payload: None,
            headers: Default::default(),
            delay: None,
        })
    });
    let stage = client(&cluster, Some(STAGE)).await;
    let worker = Worker::new(&stage, config, handler).expect("worker");
    let handle = worker.handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run_until(async move {
        let _ = stopped.await;
    }));
    let deadline = Instant::now() + WITHIN;
    while stats(&admin, "jobs.done").await.enqueued_total < allowed {
        assert!(
            Instant::now() < deadline,
            "{} of {allowed} advanced within {WITHIN:?}",
            stats(&admin, "jobs.done").await.enqueued_total
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stats(&admin, "jobs.done").await.enqueued_total, allowed);
    assert_eq!(stats(&admin, "payments").await.enqueued_total, 0);
    let _ = stop.send(());
    running
        .await
        .expect("join")
        .expect("the worker stops cleanly");
    // Each outcome counted once.
    let counted = handle.stats();
    assert_eq!(
        (counted.completed, counted.complete_failures),
        (allowed, 40 - allowed),
        "{counted:?}"
    );

    // From a pipeline's stage, an advance to a queue outside the stage's grants is refused
    // the same whether that queue exists or not: the answer says nothing of other queues.
    admin
        .admin()
        .apply_pipeline(noop_pipeline("jobs", "next"))
        .await
        .expect("apply");
    enqueue(&admin, "jobs.next", "staged")
        .await
        .expect("enqueue");
    let taken = take_one(&stage, "jobs.next").await.expect("take");
    let advance_to = |to: &str| api::CompleteRequest {
        completions: vec![api::Completion {
            queue: "jobs.next".into(),
            id: taken[0].event.as_ref().expect("an event").id.clone(),
            lease_token: taken[0].lease_token.clone(),
            outcome: Some(api::completion::Outcome::Advance(api::Advance {
                to: to.into(),
                ..Default::default()
            })),
        }],
    };
    for to in ["payments", "nowhere"] {
        let refused = stage
            .worker()
            .complete(advance_to(to))
            .await
            .expect_err("outside the grants");
        assert_eq!(refused.code(), Code::PermissionDenied, "{to}: {refused:?}");
    }
    // Within its grants, a queue that does not exist is the item's own error.
    let absent = stage
        .worker()
        .complete(advance_to("jobs.nowhere"))
        .await
        .expect("answered")
        .into_inner();
    assert_eq!(
        absent.results[0].code,
        Code::InvalidArgument as i32,
        "{absent:?}"
    );
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
