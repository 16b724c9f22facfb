//! `deploy/prometheus/cascade-alerts.yaml` is valid for Prometheus's own checker (`promtool`,
//! Debian's `prometheus` package, which `scripts/test.sh` installs), names only metrics that
//! docs/metrics.md documents, and holds exactly the alerts docs/operations.md explains.

use std::collections::BTreeSet;
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
        .filter(|name| !documented.contains(&format!("`{name}")))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics in {RULES} that docs/metrics.md does not document: {missing:?}"
    );
}

#[test]
fn every_alert_is_explained_in_operations() {
    let rules = repository_file(RULES);
    let operations = repository_file("docs/operations.md");
    let in_rules: BTreeSet<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(str::trim)
        .collect();
    let section = operations
        .split("\n## ")
        .find(|s| s.starts_with("Alerts"))
        .expect("docs/operations.md has an \"Alerts\" section");
    let explained: BTreeSet<&str> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    assert_eq!(
        in_rules, explained,
        "the alerts of {RULES} and the table in docs/operations.md differ"
    );
}
