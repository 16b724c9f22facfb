//! `docs/configuration.md` cannot drift from the settings structs: each of its sections lists
//! exactly the keys the structs have (no more, no fewer), and the default it gives each key is
//! the one the struct takes when the key is left out — `unset` for a key with no value by
//! default, `required` for one that must be given.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cascade_core::{HandlerKind, HandlerSpec, Pipeline, QueueName};
use cascade_service::Settings;
use cascade_stage_worker::StageWorkerConfig;
use serde_json::{Value, json};

/// Keys whose value is a choice of shapes (an enum), documented as one key.
const CHOICES: [&str; 1] = ["kind"];

fn doc() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The `| \`key\` | default | meaning |` rows of the `## ` section whose title starts with
/// `title`: key → default cell.
fn section_rows(doc: &str, title: &str) -> BTreeMap<String, String> {
    let start = doc
        .find(&format!("\n## {title}"))
        .unwrap_or_else(|| panic!("docs/configuration.md has no section \"## {title}…\""));
    let body = &doc[start + 4..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut rows = BTreeMap::new();
    for line in body.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert!(
            cells.len() >= 3,
            "a row needs key, default, meaning: {line}"
        );
        let key = cells[0].trim_matches('`').to_owned();
        let previous = rows.insert(key.clone(), cells[1].to_owned());
        assert!(previous.is_none(), "{title}: {key} is documented twice");
    }
    rows
}

/// Every leaf of `value` by dotted path (`[]` after an array of tables, whose first element
/// stands for all); empty maps and lists, nulls and [`CHOICES`] are leaves.
fn leaves(value: &Value, prefix: &str, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, inner) in map {
                let path = format!("{prefix}{key}");
                match CHOICES.contains(&key.as_str()) {
                    true => drop(out.insert(path, inner.clone())),
                    false => leaves(inner, &format!("{path}."), out),
                }
            }
        }
        Value::Array(items) if items.first().is_some_and(Value::is_object) => {
            let path = format!("{}[].", prefix.trim_end_matches('.'));
            leaves(&items[0], &path, out);
        }
        _ => drop(out.insert(prefix.trim_end_matches('.').to_owned(), value.clone())),
    }
}

/// How the doc writes a default: as in a TOML file, between backticks.
fn written(value: &Value) -> String {
    match value {
        Value::Null => "unset".to_owned(),
        other => format!("`{other}`"),
    }
}

/// Checks one section: `full` has every key set (its keys are the ones to document),
/// `required` is the least input that parses, `defaults` what that input parses to.
fn check(title: &str, full: Value, required: Value, defaults: Value) {
    let (mut all, mut given, mut parsed) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    leaves(&full, "", &mut all);
    leaves(&required, "", &mut given);
    leaves(&defaults, "", &mut parsed);
    let expected: BTreeMap<String, String> = all
        .keys()
        .map(|key| {
            let default = match (given.contains_key(key), parsed.get(key)) {
                (true, _) => "required".to_owned(),
                (false, Some(value)) => written(value),
                (false, None) => "unset".to_owned(),
            };
            (key.clone(), default)
        })
        .collect();
    let documented = section_rows(&doc(), title);
    let table: Vec<String> = expected
        .iter()
        .map(|(key, default)| format!("| `{key}` | {default} |"))
        .collect();
    assert_eq!(
        documented,
        expected,
        "docs/configuration.md, \"{title}\": keys or defaults differ from the settings; \
         the settings say:\n{}",
        table.join("\n")
    );
}

#[test]
fn the_cluster_settings_are_documented_with_their_defaults() {
    let mut defaults = serde_json::to_value(Settings::default()).expect("serialize");
    defaults
        .as_object_mut()
        .expect("a table")
        .remove("pipelines");
    check("Settings", defaults.clone(), json!({}), defaults);
}

#[test]
fn the_pipeline_keys_are_documented_with_their_defaults() {
    let required = json!({
        "name": "p",
        "stages": [{ "name": "s", "handler": { "kind": { "builtin": "noop" } } }],
    });
    let minimal: Pipeline = serde_json::from_value(required.clone()).expect("minimal pipeline");
    let mut full = minimal.clone();
    let stage = &mut full.stages[0];
    stage.next = Some("s".into());
    stage.queue.dead_letter_queue = Some(QueueName::parse("elsewhere").expect("a name"));
    let prefixed = |value: Value| json!({ "pipelines": [value] });
    check(
        "Pipelines",
        prefixed(serde_json::to_value(full).expect("serialize")),
        prefixed(required),
        prefixed(serde_json::to_value(minimal).expect("serialize")),
    );
}

#[test]
fn the_stage_worker_settings_are_documented_with_their_defaults() {
    let required = json!({ "handler": { "kind": { "builtin": "noop" } } });
    let minimal: StageWorkerConfig =
        serde_json::from_value(required.clone()).expect("minimal stage worker settings");
    let full = StageWorkerConfig {
        handler: Some(HandlerSpec {
            kind: HandlerKind::Builtin("noop".into()),
            concurrency: 1,
            timeout: Duration::from_secs(1),
        }),
        lease: Some(Duration::from_secs(1)),
        ..minimal.clone()
    };
    check(
        "The stage worker",
        serde_json::to_value(full).expect("serialize"),
        required,
        serde_json::to_value(minimal).expect("serialize"),
    );
}
