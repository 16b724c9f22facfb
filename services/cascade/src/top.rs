//! `cascade top`: a live terminal view of a running cluster — each pipeline stage and queue
//! with its depth (ready, delayed, leased), its rates (events in, done, retried and
//! dead-lettered per second), the stage's handlers (running / decided by the resource
//! manager) and the largest lateness of its delayed events in the last minute, and every
//! shard's health. It reads what the status page reads, `/status.json`
//! on the gateway's admin port, and redraws every `--interval`; Ctrl-C quits. Rates are the
//! difference of the totals between two reads over the time between them (the first view of
//! a stage takes them from the page's own history).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, bail};
use cascade_core::parse_duration;
use serde::Deserialize;

use crate::cli::{CliError, human_duration};
use crate::rm_client::{AdminToken, http_get};

const STATUS_PATH: &str = "/status.json";
/// Alternate screen on, cursor hidden; and back.
const ENTER_SCREEN: &str = "\x1b[?1049h\x1b[?25l";
const LEAVE_SCREEN: &str = "\x1b[?25h\x1b[?1049l";
const CLEAR: &str = "\x1b[H\x1b[2J";

#[derive(clap::Args)]
pub struct TopArgs {
    /// The gateway's admin (HTTP) address, where the status page is.
    #[arg(long, env = "CASCADE_HTTP_ADDR", default_value = "127.0.0.1:7701")]
    http_addr: String,
    /// How often to read and redraw, e.g. 2s.
    #[arg(long, default_value = "2s")]
    interval: String,
    /// Print one view and exit (for scripts and logs).
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    token: AdminToken,
}

/// The gateway's status page, read as a cluster admin when a token is given.
struct StatusPage<'a> {
    addr: &'a str,
    token: Option<&'a str>,
}

/// What `/status.json` holds, as far as this view reads it.
#[derive(Debug, Default, Deserialize)]
struct Status {
    generated_at_ms: u64,
    pipelines: Vec<PipelineRow>,
    queues: Vec<Row>,
    #[serde(default)]
    shards: Vec<Shard>,
    warnings: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct PipelineRow {
    name: String,
    stages: Vec<Row>,
}

/// A stage or a queue row.
#[derive(Debug, Default, Deserialize)]
struct Row {
    /// A stage's name, or a queue's.
    name: String,
    /// A stage's queue.
    queue: Option<String>,
    ready: u64,
    delayed: u64,
    leased: u64,
    dead_lettered: u64,
    enqueued_total: u64,
    completed_total: u64,
    #[serde(default)]
    retries_total: u64,
    handlers: Option<Handlers>,
    /// A stage's activation lateness, in µs.
    #[serde(default)]
    lateness_us: Option<u64>,
    /// `[ms, delayed, ready, leased, enqueued, completed, retries, dead_lettered,
    /// lateness µs or null]`.
    #[serde(default)]
    history: Vec<Vec<Option<u64>>>,
}

#[derive(Debug, Deserialize)]
struct Handlers {
    running: u32,
    desired: u32,
}

#[derive(Debug, Deserialize)]
struct Shard {
    shard: u32,
    stats_age_ms: Option<u64>,
    stale: bool,
}

/// A row's totals at one moment: what rates are made of.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Totals {
    at_ms: u64,
    values: [u64; 4],
}

impl Row {
    fn key(&self) -> &str {
        self.queue.as_deref().unwrap_or(&self.name)
    }

    fn totals(&self, at_ms: u64) -> Totals {
        Totals {
            at_ms,
            values: [
                self.enqueued_total,
                self.completed_total,
                self.retries_total,
                self.dead_lettered,
            ],
        }
    }

    /// The totals of the last history point but one: a stage's rates before a second read.
    fn earlier_totals(&self) -> Option<Totals> {
        let point = self.history.iter().rev().nth(1)?;
        let value = |i: usize| point.get(i).copied().flatten();
        Some(Totals {
            at_ms: value(0)?,
            values: [value(4)?, value(5)?, value(6)?, value(7)?],
        })
    }
}

type Rates = [Option<f64>; 4];

/// Per second, from `before` to `now`, each total on its own; `None` without time between
/// them, or for a total that went down (its queue was deleted and made again).
fn rates(before: Totals, now: Totals) -> Rates {
    let seconds = now.at_ms.saturating_sub(before.at_ms) as f64 / 1000.0;
    std::array::from_fn(|i| {
        let grown = now.values[i].checked_sub(before.values[i]);
        grown.filter(|_| seconds > 0.0).map(|n| n as f64 / seconds)
    })
}

fn rate_cells(rates: Rates) -> String {
    let cell = |rate: Option<f64>, width: usize| match rate {
        Some(rate) => format!("{rate:>width$.1}"),
        None => format!("{:>width$}", "-"),
    };
    format!(
        "{} {} {} {}",
        cell(rates[0], 8),
        cell(rates[1], 8),
        cell(rates[2], 8),
        cell(rates[3], 6)
    )
}

const COLUMNS: &str = "   READY  DELAYED   LEASED     IN/s   DONE/s  RETRY/s  DLQ/s";

/// The view of `status`, with rates against `previous` totals (by row key); `interval` is
/// the refresh (`None`: shown once).
fn render(
    status: &Status,
    previous: &HashMap<String, Totals>,
    source: &str,
    interval: Option<&str>,
) -> String {
    let mut out = String::new();
    let now = status.generated_at_ms;
    let _ = match interval {
        Some(interval) => writeln!(
            out,
            "cascade top — {source} — every {interval} — Ctrl-C quits\n"
        ),
        None => writeln!(out, "cascade top — {source} — once\n"),
    };
    let row_line = |out: &mut String, label: &str, row: &Row, rates: Rates| {
        let _ = write!(
            out,
            "{label:<28}{:>8} {:>8} {:>8} {}",
            row.ready,
            row.delayed,
            row.leased,
            rate_cells(rates)
        );
    };
    for pipeline in &status.pipelines {
        let _ = writeln!(
            out,
            "PIPELINE {:<19}{COLUMNS}  HANDLERS     LATE",
            pipeline.name
        );
        for stage in &pipeline.stages {
            let before = previous
                .get(stage.key())
                .copied()
                .or_else(|| stage.earlier_totals());
            let rates = before.map_or([None; 4], |b| rates(b, stage.totals(now)));
            row_line(&mut out, &format!("  {}", stage.name), stage, rates);
            let handlers = match &stage.handlers {
                Some(h) => format!("{}/{}", h.running, h.desired),
                None => "-".to_owned(),
            };
            let late = stage.lateness_us.map_or("-".to_owned(), |us| {
                human_duration(Duration::from_micros(us))
            });
            let _ = writeln!(out, "  {handlers:>8} {late:>8}");
        }
        out.push('\n');
    }
    if !status.queues.is_empty() {
        let _ = writeln!(out, "{:<28}{COLUMNS}", "QUEUES");
        for queue in &status.queues {
            let rates = previous
                .get(queue.key())
                .map_or([None; 4], |b| rates(*b, queue.totals(now)));
            row_line(&mut out, &format!("  {}", queue.name), queue, rates);
            out.push('\n');
        }
        out.push('\n');
    }
    let shards: Vec<String> = status
        .shards
        .iter()
        .map(|s| match (s.stale, s.stats_age_ms) {
            (_, None) => format!("{} no stats yet", s.shard),
            (true, Some(age)) => format!("{} STALE ({}s)", s.shard, age / 1000),
            (false, Some(_)) => format!("{} ok", s.shard),
        })
        .collect();
    let _ = writeln!(out, "SHARDS  {}", shards.join("  "));
    for warning in &status.warnings {
        let _ = writeln!(out, "! {warning}");
    }
    out
}

/// Every row's totals, by key, for the next view's rates.
fn totals_of(status: &Status) -> HashMap<String, Totals> {
    let stages = status.pipelines.iter().flat_map(|p| p.stages.iter());
    stages
        .chain(&status.queues)
        .map(|row| (row.key().to_owned(), row.totals(status.generated_at_ms)))
        .collect()
}

impl StatusPage<'_> {
    async fn read(&self) -> anyhow::Result<Status> {
        let addr = self.addr;
        let (code, body) = http_get(addr, STATUS_PATH, self.token).await?;
        if code != 200 {
            bail!("{addr}{STATUS_PATH} answered {code}: {}", body.trim_end());
        }
        serde_json::from_str(&body).with_context(|| {
            format!(
                "{addr}{STATUS_PATH} is not a Cascade gateway's status (is this its admin port?)"
            )
        })
    }
}

pub async fn top(args: TopArgs) -> anyhow::Result<()> {
    let every = parse_duration(&args.interval)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100))
        .ok_or_else(|| {
            CliError::usage(
                format!("--interval {}", args.interval),
                "not a duration of at least 100ms, such as 2s",
            )
        })?;
    let source = format!(
        "http://{}",
        crate::rm_client::admin_host_port(&args.http_addr)
    );
    let page = StatusPage {
        addr: &args.http_addr,
        token: args.token.get()?,
    };
    if args.once {
        let status = page.read().await?;
        out!("{}", render(&status, &HashMap::new(), &source, None));
        return Ok(());
    }
    let terminal = std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout();
    if terminal {
        write!(stdout, "{ENTER_SCREEN}")?;
    }
    let shown = show(&page, &source, &args.interval, every, terminal).await;
    if terminal {
        write!(stdout, "{LEAVE_SCREEN}")?;
        stdout.flush()?;
    }
    shown
}

/// Reads and redraws until Ctrl-C; a failed read is shown in place of the view, and tried
/// again at the next tick.
async fn show(
    page: &StatusPage<'_>,
    source: &str,
    interval: &str,
    every: Duration,
    terminal: bool,
) -> anyhow::Result<()> {
    // One listener for the whole run, raced with the wait and the read alike: a Ctrl-C
    // pressed at any moment ends the view.
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut previous = HashMap::new();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = async {
            ticks.tick().await;
            page.read().await
        };
        let frame = tokio::select! {
            read = next => match read {
                Ok(status) => {
                    let frame = render(&status, &previous, source, Some(interval));
                    previous = totals_of(&status);
                    frame
                }
                Err(e) => format!("cascade top — {source}\n\ncannot read the status: {}\n", cascade_core::error::describe(e.as_ref())),
            },
            _ = &mut ctrl_c => return Ok(()),
        };
        match terminal {
            true => out!("{CLEAR}{frame}"),
            false => outln!("{frame}"),
        }
        crate::stdout::flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str, totals: [u64; 4], history: Vec<Vec<Option<u64>>>) -> Row {
        Row {
            name: name.into(),
            queue: Some(format!("demo.{name}")),
            ready: 3,
            delayed: 1,
            leased: 2,
            enqueued_total: totals[0],
            completed_total: totals[1],
            retries_total: totals[2],
            dead_lettered: totals[3],
            handlers: Some(Handlers {
                running: 1,
                desired: 2,
            }),
            lateness_us: Some(2_500),
            history,
        }
    }

    fn status(at_ms: u64, stages: Vec<Row>) -> Status {
        Status {
            generated_at_ms: at_ms,
            pipelines: vec![PipelineRow {
                name: "demo".into(),
                stages,
            }],
            queues: vec![Row {
                name: "jobs".into(),
                ready: 7,
                enqueued_total: 10,
                ..Row::default()
            }],
            shards: vec![
                Shard {
                    shard: 0,
                    stats_age_ms: Some(900),
                    stale: false,
                },
                Shard {
                    shard: 1,
                    stats_age_ms: Some(12_000),
                    stale: true,
                },
            ],
            warnings: vec!["shard 1 is quiet".into()],
        }
    }

    #[test]
    fn rates_are_differences_over_time_and_none_after_a_reset() {
        let at = |ms, v| Totals {
            at_ms: ms,
            values: [v, v, 0, 0],
        };
        let some = Some;
        assert_eq!(
            rates(at(0, 10), at(2_000, 30)),
            [some(10.0), some(10.0), some(0.0), some(0.0)]
        );
        assert_eq!(rates(at(2_000, 10), at(2_000, 30)), [None; 4]);
        let reset = Totals {
            at_ms: 2_000,
            values: [5, 30, 0, 0],
        };
        assert_eq!(
            rates(at(0, 10), reset),
            [None, some(10.0), some(0.0), some(0.0)],
            "only the total that went down has no rate"
        );
    }

    #[test]
    fn the_first_view_takes_stage_rates_from_history_then_from_the_last_read() {
        // Two points 5 s apart: 50 more enqueued, 40 more done.
        let history = vec![
            [0, 0, 0, 0, 100, 80, 0, 0].map(Some).into(),
            [5_000, 0, 0, 0, 150, 120, 5, 0].map(Some).into(),
        ];
        let first = status(5_000, vec![stage("receive", [150, 120, 5, 0], history)]);
        let view = render(&first, &HashMap::new(), "http://h", Some("2s"));
        let line = view
            .lines()
            .find(|l| l.trim_start().starts_with("receive"))
            .expect("a stage line");
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "receive", "3", "1", "2", "10.0", "8.0", "1.0", "0.0", "1/2", "2ms"
            ]
        );
        assert!(view.contains("jobs"), "{view}");
        assert!(view.contains("SHARDS  0 ok  1 STALE (12s)"), "{view}");
        assert!(view.contains("! shard 1 is quiet"), "{view}");

        let previous = totals_of(&first);
        let second = status(7_000, vec![stage("receive", [170, 140, 5, 2], Vec::new())]);
        let view = render(&second, &previous, "http://h", Some("2s"));
        let line = view
            .lines()
            .find(|l| l.trim_start().starts_with("receive"))
            .expect("a stage line");
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[4..8], ["10.0", "10.0", "0.0", "1.0"]);
        let jobs = view
            .lines()
            .find(|l| l.trim_start().starts_with("jobs"))
            .expect("a queue line");
        assert!(jobs.contains("0.0"), "{jobs}");
    }
}
