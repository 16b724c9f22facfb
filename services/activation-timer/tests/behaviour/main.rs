//! The activation timer's behaviour through the bus, one behaviour per module, against the
//! real `run` and a fake dispatcher (`harness`). One test binary: linking is the slow part.

mod harness;

mod cancel;
mod due_counts;
mod earlier_entry_wakes_the_loop;
mod far_entries_load_in_time;
mod fires_on_time;
mod restart_keeps_the_schedule;
mod retries_until_acknowledged;

/// Lateness allowed in the tests, in µs; measured here it is a few ms.
pub const ON_TIME_US: i64 = 50_000;
