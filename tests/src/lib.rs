//! The end-to-end harness: real binaries started as processes on free loopback ports (and a
//! real `nats-server` for the distributed mode), waited on until ready, stopped with SIGTERM
//! or killed with SIGKILL. The scenarios in `scenarios` run against both modes.
//!
//! The binaries are the workspace's own, built before the tests run (`scripts/test.sh` runs
//! `cargo build --workspace --all-targets` first); a missing one fails the test with that advice.

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod flow;
pub mod handler_server;
pub mod history;
pub mod load;
pub mod pki;
pub mod process;
pub mod proxy;
pub mod scenarios;

pub use cluster::{Cluster, Mode, Part, StageWorkerSpec};

/// For each scenario, one `#[tokio::test]` per mode (modules `standalone` and
/// `distributed`), each on its own fresh cluster, stopped with SIGTERM at the end (every
/// process must exit 0).
#[macro_export]
macro_rules! scenario_tests {
    ($($name:ident),* $(,)?) => {
        mod standalone {
            $crate::scenario_tests!(@mode $crate::Mode::Standalone; $($name),*);
        }
        mod distributed {
            $crate::scenario_tests!(@mode $crate::Mode::Distributed; $($name),*);
        }
    };
    (@mode $mode:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                // The scenarios take and complete stage events themselves: standalone's own
                // stage workers would compete with them.
                let env = [("CASCADE__STANDALONE__STAGE_WORKERS", "false")];
                let mut cluster =
                    tokio::task::spawn_blocking(move || $crate::Cluster::start_with($mode, None, &env))
                    .await
                    .expect("start the cluster");
                $crate::scenarios::$name(&mut cluster).await;
                tokio::task::spawn_blocking(move || cluster.stop())
                    .await
                    .expect("stop the cluster");
            }
        )*
    };
}
