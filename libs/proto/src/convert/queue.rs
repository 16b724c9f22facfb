//! Queues: names, `QueueConfig` both ways, `Queue`, `QueueStats`, `CreateQueueRequest`.
//!
//! What an unset or zero field of a proto `QueueConfig` means:
//! - `lease`, `backoff_initial`, `backoff_max`, `dedup_window`, `max_payload_bytes`: the
//!   domain default (30s, 1s, 5m, 15m, 4MiB); an unset `backoff_initial` is also capped at a
//!   given `backoff_max`, so `backoff_max = 500ms` alone is valid;
//! - `max_attempts`: 0 is **unlimited** (the contract, `proto/cascade/v1`), not the default of 10;
//! - `dead_letter_queue`: empty is `<queue>.dlq`;
//! - `priority`: 0 is 0 (the lowest; also the default).
//!
//! A request without any `config` message gets every default, `max_attempts` = 10 included.

use cascade_core::commands::FamilyStats;
use cascade_core::{Queue, QueueConfig, QueueName, QueueStats};

use super::time::{duration_to_proto, optional_duration_from_proto};
use super::{ConvertError, field_at};
use crate::bus::v1 as bus;
use crate::v1;

/// A queue (or template) name given in `field`, e.g. `name` or `items[2].queue`.
pub fn queue_name_from_proto(name: &str, field: &str) -> Result<QueueName, ConvertError> {
    Ok(QueueName::parse_field(name, field)?)
}

/// A validated config; `prefix` is the config's own field (`config`, `stages[1].queue`), so
/// an error reads `config.lease: must be between 100ms and 24h, got 50ms`.
pub fn queue_config_from_proto(
    config: Option<&v1::QueueConfig>,
    prefix: &str,
) -> Result<QueueConfig, ConvertError> {
    let defaults = QueueConfig::default();
    let Some(given) = config else {
        return Ok(defaults);
    };
    let duration = |value: Option<&prost_types::Duration>, name: &str| {
        optional_duration_from_proto(value, &field_at(prefix, name))
    };
    let lease = duration(given.lease.as_ref(), "lease")?.unwrap_or(defaults.lease);
    let backoff_max =
        duration(given.backoff_max.as_ref(), "backoff_max")?.unwrap_or(defaults.backoff_max);
    let backoff_initial = duration(given.backoff_initial.as_ref(), "backoff_initial")?
        .unwrap_or(defaults.backoff_initial.min(backoff_max));
    let dedup_window =
        duration(given.dedup_window.as_ref(), "dedup_window")?.unwrap_or(defaults.dedup_window);
    let dead_letter_queue = match given.dead_letter_queue.as_str() {
        "" => None,
        name => Some(queue_name_from_proto(
            name,
            &field_at(prefix, "dead_letter_queue"),
        )?),
    };
    let max_payload_bytes = match given.max_payload_bytes {
        0 => defaults.max_payload_bytes,
        bytes => bytes,
    };
    let config = QueueConfig {
        lease,
        max_attempts: given.max_attempts,
        backoff_initial,
        backoff_max,
        dead_letter_queue,
        max_payload_bytes,
        priority: given.priority,
        dedup_window,
    };
    // The domain's check writes `<prefix>.<key>`: an empty prefix would read `.lease`.
    config.validate_at(if prefix.is_empty() { "config" } else { prefix })?;
    Ok(config)
}

/// Every field written out, so a client sees the effective config.
pub fn queue_config_to_proto(config: &QueueConfig) -> v1::QueueConfig {
    v1::QueueConfig {
        lease: Some(duration_to_proto(config.lease)),
        max_attempts: config.max_attempts,
        backoff_initial: Some(duration_to_proto(config.backoff_initial)),
        backoff_max: Some(duration_to_proto(config.backoff_max)),
        dead_letter_queue: config
            .dead_letter_queue
            .as_ref()
            .map(|name| name.to_string())
            .unwrap_or_default(),
        max_payload_bytes: config.max_payload_bytes,
        priority: config.priority,
        dedup_window: Some(duration_to_proto(config.dedup_window)),
    }
}

pub fn queue_to_proto(queue: &Queue) -> v1::Queue {
    v1::Queue {
        name: queue.name.to_string(),
        config: Some(queue_config_to_proto(&queue.config)),
    }
}

/// `name` (a queue or a template ending in `*`) and its config.
pub fn create_queue_from_proto(
    request: &v1::CreateQueueRequest,
) -> Result<(QueueName, QueueConfig), ConvertError> {
    let name = queue_name_from_proto(&request.name, "name")?;
    let config = queue_config_from_proto(request.config.as_ref(), "config")?;
    config
        .check_dead_letter_room(&name)
        .map_err(|e| e.with_field("name"))?;
    Ok((name, config))
}

/// `name` is a queue's, or a family's (`inbox:*.dlq`, which no queue is named).
pub fn queue_stats_to_proto(name: &str, stats: &QueueStats) -> v1::QueueStats {
    v1::QueueStats {
        name: name.to_owned(),
        ready: stats.ready,
        delayed: stats.delayed,
        leased: stats.leased,
        dead_lettered: stats.dead_lettered,
        oldest_ready_age: Some(duration_to_proto(stats.oldest_ready_age)),
        enqueued_total: stats.enqueued_total,
        completed_total: stats.completed_total,
        expired_leases_total: stats.expired_leases_total,
        retries_total: stats.retries_total,
    }
}

/// One entry of `ShardStats.families`.
pub fn family_stats_to_proto(family: &FamilyStats) -> bus::FamilyStats {
    bus::FamilyStats {
        stats: Some(queue_stats_to_proto(&family.name, &family.stats)),
        queues: family.queues,
    }
}

/// For readers of published `ShardStats` (the resource manager); fields under `prefix`.
pub fn queue_stats_from_proto(
    stats: &v1::QueueStats,
    prefix: &str,
) -> Result<(QueueName, QueueStats), ConvertError> {
    let name = queue_name_from_proto(&stats.name, &field_at(prefix, "name"))?;
    let oldest_ready_age = optional_duration_from_proto(
        stats.oldest_ready_age.as_ref(),
        &field_at(prefix, "oldest_ready_age"),
    )?
    .unwrap_or_default();
    let domain = QueueStats {
        ready: stats.ready,
        delayed: stats.delayed,
        leased: stats.leased,
        dead_lettered: stats.dead_lettered,
        oldest_ready_age,
        enqueued_total: stats.enqueued_total,
        completed_total: stats.completed_total,
        expired_leases_total: stats.expired_leases_total,
        retries_total: stats.retries_total,
    };
    Ok((name, domain))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::convert::duration_to_proto as d;

    #[test]
    fn unset_config_is_every_default() {
        let config = queue_config_from_proto(None, "config").expect("defaults");
        assert_eq!(config, QueueConfig::default());
        assert_eq!(config.max_attempts, 10);
    }

    #[test]
    fn zero_fields_mean_default_except_max_attempts() {
        let empty = v1::QueueConfig::default();
        let config = queue_config_from_proto(Some(&empty), "config").expect("valid");
        let defaults = QueueConfig::default();
        assert_eq!(config.lease, defaults.lease);
        assert_eq!(config.max_payload_bytes, defaults.max_payload_bytes);
        assert_eq!(config.dedup_window, defaults.dedup_window);
        assert_eq!(config.dead_letter_queue, None);
        assert_eq!(config.max_attempts, 0, "0 is unlimited");
        let zero_lease = v1::QueueConfig {
            lease: Some(d(Duration::ZERO)),
            ..v1::QueueConfig::default()
        };
        let config = queue_config_from_proto(Some(&zero_lease), "config").expect("valid");
        assert_eq!(config.lease, defaults.lease);
    }

    #[test]
    fn an_unset_initial_backoff_fits_under_a_short_maximum() {
        let short = v1::QueueConfig {
            backoff_max: Some(d(Duration::from_millis(500))),
            ..v1::QueueConfig::default()
        };
        let config = queue_config_from_proto(Some(&short), "config").expect("valid");
        assert_eq!(config.backoff_initial, Duration::from_millis(500));
    }

    #[test]
    fn domain_config_round_trips() {
        let config = QueueConfig {
            lease: Duration::from_secs(5),
            max_attempts: 3,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_secs(2),
            dead_letter_queue: Some(QueueName::parse("graveyard").expect("name")),
            max_payload_bytes: 1024,
            priority: 7,
            dedup_window: Duration::from_secs(60),
        };
        let sent = queue_config_to_proto(&config);
        assert_eq!(
            queue_config_from_proto(Some(&sent), "config"),
            Ok(config.clone())
        );
        let unlimited = QueueConfig {
            max_attempts: 0,
            ..config
        };
        let sent = queue_config_to_proto(&unlimited);
        assert_eq!(
            queue_config_from_proto(Some(&sent), "config"),
            Ok(unlimited)
        );
    }

    #[test]
    fn invalid_configs_name_the_nested_field() {
        let short_lease = v1::QueueConfig {
            lease: Some(d(Duration::from_millis(50))),
            ..v1::QueueConfig::default()
        };
        let err = queue_config_from_proto(Some(&short_lease), "config").expect_err("short");
        assert_eq!(
            err.to_string(),
            "config.lease: must be between 100ms and 24h, got 50ms"
        );
        let negative = v1::QueueConfig {
            dedup_window: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            ..v1::QueueConfig::default()
        };
        let err = queue_config_from_proto(Some(&negative), "stages[2].queue").expect_err("neg");
        assert!(
            err.to_string()
                .starts_with("stages[2].queue.dedup_window: must not be negative"),
            "{err}"
        );
        let bad_dlq = v1::QueueConfig {
            dead_letter_queue: "a b".into(),
            ..v1::QueueConfig::default()
        };
        let err = queue_config_from_proto(Some(&bad_dlq), "config").expect_err("dlq");
        assert!(
            err.to_string().starts_with("config.dead_letter_queue: "),
            "{err}"
        );
    }

    #[test]
    fn create_queue_requests() {
        let request = v1::CreateQueueRequest {
            name: "inbox:*".into(),
            config: None,
        };
        let (name, config) = create_queue_from_proto(&request).expect("valid");
        assert!(name.is_template());
        assert_eq!(config, QueueConfig::default());
        let bad = v1::CreateQueueRequest {
            name: String::new(),
            config: None,
        };
        let err = create_queue_from_proto(&bad).expect_err("empty");
        assert!(
            err.to_string().starts_with("name: must be 1-200 bytes"),
            "{err}"
        );
    }

    #[test]
    fn stats_round_trip() {
        let name = QueueName::parse("jobs").expect("name");
        let stats = QueueStats {
            ready: 1,
            delayed: 2,
            leased: 3,
            dead_lettered: 4,
            oldest_ready_age: Duration::from_millis(1500),
            enqueued_total: 5,
            completed_total: 6,
            expired_leases_total: 7,
            retries_total: 8,
        };
        let sent = queue_stats_to_proto(name.as_str(), &stats);
        assert_eq!(sent.name, "jobs");
        assert_eq!(
            queue_stats_from_proto(&sent, "queues[0]"),
            Ok((name, stats))
        );
    }
}
