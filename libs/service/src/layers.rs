//! Loading a settings type in layers, lowest first: its serde defaults, a TOML file (or
//! JSON, for a name ending in `.json`: what templating tools such as Helm write exactly),
//! `<PREFIX>__SECTION__KEY` environment variables, then overrides (from command-line flags).
//! Both Cascade's settings tree and a stage worker's settings load this way.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::ServiceError;

/// The environment prefixes of settings trees whose variables also start with another
/// tree's prefix: a stage worker's (`CASCADE__STAGE_WORKER__TOKEN`) is not Cascade's key
/// `stage_worker.token`, and one set in the same shell must not stop Cascade's start.
const NESTED_TREES: [&str; 1] = ["CASCADE__STAGE_WORKER__"];

fn of_a_tree_within(key: &str, prefix: &str) -> bool {
    NESTED_TREES
        .iter()
        .any(|nested| nested.len() > prefix.len() && key.starts_with(nested))
}

/// `T`'s defaults < `file` < the variables of `env` under `env_prefix` (`CASCADE` reads
/// `CASCADE__STORE__CACHE` as `store.cache`) < `overrides` (dotted keys, e.g.
/// `("data.dir", "/var/lib/cascade")`). Not validated: that is `T`'s own step.
///
/// Errors: a missing or unreadable file, or one with a bad value, is `SettingsFile`; a bad
/// override is `Setting` naming the key; a bad environment variable is `Setting` saying the
/// value came from the environment (even with a file, which alone reads well then).
pub fn load_layers<T: DeserializeOwned>(
    file: Option<&Path>,
    env_prefix: &str,
    overrides: &[(&str, String)],
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<T, ServiceError> {
    if let Some(path) = file
        && !path.is_file()
    {
        return Err(ServiceError::SettingsFile {
            path: path.to_path_buf(),
            reason: "no such file".into(),
        });
    }
    let prefix = format!("{env_prefix}__");
    let env: config::Map<String, String> = env
        .into_iter()
        .filter(|(key, _)| key.starts_with(&prefix) && !of_a_tree_within(key, &prefix))
        .collect();
    match build(file, env_prefix, overrides, env) {
        Ok(built) => built
            .try_deserialize()
            .map_err(|e| blame::<T>(file, e, env_prefix)),
        Err(Layered::Override(key, e)) => Err(ServiceError::setting(key, e.to_string())),
        Err(Layered::Config(e)) => Err(blame::<T>(file, e, env_prefix)),
    }
}

enum Layered<'a> {
    /// A flag's value that is no setting's.
    Override(&'a str, config::ConfigError),
    Config(config::ConfigError),
}

fn build<'a>(
    file: Option<&Path>,
    env_prefix: &str,
    overrides: &[(&'a str, String)],
    env: config::Map<String, String>,
) -> Result<config::Config, Layered<'a>> {
    let mut builder = config::Config::builder();
    if let Some(path) = file {
        let format = match path.extension().is_some_and(|e| e == "json") {
            true => config::FileFormat::Json,
            false => config::FileFormat::Toml,
        };
        builder = builder.add_source(config::File::from(path).format(format).required(true));
    }
    // Values stay text, each read as its field's type: parsing them first would rewrite a
    // secret that looks like a number or a boolean (`0123` became `123`, `TRUE` `true`).
    builder = builder.add_source(
        config::Environment::with_prefix(env_prefix)
            .prefix_separator("__")
            .separator("__")
            .source(Some(env)),
    );
    for (key, value) in overrides {
        builder = builder
            .set_override(*key, value.as_str())
            .map_err(|e| Layered::Override(key, e))?;
    }
    builder.build().map_err(Layered::Config)
}

/// Where a refused value came from: the file, when the file alone does not read (with what
/// is wrong in it, and what is wrong with the environment over it if that differs); else an
/// environment variable (or a flag) gave it, which the message says rather than sending the
/// reader to a file that is fine.
fn blame<T: DeserializeOwned>(
    file: Option<&Path>,
    error: config::ConfigError,
    env_prefix: &str,
) -> ServiceError {
    let file_alone = |path: &Path| match build(Some(path), env_prefix, &[], config::Map::new()) {
        Ok(built) => built.try_deserialize::<T>().err(),
        Err(Layered::Config(e) | Layered::Override(_, e)) => Some(e),
    };
    match file.and_then(|path| Some((path, file_alone(path)?))) {
        // The file alone may lack what the environment gives: then both are said.
        Some((path, wrong)) => ServiceError::SettingsFile {
            path: path.to_path_buf(),
            reason: match (wrong.to_string(), error.to_string()) {
                (alone, together) if alone == together => alone,
                (alone, together) => format!(
                    "{alone}; and with the environment ({env_prefix}__… variables) and flags over it: {together}"
                ),
            },
        },
        None => ServiceError::setting(
            format!("from the environment ({env_prefix}__… variables) or flags"),
            error.to_string(),
        ),
    }
}
