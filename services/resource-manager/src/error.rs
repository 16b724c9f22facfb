//! The resource manager's one error type. The decision itself cannot fail: bad numbers in
//! stats are clamped, not refused, so only settings, stage definitions, the bus and the
//! executor produce errors.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceManagerError {
    /// A setting out of range; `key` is the dotted key, e.g. `resource_manager.interval`.
    #[error("{key}: {reason}")]
    Setting { key: String, reason: String },
    /// A pipeline stage that cannot be managed, e.g. its queue name is invalid.
    #[error("stage {stage}: {reason}")]
    Stage { stage: String, reason: String },
    /// The bus refused a subscription, or closed under the service loop.
    #[error("bus subject {subject}: {reason}")]
    Bus { subject: String, reason: String },
    /// The executor could not apply a stage's decision.
    #[error("apply the decision for stage {stage}: {reason}")]
    Apply { stage: String, reason: String },
}

impl ResourceManagerError {
    /// An error about `resource_manager.<key>`.
    pub(crate) fn setting(key: &str, reason: impl Into<String>) -> ResourceManagerError {
        ResourceManagerError::Setting {
            key: format!("resource_manager.{key}"),
            reason: reason.into(),
        }
    }
}

/// The settings' own checks report through the service crate's error; a setting stays a
/// setting, with its key.
impl From<cascade_service::ServiceError> for ResourceManagerError {
    fn from(e: cascade_service::ServiceError) -> ResourceManagerError {
        match e {
            cascade_service::ServiceError::Setting { key, reason } => {
                ResourceManagerError::Setting { key, reason }
            }
            other => ResourceManagerError::Setting {
                key: "resource_manager".into(),
                reason: other.to_string(),
            },
        }
    }
}
