//! `cascade data verify|repair|export|import`: offline tools for a stopped shard's store
//! directory (`<data.dir>/dispatcher-<n>` or `<data.dir>/timer-<n>`). A running shard holds
//! its store locked, so each of them fails on one with `could not acquire lock`.

use std::path::{Path, PathBuf};

use cascade_store::durable;

#[derive(clap::Subcommand)]
pub enum DataCommand {
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

pub fn run(command: DataCommand) -> anyhow::Result<()> {
    match command {
        DataCommand::Verify { dir } => verify(&dir),
        DataCommand::Repair { dir, force } => repair(&dir, force),
        DataCommand::Export { dir, file } => {
            let contents = durable::export(&dir, &file)?;
            println!(
                "exported {} to {}: {contents}",
                dir.display(),
                file.display()
            );
            Ok(())
        }
        DataCommand::Import { file, dir } => {
            let contents = durable::import(&file, &dir)?;
            println!(
                "imported {} into {}: {contents}",
                file.display(),
                dir.display()
            );
            Ok(())
        }
    }
}

fn verify(dir: &Path) -> anyhow::Result<()> {
    let report = durable::verify(dir)?;
    for note in &report.notes {
        println!("note: {note}");
    }
    for problem in &report.problems {
        println!("problem: {problem}");
    }
    println!(
        "{}: {} stored entries checked, {} problem(s)",
        dir.display(),
        report.entries_checked,
        report.problems.len()
    );
    if !report.is_healthy() {
        anyhow::bail!(
            "the store in {} is damaged; it will not be opened: `cascade data repair {}` keeps what can be read",
            dir.display(),
            dir.display()
        );
    }
    Ok(())
}

fn repair(dir: &Path, force: bool) -> anyhow::Result<()> {
    let Some(report) = durable::repair(dir, force)? else {
        println!("{}: healthy, nothing to repair", dir.display());
        return Ok(());
    };
    println!(
        "log: {} records replayed after the last checkpoint",
        report.log.records
    );
    if let Some(stopped) = &report.log.stopped {
        println!("log: stopped at {stopped}; the records after it are lost");
    }
    for dropped in &report.dropped {
        println!("dropped: {dropped}");
    }
    let unlisted = report.dropped_count - report.dropped.len() as u64;
    if unlisted > 0 {
        println!("dropped: … and {unlisted} more");
    }
    println!(
        "counts corrected in {} queue(s); {} delayed event(s) scheduled again",
        report.counts_corrected, report.schedules_queued
    );
    println!(
        "repaired {}: {}; the old store is kept in {} (remove it once the shard runs well)",
        dir.display(),
        report.contents,
        report.damaged.display()
    );
    Ok(())
}
