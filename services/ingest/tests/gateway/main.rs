//! The gateway over real gRPC on loopback, with the test playing the dispatcher shards on an
//! in-process bus. One test binary (linking tonic once), one behaviour per module.

mod harness;

mod admin;
mod coalescing;
mod discovery;
mod errors;
mod in_process;
mod long_poll;
mod pipelines;
mod routing;
mod unreadable;
mod validation;
