//! The README's five-minute tour, run exactly as written: each of its `sh` blocks is a bash
//! script (`set -e`: every command must succeed) with the built `cascade` first on the `PATH`
//! and `CASCADE_ADDR` naming the gateway of a `cascade standalone` started with the example
//! settings — what the README's first command starts, on a free port instead of 7700.

use std::path::{Path, PathBuf};
use std::process::Command;

use cascade_e2e::process::binary;
use cascade_e2e::{Cluster, Mode};

const TOUR: &str = "## A five-minute tour";

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `sh` blocks between the tour's heading and the next `## ` heading.
fn tour_blocks(readme: &str) -> Vec<String> {
    let start = readme
        .find(TOUR)
        .unwrap_or_else(|| panic!("the README has no \"{TOUR}\""));
    let tour = &readme[start + TOUR.len()..];
    let tour = &tour[..tour.find("\n## ").unwrap_or(tour.len())];
    let mut blocks = Vec::new();
    let mut lines = tour.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "```sh" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(block.join("\n"));
        }
    }
    blocks
}

/// Runs one block; what it printed, or a failure naming the block and its output.
fn run_block(block: &str, cascade_dir: &Path, addr: &str, cwd: &Path) -> String {
    let path = format!(
        "{}:{}",
        cascade_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", block])
        .env("PATH", path)
        .env("CASCADE_ADDR", addr)
        .current_dir(cwd)
        .output()
        .expect("run bash");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the README's commands failed ({}):\n{block}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_tour_runs_as_written() {
    let readme = std::fs::read_to_string(repository().join("README.md")).expect("read README");
    let blocks = tour_blocks(&readme);
    assert!(blocks.len() >= 3, "the tour's sh blocks: {blocks:?}");
    let example = repository().join("deploy/config/cascade.toml");
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start_with(Mode::Standalone, Some(&example), &[])
    })
    .await
    .expect("start");
    let addr = format!("http://{}", cluster.grpc);
    let cascade = binary("cascade");
    let cascade_dir = cascade.parent().expect("a directory").to_owned();
    let cwd = tempfile::tempdir().expect("a directory to run in");

    let outputs = tokio::task::spawn_blocking({
        let cwd = cwd.path().to_owned();
        move || {
            blocks
                .iter()
                .map(|block| run_block(block, &cascade_dir, &addr, &cwd))
                .collect::<Vec<_>>()
        }
    })
    .await
    .expect("run the tour");

    // What the comments promise: the delayed event was acked, the template summed its
    // queues, the pipeline took the lines, and the emptied queue could be deleted.
    let (lease, template, pipeline) = (&outputs[0], &outputs[1], &outputs[2]);
    assert!(lease.contains("acked"), "the first block acked: {lease}");
    assert!(
        template.contains("hi alice"),
        "took inbox:alice's event: {template}"
    );
    assert!(
        pipeline.contains("enqueued 100 events") && pipeline.contains("deleted"),
        "the pipeline block: {pipeline}"
    );
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
