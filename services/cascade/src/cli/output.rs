//! How the client commands print: for a person, a record as aligned `name  value` lines and a
//! list as a table, durations like `1.5s` and times with how far away they are; with `--json`,
//! one JSON object per line with the same names, exact durations (`1500ms`, which every
//! duration flag accepts back) and RFC 3339 times.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use cascade_core::Timestamp;
use cascade_core::units::{format_duration, format_size};
use serde_json::{Map, Value as Json};

/// Longest cell of a table; a record shows its values whole.
const MAX_CELL_CHARS: usize = 48;

pub enum Value {
    Text(String),
    Count(u64),
    Flag(bool),
    Span(Duration),
    /// A size: `4MiB` for a person, the number of bytes in JSON.
    Bytes(u64),
    At(Timestamp),
    Map(BTreeMap<String, String>),
    Nothing,
}

/// One object: its fields in the order a person reads them.
pub type Record = Vec<(&'static str, Value)>;

#[derive(Clone, Copy)]
pub enum Format {
    Human,
    Json,
}

#[derive(Clone, Copy)]
pub struct Out {
    pub format: Format,
}

impl Out {
    pub fn record(&self, record: &Record) {
        match self.format {
            Format::Json => outln!("{}", json(record)),
            Format::Human => {
                let width = record.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
                for (name, value) in record {
                    outln!("{:width$}  {}", label(name), human(value));
                }
            }
        }
    }

    /// Several objects too wide for a table (events with their payloads): one record each,
    /// a blank line between, for a person.
    pub fn records(&self, records: &[Record], empty: &str) {
        match self.format {
            Format::Json => records.iter().for_each(|r| outln!("{}", json(r))),
            Format::Human if records.is_empty() => outln!("{empty}"),
            Format::Human => {
                for (i, record) in records.iter().enumerate() {
                    if i > 0 {
                        outln!();
                    }
                    self.record(record);
                }
            }
        }
    }

    pub fn is_json(&self) -> bool {
        matches!(self.format, Format::Json)
    }

    /// Several objects: a table for a person (or `empty` when there are none), a line each
    /// in JSON.
    pub fn table(&self, records: &[Record], empty: &str) {
        match self.format {
            Format::Json => records.iter().for_each(|r| outln!("{}", json(r))),
            Format::Human if records.is_empty() => outln!("{empty}"),
            Format::Human => out!("{}", table_text(records)),
        }
    }

    /// The outcome of an action: a sentence for a person, an object for a script.
    pub fn done(&self, sentence: String, record: Record) {
        match self.format {
            Format::Json => outln!("{}", json(&record)),
            Format::Human => outln!("{sentence}"),
        }
    }
}

fn label(name: &str) -> String {
    name.replace('_', " ")
}

fn json(record: &Record) -> Json {
    let mut object = Map::new();
    for (name, value) in record {
        let value = match value {
            Value::Text(text) => Json::from(text.as_str()),
            Value::Count(n) => Json::from(*n),
            Value::Flag(b) => Json::from(*b),
            Value::Span(d) => Json::from(format_duration(*d)),
            Value::Bytes(n) => Json::from(*n),
            Value::At(t) => Json::from(t.to_string()),
            Value::Map(map) => Json::from(Map::from_iter(
                map.iter().map(|(k, v)| (k.clone(), Json::from(v.as_str()))),
            )),
            Value::Nothing => Json::Null,
        };
        object.insert((*name).to_string(), value);
    }
    Json::Object(object)
}

fn human(value: &Value) -> String {
    match value {
        Value::Text(text) => text.clone(),
        Value::Count(n) => n.to_string(),
        Value::Flag(b) => if *b { "yes" } else { "no" }.to_string(),
        Value::Span(d) => human_duration(*d),
        Value::Bytes(n) => format_size(*n),
        Value::At(t) => human_time(*t, Timestamp::from_system_time(SystemTime::now())),
        Value::Map(map) if map.is_empty() => "-".to_string(),
        Value::Map(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Nothing => "-".to_string(),
    }
}

fn table_text(records: &[Record]) -> String {
    let header: Vec<String> = records[0]
        .iter()
        .map(|(name, _)| label(name).to_uppercase())
        .collect();
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| r.iter().map(|(_, v)| cell(&human(v))).collect())
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}", w = *w))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// One line, at most `MAX_CELL_CHARS` characters.
fn cell(text: &str) -> String {
    let line = text.replace(['\n', '\r', '\t'], " ");
    if line.chars().count() <= MAX_CELL_CHARS {
        return line;
    }
    let kept: String = line.chars().take(MAX_CELL_CHARS - 1).collect();
    format!("{kept}…")
}

/// `850ms`, `1.5s`, `2m30s`, `1h5m`, `3d2h`: what a person reads at a glance.
pub fn human_duration(d: Duration) -> String {
    let millis = d.as_millis();
    let secs = d.as_secs();
    match () {
        _ if d.is_zero() => "0s".to_string(),
        _ if millis == 0 => format!("{}us", d.as_micros()),
        _ if secs == 0 => format!("{millis}ms"),
        _ if secs < 60 => {
            let tenths = (millis + 50) / 100;
            match tenths % 10 {
                0 => format!("{}s", tenths / 10),
                t => format!("{}.{t}s", tenths / 10),
            }
        }
        _ if secs < 3600 => two_units(secs, 60, "m", "s"),
        _ if secs < 86_400 => two_units(secs / 60, 60, "h", "m"),
        _ => two_units(secs / 3600, 24, "d", "h"),
    }
}

fn two_units(value: u64, per: u64, big: &str, small: &str) -> String {
    match value % per {
        0 => format!("{}{big}", value / per),
        rest => format!("{}{big}{rest}{small}", value / per),
    }
}

/// `2026-11-25T10:00:00Z (in 9.8s)`: seconds are enough for a person, the distance says more.
fn human_time(at: Timestamp, now: Timestamp) -> String {
    let shown = humantime::format_rfc3339_seconds(at.to_system_time());
    if at >= now {
        format!("{shown} (in {})", human_duration(at.duration_since(now)))
    } else {
        format!("{shown} ({} ago)", human_duration(now.duration_since(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_micros(250), "250us"),
            (Duration::from_millis(850), "850ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_millis(9_960), "10s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(150), "2m30s"),
            (Duration::from_secs(300), "5m"),
            (Duration::from_secs(3900), "1h5m"),
            (Duration::from_secs(86_400 * 3 + 7200), "3d2h"),
        ];
        for (d, text) in cases {
            assert_eq!(human_duration(d), text, "{d:?}");
        }
    }

    #[test]
    fn times_say_how_far_away_they_are() {
        let now = Timestamp::parse_rfc3339("2026-11-25T10:00:00Z").unwrap();
        let later = now.saturating_add(Duration::from_millis(9_800));
        assert_eq!(human_time(later, now), "2026-11-25T10:00:09Z (in 9.8s)");
        assert_eq!(human_time(now, later), "2026-11-25T10:00:00Z (9.8s ago)");
    }

    #[test]
    fn a_table_aligns_its_columns_and_cuts_long_cells() {
        let rows = vec![
            vec![
                ("name", Value::Text("jobs".into())),
                ("max_attempts", Value::Count(5)),
            ],
            vec![
                ("name", Value::Text("x".repeat(60))),
                ("max_attempts", Value::Nothing),
            ],
        ];
        let text = table_text(&rows);
        let lines: Vec<&str> = text.lines().collect();
        let long = format!("{}…", "x".repeat(47));
        assert_eq!(lines[0], format!("{:48}  MAX ATTEMPTS", "NAME"));
        assert_eq!(lines[1], format!("{:48}  5", "jobs"));
        assert_eq!(lines[2], format!("{long}  -"));
    }

    #[test]
    fn json_keeps_exact_durations_and_nulls() {
        let record = vec![
            ("lease", Value::Span(Duration::from_millis(1500))),
            ("reason", Value::Nothing),
            ("attempts", Value::Count(2)),
        ];
        assert_eq!(
            json(&record).to_string(),
            r#"{"attempts":2,"lease":"1500ms","reason":null}"#
        );
    }
}
