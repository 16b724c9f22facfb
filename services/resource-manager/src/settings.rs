//! The `[resource_manager]` settings live in `cascade_service::settings` with every other
//! section (one settings tree per process); re-exported here for the decision's modules.

pub use cascade_service::settings::{
    ExecutorKind, KubernetesSettings, RATE_INTERVALS, ResourceManagerSettings,
};
