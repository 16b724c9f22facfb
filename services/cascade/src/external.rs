//! `cascade <service> …` runs the binary `cascade-<service>` installed beside `cascade`
//! (`cascade ingest --config …` is `cascade-ingest --config …`), so a container image can
//! have `cascade` as its one entrypoint for every service and the client commands alike.

use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::Context;

/// The binaries `cascade` can hand over to.
const SERVICES: [&str; 5] = [
    "ingest",
    "dispatcher",
    "activation-timer",
    "stage-worker",
    "resource-manager",
];

/// Replaces this process with `cascade-<args[0]>` and the rest of `args`; returns only on
/// failure.
pub fn exec(args: Vec<String>) -> anyhow::Result<()> {
    let (name, rest) = args.split_first().context("no subcommand given")?;
    if !SERVICES.contains(&name.as_str()) {
        anyhow::bail!(
            "unknown command '{name}': run `cascade --help` for the commands, or one of the services: {}",
            SERVICES.join(", ")
        );
    }
    let here = std::env::current_exe().context("find the cascade binary's directory")?;
    let binary = here.with_file_name(format!("cascade-{name}"));
    let err = Command::new(&binary).args(rest).exec();
    Err(err).with_context(|| format!("run {}", binary.display()))
}
