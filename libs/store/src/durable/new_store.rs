//! Writing a whole store from a stream of entries, for the offline tools (`import`,
//! `repair`): the entries go into a new directory beside the target, which is checked like
//! any store (`verify`) and only then renamed into place. A failure leaves the target as it
//! was, and the new directory is removed.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::codec::{keys, records};
use crate::error::StoreError;
use crate::kv::{checkpoint, open_sled};

use super::{StoreOptions, recover, verify};

/// The tools stream; a small cache is enough.
pub(super) const TOOL_CACHE_BYTES: u64 = 16 << 20;

/// What a store holds, counted by kind of entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Contents {
    /// Queues and templates.
    pub queues: u64,
    pub pipelines: u64,
    pub events: u64,
    /// Hand-offs waiting in the outbox (to other shards, to the timer).
    pub hand_offs: u64,
    /// An activation timer's schedules.
    pub schedules: u64,
    /// Every entry, the above and indexes, counters, dedup entries and the rest.
    pub entries: u64,
}

impl Contents {
    pub(super) fn count(&mut self, key: &[u8]) {
        self.entries += 1;
        match key.first() {
            Some(&keys::QUEUE) => self.queues += 1,
            Some(&keys::PIPELINE) => self.pipelines += 1,
            Some(&keys::EVENT) => self.events += 1,
            Some(&keys::OUTBOX) => self.hand_offs += 1,
            Some(&keys::SCHEDULE) => self.schedules += 1,
            _ => {}
        }
    }
}

impl fmt::Display for Contents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} queues, {} pipelines, {} events, {} hand-offs waiting, {} schedules ({} entries)",
            self.queues, self.pipelines, self.events, self.hand_offs, self.schedules, self.entries
        )
    }
}

/// Whether an entry is part of what a store holds, rather than of how this copy of it is
/// kept: the log position of its last checkpoint and the format are the new store's own.
pub(super) fn is_content(key: &[u8]) -> bool {
    key != keys::meta(checkpoint::CHECKPOINT_LSN).as_slice()
        && key != keys::meta("format").as_slice()
}

/// A store being written beside its target.
pub(super) struct NewStore {
    building: PathBuf,
    target: PathBuf,
    /// `None` once closed by `finish`.
    db: Option<sled::Db>,
    /// Moved into place: nothing to clean up.
    done: bool,
    /// Traded places with the old store, which the building directory then holds.
    swapped: bool,
    /// Entries put so far (a key put twice counts twice).
    pub puts: u64,
}

impl NewStore {
    /// Starts a store that [`NewStore::finish`] moves to `target`. A directory left by an
    /// earlier attempt that failed is started over.
    pub fn create(target: &Path) -> Result<NewStore, StoreError> {
        let name = target
            .file_name()
            .ok_or_else(|| StoreError::tool(target, "not a directory name"))?;
        let mut building_name = name.to_owned();
        building_name.push(".building");
        let building = target.with_file_name(building_name);
        if building.join(REPLACED_MARKER).exists() {
            return Err(StoreError::tool(
                &building,
                "this holds the store an earlier repair replaced, left here by a crash before it \
                 was moved aside: move it elsewhere (or remove it), then run again",
            ));
        }
        // The target is the live store, whatever a crash before a swap left in it.
        let stale = target.join(REPLACED_MARKER);
        if stale.exists() {
            unmark(&stale, target);
        }
        if building.exists() {
            std::fs::remove_dir_all(&building)
                .map_err(|e| StoreError::io("remove an unfinished store", &building, e))?;
        }
        let state = building.join("state");
        std::fs::create_dir_all(&state).map_err(|e| StoreError::io("create", &state, e))?;
        let db = open_sled(&state, TOOL_CACHE_BYTES)?;
        db.insert(
            keys::meta("format"),
            records::encode_u64(keys::FORMAT_VERSION),
        )
        .map_err(|e| StoreError::sled("write the format", &state, e))?;
        Ok(NewStore {
            building,
            target: target.to_path_buf(),
            db: Some(db),
            done: false,
            swapped: false,
            puts: 0,
        })
    }

    /// Adds one entry (a later put of the same key wins). Entries that are not content
    /// ([`is_content`]) are skipped.
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), StoreError> {
        if !is_content(&key) {
            return Ok(());
        }
        self.puts += 1;
        let db = self.db.as_ref().expect("open until finish");
        db.insert(key, value)
            .map(drop)
            .map_err(|e| StoreError::sled("write", &self.building, e))
    }

    /// Makes the store durable, opens it once as a service would (which starts its log),
    /// checks it, and renames it to the target; an existing target is first renamed to
    /// `set_aside` (`None`: the target must not exist, or be an empty directory). Returns
    /// what the new store holds.
    pub fn finish(mut self, set_aside: Option<&Path>) -> Result<Contents, StoreError> {
        let db = self.db.take().expect("open until finish");
        db.flush()
            .map_err(|e| StoreError::sled("flush", &self.building, e))?;
        let mut contents = Contents::default();
        for key in db.iter().keys() {
            let key = key.map_err(|e| StoreError::sled("read", &self.building, e))?;
            if is_content(&key) {
                contents.count(&key);
            }
        }
        drop(db);
        checkpoint::fsync_tree(&self.building)?;
        let options = StoreOptions {
            cache_bytes: TOOL_CACHE_BYTES,
            ..StoreOptions::default()
        };
        drop(recover(&self.building, &options)?);
        let report = verify(&self.building)?;
        if !report.is_healthy() {
            return Err(StoreError::tool(
                &self.building,
                format!(
                    "the new store does not verify ({}); the target is unchanged",
                    report.problems.join("; ")
                ),
            ));
        }
        match set_aside {
            Some(aside) => self.swap_in(aside)?,
            None => std::fs::rename(&self.building, &self.target)
                .map_err(|e| StoreError::io("move the new store to", &self.target, e))?,
        }
        checkpoint::fsync_path(super::export::parent_of(&self.target))?;
        self.done = true;
        Ok(contents)
    }

    /// Puts the new store in the old one's place and the old one at `aside`. Where the file
    /// system can, the two trade places in one step, so that a crash never leaves the
    /// target without a store (a service would then start an empty one); the old store is
    /// marked first, so that if a crash leaves it where the new one was built, the next
    /// `create` finds it there instead of starting over on it. A failure before the swap
    /// leaves the target as it was, unmarked.
    fn swap_in(&mut self, aside: &Path) -> Result<(), StoreError> {
        if aside.exists() {
            return Err(StoreError::tool(aside, "is in the way of the old store"));
        }
        let marker = self.target.join(REPLACED_MARKER);
        mark(&marker, &self.target)?;
        match exchange(&self.building, &self.target) {
            Ok(()) => {
                // The building directory holds the old store now: never removed.
                self.swapped = true;
                checkpoint::fsync_path(super::export::parent_of(&self.target))?;
                std::fs::rename(&self.building, aside).map_err(|e| {
                    StoreError::io(
                        "the new store is in place; the old one, still beside it, could not be moved to",
                        aside,
                        e,
                    )
                })
            }
            // Not on this file system: two renames, with a moment without a store between.
            Err(e) if exchange_unsupported(e) => {
                let moved = std::fs::rename(&self.target, aside)
                    .map_err(|e| StoreError::io("move the old store aside to", aside, e))
                    .and_then(|()| {
                        std::fs::rename(&self.building, &self.target).map_err(|e| {
                            // Put the old store back rather than leave no store at all.
                            let _ = std::fs::rename(aside, &self.target);
                            StoreError::io("move the new store to", &self.target, e)
                        })
                    });
                if moved.is_err() {
                    unmark(&marker, &self.target);
                }
                moved
            }
            Err(e) => {
                unmark(&marker, &self.target);
                Err(StoreError::io(
                    "swap the new store with",
                    &self.target,
                    e.into(),
                ))
            }
        }
    }
}

/// Marks the store in `dir` as replaced, durably.
fn mark(marker: &Path, dir: &Path) -> Result<(), StoreError> {
    let written =
        std::fs::write(marker, b"").and_then(|()| std::fs::File::open(marker)?.sync_all());
    let synced = written
        .map_err(|e| StoreError::io("mark the old store", marker, e))
        .and_then(|()| checkpoint::fsync_path(dir));
    if synced.is_err() {
        unmark(marker, dir);
    }
    synced
}

/// Takes the mark off the store in `dir`, which stays the live one; as far as it can, since
/// this runs on the way out of a failure.
fn unmark(marker: &Path, dir: &Path) {
    let removed = match std::fs::remove_file(marker) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    if let Err(e) = removed
        .map_err(|e| StoreError::io("remove", marker, e))
        .and_then(|()| checkpoint::fsync_path(dir))
    {
        tracing::warn!(error = %e, "store.new_store.unmark");
    }
}

/// A file in a store that a repair has replaced: where it lies, the store is the old one.
pub(super) const REPLACED_MARKER: &str = "REPLACED";

fn exchange(a: &Path, b: &Path) -> Result<(), rustix::io::Errno> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE)
}

fn exchange_unsupported(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [Errno::INVAL, Errno::NOSYS, Errno::OPNOTSUPP].contains(&e)
}

impl Drop for NewStore {
    fn drop(&mut self) {
        if !self.done && !self.swapped {
            drop(self.db.take());
            if let Err(e) = std::fs::remove_dir_all(&self.building) {
                tracing::warn!(dir = %self.building.display(), error = %e, "store.new_store.cleanup");
            }
        }
    }
}
