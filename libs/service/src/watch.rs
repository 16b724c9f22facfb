//! Files that a process reloads while it runs (identities, certificates): read every
//! interval until shutdown, and handed over whenever any of them changed. A file that
//! cannot be read now (a Kubernetes Secret's symlink being swapped) is tried again at the
//! next interval, with one warning until it can be read again. Each change is an audit
//! line: what it changed, or why it was refused (the state in force then stays).

use std::time::Duration;

use cascade_security::FileSet;
use cascade_telemetry::audit;

use crate::Shutdown;

/// Reads `files` every `interval` until `shutdown`; when they changed since the last read
/// (the first read is the caller's: `files` has seen them once), `apply` takes their
/// contents and says what changed (`Ok`) or why they were refused (`Err`). The audit line
/// names `action` and the files.
pub async fn watch_files(
    mut files: FileSet,
    interval: Duration,
    shutdown: Shutdown,
    action: &'static str,
    mut apply: impl FnMut(&[Vec<u8>]) -> Result<String, String>,
) {
    let resource = files
        .paths()
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut unreadable = false;
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let contents = match files.changed() {
            Ok(Some(contents)) => contents,
            Ok(None) => continue,
            Err((path, e)) => {
                if !unreadable {
                    tracing::warn!(file = %path.display(), error = %e, action, "watch.unreadable: the state in force stays");
                }
                unreadable = true;
                continue;
            }
        };
        unreadable = false;
        let outcome = apply(&contents);
        if let Err(reason) = &outcome {
            tracing::error!(files = %resource, error = %reason, action, "watch.refused: the state in force stays");
        }
        let outcome = outcome.map_err(|reason| (tonic::Code::InvalidArgument, reason));
        audit::record("operator", "files", action, &resource, outcome);
    }
}
