//! Files that a process reloads while it runs (identities, certificates): read every
//! interval until shutdown, and handed over whenever any of them changed. A file that
//! cannot be read now (a Kubernetes Secret's symlink being swapped) is tried again at the
//! next interval.

use std::time::Duration;

use cascade_security::FileSet;

use crate::Shutdown;

/// Calls `changed` with the files' contents each time one of them changed since the last
/// read (the first read is the caller's: `files` has seen them once).
pub async fn watch_files(
    mut files: FileSet,
    interval: Duration,
    shutdown: Shutdown,
    mut changed: impl FnMut(&FileSet, Vec<Vec<u8>>),
) {
    loop {
        tokio::select! {
            _ = shutdown.wait() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        match files.changed() {
            Ok(Some(contents)) => changed(&files, contents),
            Ok(None) => {}
            Err((path, e)) => {
                tracing::debug!(file = %path.display(), error = %e, "watch.unreadable");
            }
        }
    }
}
