//! What every Cascade service shares, so that each service's `main` only parses flags and
//! calls its crate's `run(settings, deps, shutdown)`:
//! - `settings`: one typed, validated settings tree (defaults < file < `CASCADE__SECTION__KEY`);
//! - `shutdown`: a signal that SIGTERM or ctrl-c triggers and every task can wait on;
//! - `admin`: the HTTP admin port with `/healthz` and `/readyz`;
//! - `store`: opening a shard's store from the settings;
//! - `process`: all of the above around a service binary's `run`.

pub mod admin;
pub mod error;
pub mod process;
pub mod settings;
pub mod shutdown;
pub mod store;

pub use admin::{Readiness, serve_admin};
pub use error::ServiceError;
pub use process::Process;
pub use settings::Settings;
pub use shutdown::{Shutdown, ShutdownTrigger, shutdown_channel};
