//! What a store's data costs on disk, for `docs/benchmarks.md`.
//!
//! `cargo run --release -p cascade-store --example store_footprint -- STORE_DIR` reads every
//! entry of a stopped shard's store (`<data.dir>/dispatcher-<n>` or `timer-<n>`) and prints,
//! per keyspace, how many entries it holds and their average key and value sizes, beside
//! sled's file size: the bytes the layout asks for against the bytes on disk. It reads sled
//! as it is (the log, which the next open would replay, is not read) and counts sled's `db`
//! file, not its snapshot.
//!
//! `... --example store_footprint -- --sled ENTRIES VALUE_BYTES` writes ENTRIES keys of 37
//! bytes with random values of VALUE_BYTES into a new sled tree in a scratch directory, one
//! insert at a time in key order as a checkpoint does, and prints sled's file size per entry:
//! its cost of an entry of a given size, whatever the layout above it.

use std::collections::BTreeMap;
use std::path::Path;

type BoxError = Box<dyn std::error::Error>;

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, entries, value_bytes] if flag == "--sled" => {
            sled_cost(entries.parse()?, value_bytes.parse()?)
        }
        [dir] => keyspaces(Path::new(dir)),
        _ => Err("usage: store_footprint STORE_DIR | --sled ENTRIES VALUE_BYTES".into()),
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
    let file = std::fs::metadata(state.join("db"))?.len();
    println!(
        "keys and values: {total} bytes; sled's file: {file} bytes ({:.2}x)",
        file as f64 / total as f64
    );
    Ok(())
}

fn sled_cost(entries: u64, value_bytes: usize) -> Result<(), BoxError> {
    let scratch = tempfile::tempdir()?;
    let db = sled::Config::new()
        .path(scratch.path())
        .flush_every_ms(None)
        .open()?;
    let mut random = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    for n in 0..entries {
        // The shape of an event key: a prefix byte, a queue ID, a sequence, an ID's tail.
        let mut key = vec![0x10; 9];
        key.extend_from_slice(&n.to_be_bytes());
        key.extend_from_slice(b"01M8D732XK9EP8BRF7TM");
        let value: Vec<u8> = (0..value_bytes).map(|_| next() as u8).collect();
        db.insert(key, value)?;
    }
    db.flush()?;
    drop(db);
    let file = std::fs::metadata(scratch.path().join("db"))?.len();
    let entry = 37 + value_bytes as u64;
    println!(
        "{entries} entries of {entry} bytes: sled's file {file} bytes, {:.0} per entry ({:.2}x)",
        file as f64 / entries as f64,
        file as f64 / (entries * entry) as f64
    );
    Ok(())
}
