//! Cascade's domain: events, ids, queue names and configs, pipelines, outcomes, clocks, and the
//! commands and answers of a shard.
//!
//! No I/O: every type here is plain data with validation, so the store, the services and the
//! edge conversions share one definition of what is valid. Validation errors name the field.

pub mod backoff;
pub mod clock;
pub mod commands;
pub mod config;
pub mod error;
pub mod event;
pub mod id;
pub mod outcome;
pub mod pipeline;
pub mod queue;
pub mod shard;
mod text;
pub mod time;
pub mod units;

pub use backoff::{retry_delay, retry_delay_base};
pub use clock::{Clock, SimClock, SystemClock};
pub use commands::{
    Delivery, EnqueueCmd, Enqueued, EventUpdate, LeaseToken, LeasedEvent, Queue, QueueStats,
    RedriveSelection, ScheduleEntry,
};
pub use config::QueueConfig;
pub use error::{Code, Error};
pub use event::{
    Event, EventState, MAX_HEADER_NAME_BYTES, MAX_HEADER_VALUE_BYTES, MAX_HEADERS, validate_headers,
};
pub use id::{EventId, IdempotencyKey, MAX_ID_BYTES};
pub use outcome::Outcome;
pub use pipeline::{HandlerKind, HandlerSpec, Pipeline, Stage};
pub use queue::{QueueName, queue_family};
pub use shard::shard_of;
pub use time::{Timestamp, parse_duration, parse_size};
