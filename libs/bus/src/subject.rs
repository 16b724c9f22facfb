//! The subjects Cascade's services talk on (see "The bus" in `docs/services.md`).
//!
//! Subjects carry shard numbers, never queue names: the builders take a `u32` shard, so a queue
//! name containing `.`, `*` or `>` cannot reach another subject. The cluster name is the only
//! string in a subject; it comes from the config and must pass [`validate_cluster`] at load time.

use crate::error::{BusError, excerpt};

/// The longest cluster name: it is one token of every subject.
pub const MAX_CLUSTER_LEN: usize = 64;

/// Checks a cluster name: 1–64 characters of `[A-Za-z0-9_-]`, so it is exactly one subject token
/// and can never be or contain a wildcard.
pub fn validate_cluster(cluster: &str) -> Result<(), BusError> {
    let invalid = |reason| BusError::InvalidCluster {
        cluster: excerpt(cluster),
        reason,
    };
    if cluster.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if cluster.len() > MAX_CLUSTER_LEN {
        return Err(invalid("must be at most 64 characters"));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !cluster.chars().all(allowed) {
        return Err(invalid("only letters, digits, '_' and '-' are allowed"));
    }
    Ok(())
}

/// `cascade.<cluster>.dispatcher.<shard>`: requests to one dispatcher shard.
pub fn dispatcher(cluster: &str, shard: u32) -> String {
    build(cluster, "dispatcher", shard)
}

/// `cascade.<cluster>.timer.<shard>`: requests to one activation-timer shard.
pub fn timer(cluster: &str, shard: u32) -> String {
    build(cluster, "timer", shard)
}

/// `cascade.<cluster>.stats.<shard>`: the stats one dispatcher shard publishes.
pub fn stats(cluster: &str, shard: u32) -> String {
    build(cluster, "stats", shard)
}

/// `cascade.<cluster>.stats.*`: the stats of every shard, for the resource manager.
pub fn all_stats(cluster: &str) -> String {
    debug_assert_valid(cluster);
    format!("cascade.{cluster}.stats.*")
}

/// `cascade.<cluster>.rm.decisions`: each round of the resource manager's decisions (JSON).
pub fn rm_decisions(cluster: &str) -> String {
    debug_assert_valid(cluster);
    format!("cascade.{cluster}.rm.decisions")
}

fn build(cluster: &str, role: &str, shard: u32) -> String {
    debug_assert_valid(cluster);
    format!("cascade.{cluster}.{role}.{shard}")
}

/// The builders cannot fail, so a cluster name that skipped validation is caught in debug builds.
fn debug_assert_valid(cluster: &str) {
    debug_assert!(
        validate_cluster(cluster).is_ok(),
        "cluster name {cluster:?} was not validated at config load"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::{matches, validate_pattern, validate_subject};

    #[test]
    fn builders() {
        assert_eq!(dispatcher("prod", 7), "cascade.prod.dispatcher.7");
        assert_eq!(timer("prod", 0), "cascade.prod.timer.0");
        assert_eq!(
            stats("prod", 4_294_967_295),
            "cascade.prod.stats.4294967295"
        );
        assert_eq!(all_stats("prod"), "cascade.prod.stats.*");
        assert!(validate_subject(&dispatcher("a-b_C9", 1)).is_ok());
        assert!(validate_pattern(&all_stats("prod")).is_ok());
    }

    #[test]
    fn all_stats_matches_every_shard_and_nothing_else() {
        let pattern = all_stats("prod");
        assert!(matches(&pattern, &stats("prod", 0)));
        assert!(matches(&pattern, &stats("prod", 123)));
        assert!(!matches(&pattern, &dispatcher("prod", 0)));
        assert!(!matches(&pattern, &stats("other", 0)));
    }

    #[test]
    fn cluster_validation() {
        for good in ["a", "prod", "eu-west_1", &"x".repeat(64)] {
            assert!(validate_cluster(good).is_ok(), "{good}");
        }
        let long = "x".repeat(65);
        for bad in [
            "",
            "a.b",
            "*",
            ">",
            "a b",
            "a\n",
            "é",
            "prod.>",
            long.as_str(),
        ] {
            let err = validate_cluster(bad).expect_err(bad);
            assert!(
                matches!(err, BusError::InvalidCluster { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn cluster_error_names_the_key() {
        let err = validate_cluster("a.b").expect_err("a dot is not allowed");
        assert_eq!(
            err.to_string(),
            "cluster: \"a.b\" is not a valid cluster name: only letters, digits, '_' and '-' are allowed"
        );
    }
}
