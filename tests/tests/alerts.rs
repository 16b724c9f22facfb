//! `deploy/prometheus/cascade-alerts.yaml` is valid for Prometheus's own checker (`promtool`,
//! Debian's `prometheus` package, which `scripts/test.sh` installs), names only metrics that
//! docs/metrics.md documents, and holds exactly the alerts docs/operations.md explains.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

fn repository_file(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

const RULES: &str = "deploy/prometheus/cascade-alerts.yaml";

#[test]
fn promtool_accepts_the_alerting_rules() {
    let rules = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(RULES);
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): install it (Debian: apt-get install prometheus)")
        });
    assert!(
        out.status.success(),
        "promtool check rules {RULES}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every `cascade_…` name in the rules, without the `_bucket`/`_count`/`_sum` a histogram's
/// series add.
fn metrics_used(rules: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in rules.match_indices("cascade_") {
        let name: String = rules[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(&name);
        names.insert(base.to_owned());
    }
    names
}

#[test]
fn the_rules_use_documented_metrics_only() {
    let rules = repository_file(RULES);
    let documented = repository_file("docs/metrics.md");
    let used = metrics_used(&rules);
    assert!(used.len() >= 10, "the rules use {used:?}");
    let missing: Vec<_> = used
        .iter()
        .filter(|name| !documented.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics in {RULES} that docs/metrics.md does not document: {missing:?}"
    );
}

/// Whitespace runs made one space: the same expression however it is wrapped.
fn normalized(expression: &str) -> String {
    expression.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each alert of the rules file with its expression (inline, or a `|` block below it).
fn rule_expressions(rules: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut alert = None;
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if let Some(name) = trimmed.strip_prefix("- alert: ") {
            alert = Some(name.trim().to_owned());
        } else if let Some(expression) = trimmed.strip_prefix("expr: ") {
            let mut expression = expression.to_owned();
            if expression == "|" {
                let indent = line.len() - line.trim_start().len();
                expression.clear();
                while let Some(next) = lines.next_if(|l| l.len() - l.trim_start().len() > indent) {
                    expression.push_str(next);
                    expression.push(' ');
                }
            }
            let name = alert.take().expect("an expr belongs to an alert");
            found.insert(name, normalized(&expression));
        }
    }
    found
}

/// Each alert of the table in docs/operations.md with its expression (`\|` is a `|`).
fn table_expressions(operations: &str) -> BTreeMap<String, String> {
    let section = operations
        .split("\n## ")
        .find(|s| s.starts_with("Alerts"))
        .expect("docs/operations.md has an \"Alerts\" section");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<String> = line
                .replace("\\|", "\u{0}")
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').replace('\u{0}', "|"))
                .collect();
            (cells[1].clone(), normalized(&cells[2]))
        })
        .collect()
}

#[test]
fn every_alert_is_explained_in_operations_with_its_expression() {
    let rules = rule_expressions(&repository_file(RULES));
    let table = table_expressions(&repository_file("docs/operations.md"));
    assert!(rules.len() >= 10, "{rules:?}");
    assert_eq!(
        rules, table,
        "the alerts of {RULES} and the table in docs/operations.md differ"
    );
}
