//! The Kubernetes executor: each stage runs as its own Deployment of the stage worker, and a
//! decision sets that Deployment's replicas through its `scale` subresource. A handler is
//! one replica; the batch size is not applied here (each replica takes what its own
//! settings say). RBAC: `get` on `deployments`, `patch` on `deployments/scale`.
//!
//! Each stage's Deployment is read before every round decides it (one GET per stage per
//! `resource_manager.interval`): its replicas, so that a round starts from what runs (a
//! manager restarted beside eight replicas does not decide as if there were none, and a
//! count changed by hand is what the next round starts from), and how many are ready. The
//! history counts only ready replicas as handlers that did the work, so that a stage scaled
//! from 2 to 20 is not measured as 20 handlers doing the work of 2 while 18 pods start
//! (which would make each handler look ten times slower, and ask for more), and pods lost
//! later (a stalled rollout, a node gone) stop counting. A stage whose count is still
//! unknown when its decision comes (its read failed) is read then and not patched that
//! round, for its decision started from nothing. A stage is patched, with the merge patch
//! `{"spec":{"replicas":n}}`, only when the decision differs from what its Deployment was
//! last seen or set at.
//!
//! Failure policy: a stage whose read or patch fails is logged, and tried again next round
//! (one whose read fails keeps what was last seen; one whose patch failed is forgotten, since
//! whether the patch took effect is unknown); the other stages are still applied. Nothing here ends the loop. Scaling in
//! kills no work: Kubernetes sends SIGTERM, and the stage worker drains (finishes or
//! releases what it holds) within the pod's grace period.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use cascade_core::QueueName;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::settings::KubernetesSettings;
use crate::{Current, Decision, Executor, ResourceManagerError};

/// Patches the scale of each stage's Deployment. Cheap to clone.
#[derive(Clone)]
pub struct KubernetesExecutor {
    api: Api<Deployment>,
    /// Where each stage's Deployment name comes from.
    names: KubernetesSettings,
    /// Replicas per stage as last read or patched.
    known: Arc<Mutex<BTreeMap<QueueName, Replicas>>>,
}

/// A stage's Deployment as last seen.
#[derive(Clone, Copy, Debug)]
struct Replicas {
    /// Its `spec.replicas`, as read or as patched since.
    set: u32,
    /// Its `status.readyReplicas` when last read (absent: none ready).
    ready: u32,
}

impl KubernetesExecutor {
    /// Scales the Deployments of `namespace` with `client`; names from `settings`.
    pub fn new(
        client: Client,
        namespace: &str,
        settings: &KubernetesSettings,
    ) -> KubernetesExecutor {
        KubernetesExecutor {
            api: Api::namespaced(client, namespace),
            names: settings.clone(),
            known: Arc::default(),
        }
    }

    /// Reads the stage's Deployment and remembers its replicas, set and ready.
    async fn read(&self, stage: &QueueName) -> Result<(), ResourceManagerError> {
        let name = self.names.deployment_of(stage.as_str());
        let deployment = self
            .api
            .get(&name)
            .await
            .map_err(|e| ResourceManagerError::Apply {
                stage: stage.to_string(),
                reason: format!("read deployment {name}: {e}"),
            })?;
        let count = |n: Option<i32>| u32::try_from(n.unwrap_or(0)).unwrap_or(0);
        let replicas = Replicas {
            set: count(deployment.spec.replicas),
            ready: count(deployment.status.and_then(|status| status.ready_replicas)),
        };
        self.lock().insert(stage.clone(), replicas);
        Ok(())
    }

    /// Patches the stage's replicas to `handlers` if they differ from what they were last
    /// seen at; a stage not seen yet is only read.
    async fn apply_one(&self, decision: &Decision) -> Result<(), ResourceManagerError> {
        let stage = &decision.stage;
        let name = self.names.deployment_of(stage.as_str());
        let failed = |what: &str, e: kube::Error| ResourceManagerError::Apply {
            stage: stage.to_string(),
            reason: format!("{what} the scale of deployment {name}: {e}"),
        };
        let known = self.lock().get(stage).copied();
        let Some(replicas) = known else {
            return self.read(stage).await;
        };
        if replicas.set == decision.handlers {
            return Ok(());
        }
        let patch = serde_json::json!({ "spec": { "replicas": decision.handlers } });
        let patched = self
            .api
            .patch_scale(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        if let Err(e) = patched {
            // Whether it took effect is unknown: read it again next round.
            self.lock().remove(stage);
            return Err(failed("patch", e));
        }
        tracing::info!(
            stage = %stage,
            deployment = %name,
            from = replicas.set,
            to = decision.handlers,
            "resource_manager.kubernetes.scaled"
        );
        let patched = Replicas {
            set: decision.handlers,
            ..replicas
        };
        self.lock().insert(stage.clone(), patched);
        Ok(())
    }

    /// Each write is one insert, so a lock poisoned by a panic still holds whole values.
    fn lock(&self) -> MutexGuard<'_, BTreeMap<QueueName, Replicas>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Executor for KubernetesExecutor {
    async fn apply(&self, decisions: &[Decision]) -> Result<(), ResourceManagerError> {
        self.lock()
            .retain(|stage, _| decisions.iter().any(|d| d.stage == *stage));
        let mut first_error = None;
        for decision in decisions {
            if let Err(e) = self.apply_one(decision).await {
                tracing::warn!(stage = %decision.stage, error = %e, "resource_manager.kubernetes.apply");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn current(&self) -> Current {
        self.lock()
            .iter()
            .map(|(stage, replicas)| (stage.clone(), replicas.set))
            .collect()
    }

    fn working(&self) -> Current {
        self.lock()
            .iter()
            .map(|(stage, replicas)| (stage.clone(), replicas.set.min(replicas.ready)))
            .collect()
    }

    async fn observe(&self, stages: &[&QueueName]) {
        for &stage in stages {
            if let Err(e) = self.read(stage).await {
                tracing::warn!(stage = %stage, error = %e, "resource_manager.kubernetes.read");
            }
        }
    }
}
