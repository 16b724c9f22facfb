//! Cascade's gateway, the ingest service: the only public door for producers and pull
//! consumers. It serves `Ingest`, `Worker` and `Admin` on one gRPC port with health and
//! reflection; validates every request before anything reaches a shard; routes each queue
//! to its dispatcher shard over the bus (`shard_of`); coalesces concurrent enqueues and
//! completions for one shard into one bus request; and maps every failure to a gRPC status.
//! It keeps no state and answers OK only after the owning shard answered OK.
//!
//! Entry points: [`run`] binds `grpc.addr`; [`serve`] takes a bound listener;
//! [`apply_pipeline`] applies a pipeline (from the config file) without a gRPC call;
//! [`StatusPage`] is the status page served on the HTTP admin port (`/`, `/status.json`,
//! `/dead-letters.json`).

mod abandoned;
mod admin;
mod admission;
mod advance;
mod audit;
mod auth;
mod authorize;
mod carried;
mod client_deadline;
mod client_errors;
mod coalesce;
mod error;
mod gateway;
mod in_process;
mod incoming;
mod ingest;
mod limits;
mod list;
mod peer;
mod peer_slots;
mod pipelines;
mod route;
mod server;
mod status;
mod timed;
mod tls;
mod trace;
mod worker;

pub use error::IngestError;
pub use in_process::{InProcessConnector, InProcessListener, in_process};
pub use incoming::Listeners;
pub use pipelines::apply_pipeline;
pub use server::{bind, run, serve, warn_when_open};
pub use status::StatusPage;
pub use tls::Tls;
