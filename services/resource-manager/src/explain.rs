//! Decisions in words: each reason as a phrase, each decision as a line
//! (`priority 2: needs 6.3 handlers to drain 1,900 events in 60s at 5.0/s per handler;
//! capped by max 4`), and the table `cascade rm explain` prints.

use std::fmt;

use cascade_core::Timestamp;
use cascade_core::units::format_duration;

use crate::model::{Decision, Explanation, Inputs, Reason, ThroughputSource};
use crate::settings::ResourceManagerSettings;

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "priority {}: {}", self.priority, self.explanation)
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, reason) in self.reasons.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write_reason(f, reason, &self.inputs)?;
        }
        Ok(())
    }
}

fn write_reason(f: &mut fmt::Formatter<'_>, reason: &Reason, inputs: &Inputs) -> fmt::Result {
    match reason {
        Reason::NoStats => f.write_str("no stats yet: kept"),
        Reason::StaleStats { since } => write!(f, "no stats since {}: kept", clock(*since)),
        Reason::Need { .. } => write_need(f, inputs),
        Reason::RaisedToMin { min } => write!(f, "raised to min {min}"),
        Reason::CappedByMax { max } => write!(f, "capped by max {max}"),
        Reason::Woken => f.write_str("ready events and no handler: woken"),
        Reason::KeptWarm => f.write_str("1 kept until idle"),
        Reason::WithinTolerance { current } => write!(f, "within tolerance of {current}: kept"),
        Reason::UnmeasuredStep { to } => {
            write!(f, "throughput not measured yet: up to {to} for now")
        }
        Reason::ScaleDownHeld { to, until } => {
            write!(f, "scale-down to {to} held until {}", clock(*until))
        }
        Reason::ScaledDown { to } => write!(f, "need stayed lower: down to {to}"),
        Reason::Idle { since, min } => write!(f, "idle since {}: to min {min}", clock(*since)),
        Reason::BudgetCut {
            wanted,
            total,
            higher,
        } => write!(
            f,
            "budget short: wanted {wanted} of {total}, {higher} taken by higher priorities"
        ),
    }
}

/// `needs 6.3 handlers to drain 1,900 events in 60s at 5.0/s per handler (…)`.
fn write_need(f: &mut fmt::Formatter<'_>, inputs: &Inputs) -> fmt::Result {
    write!(
        f,
        "needs {:.1} handlers to drain {} events in {} at {:.1}/s per handler",
        inputs.need,
        count(inputs.work),
        format_duration(inputs.target_drain),
        inputs.throughput.per_handler
    )?;
    match inputs.throughput.source {
        ThroughputSource::Measured => {}
        ThroughputSource::Remembered => f.write_str(" (last measured)")?,
        ThroughputSource::LowerBound => f.write_str(" (at least: handlers were waiting)")?,
        ThroughputSource::Assumed => f.write_str(" (assumed)")?,
    }
    let expected = inputs.arrivals_per_sec * inputs.target_drain.as_secs_f64();
    let parts = [
        (inputs.ready as f64, "ready"),
        (inputs.leased as f64, "leased"),
        (inputs.due_soon, "due"),
        (expected, "arriving"),
    ];
    let shown: Vec<String> = parts
        .iter()
        .filter(|(n, _)| n.round() > 0.0)
        .map(|&(n, what)| format!("{} {what}", count(n)))
        .collect();
    if shown.len() > 1 {
        write!(f, " ({})", shown.join(", "))?;
    }
    Ok(())
}

/// The decisions as a table, one stage a line, with why; `decisions` as [`crate::Planner::step`]
/// returns them.
pub fn render(
    decisions: &[Decision],
    settings: &ResourceManagerSettings,
    now: Timestamp,
) -> String {
    let assigned: u64 = decisions.iter().map(|d| u64::from(d.handlers)).sum();
    let mut out = format!(
        "at {now}: {assigned} of {} handlers assigned, target drain {}\n",
        settings.total_handlers,
        format_duration(settings.target_drain)
    );
    let header = [
        "STAGE", "PRIO", "NOW", "NEW", "BATCH", "READY", "LEASED", "DUE", "IN/S", "EACH/S", "NEED",
    ];
    let rows: Vec<[String; 11]> = decisions.iter().map(row).collect();
    let mut widths = header.map(str::len);
    for cells in &rows {
        for (width, cell) in widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut lines: Vec<(Vec<String>, String)> = vec![(
        header.iter().map(|h| (*h).to_owned()).collect(),
        "WHY".to_owned(),
    )];
    lines.extend(
        rows.into_iter()
            .zip(decisions)
            .map(|(cells, d)| (cells.to_vec(), d.explanation.to_string())),
    );
    for (cells, why) in lines {
        for (column, (cell, width)) in cells.iter().zip(widths).enumerate() {
            // The stage name reads left to right; numbers line up on the right.
            let padded = if column == 0 {
                format!("{cell:<width$}  ")
            } else {
                format!("{cell:>width$}  ")
            };
            out.push_str(&padded);
        }
        out.push_str(&why);
        out.push('\n');
    }
    out
}

fn row(decision: &Decision) -> [String; 11] {
    let inputs = &decision.explanation.inputs;
    let each = match inputs.throughput.source {
        ThroughputSource::Measured | ThroughputSource::Remembered => {
            format!("{:.1}", inputs.throughput.per_handler)
        }
        ThroughputSource::LowerBound => format!(">{:.1}", inputs.throughput.per_handler),
        ThroughputSource::Assumed => format!("~{:.1}", inputs.throughput.per_handler),
    };
    [
        decision.stage.to_string(),
        decision.priority.to_string(),
        decision.current.to_string(),
        decision.handlers.to_string(),
        decision.batch.to_string(),
        count(inputs.ready as f64),
        count(inputs.leased as f64),
        count(inputs.due_soon),
        format!("{:.1}", inputs.arrivals_per_sec),
        each,
        format!("{:.1}", inputs.need),
    ]
}

/// A count rounded to a whole number, with thousands separated: `1,900`.
fn count(value: f64) -> String {
    let whole = if value.is_finite() && value > 0.0 {
        value.round() as u64
    } else {
        0
    };
    let digits = whole.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The time of day in UTC, `12:03:10`: reasons name moments of the last minutes.
fn clock(at: Timestamp) -> String {
    let seconds = at.as_micros() / 1_000_000 % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3_600,
        seconds / 60 % 60,
        seconds % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_clocks() {
        assert_eq!(count(0.0), "0");
        assert_eq!(count(999.4), "999");
        assert_eq!(count(1_900.0), "1,900");
        assert_eq!(count(1_234_567.0), "1,234,567");
        assert_eq!(count(f64::NAN), "0");
        let at = Timestamp::from_millis((86_400 * 3 + 12 * 3_600 + 3 * 60 + 10) * 1_000);
        assert_eq!(clock(at), "12:03:10");
    }
}
