//! Cascade's worker SDK: write a [`Handler`], give it to a [`Worker`], and the worker does
//! the rest for one queue (a pipeline stage's queue is `<pipeline>.<stage>`):
//!
//! - takes batches with a long poll (`batch` events per take at most);
//! - runs the handler on up to `concurrency` events at once; both knobs can be turned while
//!   it runs through [`WorkerHandle`] (`set_concurrency(0)` pauses it);
//! - extends the lease of every event it holds half-way through the lease, so a slow
//!   handler keeps its event;
//! - completes each event with the handler's [`Outcome`], in batches; a handler's `Err`,
//!   panic or timeout is a retry with the queue's backoff;
//! - on shutdown stops taking, hands back (releases) the events it has not started, lets
//!   running handlers finish within `drain_grace`, then releases what is left, and returns.
//!
//! Delivery is at least once: after a crash, a lost lease or a failed completion an event
//! comes back, so handlers should be idempotent. See `examples/echo_worker.rs`.

mod call;
mod complete;
mod config;
mod error;
mod handle;
mod handler;
mod lease;
mod run_loop;
mod stats;
mod trace;
mod worker;

pub use cascade_client::Client;
pub use cascade_core::{Event, Outcome, Timestamp};
pub use config::{MAX_CONCURRENCY, WorkerConfig};
pub use error::WorkerError;
pub use handle::WorkerHandle;
pub use handler::{BoxedHandler, Handler, HandlerError, HandlerFn, handler_fn};
pub use stats::WorkerStats;
pub use worker::Worker;
