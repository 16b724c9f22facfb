//! The Grafana dashboard (`helm/cascade/files/cascade-dashboard.json`) parses, queries only the
//! metrics that docs/metrics.md documents, covers every metric of the system's
//! observability issue, and has its per-pipeline row; so it cannot drift from the metrics.

use std::collections::BTreeSet;

use serde_json::Value;

fn read(path: &str) -> String {
    let full = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {full}: {e}"))
}

/// The metric names in the table of docs/metrics.md.
fn documented() -> BTreeSet<String> {
    read("docs/metrics.md")
        .lines()
        .filter_map(|line| line.strip_prefix("| `cascade_"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("cascade_{name}"))
        .collect()
}

/// Every PromQL string of the dashboard: panel targets' `expr` and the variables' queries.
fn queries(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "definition", Value::String(q)) => found.push(q.clone()),
                    ("query", Value::String(q)) if q.contains("cascade_") => found.push(q.clone()),
                    _ => queries(v, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| queries(v, found)),
        _ => {}
    }
}

/// The `cascade_…` names a query uses.
fn names_in(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find("cascade_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// A series name's metric: a histogram's `_bucket`, `_count` and `_sum` belong to it.
fn metric_of(series: &str, documented: &BTreeSet<String>) -> Option<String> {
    if documented.contains(series) {
        return Some(series.to_owned());
    }
    ["_bucket", "_count", "_sum"]
        .iter()
        .filter_map(|suffix| series.strip_suffix(suffix))
        .find(|base| documented.contains(*base))
        .map(str::to_owned)
}

#[test]
fn dashboard_queries_only_documented_metrics_and_covers_them() {
    let dashboard: Value = serde_json::from_str(&read("helm/cascade/files/cascade-dashboard.json"))
        .expect("valid JSON");
    let documented = documented();
    assert!(
        documented.len() >= 10,
        "docs/metrics.md lists the metrics: {documented:?}"
    );
    let mut found = Vec::new();
    queries(&dashboard, &mut found);
    assert!(found.len() > 20, "the dashboard has its queries: {found:?}");
    let mut used = BTreeSet::new();
    for query in &found {
        let names = names_in(query);
        assert!(!names.is_empty(), "a query over no Cascade metric: {query}");
        for series in names {
            let metric = metric_of(&series, &documented).unwrap_or_else(|| {
                panic!("{series} is not documented in docs/metrics.md: {query}")
            });
            used.insert(metric);
        }
    }
    for &metric in cascade_telemetry::metrics::METRIC_NAMES {
        assert!(used.contains(metric), "the dashboard shows no {metric}");
    }
}

#[test]
fn dashboard_has_a_row_per_pipeline() {
    let dashboard: Value = serde_json::from_str(&read("helm/cascade/files/cascade-dashboard.json"))
        .expect("valid JSON");
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating variables");
    assert!(
        variables.iter().any(|v| v["name"] == "pipeline"),
        "a pipeline variable"
    );
    let panels = dashboard["panels"].as_array().expect("panels");
    let rows: Vec<&Value> = panels.iter().filter(|p| p["type"] == "row").collect();
    assert!(
        rows.iter().any(|r| r["repeat"] == "pipeline"),
        "a row repeated per pipeline"
    );
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let targets = panel["targets"]
            .as_array()
            .expect("every panel has targets");
        assert!(!targets.is_empty(), "{}", panel["title"]);
    }
    let mut ids: Vec<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "panel ids are unique");
}
