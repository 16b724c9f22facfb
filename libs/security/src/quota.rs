//! Per-identity quotas, so that one client cannot take what the others need:
//! - `enqueue_rate`: events per second through one gateway, a token bucket holding one
//!   second's worth (a batch larger than that passes when the bucket is full, and the
//!   identity then waits until it has paid for it);
//! - `max_payload`: the largest payload it may enqueue or advance with;
//! - `max_queues`: how many queues (and templates) may exist within its admin grants before
//!   it may create another.
//!
//! The buckets live in each gateway process: with N gateways an identity may enqueue up to
//! N times its rate in all.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::SecurityError;

/// An identity's quotas; unset is no limit beyond the cluster's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quotas {
    pub enqueue_rate: Option<u32>,
    pub max_payload: Option<u64>,
    pub max_queues: Option<u64>,
}

impl Quotas {
    /// RESOURCE_EXHAUSTED when `size` bytes of payload are over `max_payload`.
    pub fn check_payload(&self, identity: &str, size: u64) -> Result<(), SecurityError> {
        match self.max_payload {
            Some(limit) if size > limit => Err(SecurityError::QuotaExceeded {
                identity: identity.to_owned(),
                what: format!("a payload of {size} bytes is over its max_payload of {limit} bytes"),
                retry_after: None,
            }),
            _ => Ok(()),
        }
    }

    /// RESOURCE_EXHAUSTED when `existing` queues within its admin grants leave no room for
    /// `adding` more.
    pub fn check_queues(
        &self,
        identity: &str,
        existing: u64,
        adding: u64,
    ) -> Result<(), SecurityError> {
        match self.max_queues {
            Some(limit) if existing.saturating_add(adding) > limit => {
                Err(SecurityError::QuotaExceeded {
                    identity: identity.to_owned(),
                    what: format!(
                        "{existing} queues exist within its admin grants and it may have {limit} (max_queues); delete one first"
                    ),
                    retry_after: None,
                })
            }
            _ => Ok(()),
        }
    }
}

/// Each identity's enqueue bucket, by identity name.
#[derive(Default)]
pub struct EnqueueRates {
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl EnqueueRates {
    /// Takes `count` enqueues from `identity`'s bucket at `now`, or RESOURCE_EXHAUSTED
    /// saying when to retry; an identity with no rate quota always passes.
    pub fn take(
        &self,
        identity: &str,
        quotas: &Quotas,
        count: usize,
        now: Instant,
    ) -> Result<(), SecurityError> {
        let Some(rate) = quotas.enqueue_rate else {
            return Ok(());
        };
        let rate = f64::from(rate.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(identity.to_owned()).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(rate);
        bucket.at = now;
        let needed = (count as f64).min(rate);
        if bucket.tokens >= needed {
            bucket.tokens -= count as f64;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((needed - bucket.tokens) / rate);
        Err(SecurityError::QuotaExceeded {
            identity: identity.to_owned(),
            what: format!("enqueue_rate of {rate} events per second"),
            retry_after: Some(wait),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rated(rate: u32) -> Quotas {
        Quotas {
            enqueue_rate: Some(rate),
            ..Quotas::default()
        }
    }

    #[test]
    fn a_bucket_holds_one_second_and_refills_at_the_rate() {
        let rates = EnqueueRates::default();
        let start = Instant::now();
        let quotas = rated(10);
        rates.take("a", &quotas, 10, start).expect("a full bucket");
        let err = rates.take("a", &quotas, 1, start).expect_err("empty");
        assert_eq!(
            err.to_string(),
            "identity 'a' is over its quota: enqueue_rate of 10 events per second; retry in 100ms"
        );
        // Another identity has its own bucket.
        rates.take("b", &quotas, 10, start).expect("b's own");
        rates
            .take("a", &quotas, 5, start + Duration::from_millis(500))
            .expect("refilled by half");
        rates
            .take("a", &quotas, 1, start + Duration::from_millis(500))
            .expect_err("used again");
    }

    #[test]
    fn a_batch_over_one_seconds_worth_passes_a_full_bucket_and_is_paid_for() {
        let rates = EnqueueRates::default();
        let start = Instant::now();
        let quotas = rated(10);
        rates.take("a", &quotas, 30, start).expect("a full bucket");
        rates
            .take("a", &quotas, 1, start + Duration::from_secs(2))
            .expect_err("still paying for 30");
        rates
            .take("a", &quotas, 1, start + Duration::from_millis(3100))
            .expect("paid");
        rates
            .take("free", &Quotas::default(), 1_000_000, start)
            .expect("no quota");
    }

    #[test]
    fn payload_and_queue_quotas_name_the_limit() {
        let quotas = Quotas {
            max_payload: Some(100),
            max_queues: Some(2),
            ..Quotas::default()
        };
        quotas.check_payload("a", 100).expect("at the limit");
        let err = quotas.check_payload("a", 101).expect_err("over");
        assert_eq!(
            err.to_string(),
            "identity 'a' is over its quota: a payload of 101 bytes is over its max_payload of 100 bytes"
        );
        quotas.check_queues("a", 1, 1).expect("room for one");
        let err = quotas.check_queues("a", 2, 1).expect_err("full");
        assert_eq!(err.code(), cascade_core::Code::ResourceExhausted);
        assert!(err.to_string().contains("2 queues exist"), "{err}");
    }
}
