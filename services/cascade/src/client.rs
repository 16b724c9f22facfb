//! The client subcommands: enough to try Cascade without other tools. Each prints JSON (one
//! object per line), so scripts can read it too.

use std::collections::HashMap;
use std::io::Read;

use anyhow::Context;
use cascade_client::{Client, api};
use cascade_core::{Timestamp, parse_duration, parse_size};
use cascade_proto::convert;
use serde_json::json;

#[derive(clap::Args)]
pub struct Conn {
    /// The gateway's gRPC address.
    #[arg(
        long,
        env = "CASCADE_ADDR",
        default_value = "http://127.0.0.1:7700",
        global = true
    )]
    addr: String,
}

impl Conn {
    async fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::connect(&self.addr).await?)
    }
}

#[derive(clap::Subcommand)]
pub enum QueueCommand {
    /// Create a queue, or a template if NAME ends in `*` (e.g. `inbox:*`).
    Create(QueueConfigArgs),
    /// Show a queue's config.
    Get { name: String },
    /// List queues and templates.
    List {
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Delete a queue or a template. A queue that still holds events (ready, delayed or
    /// leased) is refused unless --force, which drops them with it.
    Delete {
        name: String,
        /// Delete the queue even if it holds events, and drop them.
        #[arg(long)]
        force: bool,
    },
}

#[derive(clap::Args)]
pub struct QueueConfigArgs {
    name: String,
    /// How long a take holds an event, e.g. 30s [default: 30s].
    #[arg(long)]
    lease: Option<String>,
    /// Takes per stage before dead-lettering; 0 = unlimited [default: 10].
    #[arg(long)]
    max_attempts: Option<u32>,
    /// First retry delay [default: 1s].
    #[arg(long)]
    backoff_initial: Option<String>,
    /// Longest retry delay [default: 5m].
    #[arg(long)]
    backoff_max: Option<String>,
    /// Where dead letters go [default: <name>.dlq].
    #[arg(long)]
    dead_letter_queue: Option<String>,
    /// Largest payload, e.g. 1MiB [default: 4MiB].
    #[arg(long)]
    max_payload: Option<String>,
    #[arg(long)]
    priority: Option<u32>,
    /// How long IDs and idempotency keys are remembered [default: 15m].
    #[arg(long)]
    dedup_window: Option<String>,
}

#[derive(clap::Args)]
pub struct EnqueueArgs {
    /// The queue, or with --pipeline the pipeline (its first stage).
    queue: String,
    /// The payload; without it, standard input is read.
    payload: Option<String>,
    /// Activate after this long, e.g. 10s.
    #[arg(long, conflicts_with = "at")]
    delay: Option<String>,
    /// Activate at this time (RFC 3339, e.g. 2026-11-23T10:00:00Z).
    #[arg(long)]
    at: Option<String>,
    /// Client-chosen event ID (dedup: a repeat answers the original).
    #[arg(long)]
    id: Option<String>,
    /// Idempotency key (dedup within the queue's window).
    #[arg(long)]
    key: Option<String>,
    /// A header, NAME=VALUE; repeatable.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// QUEUE names a pipeline: the event enters its first stage.
    #[arg(long)]
    pipeline: bool,
    #[command(flatten)]
    conn: Conn,
}

#[derive(clap::Args)]
pub struct TakeArgs {
    queue: String,
    #[arg(long, default_value_t = 1)]
    max: u32,
    /// Wait this long for an event when none is ready, e.g. 5s.
    #[arg(long)]
    wait: Option<String>,
    /// Lease duration [default: the queue's].
    #[arg(long)]
    lease: Option<String>,
    #[command(flatten)]
    conn: Conn,
}

#[derive(clap::Args)]
pub struct AckArgs {
    queue: String,
    id: String,
    /// The lease token `cascade take` printed.
    token: String,
    #[command(flatten)]
    conn: Conn,
}

#[derive(clap::Args)]
pub struct StatsArgs {
    queue: String,
    #[command(flatten)]
    conn: Conn,
}

fn duration(flag: &str, text: &str) -> anyhow::Result<prost_types::Duration> {
    let d = parse_duration(text).with_context(|| format!("--{flag}"))?;
    Ok(convert::duration_to_proto(d))
}

fn time_text(t: Option<&prost_types::Timestamp>) -> Option<String> {
    convert::timestamp_from_proto(t?, "time")
        .ok()
        .map(|t| t.to_string())
}

fn duration_text(d: Option<&prost_types::Duration>) -> String {
    d.and_then(|d| convert::duration_from_proto(d, "duration").ok())
        .map(cascade_core::units::format_duration)
        .unwrap_or_default()
}

fn print(value: serde_json::Value) {
    println!("{value}");
}

pub async fn queue(conn: Conn, command: QueueCommand) -> anyhow::Result<()> {
    let mut admin = conn.client().await?.admin();
    match command {
        QueueCommand::Create(args) => {
            let config = api::QueueConfig {
                lease: args.lease.map(|v| duration("lease", &v)).transpose()?,
                // 0 means unlimited in the contract, so the default is spelled out.
                max_attempts: args
                    .max_attempts
                    .unwrap_or(cascade_core::QueueConfig::default().max_attempts),
                backoff_initial: args
                    .backoff_initial
                    .map(|v| duration("backoff-initial", &v))
                    .transpose()?,
                backoff_max: args
                    .backoff_max
                    .map(|v| duration("backoff-max", &v))
                    .transpose()?,
                dead_letter_queue: args.dead_letter_queue.unwrap_or_default(),
                max_payload_bytes: args
                    .max_payload
                    .map(|v| parse_size(&v).context("--max-payload"))
                    .transpose()?
                    .unwrap_or(0),
                priority: args.priority.unwrap_or(0),
                dedup_window: args
                    .dedup_window
                    .map(|v| duration("dedup-window", &v))
                    .transpose()?,
            };
            let queue = admin
                .create_queue(api::CreateQueueRequest {
                    name: args.name,
                    config: Some(config),
                })
                .await?
                .into_inner();
            print(queue_json(&queue));
        }
        QueueCommand::Get { name } => {
            let queue = admin
                .get_queue(api::GetQueueRequest { name })
                .await?
                .into_inner();
            print(queue_json(&queue));
        }
        QueueCommand::List { prefix } => {
            let mut page_token = String::new();
            loop {
                let page = admin
                    .list_queues(api::ListQueuesRequest {
                        prefix: prefix.clone(),
                        page_size: 1000,
                        page_token,
                    })
                    .await?
                    .into_inner();
                page.queues.iter().for_each(|q| print(queue_json(q)));
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
        }
        QueueCommand::Delete { name, force } => {
            admin
                .delete_queue(api::DeleteQueueRequest {
                    name: name.clone(),
                    force,
                })
                .await?;
            print(json!({ "deleted": name }));
        }
    }
    Ok(())
}

fn queue_json(q: &api::Queue) -> serde_json::Value {
    let c = q.config.clone().unwrap_or_default();
    json!({
        "name": q.name,
        "lease": duration_text(c.lease.as_ref()),
        "max_attempts": c.max_attempts,
        "backoff_initial": duration_text(c.backoff_initial.as_ref()),
        "backoff_max": duration_text(c.backoff_max.as_ref()),
        "dead_letter_queue": c.dead_letter_queue,
        "max_payload_bytes": c.max_payload_bytes,
        "priority": c.priority,
        "dedup_window": duration_text(c.dedup_window.as_ref()),
    })
}

pub async fn enqueue(args: EnqueueArgs) -> anyhow::Result<()> {
    let payload = match args.payload {
        Some(p) => p.into_bytes(),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("read the payload from standard input")?;
            buf
        }
    };
    let when = match (args.delay, args.at) {
        (Some(d), _) => Some(api::enqueue_request::When::Delay(duration("delay", &d)?)),
        (None, Some(at)) => Some(api::enqueue_request::When::ActivateAt(
            convert::timestamp_to_proto(Timestamp::parse_rfc3339(&at).context("--at")?),
        )),
        (None, None) => None,
    };
    let mut headers = HashMap::new();
    for h in args.headers {
        let (k, v) = h
            .split_once('=')
            .with_context(|| format!("--header {h}: expected NAME=VALUE"))?;
        headers.insert(k.to_string(), v.to_string());
    }
    let mut ingest = args.conn.client().await?.ingest();
    let r = ingest
        .enqueue(api::EnqueueRequest {
            queue: if args.pipeline {
                String::new()
            } else {
                args.queue.clone()
            },
            pipeline: if args.pipeline {
                args.queue
            } else {
                String::new()
            },
            id: args.id.unwrap_or_default(),
            idempotency_key: args.key.unwrap_or_default(),
            payload,
            headers,
            when,
        })
        .await?
        .into_inner();
    print(json!({
        "id": r.id,
        "queue": r.queue,
        "duplicate": r.duplicate,
        "activate_at": time_text(r.activate_at.as_ref()),
    }));
    Ok(())
}

pub async fn take(args: TakeArgs) -> anyhow::Result<()> {
    let mut worker = args.conn.client().await?.worker();
    let taken = worker
        .take(api::TakeRequest {
            queue: args.queue,
            max_events: args.max,
            lease: args.lease.map(|v| duration("lease", &v)).transpose()?,
            wait: args.wait.map(|v| duration("wait", &v)).transpose()?,
            worker_id: "cascade-cli".into(),
        })
        .await?
        .into_inner();
    for leased in taken.events {
        let e = leased.event.unwrap_or_default();
        print(json!({
            "id": e.id,
            "queue": e.queue,
            "lease_token": leased.lease_token,
            "lease_expires_at": time_text(leased.lease_expires_at.as_ref()),
            "attempts": e.attempts,
            "activate_at": time_text(e.activate_at.as_ref()),
            "headers": e.headers,
            "payload": String::from_utf8_lossy(&e.payload),
        }));
    }
    Ok(())
}

pub async fn ack(args: AckArgs) -> anyhow::Result<()> {
    let mut worker = args.conn.client().await?.worker();
    let response = worker
        .complete(api::CompleteRequest {
            completions: vec![api::Completion {
                queue: args.queue,
                id: args.id.clone(),
                lease_token: args.token,
                outcome: Some(api::completion::Outcome::Ack(api::Ack {})),
            }],
        })
        .await?
        .into_inner();
    let result = response
        .results
        .first()
        .context("the gateway answered without a result")?;
    if result.code != 0 {
        anyhow::bail!(
            "ack of {} refused (code {}): {}",
            args.id,
            result.code,
            result.message
        );
    }
    print(json!({ "acked": args.id }));
    Ok(())
}

pub async fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let mut admin = args.conn.client().await?.admin();
    let s = admin
        .queue_stats(api::QueueStatsRequest { name: args.queue })
        .await?
        .into_inner();
    print(json!({
        "name": s.name,
        "ready": s.ready,
        "delayed": s.delayed,
        "leased": s.leased,
        "dead_lettered": s.dead_lettered,
        "oldest_ready_age": duration_text(s.oldest_ready_age.as_ref()),
        "enqueued_total": s.enqueued_total,
        "completed_total": s.completed_total,
        "expired_leases_total": s.expired_leases_total,
        "retries_total": s.retries_total,
    }));
    Ok(())
}
