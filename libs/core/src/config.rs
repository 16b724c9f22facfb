//! A queue's configuration, read strictly from config files or the API and then validated;
//! errors name the dotted key and the allowed range.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, excerpt};
use crate::queue::QueueName;
use crate::units::{format_duration, format_size, serde_duration, serde_size};

const MIB: u64 = 1 << 20;
const DAY: Duration = Duration::from_secs(86_400);

/// How a queue (or every queue a template matches) behaves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// How long a take holds an event before it goes back to ready.
    #[serde(with = "serde_duration")]
    pub lease: Duration,
    /// Takes per stage before the event is dead-lettered; 0 = unlimited.
    pub max_attempts: u32,
    #[serde(with = "serde_duration")]
    pub backoff_initial: Duration,
    #[serde(with = "serde_duration")]
    pub backoff_max: Duration,
    /// `None`: `<queue>.dlq`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_queue: Option<QueueName>,
    #[serde(with = "serde_size")]
    pub max_payload_bytes: u64,
    pub priority: u32,
    /// How long an id or idempotency key is remembered for dedup.
    #[serde(with = "serde_duration")]
    pub dedup_window: Duration,
}

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig {
            lease: Duration::from_secs(30),
            max_attempts: 10,
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            dead_letter_queue: None,
            max_payload_bytes: 4 * MIB,
            priority: 0,
            dedup_window: Duration::from_secs(15 * 60),
        }
    }
}

impl QueueConfig {
    pub const MIN_LEASE: Duration = Duration::from_millis(100);
    pub const MAX_LEASE: Duration = DAY;
    pub const MIN_BACKOFF: Duration = Duration::from_millis(1);
    pub const MAX_BACKOFF: Duration = Duration::from_secs(7 * 86_400);
    pub const MAX_PAYLOAD_LIMIT: u64 = 64 * MIB;
    pub const MIN_DEDUP_WINDOW: Duration = Duration::from_secs(1);
    pub const MAX_DEDUP_WINDOW: Duration = Duration::from_secs(7 * 86_400);

    /// Validates with errors under `config.<key>`.
    pub fn validate(&self) -> Result<(), Error> {
        self.validate_at("config")
    }

    /// Validates with errors under `<prefix>.<key>`, e.g. `stages[2].queue.lease`.
    pub fn validate_at(&self, prefix: &str) -> Result<(), Error> {
        let key = |name: &str| format!("{prefix}.{name}");
        check_duration(
            &key("lease"),
            self.lease,
            Self::MIN_LEASE,
            Self::MAX_LEASE,
            "24h",
        )?;
        check_duration(
            &key("backoff_max"),
            self.backoff_max,
            Self::MIN_BACKOFF,
            Self::MAX_BACKOFF,
            "7d",
        )?;
        if self.backoff_initial < Self::MIN_BACKOFF || self.backoff_initial > self.backoff_max {
            return Err(Error::invalid(
                key("backoff_initial"),
                format!(
                    "must be between 1ms and backoff_max ({}), got {}",
                    format_duration(self.backoff_max),
                    format_duration(self.backoff_initial)
                ),
            ));
        }
        if self.max_payload_bytes == 0 || self.max_payload_bytes > Self::MAX_PAYLOAD_LIMIT {
            return Err(Error::invalid(
                key("max_payload_bytes"),
                format!(
                    "must be between 1B and 64MiB, got {}",
                    format_size(self.max_payload_bytes)
                ),
            ));
        }
        check_duration(
            &key("dedup_window"),
            self.dedup_window,
            Self::MIN_DEDUP_WINDOW,
            Self::MAX_DEDUP_WINDOW,
            "7d",
        )?;
        if let Some(dlq) = &self.dead_letter_queue
            && dlq.is_template()
        {
            return Err(Error::invalid(
                key("dead_letter_queue"),
                format!(
                    "must be a queue name, not a template, got {}",
                    excerpt(dlq.as_str())
                ),
            ));
        }
        Ok(())
    }

    /// The dead-letter queue of `queue`: the configured one, else `<queue>.dlq`.
    pub fn dead_letter_queue_for(&self, queue: &QueueName) -> Result<QueueName, Error> {
        match &self.dead_letter_queue {
            Some(dlq) => Ok(dlq.clone()),
            None => queue.dead_letter_default(),
        }
    }

    /// INVALID_ARGUMENT when the events of `queue` (a name or template) could not be
    /// dead-lettered: no `dead_letter_queue`, and `<queue>.dlq` would be too long a name.
    pub fn check_dead_letter_room(&self, queue: &QueueName) -> Result<(), Error> {
        match self.dead_letter_queue {
            Some(_) => Ok(()),
            None => queue.check_dead_letter_room(),
        }
    }

    /// RESOURCE_EXHAUSTED when a payload is over `max_payload_bytes`.
    pub fn check_payload(&self, len: usize) -> Result<(), Error> {
        let size = len as u64;
        if size > self.max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                size,
                limit: self.max_payload_bytes,
            });
        }
        Ok(())
    }
}

fn check_duration(
    key: &str,
    value: Duration,
    min: Duration,
    max: Duration,
    max_text: &str,
) -> Result<(), Error> {
    if value < min || value > max {
        return Err(Error::invalid(
            key,
            format!(
                "must be between {} and {max_text}, got {}",
                format_duration(min),
                format_duration(value)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error as DeError, MapDeserializer, StrDeserializer};

    fn from_pairs(pairs: &[(&'static str, &'static str)]) -> Result<QueueConfig, DeError> {
        let map: MapDeserializer<'_, _, DeError> = MapDeserializer::new(pairs.iter().copied());
        QueueConfig::deserialize(map)
    }

    #[test]
    fn defaults_are_valid() {
        let config = QueueConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.lease, Duration::from_secs(30));
        assert_eq!(config.max_payload_bytes, 4 << 20);
    }

    #[test]
    fn invalid_values_name_the_key_and_range() {
        type Case = (fn(&mut QueueConfig), &'static str);
        let cases: [Case; 8] = [
            (
                |c| c.lease = Duration::from_millis(50),
                "config.lease: must be between 100ms and 24h, got 50ms",
            ),
            (
                |c| c.lease = Duration::from_secs(86_401),
                "config.lease: must be between 100ms and 24h, got 86401s",
            ),
            (
                |c| c.backoff_initial = Duration::ZERO,
                "config.backoff_initial: must be between 1ms and backoff_max (5m), got 0s",
            ),
            (
                |c| c.backoff_initial = Duration::from_secs(600),
                "config.backoff_initial: must be between 1ms and backoff_max (5m), got 10m",
            ),
            (
                |c| c.backoff_max = Duration::from_secs(8 * 86_400),
                "config.backoff_max: must be between 1ms and 7d, got 8d",
            ),
            (
                |c| c.max_payload_bytes = 0,
                "config.max_payload_bytes: must be between 1B and 64MiB, got 0B",
            ),
            (
                |c| c.max_payload_bytes = 65 << 20,
                "config.max_payload_bytes: must be between 1B and 64MiB, got 65MiB",
            ),
            (
                |c| c.dedup_window = Duration::from_millis(10),
                "config.dedup_window: must be between 1s and 7d, got 10ms",
            ),
        ];
        for (change, message) in cases {
            let mut config = QueueConfig::default();
            change(&mut config);
            assert_eq!(config.validate().expect_err(message).to_string(), message);
        }
        let template = QueueConfig {
            dead_letter_queue: Some(QueueName::parse("dead:*").expect("valid")),
            ..QueueConfig::default()
        };
        let err = template
            .validate_at("stages[1].queue")
            .expect_err("template dlq");
        assert_eq!(err.field(), "stages[1].queue.dead_letter_queue");
    }

    #[test]
    fn deserializes_strings_with_units_and_rejects_unknown_keys() {
        let config =
            from_pairs(&[("lease", "2m"), ("max_payload_bytes", "1MiB")]).expect("valid config");
        assert_eq!(config.lease, Duration::from_secs(120));
        assert_eq!(config.max_payload_bytes, 1 << 20);
        assert_eq!(config.backoff_max, QueueConfig::default().backoff_max);
        let unknown = from_pairs(&[("leese", "2m")]).expect_err("unknown key");
        assert!(unknown.to_string().contains("leese"), "{unknown}");
        assert!(from_pairs(&[("lease", "soon")]).is_err());
    }

    #[test]
    fn queue_names_deserialize_validated() {
        let good: StrDeserializer<'_, DeError> = "graveyard".into_deserializer();
        assert_eq!(
            QueueName::deserialize(good).map(String::from),
            Ok("graveyard".to_owned())
        );
        let bad: StrDeserializer<'_, DeError> = "bad name".into_deserializer();
        let err = QueueName::deserialize(bad).expect_err("space");
        assert!(err.to_string().contains("[A-Za-z0-9._:-]"), "{err}");
    }

    #[test]
    fn dead_letter_queue_and_payload_limit() {
        let queue = QueueName::parse("orders").expect("valid");
        let config = QueueConfig::default();
        assert_eq!(
            config.dead_letter_queue_for(&queue).map(String::from),
            Ok("orders.dlq".to_owned())
        );
        assert_eq!(config.check_payload(4 << 20), Ok(()));
        let err = config.check_payload((4 << 20) + 1).expect_err("too large");
        assert_eq!(err.code(), crate::error::Code::ResourceExhausted);
    }
}
