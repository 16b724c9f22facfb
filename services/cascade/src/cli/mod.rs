//! The client commands: every RPC of the gateway from a shell, under names scripts and docs
//! can rely on. Output is for a person by default (`output`), one JSON object per line with
//! `--json`; failures are one line with an exit code (`error`).

mod dead_letters;
pub mod error;
mod events;
mod leases;
mod output;
mod pipelines;
mod proto_json;
mod queues;

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use cascade_client::{Client, ClientOptions, api};
use cascade_core::{Timestamp, parse_duration};
use cascade_proto::convert;

pub use error::CliError;
pub(crate) use output::human_duration;
use output::{Format, Out, Record, Value};

#[derive(clap::Args)]
pub struct ClientOpts {
    /// The gateway's gRPC address.
    #[arg(
        long,
        env = "CASCADE_ADDR",
        default_value = "http://127.0.0.1:7700",
        global = true
    )]
    addr: String,
    /// Print one JSON object per line (exact durations such as `1500ms`, RFC 3339 times)
    /// instead of text and tables.
    #[arg(long, global = true)]
    json: bool,
    /// The CA certificate (PEM) that signed the gateway's: speak TLS to it.
    #[arg(long, env = "CASCADE_CA", value_name = "FILE", global = true)]
    ca: Option<PathBuf>,
    /// A client certificate (PEM) for a gateway that asks for one (mutual TLS); with --key.
    #[arg(
        long,
        env = "CASCADE_CERT",
        value_name = "FILE",
        global = true,
        requires = "key"
    )]
    cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "CASCADE_KEY",
        value_name = "FILE",
        global = true,
        requires = "cert"
    )]
    key: Option<PathBuf>,
    /// The bearer token of your identity (better in CASCADE_TOKEN than on a command line,
    /// where other users of the machine can see it).
    #[arg(long, env = "CASCADE_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
}

impl ClientOpts {
    async fn session(&self) -> Result<Session, CliError> {
        let options = ClientOptions::from_files(
            self.ca.as_deref(),
            self.cert.as_deref().zip(self.key.as_deref()),
            self.token.clone(),
            ["--ca", "--cert", "--key"],
        )
        .map_err(|e| CliError::connect(&self.addr, e))?;
        let client = Client::connect_with(&self.addr, &options)
            .await
            .map_err(|e| CliError::connect(&self.addr, e))?;
        Ok(Session {
            client,
            addr: self.addr.clone(),
            out: self.out(),
        })
    }

    fn out(&self) -> Out {
        Out {
            format: if self.json {
                Format::Json
            } else {
                Format::Human
            },
        }
    }
}

/// A connection to the gateway and the way to print what it answers.
struct Session {
    client: Client,
    addr: String,
    out: Out,
}

impl Session {
    /// Turns the server's refusal of `what` into the command's error.
    fn refused(&self, what: impl Into<String>) -> impl FnOnce(tonic::Status) -> CliError {
        let addr = self.addr.clone();
        let what = what.into();
        move |status| CliError::refused(&addr, what, status)
    }
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// Enqueue one event; the payload is the argument, or standard input without one
    /// (with --lines, one event per line of standard input).
    Enqueue(events::EnqueueArgs),
    /// Show one event: state, attempts, times, headers and payload.
    Get(events::EventArgs),
    /// Change a waiting (delayed or ready) event: payload, activation time, headers.
    Update(events::UpdateArgs),
    /// Delete a waiting event (a leased one is completed through its lease instead).
    Delete(events::EventArgs),
    /// Take ready events under a lease; prints each with its lease token.
    Take(leases::TakeArgs),
    /// Done: acknowledge a taken event with its lease token; it leaves the queue.
    Ack(leases::LeaseArgs),
    /// Failed: retry the event after the queue's backoff (or --delay); dead-lettered once
    /// its attempts are used up.
    Nack(leases::NackArgs),
    /// Give a taken event back: ready again at once (its take still counts as an attempt).
    Release(leases::LeaseArgs),
    /// Hold a lease longer.
    Extend(leases::ExtendArgs),
    /// Move a taken event to its dead-letter queue with a reason.
    DeadLetter(leases::DeadLetterArgs),
    /// Put a taken event back for a later time; its attempts start again at 1.
    Reschedule(leases::RescheduleArgs),
    /// Move a taken pipeline event to its next stage (or --to another stage).
    Advance(leases::AdvanceArgs),
    /// Create, show, list, delete or purge queues and templates.
    Queue {
        #[command(subcommand)]
        command: queues::QueueCommand,
        #[command(flatten)]
        opts: ClientOpts,
    },
    /// Show a queue's counts and totals; for a template, its queues' summed.
    Stats(queues::StatsArgs),
    /// List a dead-letter queue's events with their reasons, or send them back.
    Dlq {
        #[command(subcommand)]
        command: dead_letters::DlqCommand,
        #[command(flatten)]
        opts: ClientOpts,
    },
    /// Apply, show or list pipelines.
    Pipeline {
        #[command(subcommand)]
        command: pipelines::PipelineCommand,
        #[command(flatten)]
        opts: ClientOpts,
    },
}

pub async fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Enqueue(args) => events::enqueue(args).await,
        Command::Get(args) => events::get(args).await,
        Command::Update(args) => events::update(args).await,
        Command::Delete(args) => events::delete(args).await,
        Command::Take(args) => leases::take(args).await,
        Command::Ack(args) => leases::ack(args).await,
        Command::Nack(args) => leases::nack(args).await,
        Command::Release(args) => leases::release(args).await,
        Command::Extend(args) => leases::extend(args).await,
        Command::DeadLetter(args) => leases::dead_letter(args).await,
        Command::Reschedule(args) => leases::reschedule(args).await,
        Command::Advance(args) => leases::advance(args).await,
        Command::Queue { command, opts } => queues::queue(command, opts).await,
        Command::Stats(args) => queues::stats(args).await,
        Command::Dlq { command, opts } => dead_letters::dlq(command, opts).await,
        Command::Pipeline { command, opts } => pipelines::pipeline(command, opts).await,
    }
}

fn duration(flag: &str, text: &str) -> Result<Duration, CliError> {
    // A duration's option takes a value starting with '-' (to say that a negative one is
    // refused): one that is a flag means its value was left out.
    let flag_given = text.starts_with("--")
        || (text.starts_with('-') && text[1..].starts_with(|c: char| c.is_ascii_alphabetic()));
    if flag_given {
        return Err(CliError::usage(
            format!("--{flag}"),
            format!("needs a value, such as 30s; {text} is a flag"),
        ));
    }
    parse_duration(text).map_err(|e| CliError::usage(format!("--{flag} {text}"), e))
}

fn duration_proto(flag: &str, text: &str) -> Result<prost_types::Duration, CliError> {
    duration(flag, text).map(convert::duration_to_proto)
}

fn time(flag: &str, text: &str) -> Result<Timestamp, CliError> {
    Timestamp::parse_rfc3339(text).map_err(|e| CliError::usage(format!("--{flag} {text}"), e))
}

fn headers(pairs: &[String]) -> Result<HashMap<String, String>, CliError> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => Ok((k.to_string(), v.to_string())),
            None => Err(CliError::usage(
                format!("--header {pair}"),
                "expected NAME=VALUE",
            )),
        })
        .collect()
}

fn stdin_bytes() -> Result<Vec<u8>, CliError> {
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .map_err(|e| CliError::failed("cannot read standard input", e))?;
    Ok(buf)
}

fn proto_time(t: Option<&prost_types::Timestamp>) -> Value {
    t.and_then(|t| convert::timestamp_from_proto(t, "time").ok())
        .map_or(Value::Nothing, Value::At)
}

fn proto_duration(d: Option<&prost_types::Duration>) -> Value {
    d.and_then(|d| convert::duration_from_proto(d, "duration").ok())
        .map_or(Value::Nothing, Value::Span)
}

/// A payload as text when it is UTF-8, else in base64 under its own name.
fn payload_field(payload: &[u8]) -> (&'static str, Value) {
    use base64::Engine;
    match std::str::from_utf8(payload) {
        Ok(text) => ("payload", Value::Text(text.to_string())),
        Err(_) => (
            "payload_base64",
            Value::Text(base64::engine::general_purpose::STANDARD.encode(payload)),
        ),
    }
}

fn event_record(e: &api::Event) -> Record {
    let state = match api::EventState::try_from(e.state) {
        Ok(api::EventState::Delayed) => "delayed",
        Ok(api::EventState::Ready) => "ready",
        Ok(api::EventState::Leased) => "leased",
        _ => "unknown",
    };
    vec![
        ("id", Value::Text(e.id.clone())),
        ("queue", Value::Text(e.queue.clone())),
        ("state", Value::Text(state.into())),
        ("attempts", Value::Count(e.attempts.into())),
        ("activate_at", proto_time(e.activate_at.as_ref())),
        ("created_at", proto_time(e.created_at.as_ref())),
        ("lease_expires_at", proto_time(e.lease_expires_at.as_ref())),
        ("version", Value::Count(e.version)),
        (
            "headers",
            Value::Map(e.headers.clone().into_iter().collect()),
        ),
        payload_field(&e.payload),
    ]
}
