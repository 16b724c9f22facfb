//! Dead-letter queues: what is in one, with each event's origin and reason, and redrive.

use cascade_client::api;
use cascade_core::event::{DEAD_LETTER_FROM, DEAD_LETTER_REASON};

use super::output::Value;
use super::{CliError, ClientOpts};

#[derive(clap::Subcommand)]
pub enum DlqCommand {
    /// List a dead-letter queue's events (e.g. `jobs.dlq`): origin, attempts, reason.
    List {
        /// The dead-letter queue.
        dlq: String,
        /// Events to list at most (at least 1).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Send dead letters back to the queues they came from, due now, attempts from 1.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["all", "ids"])))]
    Redrive {
        /// The dead-letter queue.
        dlq: String,
        /// The IDs of the events to send back.
        ids: Vec<String>,
        /// Every event of the dead-letter queue.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
}

pub async fn dlq(command: DlqCommand, opts: ClientOpts) -> Result<(), CliError> {
    let s = opts.session().await?;
    let mut admin = s.client.admin();
    match command {
        DlqCommand::List { dlq, limit } => {
            let mut records = Vec::new();
            let mut page_token = String::new();
            while records.len() < limit as usize {
                let page = admin
                    .list_dead_letters(api::ListDeadLettersRequest {
                        queue: dlq.clone(),
                        page_size: (limit as usize - records.len()).min(1000) as u32,
                        page_token,
                    })
                    .await
                    .map_err(s.refused(format!("cannot list the dead letters of {dlq}")))?
                    .into_inner();
                records.extend(page.events.iter().map(|e| {
                    let header = |name| e.headers.get(name).cloned().unwrap_or_default();
                    vec![
                        ("id", Value::Text(e.id.clone())),
                        ("from", Value::Text(header(DEAD_LETTER_FROM))),
                        ("attempts", Value::Count(e.attempts.into())),
                        ("reason", Value::Text(header(DEAD_LETTER_REASON))),
                        super::payload_field(&e.payload),
                    ]
                }));
                if page.next_page_token.is_empty() {
                    break;
                }
                page_token = page.next_page_token;
            }
            s.out.table(&records, &format!("no dead letters in {dlq}"));
        }
        DlqCommand::Redrive { dlq, ids, all } => {
            let named: std::collections::BTreeSet<&String> = ids.iter().collect();
            let named = named.len() as u64;
            let moved = admin
                .redrive(api::RedriveRequest {
                    queue: dlq.clone(),
                    ids,
                    all,
                })
                .await
                .map_err(s.refused(format!("cannot redrive {dlq}")))?
                .into_inner()
                .moved;
            if !all && moved < named {
                return Err(CliError::failed(
                    format!("cannot redrive every event named from {dlq}"),
                    format!(
                        "sent {moved} of the {named} back; the others are not in {dlq} (sent back already, never dead-lettered there, or taken by a consumer of {dlq} now): list what is there with `cascade dlq list {dlq}`"
                    ),
                ));
            }
            s.out.done(
                format!("sent {moved} events from {dlq} back to their queues"),
                vec![("queue", Value::Text(dlq)), ("moved", Value::Count(moved))],
            );
        }
    }
    Ok(())
}
