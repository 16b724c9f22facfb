//! `export` and `import`: a stopped store's contents as one file, and that file as a new
//! store, to back a shard up or move it to another disk, machine or volume (the library side
//! of `cascade data export|import`).
//!
//! The file holds what the next open of the store would see (sled with the log replayed),
//! entry by entry, every value checked on the way out: queues, pipelines, events and their
//! indexes, counters, dedup entries, hand-offs waiting in the outbox, the timer's schedules,
//! the cluster's identity. It is independent of how the source kept them (its checkpoints,
//! log segments and sled files). Layout, all numbers big-endian except the frame lengths:
//!
//! ```text
//! "cascade store export\n"
//! frame*:  len u32 LE | payload
//!   header: 0x02 | file version u8 (1) | store format u64
//!   entry:  0x01 | key (u32 length, bytes) | value (u32 length, bytes)
//!   end:    0x00 | entries u64
//! crc32c u32 LE of every byte after the first line
//! ```

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::codec::bytes::{Reader, Writer};
use crate::codec::{self, keys, records};
use crate::error::StoreError;
use crate::kv::{Batch, Flow, Kv, Replayed, checkpoint};

use super::new_store::{Contents, NewStore, TOOL_CACHE_BYTES, is_content};

const MAGIC: &[u8] = b"cascade store export\n";
const FILE_VERSION: u8 = 1;
const HEADER: u8 = 0x02;
const ENTRY: u8 = 0x01;
const END: u8 = 0x00;
/// A frame longer than this is damage, not data (values are bounded far below it).
const MAX_FRAME: u32 = 1 << 30;

/// Writes the contents of the stopped store in `dir` to `file` (written beside it and
/// renamed when complete). Refuses a store that fails its checks: repair it first. Changes
/// nothing in `dir`: its log is read, not opened for appends (which would cut a torn tail).
pub fn export(dir: &Path, file: &Path) -> Result<Contents, StoreError> {
    let (kv, format) = read_stopped(dir)?;
    let partial = with_suffix(file, ".partial");
    let written = write_export(dir, &kv, format, &partial);
    let contents = match written {
        Ok(contents) => contents,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, file).map_err(|e| StoreError::io("rename to", file, e))?;
    checkpoint::fsync_path(parent_of(file))?;
    Ok(contents)
}

/// The store in `dir` as its next open would see it, read without changing it, and its format.
fn read_stopped(dir: &Path) -> Result<(Kv, u64), StoreError> {
    let state_dir = super::tool_state_dir(dir)?;
    let mut kv = Kv::open(&state_dir, TOOL_CACHE_BYTES)?;
    let format = kv
        .get(&keys::meta("format"))?
        .and_then(|v| records::decode_u64(&v, "store format").ok());
    let Some(format) = format.filter(|f| keys::readable_format(*f)) else {
        return Err(StoreError::tool(
            dir,
            format!(
                "store format {}; this build reads formats up to {}",
                format.map_or("unknown".into(), |f| f.to_string()),
                keys::FORMAT_VERSION
            ),
        ));
    };
    let checkpoint_lsn = checkpoint::lsn(kv.db(), &state_dir)?;
    let wal_dir = dir.join("wal");
    let damaged = |why: String| {
        StoreError::tool(
            dir,
            format!("{why}; the store is damaged: `cascade data repair` it first"),
        )
    };
    crate::wal::verify(&wal_dir, checkpoint_lsn).map_err(|e| damaged(e.to_string()))?;
    let mut replayed = Replayed::default();
    let read = crate::wal::salvage(&wal_dir, checkpoint_lsn, |_, bytes| {
        let batch = Batch::decode(&bytes).map_err(|e| e.to_string())?;
        replayed.apply(batch);
        Ok(())
    })?;
    if let Some(stopped) = read.stopped {
        return Err(damaged(stopped));
    }
    kv.adopt(replayed);
    Ok((kv, format))
}

/// The header names the store's `format` as found, not this build's: a store this build never
/// opened holds only what its own format's builds read.
fn write_export(dir: &Path, kv: &Kv, format: u64, partial: &Path) -> Result<Contents, StoreError> {
    let out = File::create(partial).map_err(|e| StoreError::io("create", partial, e))?;
    let mut out = Framed::new(BufWriter::new(out), partial);
    out.magic()?;
    out.frame(
        &Writer::default()
            .u8(HEADER)
            .u8(FILE_VERSION)
            .u64(format)
            .finish(),
    )?;
    let mut contents = Contents::default();
    kv.scan(&[0x00], &[0xff], |key, value| {
        if !is_content(key) {
            return Ok(Flow::Continue);
        }
        codec::check_entry(key, value).map_err(|e| {
            StoreError::tool(
                dir,
                format!(
                    "{}; the store is damaged: `cascade data repair` it first",
                    super::verify::describe(key, &e)
                ),
            )
        })?;
        contents.count(key);
        let entry = Writer::with_capacity(key.len() + value.len() + 9)
            .u8(ENTRY)
            .bytes(key)
            .bytes(value)
            .finish();
        out.frame(&entry)?;
        Ok(Flow::Continue)
    })?;
    out.frame(&Writer::default().u8(END).u64(contents.entries).finish())?;
    let out = out.finish()?;
    out.sync_all()
        .map_err(|e| StoreError::io("fsync", partial, e))?;
    Ok(contents)
}

/// The directory that holds `path`, to fsync after a rename in it.
pub(super) fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Makes a new store in `dir` (which must not exist, or be an empty directory) from an
/// export. Nothing is left in `dir` unless the whole file checked out.
pub fn import(file: &Path, dir: &Path) -> Result<Contents, StoreError> {
    if let Ok(mut entries) = std::fs::read_dir(dir)
        && entries.next().is_some()
    {
        return Err(StoreError::tool(
            dir,
            "not empty: import into a new directory (a store is never merged into another)",
        ));
    }
    let input = File::open(file).map_err(|e| StoreError::io("open", file, e))?;
    let left = input
        .metadata()
        .map_err(|e| StoreError::io("stat", file, e))?
        .len();
    let mut input = Unframed {
        reader: BufReader::new(input),
        path: file,
        crc: 0,
        left,
    };
    input.magic()?;
    let header = input.frame()?;
    let mut r = Reader::new(&header, "export header");
    let bad = |reason: String| StoreError::tool(file, reason);
    if r.u8().ok() != Some(HEADER) {
        return Err(bad("not a Cascade store export: no header".into()));
    }
    let (version, format) = (r.u8().ok(), r.u64().ok());
    if version != Some(FILE_VERSION) {
        return Err(bad(format!(
            "export file version {}; this build reads version {FILE_VERSION}",
            version.map_or("unknown".into(), |v| v.to_string())
        )));
    }
    if !format.is_some_and(keys::readable_format) {
        return Err(bad(format!(
            "exported from store format {}; this build reads formats up to {}: import it with the build that exported it",
            format.map_or("unknown".into(), |v| v.to_string()),
            keys::FORMAT_VERSION
        )));
    }
    let mut store = NewStore::create(dir)?;
    loop {
        let frame = input.frame()?;
        let mut r = Reader::new(&frame, "export entry");
        let malformed = |e: codec::Malformed| bad(format!("damaged export: {e}"));
        match r.u8().map_err(malformed)? {
            ENTRY => {
                let key = r.bytes().map_err(malformed)?.to_vec();
                let value = r.bytes().map_err(malformed)?.to_vec();
                r.finish().map_err(malformed)?;
                codec::check_entry(&key, &value).map_err(|e| {
                    bad(format!(
                        "damaged export: {}",
                        super::verify::describe(&key, &e)
                    ))
                })?;
                store.put(key, value)?;
            }
            END => {
                let entries = r.u64().map_err(malformed)?;
                if entries != store.puts {
                    return Err(bad(format!(
                        "damaged export: it says {entries} entries, {} were read",
                        store.puts
                    )));
                }
                break;
            }
            other => return Err(bad(format!("damaged export: unknown frame {other:#04x}"))),
        }
    }
    input.check_crc()?;
    store.finish(None)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes frames and keeps the checksum of everything after the magic.
struct Framed<'a> {
    out: BufWriter<File>,
    path: &'a Path,
    crc: u32,
}

impl Framed<'_> {
    fn new(out: BufWriter<File>, path: &Path) -> Framed<'_> {
        Framed { out, path, crc: 0 }
    }

    fn write(&mut self, bytes: &[u8], checksummed: bool) -> Result<(), StoreError> {
        if checksummed {
            self.crc = crc32c::crc32c_append(self.crc, bytes);
        }
        self.out
            .write_all(bytes)
            .map_err(|e| StoreError::io("write", self.path, e))
    }

    fn magic(&mut self) -> Result<(), StoreError> {
        self.write(MAGIC, false)
    }

    fn frame(&mut self, payload: &[u8]) -> Result<(), StoreError> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|len| *len <= MAX_FRAME)
            .ok_or_else(|| StoreError::tool(self.path, "an entry too large to export"))?;
        self.write(&len.to_le_bytes(), true)?;
        self.write(payload, true)
    }

    fn finish(mut self) -> Result<File, StoreError> {
        let crc = self.crc.to_le_bytes();
        self.write(&crc, false)?;
        self.out
            .into_inner()
            .map_err(|e| StoreError::io("write", self.path, e.into_error()))
    }
}

/// Reads frames, checksumming them.
struct Unframed<'a> {
    reader: BufReader<File>,
    path: &'a Path,
    crc: u32,
    /// Bytes of the file not read yet: no frame claims more.
    left: u64,
}

impl Unframed<'_> {
    fn read(&mut self, len: usize, checksummed: bool) -> Result<Vec<u8>, StoreError> {
        if len as u64 > self.left {
            return Err(StoreError::tool(
                self.path,
                "damaged export: it ends early (cut short?)",
            ));
        }
        self.left -= len as u64;
        let mut buf = vec![0; len];
        self.reader
            .read_exact(&mut buf)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    StoreError::tool(self.path, "damaged export: it ends early (cut short?)")
                }
                _ => StoreError::io("read", self.path, e),
            })?;
        if checksummed {
            self.crc = crc32c::crc32c_append(self.crc, &buf);
        }
        Ok(buf)
    }

    fn magic(&mut self) -> Result<(), StoreError> {
        match self.read(MAGIC.len(), false) {
            Ok(magic) if magic == MAGIC => Ok(()),
            _ => Err(StoreError::tool(
                self.path,
                "not a Cascade store export (made by `cascade data export`)",
            )),
        }
    }

    fn frame(&mut self) -> Result<Vec<u8>, StoreError> {
        let len = self.read(4, true)?;
        let len = u32::from_le_bytes(len.try_into().expect("four bytes"));
        if len > MAX_FRAME {
            return Err(StoreError::tool(
                self.path,
                format!("damaged export: a frame of {len} bytes"),
            ));
        }
        self.read(len as usize, true)
    }

    fn check_crc(&mut self) -> Result<(), StoreError> {
        let expected = self.crc;
        let stored = self.read(4, false)?;
        let stored = u32::from_le_bytes(stored.try_into().expect("four bytes"));
        let mut rest = [0u8; 1];
        let trailing = self.reader.read(&mut rest).unwrap_or(0);
        if stored != expected || trailing != 0 {
            return Err(StoreError::tool(
                self.path,
                "damaged export: its checksum does not match",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
