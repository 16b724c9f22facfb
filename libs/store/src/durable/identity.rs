//! The cluster a store belongs to. Its name and shard count are written when the store is
//! created and compared at every open after, so a changed `cluster.shards` (or a volume
//! mounted under another cluster) stops the shard with a message instead of stranding the
//! queues the new count hashes elsewhere. A store written before this record existed gets
//! it at its next open: nothing older can be checked.

use crate::codec::{keys, records};
use crate::durable::ClusterIdentity;
use crate::error::StoreError;
use crate::kv::Kv;

/// Records `expected` in a store that has no record yet; refuses a store recorded with
/// another name or shard count.
pub(super) fn check(kv: &Kv, expected: &ClusterIdentity) -> Result<(), StoreError> {
    let key = keys::meta("cluster");
    let stored = kv
        .db()
        .get(&key)
        .map_err(|e| StoreError::sled("read the cluster", kv.dir(), e))?;
    let Some(stored) = stored else {
        let record = records::encode_cluster(&expected.name, expected.shards);
        return super::write_meta(kv, key, record, "write the cluster");
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

#[cfg(test)]
mod tests {
    use crate::durable::{ClusterIdentity, StoreOptions, recover};
    use crate::error::StoreError;

    fn options(name: &str, shards: u32) -> StoreOptions {
        StoreOptions {
            cluster: Some(ClusterIdentity {
                name: name.into(),
                shards,
            }),
            ..StoreOptions::default()
        }
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
