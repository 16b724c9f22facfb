//! Events by ID: enqueue, get, update, delete.

use std::io::BufRead;
use std::ops::Range;

use bytes::Bytes;

use cascade_client::{RefusedWhole, api, refused_whole_reason};
use cascade_core::error::excerpt;
use cascade_proto::convert;

use super::output::{Record, Value};
use super::{CliError, ClientOpts, Session};

/// Items per `EnqueueBatch` with --lines: well under the gateway's default limit (1000). A
/// gateway with lower limits gets them in halves until they pass.
const LINES_PER_BATCH: usize = 500;

#[derive(clap::Args)]
pub struct EnqueueArgs {
    /// The queue, or with --pipeline the pipeline (its first stage).
    queue: String,
    /// The payload; without it, standard input is read.
    #[arg(conflicts_with = "lines")]
    payload: Option<String>,
    #[command(flatten)]
    when: When,
    /// Client-chosen event ID (dedup: a repeat answers the original).
    #[arg(long, conflicts_with = "lines")]
    id: Option<String>,
    /// Idempotency key (dedup within the queue's window).
    #[arg(long, conflicts_with = "lines", value_name = "KEY")]
    idempotency_key: Option<String>,
    /// A header, NAME=VALUE; repeatable.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    /// QUEUE names a pipeline: the event enters its first stage.
    #[arg(long)]
    pipeline: bool,
    /// One event per line of standard input, sent in batches.
    #[arg(long)]
    lines: bool,
    #[command(flatten)]
    opts: ClientOpts,
}

/// When an event comes due: after --delay, at --at, or now.
#[derive(clap::Args)]
struct When {
    /// Activate after this long, e.g. 10s.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "at")]
    delay: Option<String>,
    /// Activate at this time (RFC 3339, e.g. 2026-11-23T10:00:00Z).
    #[arg(long)]
    at: Option<String>,
}

impl When {
    fn enqueue(&self) -> Result<Option<api::enqueue_request::When>, CliError> {
        use api::enqueue_request::When;
        Ok(match (&self.delay, &self.at) {
            (Some(d), _) => Some(When::Delay(super::duration_proto("delay", d)?)),
            (None, Some(at)) => Some(When::ActivateAt(convert::timestamp_to_proto(super::time(
                "at", at,
            )?))),
            (None, None) => None,
        })
    }

    fn update(&self) -> Result<Option<api::update_request::When>, CliError> {
        use api::update_request::When;
        Ok(self.enqueue()?.map(|when| match when {
            api::enqueue_request::When::Delay(d) => When::Delay(d),
            api::enqueue_request::When::ActivateAt(t) => When::ActivateAt(t),
        }))
    }
}

#[derive(clap::Args)]
pub struct EventArgs {
    queue: String,
    id: String,
    #[command(flatten)]
    opts: ClientOpts,
}

#[derive(clap::Args)]
pub struct UpdateArgs {
    queue: String,
    id: String,
    /// The new payload.
    #[arg(long)]
    payload: Option<String>,
    #[command(flatten)]
    when: When,
    /// A header to set, NAME=VALUE (merged into the event's); repeatable.
    #[arg(long = "header", value_name = "NAME=VALUE")]
    headers: Vec<String>,
    #[command(flatten)]
    opts: ClientOpts,
}

fn enqueued_record(r: &api::EnqueueResponse) -> Record {
    vec![
        ("id", Value::Text(r.id.clone())),
        ("queue", Value::Text(r.queue.clone())),
        ("duplicate", Value::Flag(r.duplicate)),
        ("activate_at", super::proto_time(r.activate_at.as_ref())),
    ]
}

pub async fn enqueue(args: EnqueueArgs) -> Result<(), CliError> {
    let (queue, pipeline) = match args.pipeline {
        true => (String::new(), args.queue.clone()),
        false => (args.queue.clone(), String::new()),
    };
    let template = api::EnqueueRequest {
        queue,
        pipeline,
        id: args.id.clone().unwrap_or_default(),
        idempotency_key: args.idempotency_key.clone().unwrap_or_default(),
        payload: Bytes::new(),
        headers: super::headers(&args.headers)?,
        when: args.when.enqueue()?,
    };
    let s = args.opts.session().await?;
    if args.lines {
        return enqueue_lines(&s, &args.queue, template).await;
    }
    let payload = match args.payload {
        Some(p) => Bytes::from(p),
        None => Bytes::from(super::stdin_bytes()?),
    };
    let request = api::EnqueueRequest {
        payload,
        ..template
    };
    let sent = s
        .client
        .ingest()
        .enqueue(request)
        .await
        .map_err(s.refused(format!("cannot enqueue to {}", args.queue)))?
        .into_inner();
    s.out.record(&enqueued_record(&sent));
    Ok(())
}

/// Every line of standard input is an event, sent in order; a refused one is reported and
/// the rest still go. A batch the gateway refuses whole for its size (more lines or bytes
/// than its limits) goes again in halves; a line alone goes as a unary call, whose limit is
/// a payload's, not a batch's. A refusal that every later line would meet too (the caller's
/// grants, credentials or quota for a whole batch, an unreachable gateway) stops the
/// command, which says how many lines went and which did not.
async fn enqueue_lines(
    s: &Session,
    target: &str,
    template: api::EnqueueRequest,
) -> Result<(), CliError> {
    let lines: Vec<String> = std::io::stdin()
        .lock()
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| CliError::failed("cannot read standard input", e))?;
    let event = |line: &String| api::EnqueueRequest {
        payload: line.clone().into_bytes().into(),
        ..template.clone()
    };
    let (mut sent, mut refused) = (0u64, Vec::new());
    let count = lines.len();
    let none_from = |first: usize, status| {
        let what = format!("cannot enqueue lines {first} to {count} of {count} to {target}");
        CliError::refused(&s.addr, what, status)
    };
    // The ranges of lines still to send, the next one last.
    let mut to_send: Vec<Range<usize>> = (0..lines.len())
        .step_by(LINES_PER_BATCH)
        .map(|start| start..lines.len().min(start + LINES_PER_BATCH))
        .rev()
        .collect();
    while let Some(range) = to_send.pop() {
        let chunk = &lines[range.clone()];
        let answer = match chunk {
            [line] => enqueue_alone(s, event(line)).await,
            _ => {
                let items = chunk.iter().map(event).collect();
                let request = api::EnqueueBatchRequest { items };
                let answer = s.client.ingest().enqueue_batch(request).await;
                answer.map(|answer| answer.into_inner().results)
            }
        };
        let results = match answer {
            Ok(results) => results,
            Err(status) if chunk.len() > 1 && refused_for_its_size(&status) => {
                let middle = range.start + chunk.len() / 2;
                to_send.extend([middle..range.end, range.start..middle]);
                continue;
            }
            Err(status) => {
                refused.push(none_from(range.start + 1, status));
                break;
            }
        };
        if results.len() != chunk.len() {
            // Which lines went is unknown: none is counted, none said to have failed alone.
            let got = format!(
                "the gateway answered {} results for {} lines",
                results.len(),
                chunk.len()
            );
            refused.push(none_from(range.start + 1, tonic::Status::internal(got)));
            break;
        }
        let answered = Answered::of(&results, chunk, range.start + 1);
        sent += answered.enqueued.len() as u64;
        if s.out.is_json() {
            answered
                .enqueued
                .iter()
                .for_each(|ok| s.out.record(&enqueued_record(ok)));
        }
        for (number, line, status) in answered.refused {
            let what = format!(
                "cannot enqueue line {number} ({}) to {target}",
                excerpt(line)
            );
            refused.push(CliError::refused(&s.addr, what, status));
        }
        if let Some((number, status)) = answered.stop {
            refused.push(none_from(number, status));
            break;
        }
    }
    if !s.out.is_json() {
        outln!("enqueued {sent} events to {target}");
    }
    report_refusals(refused)
}

/// What a batch's answers say, line by line.
struct Answered<'a> {
    enqueued: Vec<&'a api::EnqueueResponse>,
    /// Lines refused for what they are: their numbers, the lines and why.
    refused: Vec<(usize, &'a str, tonic::Status)>,
    /// The first line refused for what every later line would meet too, and why: it ends the
    /// command, and no line after it is reported alone.
    stop: Option<(usize, tonic::Status)>,
}

impl<'a> Answered<'a> {
    /// `results` for `chunk` (as many), whose first line is line `first`.
    fn of(results: &'a [api::EnqueueResult], chunk: &'a [String], first: usize) -> Answered<'a> {
        let went = results
            .iter()
            .filter(|result| result.ok.is_some() && result.code == 0)
            .count();
        let mut answered = Answered {
            enqueued: Vec::with_capacity(went),
            refused: Vec::new(),
            stop: None,
        };
        for ((result, line), number) in results.iter().zip(chunk).zip(first..) {
            match (&result.ok, result.code) {
                (Some(ok), 0) => answered.enqueued.push(ok),
                _ if answered.stop.is_some() => {}
                _ => {
                    let status = tonic::Status::new(result.code.into(), result.message.clone());
                    // Every line goes to the same queue, so to one shard: a refusal of the
                    // queue or the caller, or a batch none of whose lines reached the shard,
                    // is every later line's answer too.
                    match about_the_queue(&status) || (went == 0 && about_every_line(&status)) {
                        true => answered.stop = Some((number, status)),
                        false => answered.refused.push((number, line, status)),
                    }
                }
            }
        }
        answered
    }
}

/// One line's event as a unary call, answered as a batch answers an item; an error every
/// later line would meet too (not about this line) is the call's, as a batch's would be.
async fn enqueue_alone(
    s: &Session,
    event: api::EnqueueRequest,
) -> Result<Vec<api::EnqueueResult>, tonic::Status> {
    let result = match s.client.ingest().enqueue(event).await {
        Ok(ok) => api::EnqueueResult {
            ok: Some(ok.into_inner()),
            ..Default::default()
        },
        Err(status) if about_every_line(&status) => return Err(status),
        Err(status) => api::EnqueueResult {
            code: status.code() as i32,
            message: status.message().to_owned(),
            ..Default::default()
        },
    };
    Ok(vec![result])
}

/// Whether a refusal of one line's call would meet every line: the call never reached a
/// gateway, or the gateway refused the caller or the queue, not the line.
fn about_every_line(status: &tonic::Status) -> bool {
    use tonic::Code;
    std::error::Error::source(status).is_some()
        || about_the_queue(status)
        || matches!(status.code(), Code::Unavailable | Code::DeadlineExceeded)
}

/// Whether a line's refusal is the queue's or the caller's (no such queue, no grant, the
/// disk alarm of the queue's shard), which every line meets. A line's own UNAVAILABLE inside
/// a batch is not: the rest of the batch may have gone, over another bus request.
fn about_the_queue(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unauthenticated | Code::PermissionDenied | Code::NotFound => true,
        // The shard's disk alarm (a quota's refusal is the line's, or passes with time).
        Code::ResourceExhausted => status.message().contains("(store.min_free_bytes)"),
        _ => false,
    }
}

/// Whether a batch refused whole would pass in smaller ones. One refused for a line outside
/// the caller's grants would not: every line goes to the same queue.
fn refused_for_its_size(status: &tonic::Status) -> bool {
    matches!(
        refused_whole_reason(status),
        Some(RefusedWhole::TooManyItems | RefusedWhole::TooLarge)
    )
}

/// Prints every refusal but the last, which becomes the command's error (and exit code).
fn report_refusals(mut refused: Vec<CliError>) -> Result<(), CliError> {
    let last = refused.pop();
    for error in refused {
        eprintln!("error: {error}");
    }
    last.map_or(Ok(()), Err)
}

pub async fn get(args: EventArgs) -> Result<(), CliError> {
    let s = args.opts.session().await?;
    let event = s
        .client
        .ingest()
        .get(api::GetRequest {
            queue: args.queue.clone(),
            id: args.id.clone(),
        })
        .await
        .map_err(s.refused(format!("cannot get '{}' in {}", args.id, args.queue)))?
        .into_inner();
    s.out.record(&super::event_record(&event));
    Ok(())
}

pub async fn update(args: UpdateArgs) -> Result<(), CliError> {
    let request = api::UpdateRequest {
        queue: args.queue.clone(),
        id: args.id.clone(),
        payload: args.payload.map(Bytes::from),
        headers: super::headers(&args.headers)?,
        when: args.when.update()?,
    };
    let s = args.opts.session().await?;
    let event = s
        .client
        .ingest()
        .update(request)
        .await
        .map_err(s.refused(format!("cannot update '{}' in {}", args.id, args.queue)))?
        .into_inner();
    s.out.record(&super::event_record(&event));
    Ok(())
}

pub async fn delete(args: EventArgs) -> Result<(), CliError> {
    let s = args.opts.session().await?;
    s.client
        .ingest()
        .delete(api::DeleteRequest {
            queue: args.queue.clone(),
            id: args.id.clone(),
        })
        .await
        .map_err(s.refused(format!("cannot delete '{}' in {}", args.id, args.queue)))?;
    s.out.done(
        format!("deleted '{}' from {}", args.id, args.queue),
        vec![
            ("deleted", Value::Text(args.id)),
            ("queue", Value::Text(args.queue)),
        ],
    );
    Ok(())
}
