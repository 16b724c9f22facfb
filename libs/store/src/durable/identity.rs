//! The cluster a store belongs to, and which of its stores it is. Its name and shard count,
//! and the store's own name (`dispatcher-0`), are written when the store is created and
//! compared at every open after, so a changed `cluster.shards`, a volume mounted under
//! another cluster, or two shards' directories swapped (a restore under the wrong name)
//! stops the shard with a message instead of stranding the queues it holds. A store written
//! before a record existed gets it at its next open: nothing older can be checked.

use crate::codec::{keys, records};
use crate::durable::ClusterIdentity;
use crate::error::StoreError;
use crate::kv::Kv;

/// Records `expected` in a store that has no record yet; refuses a store recorded with
/// another name or shard count, or as another store.
pub(super) fn check(kv: &Kv, expected: &ClusterIdentity) -> Result<(), StoreError> {
    check_cluster(kv, expected)?;
    match &expected.store {
        Some(name) => check_store(kv, name),
        None => Ok(()),
    }
}

fn check_store(kv: &Kv, expected: &str) -> Result<(), StoreError> {
    let record = || records::encode_store_name(expected);
    let Some(stored) = recorded(kv, "store", record)? else {
        return Ok(());
    };
    let found = records::decode_store_name(&stored)
        .map_err(|e| StoreError::corrupt(kv.dir(), e.to_string()))?;
    match found == expected {
        true => Ok(()),
        false => Err(StoreError::WrongStore {
            path: kv.dir().to_path_buf(),
            found,
            expected: expected.to_owned(),
        }),
    }
}

fn check_cluster(kv: &Kv, expected: &ClusterIdentity) -> Result<(), StoreError> {
    let record = || records::encode_cluster(&expected.name, expected.shards);
    let Some(stored) = recorded(kv, "cluster", record)? else {
        return Ok(());
    };
    let (found_name, found_shards) = records::decode_cluster(&stored)
        .map_err(|e| StoreError::corrupt(kv.dir(), e.to_string()))?;
    if found_name == expected.name && found_shards == expected.shards {
        return Ok(());
    }
    Err(StoreError::WrongCluster {
        path: kv.dir().to_path_buf(),
        found_name,
        found_shards,
        expected_name: expected.name.clone(),
        expected_shards: expected.shards,
    })
}

/// The record `meta/<name>` as stored; `None` once `record()` has been written in its
/// place, when the store had none.
fn recorded(
    kv: &Kv,
    name: &str,
    record: impl FnOnce() -> Vec<u8>,
) -> Result<Option<sled::IVec>, StoreError> {
    let key = keys::meta(name);
    let stored = kv
        .db()
        .get(&key)
        .map_err(|e| StoreError::sled("read an identity record", kv.dir(), e))?;
    match stored {
        Some(stored) => Ok(Some(stored)),
        None => super::write_meta(kv, key, record(), "write an identity record").map(|()| None),
    }
}

#[cfg(test)]
mod tests {
    use crate::durable::{ClusterIdentity, StoreOptions, recover};
    use crate::error::StoreError;

    fn options(name: &str, shards: u32) -> StoreOptions {
        as_store(name, shards, None)
    }

    fn as_store(name: &str, shards: u32, store: Option<&str>) -> StoreOptions {
        StoreOptions {
            cluster: Some(ClusterIdentity {
                name: name.into(),
                shards,
                store: store.map(str::to_owned),
            }),
            ..StoreOptions::default()
        }
    }

    /// Two shards' directories swapped, or a timer's store restored as a dispatcher's.
    #[test]
    fn a_store_opens_only_as_the_store_it_was_created_as() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(recover(dir.path(), &as_store("orders", 2, Some("dispatcher-0"))).expect("create"));
        drop(recover(dir.path(), &as_store("orders", 2, Some("dispatcher-0"))).expect("reopens"));
        for other in ["dispatcher-1", "timer-0"] {
            let err = recover(dir.path(), &as_store("orders", 2, Some(other)))
                .err()
                .expect("refused");
            let text = err.to_string();
            assert!(
                matches!(err, StoreError::WrongStore { .. })
                    && text.contains("is the store of dispatcher-0")
                    && text.contains(&format!("opened it as {other}")),
                "{text}"
            );
        }
        let report = crate::durable::verify(dir.path()).expect("verify");
        assert!(report.is_healthy(), "{:?}", report.problems);
        drop(recover(dir.path(), &options("orders", 2)).expect("a tool checks no name"));
    }

    #[test]
    fn a_store_without_its_name_gets_it_at_its_next_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(recover(dir.path(), &options("orders", 2)).expect("create unnamed"));
        drop(recover(dir.path(), &as_store("orders", 2, Some("timer-1"))).expect("adopted"));
        let err = recover(dir.path(), &as_store("orders", 2, Some("timer-0")))
            .err()
            .expect("recorded now");
        assert!(matches!(err, StoreError::WrongStore { .. }), "{err}");
    }

    /// The identity record is part of every store the services open: `cascade data verify`
    /// must read it as what it is, not report it as damage.
    #[test]
    fn a_store_with_its_cluster_recorded_verifies_healthy() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(recover(dir.path(), &options("orders", 4)).expect("create"));
        let report = crate::durable::verify(dir.path()).expect("verify");
        assert!(report.is_healthy(), "{:?}", report.problems);
    }

    #[test]
    fn a_store_opens_only_under_the_cluster_it_was_created_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(recover(dir.path(), &options("orders", 4)).expect("create"));
        drop(recover(dir.path(), &options("orders", 4)).expect("same cluster reopens"));
        for (name, shards) in [("orders", 8), ("billing", 4)] {
            let err = recover(dir.path(), &options(name, shards))
                .err()
                .expect("refused");
            assert!(
                matches!(err, StoreError::WrongCluster { .. }),
                "unexpected error {err}"
            );
            let text = err.to_string();
            assert!(
                text.contains("cluster 'orders' with 4 shards")
                    && text.contains(&format!("cluster '{name}' with {shards} shards")),
                "{text}"
            );
        }
        drop(recover(dir.path(), &options("orders", 4)).expect("still opens after refusals"));
    }

    #[test]
    fn a_store_without_a_record_gets_one_at_its_next_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(recover(dir.path(), &StoreOptions::default()).expect("create unchecked"));
        drop(recover(dir.path(), &options("orders", 2)).expect("adopted"));
        let err = recover(dir.path(), &options("orders", 3))
            .err()
            .expect("recorded now");
        assert!(matches!(
            err,
            StoreError::WrongCluster {
                found_shards: 2,
                expected_shards: 3,
                ..
            }
        ));
    }
}
