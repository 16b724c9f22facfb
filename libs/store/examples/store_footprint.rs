//! What a store's data costs on disk, for `docs/benchmarks.md`.
//!
//! `cargo run --release -p cascade-store --example store_footprint -- STORE_DIR` reads every
//! entry of a stopped shard's store (`<data.dir>/dispatcher-<n>` or `timer-<n>`) and prints,
//! per keyspace, how many entries it holds and their average key and value sizes, beside
//! sled's file size: the bytes the layout asks for against the bytes on disk. It reads sled
//! as it is (the log, which the next open would replay, is not read) and counts sled's `db`
//! file and the blob files beside it (nodes too large for a quarter of a segment), not its
//! snapshot.
//!
//! `... --example store_footprint -- --sled ENTRIES VALUE_BYTES [SEGMENT_BYTES]` writes ENTRIES
//! keys of 37 bytes with random values of VALUE_BYTES into a new sled tree in a scratch
//! directory (sled's segments of SEGMENT_BYTES, its default 512 KiB unless given), one insert
//! at a time in key order as a checkpoint does, and prints sled's file size per entry, what
//! it wrote beside it as blob files (a node too large for a quarter of a segment), and how
//! long the inserts and the flush took: its cost of an entry of a given size, whatever the
//! layout above it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, entries, value_bytes, segment @ ..] if flag == "--sled" && segment.len() <= 1 => {
            let segment = segment.first().map(|s| s.parse()).transpose()?;
            sled_cost(entries.parse()?, value_bytes.parse()?, segment)
        }
        [dir] => keyspaces(Path::new(dir)),
        _ => Err(
            "usage: store_footprint STORE_DIR | --sled ENTRIES VALUE_BYTES [SEGMENT_BYTES]".into(),
        ),
    }
}

fn keyspaces(dir: &Path) -> Result<(), BoxError> {
    let state = dir.join("state");
    // As the store opens it: with sled's own flushing, which may clean segments, off.
    let db = cascade_store::kv::open_sled(&state, 16 << 20)?;
    // Per key prefix: entries, key bytes, value bytes.
    let mut spaces: BTreeMap<u8, (u64, u64, u64)> = BTreeMap::new();
    for entry in db.iter() {
        let (key, value) = entry?;
        let space = spaces.entry(key.first().copied().unwrap_or(0)).or_default();
        space.0 += 1;
        space.1 += key.len() as u64;
        space.2 += value.len() as u64;
    }
    let mut total = 0;
    for (prefix, (entries, keys, values)) in &spaces {
        let per = |bytes: &u64| *bytes as f64 / *entries as f64;
        println!(
            "{prefix:#04x}: {entries} entries, key {:.1} B, value {:.1} B on average",
            per(keys),
            per(values)
        );
        total += keys + values;
    }
    let (file, blobs, blob_bytes) = sled_files(&state)?;
    println!(
        "keys and values: {total} bytes; sled's file: {file} bytes and {blobs} blob files of \
         {blob_bytes} ({:.2}x)",
        (file + blob_bytes) as f64 / total as f64
    );
    Ok(())
}

fn sled_cost(entries: u64, value_bytes: usize, segment: Option<usize>) -> Result<(), BoxError> {
    let scratch = tempfile::tempdir()?;
    let mut config = sled::Config::new()
        .path(scratch.path())
        .flush_every_ms(None);
    if let Some(segment) = segment {
        config = config.segment_size(segment);
    }
    let db = config.open()?;
    let mut random = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    let started = Instant::now();
    for n in 0..entries {
        // The shape of an event key: a prefix byte, a queue ID, a sequence, an ID's tail.
        let mut key = vec![0x10; 9];
        key.extend_from_slice(&n.to_be_bytes());
        key.extend_from_slice(b"01M8D732XK9EP8BRF7TM");
        let value: Vec<u8> = (0..value_bytes).map(|_| next() as u8).collect();
        db.insert(key, value)?;
    }
    db.flush()?;
    let took = started.elapsed();
    drop(db);
    let (file, blobs, blob_bytes) = sled_files(scratch.path())?;
    let entry = 37 + value_bytes as u64;
    let on_disk = file + blob_bytes;
    println!(
        "{entries} entries of {entry} bytes: sled's file {file} bytes and {blobs} blob files of \
         {blob_bytes}, {:.0} per entry ({:.2}x); inserts and flush {:.2} s, {:.1} µs per entry",
        on_disk as f64 / entries as f64,
        on_disk as f64 / (entries * entry) as f64,
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / entries as f64,
    );
    Ok(())
}

/// What sled keeps in `dir`: its `db` file's bytes, and the blob files beside it (nodes too
/// large for a quarter of a segment) with their bytes.
fn sled_files(dir: &Path) -> Result<(u64, u64, u64), BoxError> {
    let file = std::fs::metadata(dir.join("db"))?.len();
    let Ok(entries) = std::fs::read_dir(dir.join("blobs")) else {
        return Ok((file, 0, 0));
    };
    let (mut blobs, mut bytes) = (0, 0);
    for entry in entries {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            blobs += 1;
            bytes += meta.len();
        }
    }
    Ok((file, blobs, bytes))
}
