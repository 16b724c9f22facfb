//! What each caller may do, checked by each call once its request is valid and the queues
//! it touches are known (a pipeline resolved to its first stage, an advance to its target):
//!
//! | calls | the caller needs, on the queue named |
//! |---|---|
//! | `Enqueue`, `EnqueueBatch`, `Get`, `Update`, `Delete` | producer |
//! | `Take`, `Complete`, `ExtendLease` | consumer; an advance out of its pipeline also producer on the target |
//! | `CreateQueue`, `DeleteQueue`, `PurgeQueue`, `ListDeadLetters`, `Redrive` | admin |
//! | `ApplyPipeline` | admin on every stage's queue |
//! | `GetQueue`, `QueueStats`, `GetPipeline` (any stage) | any role |
//! | `ListQueues`, `ListPipelines` | lists only what the caller may read |
//!
//! A batch with a forbidden item is refused whole, naming the first and listing them all.
//! Quotas come after the grants: the enqueue rate (per gateway process), the payload size,
//! and the queues that may exist within the caller's admin grants. A pipeline applied by a client may name only
//! handler URLs under `auth.handler_url_prefixes`.

use std::collections::BTreeSet;
use std::time::Instant;

use cascade_core::{HandlerKind, Pipeline};
use cascade_proto::v1::ListQueuesRequest;
use cascade_security::{Caller, EnqueueRates, HandlerUrls, Permission, SecurityError};

use crate::IngestError;
use crate::gateway::{Gateway, Prepared};

/// The gateway's share of the security settings.
pub(crate) struct Policy {
    pub rates: EnqueueRates,
    pub handler_urls: HandlerUrls,
}

/// `field`'s error for a refusal.
pub(crate) fn refused(field: &str, source: SecurityError) -> IngestError {
    IngestError::Security {
        field: field.to_owned(),
        source,
    }
}

/// PERMISSION_DENIED unless `caller` may do `permission` on `queue` (named by `field`).
pub(crate) fn allowed(
    caller: &Caller,
    permission: Permission,
    queue: &str,
    field: &str,
) -> Result<(), IngestError> {
    caller
        .check(permission, queue)
        .map_err(|source| refused(field, source))
}

/// INVALID_ARGUMENT for a header Cascade itself sets (`cascade-…`: where a dead letter came
/// from, why it failed): a client that could set them could steer a redrive.
pub(crate) fn no_reserved_headers<'a>(
    names: impl IntoIterator<Item = &'a String>,
    field: &str,
) -> Result<(), IngestError> {
    let prefix = cascade_core::event::RESERVED_HEADER_PREFIX;
    match names
        .into_iter()
        .find(|name| cascade_core::event::is_reserved_header(name))
    {
        Some(name) => Err(IngestError::invalid(
            field,
            format!(
                "header names starting with {prefix}, in any case, are Cascade's own (set on dead letters); rename {name}"
            ),
        )),
        None => Ok(()),
    }
}

/// RESOURCE_EXHAUSTED when `size` bytes of payload (in `field`) are over the caller's quota.
pub(crate) fn payload_quota(caller: &Caller, field: &str, size: usize) -> Result<(), IngestError> {
    match caller.identity() {
        Some(identity) => identity
            .quotas
            .check_payload(&identity.name, size as u64)
            .map_err(|source| refused(field, source)),
        None => Ok(()),
    }
}

/// A batch with a forbidden item is refused whole: the first such item's PERMISSION_DENIED,
/// which names it, becomes the request's, and the status lists every forbidden item so that
/// a client can send the others again without them.
pub(crate) fn refuse_whole<I>(prepared: &mut Vec<Prepared<I>>) -> Result<(), IngestError> {
    let forbidden: Vec<usize> = prepared
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p, Err(e) if e.code() == tonic::Code::PermissionDenied))
        .map(|(index, _)| index)
        .collect();
    match forbidden.first() {
        Some(&first) => prepared
            .swap_remove(first)
            .map(drop)
            .map_err(|err| err.refusing_forbidden(forbidden)),
        None => Ok(()),
    }
}

impl Gateway {
    /// Takes `count` enqueues from the caller's rate quota.
    pub(crate) fn enqueue_quota(&self, caller: &Caller, count: usize) -> Result<(), IngestError> {
        let Some(identity) = caller.identity() else {
            return Ok(());
        };
        self.policy
            .rates
            .take(&identity.name, &identity.quotas, count, Instant::now())
            .map_err(|source| refused("items", source))
    }

    /// A pipeline a client applies: admin on every stage (and on every stage of the pipeline
    /// it replaces, and on a stage's own dead-letter queue), its handlers within the
    /// allow-list, and its new queues within the caller's queue quota.
    pub(crate) async fn check_pipeline(
        &self,
        caller: &Caller,
        pipeline: &Pipeline,
    ) -> Result<(), IngestError> {
        if caller.identity().is_none() {
            return Ok(());
        }
        if let Some(replaced) = self.pipelines.get(&self.shards, &pipeline.name).await? {
            for stage in &replaced.stages {
                let queue = replaced.stage_queue(&stage.name);
                allowed(caller, Permission::Administer, queue.as_str(), "name")?;
            }
        }
        let queues: Vec<String> = pipeline
            .stages
            .iter()
            .map(|stage| pipeline.stage_queue(&stage.name).to_string())
            .collect();
        for (i, (stage, queue)) in pipeline.stages.iter().zip(&queues).enumerate() {
            let at = |name: &str| format!("stages[{i}]{name}");
            allowed(caller, Permission::Administer, queue, &at(""))?;
            if let Some(dead_letters) = &stage.queue.dead_letter_queue {
                let field = at(".queue.dead_letter_queue");
                allowed(
                    caller,
                    Permission::Administer,
                    dead_letters.as_str(),
                    &field,
                )?;
            }
            let (kind, url) = match &stage.handler.kind {
                HandlerKind::Http { url } => ("http.url", url),
                HandlerKind::Grpc { endpoint } => ("grpc.endpoint", endpoint),
                HandlerKind::Builtin(_) => continue,
            };
            let field = at(&format!(".handler.{kind}"));
            self.policy
                .handler_urls
                .check(url)
                .map_err(|source| refused(&field, source))?;
        }
        self.queue_quota(caller, &queues).await
    }

    /// RESOURCE_EXHAUSTED when creating those of `queues` that do not exist yet would put
    /// more queues within the caller's admin grants than its `max_queues`.
    pub(crate) async fn queue_quota(
        &self,
        caller: &Caller,
        queues: &[String],
    ) -> Result<(), IngestError> {
        let Some(identity) = caller.identity() else {
            return Ok(());
        };
        let Some(limit) = identity.quotas.max_queues else {
            return Ok(());
        };
        let patterns: Vec<_> = identity.admin_patterns().collect();
        let mut existing = BTreeSet::new();
        for prefix in patterns.iter().map(|p| p.prefix()).collect::<BTreeSet<_>>() {
            let mut token = String::new();
            loop {
                let page = self
                    .list_queue_page(ListQueuesRequest {
                        prefix: prefix.to_owned(),
                        page_size: 0,
                        page_token: token,
                    })
                    .await?;
                let names = page.queues.into_iter().map(|q| q.name);
                existing.extend(names.filter(|n| patterns.iter().any(|p| p.matches(n))));
                // At the limit the count no longer matters.
                if page.next_page_token.is_empty() || existing.len() as u64 >= limit {
                    break;
                }
                token = page.next_page_token;
            }
        }
        let adding = queues.iter().filter(|q| !existing.contains(*q)).count() as u64;
        identity
            .quotas
            .check_queues(&identity.name, existing.len() as u64, adding)
            .map_err(|source| refused("name", source))
    }
}
