//! `deploy/config/cascade.toml` is the complete, commented example: it parses, it names every
//! key the settings have, and each value it shows is the default — except `pipelines`, which
//! holds the demo pipeline (valid, three stages).

use std::collections::BTreeSet;
use std::path::PathBuf;

use cascade_service::Settings;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/cascade.toml")
}

/// Dotted paths of `value`'s keys; `optional` gets those whose value is null (unset by
/// default: TOML cannot write them, so the example shows them commented out).
fn keys(
    value: &serde_json::Value,
    prefix: &str,
    out: &mut BTreeSet<String>,
    optional: &mut BTreeSet<String>,
) {
    if let serde_json::Value::Object(map) = value {
        for (k, v) in map {
            let path = format!("{prefix}{k}");
            keys(v, &format!("{path}."), out, optional);
            match v.is_null() {
                true => optional.insert(path),
                false => out.insert(path),
            };
        }
    }
}

#[test]
fn example_config_is_complete_and_shows_the_defaults() {
    let mut loaded =
        Settings::load_from(Some(&example()), &[], Vec::new()).expect("the example parses");
    assert_eq!(loaded.pipelines.len(), 1, "the demo pipeline");
    assert_eq!(loaded.pipelines[0].stages.len(), 3);
    loaded.pipelines.clear();
    let defaults = serde_json::to_value(Settings::default()).expect("serialize");
    assert_eq!(
        serde_json::to_value(&loaded).expect("serialize"),
        defaults,
        "every value in the example is the default"
    );
    let in_file: serde_json::Value = config::Config::builder()
        .add_source(config::File::from(example().as_path()))
        .build()
        .and_then(config::Config::try_deserialize)
        .expect("read the file as a tree");
    let (mut want, mut have, mut optional) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    keys(&defaults, "", &mut want, &mut optional);
    keys(&in_file, "", &mut have, &mut BTreeSet::new());
    let missing: Vec<_> = want.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "keys missing from the example: {missing:?}"
    );
    let text = std::fs::read_to_string(example()).expect("read the example");
    for key in &optional {
        let leaf = key.rsplit('.').next().unwrap_or(key);
        assert!(
            text.contains(&format!("# {leaf} = ")),
            "the example shows unset key {key} commented out"
        );
    }
}
