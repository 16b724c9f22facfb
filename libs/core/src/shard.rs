//! Which shard owns a queue: jump consistent hash (Lamping & Veach, 2014) of the queue's name
//! over the cluster's shard count. Every queue of a template family spreads over all shards,
//! so millions of per-user queues share the load; one queue always lives on one shard.

use crate::QueueName;

/// The shard (0..shards) that owns `queue`. `shards` must be at least 1.
pub fn shard_of(queue: &QueueName, shards: u32) -> u32 {
    jump_hash(fnv1a(queue.as_str().as_bytes()), shards.max(1))
}

/// FNV-1a, 64-bit: stable across builds and platforms, unlike std's hasher, because the
/// placement of every queue depends on it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn jump_hash(mut key: u64, buckets: u32) -> u32 {
    let (mut b, mut j) = (-1i64, 0i64);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> QueueName {
        QueueName::parse(name).expect("valid")
    }

    #[test]
    fn one_shard_owns_everything() {
        assert_eq!(shard_of(&q("jobs"), 1), 0);
    }

    #[test]
    fn placement_is_stable_and_spread() {
        // Pinned (values from an independent implementation of FNV-1a and jump hash): a
        // change here would move every queue of every running cluster.
        assert_eq!(shard_of(&q("jobs"), 16), 13);
        assert_eq!(shard_of(&q("inbox:alice"), 16), 5);
        assert_eq!(shard_of(&q("orders.validate"), 16), 3);
        let mut counts = [0u32; 4];
        for i in 0..4000 {
            counts[shard_of(&q(&format!("inbox:{i}")), 4) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn growing_the_cluster_moves_only_a_share_of_queues() {
        let moved = (0..4000)
            .filter(|i| {
                let name = q(&format!("inbox:{i}"));
                shard_of(&name, 4) != shard_of(&name, 5)
            })
            .count();
        // Ideally 1/5 of them.
        assert!((600..1000).contains(&moved), "{moved}");
    }
}
