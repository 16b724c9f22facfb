//! The `[resource_manager]` settings: the budget, the drain target and the stabilisation
//! windows of the decision. Deserialized strictly (unknown keys are refused), then checked
//! with [`ResourceManagerSettings::validate`], whose errors name `resource_manager.<key>`.
//! The type lives here, with the other sections, so that `cascade-resource-manager` (the
//! decision, the service loop and its binary) can depend on this crate.
//!
//! ```toml
//! [resource_manager]
//! enabled = true
//! executor = "local"
//! interval = "5s"
//! total_handlers = 16
//! target_drain = "60s"
//! scale_down_after = "2m"
//! idle_after = "5m"
//! max_batch = 100
//! throughput_window = "1m"
//! default_throughput = 1.0
//! tolerance = 0.1
//!
//! [resource_manager.kubernetes]
//! namespace = ""
//! deployment = "cascade-stage-{pipeline}-{stage}"
//! deployments = {}
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::Pipeline;
use cascade_core::units::{format_duration, one_of, serde_duration};
use serde::{Deserialize, Serialize};

use crate::ServiceError;

/// Handlers in the budget at most: far beyond one cluster, small enough to catch a typo.
const MAX_TOTAL_HANDLERS: u32 = 100_000;
/// Events per take at most, whatever `max_batch` says: a take must fit one bus message.
const MAX_BATCH_LIMIT: u32 = 10_000;
/// The longest interval: a manager that looks less often cannot react to anything.
const MAX_INTERVAL: Duration = Duration::from_secs(3_600);
/// The rates are medians over the last three intervals, so the window must hold them.
pub const RATE_INTERVALS: u32 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceManagerSettings {
    /// Whether `cascade standalone` runs the resource manager over its stage workers.
    /// Off: each stage keeps `handler.concurrency` handlers at once, as its worker starts.
    pub enabled: bool,
    /// What applies the decisions. `cascade standalone` always turns its own stage workers;
    /// the `cascade-resource-manager` binary takes `kubernetes` or `none`.
    pub executor: ExecutorKind,
    /// Where the `kubernetes` executor finds each stage's Deployment.
    pub kubernetes: KubernetesSettings,
    /// How often stats are read and a decision is made.
    #[serde(with = "serde_duration")]
    pub interval: Duration,
    /// Handlers over all stages at most: the budget that priorities share.
    pub total_handlers: u32,
    /// A backlog should be worked off within this. Also how far ahead delayed events count
    /// as work, so that handlers are ready before a known wave becomes due.
    #[serde(with = "serde_duration")]
    pub target_drain: Duration,
    /// A stage keeps its handlers until its need has stayed lower for this long; then it
    /// goes to the highest need seen in that time. At least `interval`.
    #[serde(with = "serde_duration")]
    pub scale_down_after: Duration,
    /// A stage with nothing ready, leased, due soon or arriving for this long goes to its
    /// `min_handlers` (0 allowed: scale to zero; new arrivals wake it). At least
    /// `scale_down_after`.
    #[serde(with = "serde_duration")]
    pub idle_after: Duration,
    /// Events one take may ask for at most.
    pub max_batch: u32,
    /// How far back per-handler throughput is measured.
    #[serde(with = "serde_duration")]
    pub throughput_window: Duration,
    /// Events per second one handler is assumed to finish until it has been measured. Low on
    /// purpose: an unmeasured stage asks for more handlers, but at most doubles per interval.
    pub default_throughput: f64,
    /// A stage is scaled up only when its need exceeds its current count by more than this
    /// fraction: need that hovers just above a whole number must not add and remove a
    /// handler every few minutes.
    pub tolerance: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum ExecutorKind {
    /// The stage workers of `cascade standalone`, in its process.
    Local,
    /// The `scale` subresource of each stage's Deployment, with kube-rs.
    Kubernetes,
    /// Decide, show and publish only; nothing is changed.
    None,
}

impl TryFrom<String> for ExecutorKind {
    type Error = String;

    fn try_from(given: String) -> Result<ExecutorKind, String> {
        let choices = [
            ("local", ExecutorKind::Local),
            ("kubernetes", ExecutorKind::Kubernetes),
            ("none", ExecutorKind::None),
        ];
        one_of(&given, &choices)
    }
}

/// The `kubernetes` executor's Deployments: one per stage, in one namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSettings {
    /// The Deployments' namespace; empty: the manager's own (in a pod, the service
    /// account's namespace).
    pub namespace: String,
    /// The Deployment of stage `<stage>` of pipeline `<pipeline>`, with `{pipeline}` and
    /// `{stage}` replaced by the names made lowercase with each character other than
    /// `a-z`, `0-9` and `-` turned into `-` (Kubernetes names allow no others).
    pub deployment: String,
    /// Names that do not follow `deployment`, by stage queue (`<pipeline>.<stage>`).
    pub deployments: BTreeMap<String, String>,
}

impl Default for KubernetesSettings {
    fn default() -> Self {
        KubernetesSettings {
            namespace: String::new(),
            deployment: "cascade-stage-{pipeline}-{stage}".into(),
            deployments: BTreeMap::new(),
        }
    }
}

impl KubernetesSettings {
    /// The Deployment that runs stage queue `stage` (`<pipeline>.<stage>`): its override
    /// from `deployments`, or the `deployment` template with the names filled in. A queue
    /// that is no pipeline's stage fills `{stage}` whole and `{pipeline}` with nothing.
    pub fn deployment_of(&self, stage: &str) -> String {
        if let Some(name) = self.deployments.get(stage) {
            return name.clone();
        }
        let (pipeline, stage) = Pipeline::split_stage_queue(stage).unwrap_or(("", stage));
        self.deployment
            .replace("{pipeline}", &dns_label(pipeline))
            .replace("{stage}", &dns_label(stage))
    }
}

/// Lowercase, with each character outside `a-z0-9-` turned into `-`.
fn dns_label(name: &str) -> String {
    name.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-') => c,
            _ => '-',
        })
        .collect()
}

impl Default for ResourceManagerSettings {
    fn default() -> Self {
        ResourceManagerSettings {
            enabled: true,
            executor: ExecutorKind::Local,
            kubernetes: KubernetesSettings::default(),
            interval: Duration::from_secs(5),
            total_handlers: 16,
            target_drain: Duration::from_secs(60),
            scale_down_after: Duration::from_secs(120),
            idle_after: Duration::from_secs(300),
            max_batch: 100,
            throughput_window: Duration::from_secs(60),
            default_throughput: 1.0,
            tolerance: 0.1,
        }
    }
}

impl ResourceManagerSettings {
    /// Checks every value; the first bad one is named as `resource_manager.<key>`.
    pub fn validate(&self) -> Result<(), ServiceError> {
        if self.interval.is_zero() || self.interval > MAX_INTERVAL {
            return Err(setting(
                "interval",
                format!(
                    "must be more than 0 and at most {}, got {}",
                    format_duration(MAX_INTERVAL),
                    format_duration(self.interval)
                ),
            ));
        }
        if !(1..=MAX_TOTAL_HANDLERS).contains(&self.total_handlers) {
            return Err(setting(
                "total_handlers",
                format!(
                    "must be 1 to {MAX_TOTAL_HANDLERS}, got {}",
                    self.total_handlers
                ),
            ));
        }
        if self.target_drain < self.interval {
            return Err(setting(
                "target_drain",
                format!(
                    "must be at least resource_manager.interval ({}), got {}",
                    format_duration(self.interval),
                    format_duration(self.target_drain)
                ),
            ));
        }
        // A hold shorter than one round is over before the next decision sees it: the
        // count would follow every dip of the need, down and back up.
        if self.scale_down_after < self.interval {
            return Err(setting(
                "scale_down_after",
                format!(
                    "must be at least resource_manager.interval ({}), got {}",
                    format_duration(self.interval),
                    format_duration(self.scale_down_after)
                ),
            ));
        }
        // Idleness, not the shorter scale-down hold, decides when a stage goes to its
        // minimum (0 allowed): a stage with handlers keeps one until it is idle.
        if self.idle_after < self.scale_down_after {
            return Err(setting(
                "idle_after",
                format!(
                    "must be at least resource_manager.scale_down_after ({}), got {}",
                    format_duration(self.scale_down_after),
                    format_duration(self.idle_after)
                ),
            ));
        }
        let min_window = self.interval.saturating_mul(RATE_INTERVALS);
        if self.throughput_window < min_window {
            return Err(setting(
                "throughput_window",
                format!(
                    "must be at least {RATE_INTERVALS} × resource_manager.interval ({}), got {}",
                    format_duration(min_window),
                    format_duration(self.throughput_window)
                ),
            ));
        }
        if !(1..=MAX_BATCH_LIMIT).contains(&self.max_batch) {
            return Err(setting(
                "max_batch",
                format!("must be 1 to {MAX_BATCH_LIMIT}, got {}", self.max_batch),
            ));
        }
        if !(self.default_throughput.is_finite() && self.default_throughput > 0.0) {
            return Err(setting(
                "default_throughput",
                format!(
                    "must be a number of events per second above 0, got {}",
                    self.default_throughput
                ),
            ));
        }
        if !(self.tolerance.is_finite() && (0.0..1.0).contains(&self.tolerance)) {
            return Err(setting(
                "tolerance",
                format!(
                    "must be a fraction from 0 up to (not including) 1, got {}",
                    self.tolerance
                ),
            ));
        }
        if self.kubernetes.deployment.is_empty() {
            return Err(setting(
                "kubernetes.deployment",
                "must name the Deployments, e.g. \"cascade-stage-{pipeline}-{stage}\"",
            ));
        }
        if let Some((stage, _)) = self
            .kubernetes
            .deployments
            .iter()
            .find(|(_, n)| n.is_empty())
        {
            return Err(setting(
                &format!("kubernetes.deployments.\"{stage}\""),
                "must not be empty",
            ));
        }
        Ok(())
    }
}

/// An error about `resource_manager.<key>`.
fn setting(key: &str, reason: impl Into<String>) -> ServiceError {
    ServiceError::setting(format!("resource_manager.{key}"), reason)
}

#[cfg(test)]
mod tests {
    use serde::de::IntoDeserializer;
    use serde::de::value::{Error as DeError, MapDeserializer};

    use super::*;

    fn from_strings(
        pairs: &[(&'static str, &'static str)],
    ) -> Result<ResourceManagerSettings, DeError> {
        let map: MapDeserializer<'_, _, DeError> =
            MapDeserializer::new(pairs.iter().map(|(k, v)| (*k, v.into_deserializer())));
        ResourceManagerSettings::deserialize(map)
    }

    #[test]
    fn deployment_names_follow_the_template_unless_overridden() {
        let mut settings = KubernetesSettings::default();
        settings
            .deployments
            .insert("orders.Ship".into(), "shipping-worker".into());
        assert_eq!(
            settings.deployment_of("Orders.check_stock"),
            "cascade-stage-orders-check-stock"
        );
        assert_eq!(settings.deployment_of("orders.Ship"), "shipping-worker");
    }

    #[test]
    fn defaults_are_valid() {
        ResourceManagerSettings::default()
            .validate()
            .expect("the defaults are valid");
    }

    #[test]
    fn the_scale_down_hold_and_idleness_may_equal_their_lower_bounds() {
        let settings = ResourceManagerSettings {
            interval: Duration::from_secs(10),
            scale_down_after: Duration::from_secs(10),
            idle_after: Duration::from_secs(10),
            throughput_window: Duration::from_secs(30),
            target_drain: Duration::from_secs(10),
            ..ResourceManagerSettings::default()
        };
        settings
            .validate()
            .expect("a hold of one interval and idleness as long as the hold are valid");
    }

    #[test]
    fn idleness_is_checked_against_the_scale_down_hold_given() {
        // Each is fine against the defaults; together, idleness would come before the hold.
        let settings = ResourceManagerSettings {
            scale_down_after: Duration::from_secs(600),
            idle_after: Duration::from_secs(300),
            ..ResourceManagerSettings::default()
        };
        let err = settings
            .validate()
            .expect_err("idle_after below scale_down_after");
        assert_eq!(
            err.to_string(),
            "setting resource_manager.idle_after: must be at least \
             resource_manager.scale_down_after (10m), got 5m"
        );
    }

    #[test]
    fn durations_are_read_as_human_strings_over_the_defaults() {
        let settings = from_strings(&[("interval", "10s"), ("scale_down_after", "5m")])
            .expect("valid settings");
        assert_eq!(settings.interval, Duration::from_secs(10));
        assert_eq!(settings.scale_down_after, Duration::from_secs(300));
        assert_eq!(settings.total_handlers, 16);
    }

    #[test]
    fn an_executor_that_is_none_of_them_is_refused_naming_them() {
        let err = from_strings(&[("executor", "kubernets")]).expect_err("misspelt");
        assert!(
            err.to_string()
                .contains("must be one of local, kubernetes, none, got \"kubernets\""),
            "{err}"
        );
        let read = from_strings(&[("executor", "kubernetes")]).expect("valid");
        assert_eq!(read.executor, ExecutorKind::Kubernetes);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = from_strings(&[("intervall", "10s")]).expect_err("misspelt key");
        assert!(err.to_string().contains("intervall"), "{err}");
    }

    #[test]
    fn errors_name_the_key_and_the_range() {
        let base = ResourceManagerSettings::default();
        let cases: Vec<(ResourceManagerSettings, &str, &str)> = vec![
            (
                ResourceManagerSettings {
                    interval: Duration::ZERO,
                    ..base.clone()
                },
                "resource_manager.interval",
                "more than 0",
            ),
            (
                ResourceManagerSettings {
                    total_handlers: 0,
                    ..base.clone()
                },
                "resource_manager.total_handlers",
                "1 to 100000",
            ),
            (
                ResourceManagerSettings {
                    target_drain: Duration::from_secs(1),
                    ..base.clone()
                },
                "resource_manager.target_drain",
                "at least resource_manager.interval (5s)",
            ),
            (
                ResourceManagerSettings {
                    scale_down_after: Duration::from_secs(1),
                    ..base.clone()
                },
                "resource_manager.scale_down_after",
                "at least resource_manager.interval (5s), got 1s",
            ),
            (
                ResourceManagerSettings {
                    idle_after: Duration::from_secs(60),
                    ..base.clone()
                },
                "resource_manager.idle_after",
                "at least resource_manager.scale_down_after (2m), got 1m",
            ),
            (
                ResourceManagerSettings {
                    throughput_window: Duration::from_secs(10),
                    ..base.clone()
                },
                "resource_manager.throughput_window",
                "(15s), got 10s",
            ),
            (
                ResourceManagerSettings {
                    max_batch: 0,
                    ..base.clone()
                },
                "resource_manager.max_batch",
                "1 to 10000",
            ),
            (
                ResourceManagerSettings {
                    default_throughput: f64::NAN,
                    ..base.clone()
                },
                "resource_manager.default_throughput",
                "above 0",
            ),
            (
                ResourceManagerSettings {
                    tolerance: 1.0,
                    ..base.clone()
                },
                "resource_manager.tolerance",
                "fraction",
            ),
        ];
        for (settings, key, words) in cases {
            let err = settings.validate().expect_err(key);
            let text = err.to_string();
            assert!(text.starts_with(&format!("setting {key}: ")), "{text}");
            assert!(text.contains(words), "{text}");
        }
    }
}
