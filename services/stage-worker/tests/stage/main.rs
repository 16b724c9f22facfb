//! The stage worker and the worker SDK against a real, in-process Cascade (dispatcher,
//! activation timer and gateway over the in-process bus), with handlers served by the test:
//! HTTP (axum), gRPC (tonic) and in-process Rust. One file per behaviour.

mod concurrency;
mod drain;
mod grpc_handler;
mod harness;
mod http_handler;
mod http_server;
mod lease_extension;
mod queue_of_a_stage;
mod rust_handler;
