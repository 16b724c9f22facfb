//! `cascade data verify DIR`: what is wrong with a store, without changing it.

use std::path::Path;

pub fn run(dir: &Path) -> anyhow::Result<()> {
    let report = cascade_store::durable::verify(dir)?;
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
            "the store in {} is damaged; it will not be opened",
            dir.display()
        );
    }
    Ok(())
}
