//! What a worker is set to do: which queue, how many events per take, how many handlers at
//! once, how long its leases are, how long it waits in a long poll and when draining.

use std::time::Duration;

use cascade_core::units::format_duration;
use cascade_core::{QueueConfig, QueueName};
use cascade_proto::convert::MAX_TAKE_EVENTS;

use crate::WorkerError;

/// Handlers at once at most: far beyond one process's useful concurrency, small enough
/// to catch a typo.
pub const MAX_CONCURRENCY: u32 = 100_000;
/// The longest `poll_wait`: a gateway caps a take's wait far below it anyway.
const MAX_POLL_WAIT: Duration = Duration::from_secs(3600);
/// The longest `drain_grace`, so that a shutdown's deadline is a time the clock can hold.
const MAX_DRAIN_GRACE: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The one queue this worker takes from (a stage's queue `<pipeline>.<stage>`).
    pub queue: QueueName,
    /// Events per `Take` at most (1 to 10,000); changeable at run time.
    pub batch: u32,
    /// Handlers running at once at most; 0 pauses the worker. Changeable at run time.
    pub concurrency: u32,
    /// The lease asked for on each take and extension; `None`: the queue's.
    pub lease: Option<Duration>,
    /// How long a `Take` waits on the gateway for events when none is ready (long poll).
    pub poll_wait: Duration,
    /// A handler running longer is abandoned and its event retried with the queue's
    /// backoff; `None`: no limit (its lease is extended while it runs).
    pub handler_timeout: Option<Duration>,
    /// On shutdown, how long running handlers get to finish before they are abandoned
    /// and their events released.
    pub drain_grace: Duration,
    /// Completions per `Complete` request at most.
    pub completion_batch: usize,
    /// Names this worker in the gateway's logs.
    pub worker_id: String,
}

impl WorkerConfig {
    /// Defaults for `queue`: batch 16, concurrency 1, the queue's lease, 5s long polls,
    /// no handler timeout, 25s of drain (within Kubernetes' default 30s grace).
    pub fn new(queue: &str) -> Result<WorkerConfig, WorkerError> {
        let queue = QueueName::parse(queue).map_err(|e| match e {
            cascade_core::Error::InvalidArgument { field, reason } => {
                WorkerError::config(field, reason)
            }
            other => WorkerError::config("queue", other.to_string()),
        })?;
        Ok(WorkerConfig {
            queue,
            batch: 16,
            concurrency: 1,
            lease: None,
            poll_wait: Duration::from_secs(5),
            handler_timeout: None,
            drain_grace: Duration::from_secs(25),
            completion_batch: 256,
            worker_id: format!("worker-{}", std::process::id()),
        })
    }

    pub fn batch(mut self, batch: u32) -> WorkerConfig {
        self.batch = batch;
        self
    }

    pub fn concurrency(mut self, concurrency: u32) -> WorkerConfig {
        self.concurrency = concurrency;
        self
    }

    pub fn lease(mut self, lease: Duration) -> WorkerConfig {
        self.lease = Some(lease);
        self
    }

    pub fn poll_wait(mut self, wait: Duration) -> WorkerConfig {
        self.poll_wait = wait;
        self
    }

    pub fn handler_timeout(mut self, timeout: Duration) -> WorkerConfig {
        self.handler_timeout = Some(timeout);
        self
    }

    pub fn drain_grace(mut self, grace: Duration) -> WorkerConfig {
        self.drain_grace = grace;
        self
    }

    pub fn worker_id(mut self, id: impl Into<String>) -> WorkerConfig {
        self.worker_id = id.into();
        self
    }

    /// Errors name the field and the allowed range.
    pub fn validate(&self) -> Result<(), WorkerError> {
        if self.queue.is_template() {
            return Err(WorkerError::config(
                "queue",
                format!(
                    "'{}' is a template; name a queue that matches it",
                    self.queue
                ),
            ));
        }
        check_batch(self.batch)?;
        check_concurrency(self.concurrency)?;
        if let Some(lease) = self.lease
            && !(QueueConfig::MIN_LEASE..=QueueConfig::MAX_LEASE).contains(&lease)
        {
            return Err(WorkerError::config(
                "lease",
                format!(
                    "must be between 100ms and 24h (or unset for the queue's), got {}",
                    format_duration(lease)
                ),
            ));
        }
        if self.poll_wait.is_zero() || self.poll_wait > MAX_POLL_WAIT {
            return Err(WorkerError::config(
                "poll_wait",
                format!(
                    "must be more than 0 and at most 1h, got {}",
                    format_duration(self.poll_wait)
                ),
            ));
        }
        if self.drain_grace > MAX_DRAIN_GRACE {
            return Err(WorkerError::config(
                "drain_grace",
                format!(
                    "must be at most 24h, got {}",
                    format_duration(self.drain_grace)
                ),
            ));
        }
        if self.handler_timeout.is_some_and(|t| t.is_zero()) {
            return Err(WorkerError::config(
                "handler_timeout",
                "must be more than 0 (or unset for none)",
            ));
        }
        if self.completion_batch == 0 {
            return Err(WorkerError::config(
                "completion_batch",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

pub(crate) fn check_batch(batch: u32) -> Result<(), WorkerError> {
    if (1..=MAX_TAKE_EVENTS).contains(&batch) {
        return Ok(());
    }
    Err(WorkerError::config(
        "batch",
        format!("must be 1 to {MAX_TAKE_EVENTS}, got {batch}"),
    ))
}

pub(crate) fn check_concurrency(concurrency: u32) -> Result<(), WorkerError> {
    if concurrency <= MAX_CONCURRENCY {
        return Ok(());
    }
    Err(WorkerError::config(
        "concurrency",
        format!("must be 0 to {MAX_CONCURRENCY}, got {concurrency}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(config: &WorkerConfig) -> String {
        match config.validate() {
            Err(WorkerError::Config { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_bad_values_name_their_field() {
        let config = WorkerConfig::new("jobs").expect("valid name");
        config.validate().expect("defaults are valid");
        assert_eq!(field_of(&config.clone().batch(0)), "batch");
        assert_eq!(
            field_of(&config.clone().batch(MAX_TAKE_EVENTS + 1)),
            "batch"
        );
        assert_eq!(
            field_of(&config.clone().concurrency(MAX_CONCURRENCY + 1)),
            "concurrency"
        );
        assert_eq!(
            field_of(&config.clone().lease(Duration::from_millis(10))),
            "lease"
        );
        assert_eq!(
            field_of(&config.clone().poll_wait(Duration::ZERO)),
            "poll_wait"
        );
        assert_eq!(
            field_of(&config.clone().poll_wait(Duration::MAX)),
            "poll_wait"
        );
        assert_eq!(
            field_of(&config.clone().drain_grace(Duration::MAX)),
            "drain_grace"
        );
        assert_eq!(
            field_of(&config.clone().handler_timeout(Duration::ZERO)),
            "handler_timeout"
        );
        config
            .concurrency(0)
            .validate()
            .expect("0 starts the worker paused");
        assert!(matches!(
            WorkerConfig::new("a b"),
            Err(WorkerError::Config { .. })
        ));
        let template = WorkerConfig::new("inbox:*").expect("a valid name");
        assert_eq!(field_of(&template), "queue");
    }
}
