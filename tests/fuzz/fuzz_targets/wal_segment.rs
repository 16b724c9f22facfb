//! A log as recovery finds it after a crash. Two kinds of input, by the first byte's low bit:
//!
//! - **raw**: the rest is the only segment's bytes (after the segment's magic);
//! - **damaged**: the rest is a list of records (each a length byte and that many bytes)
//!   written through the log and synced, then damaged as two more bytes say: cut at an
//!   offset, or one byte flipped.
//!
//! Opening (which cuts a torn tail and refuses damage before good records) and replaying
//! must give records or an error, never panic; every record replayed must be the one
//! written with that LSN (damage is never read back as data); each must decode as a batch
//! or be refused as malformed.
#![no_main]

use std::path::Path;

use cascade_store::kv::Batch;
use cascade_store::wal::{Wal, WalOptions};
use libfuzzer_sys::fuzz_target;

/// The name of a segment whose first record is LSN 1, and the magic it starts with.
const SEGMENT: &str = "00000000000000000001.wal";
const MAGIC: &[u8] = b"CSCWAL01";
const OPTIONS: WalOptions = WalOptions {
    segment_bytes: 1 << 20,
};

fuzz_target!(|input: &[u8]| {
    let Some((&flags, body)) = input.split_first() else {
        return;
    };
    // In memory where the machine has it: files are most of the cost of an input.
    let dir = tempfile::Builder::new()
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a temporary directory");
    let written = if flags & 1 == 0 {
        let mut contents = MAGIC.to_vec();
        contents.extend_from_slice(body);
        std::fs::write(dir.path().join(SEGMENT), &contents).expect("write the segment");
        Vec::new()
    } else {
        write_then_damage(dir.path(), flags, body)
    };
    let Ok(wal) = Wal::open(dir.path(), OPTIONS, 0) else {
        return;
    };
    let Ok(records) = wal.read_after(0) else {
        return;
    };
    for record in records {
        let Ok((lsn, payload)) = record else {
            return;
        };
        if flags & 1 == 1 {
            let index = usize::try_from(lsn - 1).expect("a small LSN");
            assert_eq!(written.get(index), Some(&payload), "record {lsn} read back");
        }
        let _ = Batch::decode(&payload);
    }
});

/// Writes the records `body` lists through the log, syncs, and damages the segment: the
/// first two bytes give an offset (from the end), `flags` bit 1 whether to cut there or
/// flip the byte there. Returns the records written.
fn write_then_damage(dir: &Path, flags: u8, body: &[u8]) -> Vec<Vec<u8>> {
    let (offset, mut rest) = match body {
        [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
        _ => (0, body),
    };
    let mut written = Vec::new();
    while let Some((&len, after)) = rest.split_first() {
        let len = usize::from(len).min(after.len());
        written.push(after[..len].to_vec());
        rest = &after[len..];
    }
    let mut wal = Wal::open(dir, OPTIONS, 0).expect("open an empty log");
    for record in &written {
        wal.append(record).expect("append");
    }
    wal.sync().expect("sync");
    drop(wal);
    let path = dir.join(SEGMENT);
    let mut bytes = std::fs::read(&path).expect("read the segment");
    if let Some(at) = bytes.len().checked_sub(1 + offset % bytes.len().max(1)) {
        if flags & 2 == 0 {
            bytes.truncate(at);
        } else {
            bytes[at] ^= 1 << (flags >> 5);
        }
    }
    std::fs::write(&path, &bytes).expect("damage the segment");
    written
}
