//! The fault suite: real processes on loopback, one fault each, every acknowledged event
//! accounted for. `cargo test -p cascade-e2e --test faults`; a longer soak repeats the
//! faults of the kill and network tests `CASCADE_FAULT_ROUNDS` times (docs/operations.md).

mod bus_down;
mod clock;
mod duplicate;
mod network;
mod shard_down;
mod sigkill;
mod zombie;

use std::process::Command;

/// A gateway's request lost with a killed dispatcher or a broken NATS connection holds that
/// shard's requests back for `bus.request_timeout` (10 s by default): shorter here, so that
/// a fault costs little time.
const SHORT_REQUEST_TIMEOUT: [(&str, &str); 1] = [("CASCADE__BUS__REQUEST_TIMEOUT", "1s")];

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}

/// How many times the kill and network tests play their faults: once unless
/// `CASCADE_FAULT_ROUNDS` says more (a soak).
fn rounds() -> usize {
    match std::env::var("CASCADE_FAULT_ROUNDS") {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("CASCADE_FAULT_ROUNDS={n}: a number of rounds")),
        Err(_) => 1,
    }
}
