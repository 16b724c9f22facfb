//! The events of a shard poll whose client went away: they go back to their queue at once,
//! instead of staying leased to nobody until their lease ends (their attempt stays counted).

use std::sync::Arc;

use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::v1::completion::Outcome as ProtoOutcome;
use cascade_proto::v1::{CompleteRequest, Completion, CompletionResult, Release, TakeResponse};

use crate::coalesce::Batch;
use crate::route::Shards;
use crate::worker::CompleteBatch;

/// Where a poll's events go back to: their shard, in requests of at most `per_request`
/// releases (`Limits::bus_items`), so that each reply fits one bus message even when every
/// release fails (a lease that ended and was taken again meanwhile).
#[derive(Clone)]
pub(crate) struct ReleaseTo {
    pub shards: Arc<Shards>,
    pub shard: u32,
    pub per_request: usize,
}

impl ReleaseTo {
    /// Gives the events of `taken` back to their queue.
    pub async fn release(&self, taken: TakeResponse) {
        let completions: Vec<Completion> = taken
            .events
            .into_iter()
            .filter_map(|leased| {
                let event = leased.event?;
                Some(Completion {
                    queue: event.queue,
                    id: event.id,
                    lease_token: leased.lease_token,
                    outcome: Some(ProtoOutcome::Release(Release {})),
                })
            })
            .collect();
        let shard = self.shard;
        for chunk in completions.chunks(self.per_request.max(1)) {
            let count = chunk.len();
            let request = CompleteRequest {
                completions: chunk.to_vec(),
            };
            let released = self
                .shards
                .call(shard, Op::Complete(request))
                .await
                .and_then(|reply| CompleteBatch::outcomes(shard, reply));
            match released {
                Ok(results) => {
                    let failed = results.iter().filter(|r| r.code != 0).count();
                    tracing::info!(shard, count, failed, "take.abandoned.released");
                }
                // They come back when their lease ends, as they would have without the release.
                Err(err) => {
                    tracing::warn!(shard, count, error = %err, "take.abandoned.release_failed")
                }
            }
        }
    }
}

/// A poll's leased events until they are the client's answer. Dropped before that (the
/// client went away before the poll's answer reached the RPC, or while the take sent its
/// completions to other shards, or the take failed after the poll), they are released.
pub(crate) struct Unanswered {
    to: ReleaseTo,
    taken: Option<TakeResponse>,
}

impl Unanswered {
    pub fn hold(to: &ReleaseTo, taken: TakeResponse) -> Unanswered {
        Unanswered {
            to: to.clone(),
            taken: Some(taken),
        }
    }

    /// The results of the completions the poll carried, taken out.
    pub fn completion_results(&mut self) -> Vec<CompletionResult> {
        self.taken
            .as_mut()
            .map(|t| std::mem::take(&mut t.completions))
            .unwrap_or_default()
    }

    pub fn has_events(&self) -> bool {
        self.taken.as_ref().is_some_and(|t| !t.events.is_empty())
    }

    /// Gives the events back to their queue now (the client went away).
    pub async fn release(mut self) {
        if let Some(taken) = self.taken.take().filter(|t| !t.events.is_empty()) {
            self.to.release(taken).await;
        }
    }

    /// The events, now the client's.
    pub fn answered(mut self) -> TakeResponse {
        self.taken.take().unwrap_or_default()
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some(taken) = self.taken.take().filter(|t| !t.events.is_empty()) else {
            return;
        };
        // No runtime only when the process is stopping: the leases end on their own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let to = self.to.clone();
            runtime.spawn(async move { to.release(taken).await });
        }
    }
}
