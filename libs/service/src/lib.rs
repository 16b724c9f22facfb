//! What every Cascade service shares, so that each service's `main` only parses flags and
//! calls its crate's `run(settings, deps, shutdown)`:
//! - `settings`: one typed, validated settings tree (defaults < file < `CASCADE__SECTION__KEY`),
//!   loaded by `load_layers`, which a stage worker's settings use too;
//! - `shutdown`: a signal that SIGTERM or ctrl-c triggers and every task can wait on;
//! - `admin`: the HTTP admin port with `/healthz` and `/readyz`;
//! - `auth`: the identities file, reloaded while the process runs, and the admin port's
//!   guard of its operators' pages;
//! - `store`: opening a shard's store as the settings say;
//! - `shards`: running a sharded service's shards, and stopping them all on the first failure;
//! - `flags`: the command-line flags the service binaries share;
//! - `observe`: the store's and the bus's hooks wired into the process's metrics;
//! - `process`: all of the above around a service binary's `run`;
//! - `watch`: files reloaded while the process runs.

pub mod admin;
pub mod auth;
mod deps;
pub mod error;
pub mod flags;
mod layers;
pub mod observe;
pub mod process;
pub mod settings;
pub mod shards;
pub mod shutdown;
pub mod store;
pub mod watch;

pub use admin::{Readiness, serve_admin};
pub use deps::Deps;
pub use error::{ServiceError, ShardError, exit_code};
pub use flags::{DataFlags, ServiceFlags};
pub use layers::load_layers;
pub use process::Process;
pub use settings::Settings;
pub use shards::{RunningShard, ShardCore, ShardSupervisor, SupervisedShard};
pub use shutdown::{Shutdown, ShutdownTrigger, shutdown_channel};
