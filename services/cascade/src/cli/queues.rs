//! Queues and templates: create, get, list, delete, purge, and their stats.

use cascade_client::api;
use cascade_core::parse_size;

use super::output::{Record, Value};
use super::{CliError, ClientOpts};

#[derive(clap::Subcommand)]
pub enum QueueCommand {
    /// Create a queue, or a template if NAME ends in `*` (e.g. `inbox:*`).
    Create(QueueConfigArgs),
    /// Show a queue's config.
    Get { name: String },
    /// List queues and templates.
    List {
        /// Only names that start with this.
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
    /// Drop every event of a queue (ready, delayed and leased) and keep the queue; prints
    /// how many went.
    Purge { name: String },
}

#[derive(clap::Args)]
pub struct QueueConfigArgs {
    name: String,
    /// How long a take holds an event, e.g. 30s [default: 30s].
    #[arg(long, allow_hyphen_values = true)]
    lease: Option<String>,
    /// Takes per stage before dead-lettering; 0 = unlimited [default: 10].
    #[arg(long, allow_hyphen_values = true)]
    max_attempts: Option<u32>,
    /// First retry delay [default: 1s].
    #[arg(long, allow_hyphen_values = true)]
    backoff_initial: Option<String>,
    /// Longest retry delay [default: 5m].
    #[arg(long, allow_hyphen_values = true)]
    backoff_max: Option<String>,
    /// Where dead letters go [default: <name>.dlq].
    #[arg(long)]
    dead_letter_queue: Option<String>,
    /// Largest payload, e.g. 1MiB [default: 4MiB].
    #[arg(long)]
    max_payload: Option<String>,
    /// The queue's priority, kept with its config [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    priority: Option<u32>,
    /// How long IDs and idempotency keys are remembered [default: 15m].
    #[arg(long, allow_hyphen_values = true)]
    dedup_window: Option<String>,
}

#[derive(clap::Args)]
pub struct StatsArgs {
    /// A queue, or a template (`inbox:*`) for its queues summed.
    queue: String,
    #[command(flatten)]
    opts: ClientOpts,
}

impl QueueConfigArgs {
    fn config(&self) -> Result<api::QueueConfig, CliError> {
        let duration = |flag: &str, v: &Option<String>| {
            v.as_deref()
                .map(|v| super::duration_proto(flag, v))
                .transpose()
        };
        Ok(api::QueueConfig {
            lease: duration("lease", &self.lease)?,
            // 0 means unlimited in the contract, so the default is spelled out.
            max_attempts: self
                .max_attempts
                .unwrap_or(cascade_core::QueueConfig::default().max_attempts),
            backoff_initial: duration("backoff-initial", &self.backoff_initial)?,
            backoff_max: duration("backoff-max", &self.backoff_max)?,
            dead_letter_queue: self.dead_letter_queue.clone().unwrap_or_default(),
            max_payload_bytes: self
                .max_payload
                .as_deref()
                .map(|v| {
                    parse_size(v).map_err(|e| CliError::usage(format!("--max-payload {v}"), e))
                })
                .transpose()?
                .unwrap_or(0),
            priority: self.priority.unwrap_or(0),
            dedup_window: duration("dedup-window", &self.dedup_window)?,
        })
    }
}

fn queue_record(q: &api::Queue) -> Record {
    let c = q.config.clone().unwrap_or_default();
    vec![
        ("name", Value::Text(q.name.clone())),
        ("lease", super::proto_duration(c.lease.as_ref())),
        ("max_attempts", Value::Count(c.max_attempts.into())),
        (
            "backoff_initial",
            super::proto_duration(c.backoff_initial.as_ref()),
        ),
        ("backoff_max", super::proto_duration(c.backoff_max.as_ref())),
        (
            "dead_letter_queue",
            Value::Text(dead_letter_queue(&q.name, c.dead_letter_queue)),
        ),
        ("max_payload_bytes", Value::Bytes(c.max_payload_bytes)),
        ("priority", Value::Count(c.priority.into())),
        (
            "dedup_window",
            super::proto_duration(c.dedup_window.as_ref()),
        ),
    ]
}

/// The queue's dead letters' queue as it applies: the one configured, else `<name>.dlq`. A
/// template's stays as configured (empty: each queue's own `<queue>.dlq`).
fn dead_letter_queue(name: &str, configured: String) -> String {
    match configured.is_empty() && !name.ends_with('*') {
        true => format!("{name}.dlq"),
        false => configured,
    }
}

pub async fn queue(command: QueueCommand, opts: ClientOpts) -> Result<(), CliError> {
    let config = match &command {
        QueueCommand::Create(args) => Some(args.config()?),
        _ => None,
    };
    let s = opts.session().await?;
    let mut admin = s.client.admin();
    match command {
        QueueCommand::Create(args) => {
            let queue = admin
                .create_queue(api::CreateQueueRequest {
                    name: args.name.clone(),
                    config,
                })
                .await
                .map_err(s.refused(format!("cannot create queue {}", args.name)))?
                .into_inner();
            s.out.record(&queue_record(&queue));
        }
        QueueCommand::Get { name } => {
            let queue = admin
                .get_queue(api::GetQueueRequest { name: name.clone() })
                .await
                .map_err(s.refused(format!("cannot get queue {name}")))?
                .into_inner();
            s.out.record(&queue_record(&queue));
        }
        QueueCommand::List { prefix } => {
            let mut queues = Vec::new();
            let mut page_token = String::new();
            loop {
                let page = admin
                    .list_queues(api::ListQueuesRequest {
                        prefix: prefix.clone(),
                        page_size: 1000,
                        page_token,
                    })
                    .await
                    .map_err(s.refused("cannot list queues"))?
                    .into_inner();
                queues.extend(page.queues.iter().map(queue_record));
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            s.out.table(&queues, "no queues");
        }
        QueueCommand::Delete { name, force } => {
            admin
                .delete_queue(api::DeleteQueueRequest {
                    name: name.clone(),
                    force,
                })
                .await
                .map_err(s.refused(format!("cannot delete queue {name}")))?;
            s.out.done(
                format!("deleted queue {name}"),
                vec![("deleted", Value::Text(name))],
            );
        }
        QueueCommand::Purge { name } => {
            let purged = admin
                .purge_queue(api::PurgeQueueRequest { name: name.clone() })
                .await
                .map_err(s.refused(format!("cannot purge queue {name}")))?
                .into_inner()
                .purged;
            s.out.done(
                format!("purged {purged} events from {name}"),
                vec![
                    ("queue", Value::Text(name)),
                    ("purged", Value::Count(purged)),
                ],
            );
        }
    }
    Ok(())
}

pub async fn stats(args: StatsArgs) -> Result<(), CliError> {
    let s = args.opts.session().await?;
    let stats = s
        .client
        .admin()
        .queue_stats(api::QueueStatsRequest {
            name: args.queue.clone(),
        })
        .await
        .map_err(s.refused(format!("cannot get the stats of {}", args.queue)))?
        .into_inner();
    s.out.record(&vec![
        ("name", Value::Text(stats.name)),
        ("ready", Value::Count(stats.ready)),
        ("delayed", Value::Count(stats.delayed)),
        ("leased", Value::Count(stats.leased)),
        ("dead_lettered", Value::Count(stats.dead_lettered)),
        (
            "oldest_ready_age",
            super::proto_duration(stats.oldest_ready_age.as_ref()),
        ),
        ("enqueued_total", Value::Count(stats.enqueued_total)),
        ("completed_total", Value::Count(stats.completed_total)),
        (
            "expired_leases_total",
            Value::Count(stats.expired_leases_total),
        ),
        ("retries_total", Value::Count(stats.retries_total)),
    ]);
    Ok(())
}
