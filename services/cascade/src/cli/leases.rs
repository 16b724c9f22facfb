//! Work under a lease: take, then one completion per event (ack, nack, release, extend,
//! dead-letter, reschedule, advance) with the lease token take printed.

use std::time::{Duration, SystemTime};

use bytes::Bytes;

use cascade_client::api;
use cascade_core::Timestamp;
use cascade_proto::convert;

use tonic::{Code, Status};

use super::output::Value;
use super::{CliError, ClientOpts, Session};
use api::completion::Outcome;

#[derive(clap::Args)]
pub struct TakeArgs {
    queue: String,
    /// Events to take at most.
    #[arg(long, allow_hyphen_values = true, default_value_t = 1)]
    max: u32,
    /// Wait this long for an event when none is ready, e.g. 5s.
    #[arg(long, allow_hyphen_values = true)]
    wait: Option<String>,
    /// Lease duration [default: the queue's].
    #[arg(long, allow_hyphen_values = true)]
    lease: Option<String>,
    /// Print only `ID TOKEN` per event taken, for shell scripts:
    /// `lease=$(cascade take jobs --quiet) && cascade ack jobs $lease`.
    #[arg(long, short, conflicts_with = "json")]
    quiet: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

/// An event held under a lease: what every completion names.
#[derive(clap::Args)]
pub struct LeaseArgs {
    queue: String,
    id: String,
    /// The lease token `cascade take` printed.
    #[arg(value_name = "TOKEN")]
    lease_token: String,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(clap::Args)]
pub struct NackArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// Retry after this long instead of the queue's backoff.
    #[arg(long, allow_hyphen_values = true)]
    delay: Option<String>,
    /// Why it failed: kept on the event (`cascade-last-failure`) and in its dead-letter
    /// reason if its attempts run out.
    #[arg(long)]
    reason: Option<String>,
}

#[derive(clap::Args)]
pub struct ExtendArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// How much longer to hold it, from now, e.g. 1m.
    #[arg(long, allow_hyphen_values = true)]
    by: String,
}

#[derive(clap::Args)]
pub struct DeadLetterArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// Why: kept on the dead letter (its `cascade-dead-letter-reason` header).
    #[arg(long)]
    reason: String,
}

#[derive(clap::Args)]
#[group(id = "due", required = true, multiple = false, args = ["delay", "at"])]
pub struct RescheduleArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// Due again after this long, e.g. 1h.
    #[arg(long, allow_hyphen_values = true)]
    delay: Option<String>,
    /// Due again at this time (RFC 3339).
    #[arg(long)]
    at: Option<String>,
}

#[derive(clap::Args)]
pub struct AdvanceArgs {
    #[command(flatten)]
    lease: LeaseArgs,
    /// The stage to move to [default: the next one].
    #[arg(long)]
    to: Option<String>,
    /// A new payload for the next stage.
    #[arg(long)]
    payload: Option<String>,
    /// Due at the next stage after this long.
    #[arg(long, allow_hyphen_values = true)]
    delay: Option<String>,
    /// A header to set, NAME=VALUE; repeatable.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
}

pub async fn take(args: TakeArgs) -> Result<(), CliError> {
    let request = api::TakeRequest {
        queue: args.queue.clone(),
        max_events: args.max,
        lease: args
            .lease
            .map(|v| super::duration_proto("lease", &v))
            .transpose()?,
        wait: args
            .wait
            .as_deref()
            .map(|v| super::duration_proto("wait", v))
            .transpose()?,
        worker_id: "cascade-cli".into(),
        completions: Vec::new(),
    };
    let asked_wait = args
        .wait
        .as_deref()
        .map(|v| super::duration("wait", v))
        .transpose()?;
    let s = args.opts.session().await?;
    let asked = std::time::Instant::now();
    let taken = s
        .client
        .worker()
        .take(request)
        .await
        .map_err(s.refused(format!("cannot take from {}", args.queue)))?
        .into_inner();
    if args.quiet {
        for leased in &taken.events {
            let id = leased.event.as_ref().map_or("", |event| event.id.as_str());
            outln!("{id} {}", leased.lease_token);
        }
        return Ok(());
    }
    let records: Vec<_> = taken
        .events
        .iter()
        .map(|leased| {
            let mut record =
                super::event_record(leased.event.as_ref().unwrap_or(&api::Event::default()));
            record.insert(2, ("lease_token", Value::Text(leased.lease_token.clone())));
            record
        })
        .collect();
    let waited = asked.elapsed();
    let empty = match (args.wait, asked_wait) {
        // Answered a second or more before the wait asked for: say so, not that it waited.
        (Some(wait), Some(asked_wait)) if waited + Duration::from_secs(1) < asked_wait => format!(
            "no event became ready in {} within {:.1}s: the gateway answered before the {wait} asked for (it caps a wait at dispatcher.max_take_wait, and answers at once when it stops)",
            args.queue,
            waited.as_secs_f64()
        ),
        (Some(wait), _) => format!("no event became ready in {} within {wait}", args.queue),
        (None, _) => format!("no event is ready in {}", args.queue),
    };
    s.out.records(&records, &empty);
    Ok(())
}

/// Sends one completion; `verb` names it in the error ("cannot ack 'e1' in jobs").
async fn complete(
    lease: LeaseArgs,
    verb: &str,
    outcome: Outcome,
    sentence: String,
) -> Result<(), CliError> {
    let s = lease.opts.session().await?;
    let what = format!("cannot {verb} '{}' in {}", lease.id, lease.queue);
    let response = s
        .client
        .worker()
        .complete(api::CompleteRequest {
            completions: vec![api::Completion {
                queue: lease.queue.clone(),
                id: lease.id.clone(),
                lease_token: lease.lease_token,
                outcome: Some(outcome),
            }],
        })
        .await
        .map_err(s.refused(what.clone()))?
        .into_inner();
    let result = response
        .results
        .first()
        .ok_or_else(|| CliError::failed(what.clone(), "the gateway answered without a result"))?;
    if result.code != 0 {
        let status = tonic::Status::new(result.code.into(), result.message.clone());
        return Err(refusal(&s, &lease.queue, &lease.id, what, status).await);
    }
    s.out.done(
        sentence,
        vec![
            ("id", Value::Text(lease.id)),
            ("queue", Value::Text(lease.queue)),
            ("outcome", Value::Text(verb.to_string())),
        ],
    );
    Ok(())
}

pub async fn ack(lease: LeaseArgs) -> Result<(), CliError> {
    let sentence = format!("acked '{}' in {}", lease.id, lease.queue);
    complete(lease, "ack", Outcome::Ack(api::Ack {}), sentence).await
}

pub async fn nack(args: NackArgs) -> Result<(), CliError> {
    let delay = args
        .delay
        .as_deref()
        .map(|d| super::duration_proto("delay", d))
        .transpose()?;
    let after = match &args.delay {
        Some(d) => format!("in {d}"),
        None => "after the queue's backoff".into(),
    };
    // The answer does not say which: the queue's max_attempts decides.
    let sentence = format!(
        "'{}' in {} will be retried {after}, or dead-lettered if that was its last attempt",
        args.lease.id, args.lease.queue
    );
    let retry = api::Retry {
        delay,
        reason: args.reason.unwrap_or_default(),
    };
    complete(args.lease, "nack", Outcome::Retry(retry), sentence).await
}

pub async fn release(lease: LeaseArgs) -> Result<(), CliError> {
    let sentence = format!("released '{}' in {}: ready again", lease.id, lease.queue);
    complete(
        lease,
        "release",
        Outcome::Release(api::Release {}),
        sentence,
    )
    .await
}

pub async fn dead_letter(args: DeadLetterArgs) -> Result<(), CliError> {
    let sentence = format!(
        "dead-lettered '{}' from {}: {}",
        args.lease.id, args.lease.queue, args.reason
    );
    let outcome = Outcome::DeadLetter(api::DeadLetter {
        reason: args.reason,
    });
    complete(args.lease, "dead-letter", outcome, sentence).await
}

pub async fn reschedule(args: RescheduleArgs) -> Result<(), CliError> {
    let at = match (&args.delay, &args.at) {
        (Some(delay), _) => Timestamp::from_system_time(SystemTime::now())
            .saturating_add(super::duration("delay", delay)?),
        (None, Some(at)) => super::time("at", at)?,
        (None, None) => unreachable!("clap requires --delay or --at"),
    };
    let sentence = format!(
        "rescheduled '{}' in {} for {at}",
        args.lease.id, args.lease.queue
    );
    let outcome = Outcome::Reschedule(api::Reschedule {
        activate_at: Some(convert::timestamp_to_proto(at)),
    });
    complete(args.lease, "reschedule", outcome, sentence).await
}

pub async fn advance(args: AdvanceArgs) -> Result<(), CliError> {
    let outcome = Outcome::Advance(api::Advance {
        to: args.to.clone().unwrap_or_default(),
        payload: args.payload.map(Bytes::from),
        headers: super::headers(&args.headers)?,
        delay: args
            .delay
            .as_deref()
            .map(|d| super::duration_proto("delay", d))
            .transpose()?,
    });
    let to = args.to.map_or(
        "its next stage (acked, at a pipeline's last stage or on a plain queue)".into(),
        // A stage of the event's pipeline, or a queue: the gateway decides which.
        |s| s.to_string(),
    );
    let sentence = format!(
        "advanced '{}' from {} to {to}",
        args.lease.id, args.lease.queue
    );
    complete(args.lease, "advance", outcome, sentence).await
}

pub async fn extend(args: ExtendArgs) -> Result<(), CliError> {
    let by = super::duration_proto("by", &args.by)?;
    let lease = args.lease;
    let s = lease.opts.session().await?;
    let extended = s
        .client
        .worker()
        .extend_lease(api::ExtendLeaseRequest {
            queue: lease.queue.clone(),
            id: lease.id.clone(),
            lease_token: lease.lease_token,
            extend_by: Some(by),
        })
        .await;
    let what = format!(
        "cannot extend the lease of '{}' in {}",
        lease.id, lease.queue
    );
    let extended = match extended {
        Ok(reply) => reply.into_inner(),
        Err(status) => return Err(refusal(&s, &lease.queue, &lease.id, what, status).await),
    };
    s.out.record(&vec![
        ("id", Value::Text(lease.id)),
        ("queue", Value::Text(lease.queue)),
        (
            "lease_expires_at",
            super::proto_time(extended.lease_expires_at.as_ref()),
        ),
    ]);
    Ok(())
}

/// The server refuses a lease token alike whether the event is still there (leased again,
/// or waiting after its lease expired) or gone (acked, moved on, or an ID that was never
/// in the queue); the event itself tells a person which.
async fn refusal(s: &Session, queue: &str, id: &str, what: String, status: Status) -> CliError {
    let stale =
        status.code() == Code::FailedPrecondition && status.message().contains("not current");
    if stale {
        let lookup = s
            .client
            .ingest()
            .get(api::GetRequest {
                queue: queue.to_string(),
                id: id.to_string(),
            })
            .await;
        if lookup.is_err_and(|e| e.code() == Code::NotFound) {
            let gone = Status::not_found(format!(
                "event '{id}' is not in queue '{queue}': it was completed (acked, dead-lettered or moved to the next stage) or never enqueued there"
            ));
            return CliError::refused(&s.addr, what, gone);
        }
    }
    CliError::refused(&s.addr, what, status)
}
