//! `cascade <service> …` runs the binary `cascade-<service>` installed beside `cascade`
//! (`cascade ingest --config …` is `cascade-ingest --config …`), so a container image can
//! have `cascade` as its one entrypoint for every service and the client commands alike.

use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::cli::CliError;

/// The binaries `cascade` can hand over to.
const SERVICES: [&str; 5] = [
    "ingest",
    "dispatcher",
    "activation-timer",
    "stage-worker",
    "resource-manager",
];

/// Replaces this process with `cascade-<args[0]>` and the rest of `args`; returns only on
/// failure. A name that is no service is a mistyped command: bad usage (exit code 2).
pub fn exec(args: Vec<String>) -> Result<(), CliError> {
    let Some((name, rest)) = args.split_first() else {
        return Err(CliError::usage("cascade", "no command given"));
    };
    if !SERVICES.contains(&name.as_str()) {
        return Err(CliError::usage(
            format!("unknown command '{name}'"),
            format!(
                "cascade has no such command, and it is none of the services {}",
                SERVICES.join(", ")
            ),
        ));
    }
    let here = std::env::current_exe()
        .map_err(|e| CliError::message(format!("find the cascade binary's directory: {e}")))?;
    let binary = here.with_file_name(format!("cascade-{name}"));
    let err = Command::new(&binary).args(rest).exec();
    Err(CliError::message(format!(
        "run {}: {err}",
        binary.display()
    )))
}
