//! `cascade data verify|repair|export|import`: offline tools for a stopped shard's store
//! directory (`<data.dir>/dispatcher-<n>` or `<data.dir>/timer-<n>`). A running shard holds
//! its store locked, so each of them fails on one with `could not acquire lock`. Output is
//! for a person, or one JSON object with `--json`.

use std::path::{Path, PathBuf};

use cascade_store::durable;
use serde::Serialize;

#[derive(clap::Args)]
pub struct DataArgs {
    #[command(subcommand)]
    command: DataCommand,
    /// Print one JSON object (the report, with every number) instead of text.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(clap::Subcommand)]
enum DataCommand {
    /// Check a store (log frames and continuity, every stored value) without changing it.
    Verify { dir: PathBuf },
    /// Rebuild a damaged store from what can still be read: the log up to its first
    /// unreadable record, every value that passes its checks; indexes and counts are made
    /// again and delayed events scheduled again. The damaged store is kept beside it as
    /// DIR.damaged-<unix seconds>. A healthy store is left alone unless --force.
    Repair {
        dir: PathBuf,
        /// Rebuild a healthy store too: on a dispatcher's store after its timer's store
        /// lost records, so that every delayed event is scheduled again.
        #[arg(long)]
        force: bool,
    },
    /// Write a stopped store's contents (queues, pipelines, events, dedup entries, hand-offs,
    /// schedules) to FILE, for a backup or to move the shard to another disk or machine.
    Export { dir: PathBuf, file: PathBuf },
    /// Make a new store in DIR (absent or empty) from an export; start the shard's service
    /// on DIR with the same cluster settings.
    Import { file: PathBuf, dir: PathBuf },
}

/// What an export or import moved.
#[derive(Serialize)]
struct Moved<'a> {
    from: &'a Path,
    to: &'a Path,
    #[serde(flatten)]
    contents: durable::Contents,
}

/// A store that a running shard holds locked.
const LOCKED: &str = "could not acquire lock";

pub fn run(args: DataArgs) -> anyhow::Result<()> {
    let store = args.command.store_dir().to_path_buf();
    run_command(args).map_err(|e| {
        // sled's own words for it carry the OS error's debug form: said plainly instead.
        match cascade_core::error::describe(e.as_ref()).contains(LOCKED) {
            true => anyhow::anyhow!(
                "{}: a running service has the store open (sled {LOCKED} on it): stop its shard's service first",
                store.display()
            ),
            false => e,
        }
    })
}

impl DataCommand {
    /// The store directory the command reads or writes.
    fn store_dir(&self) -> &Path {
        match self {
            DataCommand::Verify { dir }
            | DataCommand::Repair { dir, .. }
            | DataCommand::Export { dir, .. }
            | DataCommand::Import { dir, .. } => dir,
        }
    }
}

fn run_command(args: DataArgs) -> anyhow::Result<()> {
    let json = args.json;
    match args.command {
        DataCommand::Verify { dir } => verify(&dir, json),
        DataCommand::Repair { dir, force } => repair(&dir, force, json),
        DataCommand::Export { dir, file } => {
            let contents = durable::export(&dir, &file)?;
            let text = format!(
                "exported {} to {}: {contents}",
                dir.display(),
                file.display()
            );
            print(
                json,
                &text,
                &Moved {
                    from: &dir,
                    to: &file,
                    contents,
                },
            );
            Ok(())
        }
        DataCommand::Import { file, dir } => {
            let contents = durable::import(&file, &dir)?;
            let text = format!(
                "imported {} into {}: {contents}",
                file.display(),
                dir.display()
            );
            print(
                json,
                &text,
                &Moved {
                    from: &file,
                    to: &dir,
                    contents,
                },
            );
            Ok(())
        }
    }
}

/// `text` for a person, or `report` as one JSON line.
fn print(json: bool, text: &str, report: &impl Serialize) {
    match json {
        true => outln!(
            "{}",
            serde_json::to_string(report).expect("a report serializes")
        ),
        false => outln!("{text}"),
    }
}

fn verify(dir: &Path, json: bool) -> anyhow::Result<()> {
    let report = durable::verify(dir)?;
    let mut text = String::new();
    for note in &report.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    for problem in &report.problems {
        text.push_str(&format!("problem: {problem}\n"));
    }
    text.push_str(&format!(
        "{}: {} stored entries checked, {} problem(s)",
        dir.display(),
        report.entries_checked,
        report.problems.len()
    ));
    print(json, &text, &report);
    if !report.is_healthy() {
        anyhow::bail!(
            "the store in {} is damaged; it will not be opened: `cascade data repair {}` keeps what can be read",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

fn repair(dir: &Path, force: bool, json: bool) -> anyhow::Result<()> {
    let Some(report) = durable::repair(dir, force)? else {
        let text = format!("{}: healthy, nothing to repair", dir.display());
        print(
            json,
            &text,
            &serde_json::json!({ "dir": dir, "repaired": false }),
        );
        return Ok(());
    };
    let mut text = format!(
        "log: {} records replayed after the last checkpoint\n",
        report.log.records
    );
    if let Some(stopped) = &report.log.stopped {
        text.push_str(&format!(
            "log: stopped at {stopped}; the records after it are lost\n"
        ));
    }
    for dropped in &report.dropped {
        text.push_str(&format!("dropped: {dropped}\n"));
    }
    let unlisted = report.dropped_count - report.dropped.len() as u64;
    if unlisted > 0 {
        text.push_str(&format!("dropped: … and {unlisted} more\n"));
    }
    text.push_str(&format!(
        "counts corrected in {} queue(s); {} delayed event(s) scheduled again\n",
        report.counts_corrected, report.schedules_queued
    ));
    text.push_str(&format!(
        "repaired {}: {}; the old store is kept in {} (remove it once the shard runs well)",
        dir.display(),
        report.contents,
        report.damaged.display()
    ));
    print(json, &text, &report);
    Ok(())
}
