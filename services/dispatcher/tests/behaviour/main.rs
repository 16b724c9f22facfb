//! The dispatcher's behaviour through the bus, one behaviour per module, against the real
//! dispatcher and activation timer (`cluster`). One test binary: linking is the slow part.

mod cluster;

mod advance_across_shards;
mod bad_requests;
mod delayed_events;
mod enqueue_take_complete;
mod long_poll;
mod pipelines;
mod restart;
mod schedules_wait_for_the_timer;
mod stale_token;
mod stats_published;
mod take_fits_the_bus;
