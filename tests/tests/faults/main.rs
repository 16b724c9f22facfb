//! The fault suite: real processes on loopback, one fault each, every acknowledged event
//! accounted for. `cargo test -p cascade-e2e --test faults`.

mod shard_down;
mod zombie;

use std::process::Command;

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}: {status}");
}
