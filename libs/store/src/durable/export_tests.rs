//! Export and import against real store directories: a round trip gives the same store, and
//! anything damaged or in the way is refused with the target left as it was.

use std::fs;

use super::super::test_store::{fill, jobs_counts, keyed, open};
use super::*;

#[test]
fn an_exported_store_imports_as_the_same_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    fill(&source);
    let file = dir.path().join("shard.export");
    let exported = export(&source, &file).expect("export");
    assert_eq!(
        (exported.queues, exported.pipelines, exported.events),
        (5, 1, 7),
        "jobs, inbox:*, inbox:alice and the stages' flow.a and flow.b; 6 events in jobs and 1 in inbox:alice: {exported}"
    );
    assert!(
        exported.hand_offs >= 1,
        "the delayed event's schedule: {exported}"
    );
    assert!(!file.with_extension("export.partial").exists());

    // An empty directory is a fine target.
    let copy = dir.path().join("copy");
    fs::create_dir(&copy).expect("mkdir");
    let imported = import(&file, &copy).expect("import");
    assert_eq!(imported, exported);
    assert_eq!(jobs_counts(&copy), jobs_counts(&source));
    assert_eq!(jobs_counts(&copy), [3, 1, 2]);

    // Entry for entry the same: the copy exports to the same bytes.
    let again = dir.path().join("copy.export");
    export(&copy, &again).expect("export the copy");
    assert_eq!(
        fs::read(&again).expect("read"),
        fs::read(&file).expect("read")
    );

    // And it works: the delayed event and the key's dedup entry came along.
    let (mut shard, _wal) = open(&copy);
    let taken = shard
        .take(test_store_at(5), &q("jobs"), 10, None)
        .expect("take");
    let mut payloads: Vec<_> = taken.iter().map(|l| l.event.payload.clone()).collect();
    payloads.sort();
    assert_eq!(
        payloads,
        [b"four".to_vec(), b"keyed".to_vec(), b"three".to_vec()]
    );
    assert_eq!(shard.list_pipelines().expect("pipelines").len(), 1);
    let again = shard.enqueue(test_store_at(5), keyed()).expect("enqueue");
    assert!(again.duplicate, "the idempotency key's entry came along");
}

#[test]
fn import_refuses_a_damaged_export_and_a_directory_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    fill(&source);
    let file = dir.path().join("shard.export");
    export(&source, &file).expect("export");
    let bytes = fs::read(&file).expect("read");

    let target = dir.path().join("target");
    let refused = |file: &Path| {
        let e = import(file, &target).expect_err("refused").to_string();
        assert!(!target.exists(), "nothing left behind: {e}");
        assert!(!dir.path().join("target.building").exists(), "{e}");
        e
    };
    let flipped = dir.path().join("flipped");
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x01;
    fs::write(&flipped, &damaged).expect("write");
    let e = refused(&flipped);
    assert!(e.contains("damaged export"), "{e}");

    let cut = dir.path().join("cut");
    fs::write(&cut, &bytes[..bytes.len() - 10]).expect("write");
    let e = refused(&cut);
    assert!(e.contains("damaged export"), "{e}");

    let e = refused(&source.join("state").join("conf"));
    assert!(e.contains("not a Cascade store export"), "{e}");

    fs::create_dir(&target).expect("mkdir");
    fs::write(target.join("keep.txt"), "mine").expect("write");
    let e = import(&file, &target).expect_err("refused").to_string();
    assert!(e.contains("not empty"), "{e}");
    assert_eq!(
        fs::read_to_string(target.join("keep.txt")).expect("kept"),
        "mine"
    );
}

#[test]
fn export_refuses_what_is_not_a_healthy_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = export(dir.path(), &dir.path().join("out"))
        .expect_err("no store")
        .to_string();
    assert!(e.contains("no store here"), "{e}");
    assert!(!dir.path().join("out").exists());
}

fn test_store_at(secs: u64) -> cascade_core::Timestamp {
    super::super::test_store::at(secs)
}

fn q(name: &str) -> cascade_core::QueueName {
    super::super::test_store::q(name)
}

/// An export names the format of the store it read: one this build never opened holds only
/// what the builds of that format read, and their import takes it.
#[test]
fn an_export_names_the_format_it_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    fill(&source);
    let earlier = keys::FORMAT_VERSION - 1;
    let db = crate::kv::open_sled(&source.join("state"), 1 << 20).expect("sled");
    db.insert(keys::meta("format"), records::encode_u64(earlier))
        .expect("mark");
    db.flush().expect("flush");
    drop(db);
    let file = dir.path().join("shard.export");
    export(&source, &file).expect("export");
    let bytes = fs::read(&file).expect("read");
    // The magic line, the header frame's length, its kind and file version, then the format.
    let at = MAGIC.len() + 4 + 2;
    let format = u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    assert_eq!(format, earlier);
    import(&file, &dir.path().join("copy")).expect("this build imports it");
}
