//! Extending: every held event, waiting or running, is extended half-way through its lease
//! (at most `EXTENSIONS_IN_FLIGHT` at once). A lease found gone is counted and the event let
//! go; an extension that fails in transit is tried again soon.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1;
use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::Instrument;

use super::{Extended, State};
use crate::Handler;
use crate::lease::{extend_at, extend_retry_pause, remaining_lease};
use crate::stats::Counter;

impl<H: Handler> State<H> {
    /// The earliest extension due, dropping entries of events no longer held.
    pub(super) fn next_extend_due(&mut self) -> Option<Instant> {
        while let Some(&Reverse((due, key))) = self.extend_queue.peek() {
            match self.held.get(&key) {
                Some(held) if held.next_extend == due && !held.extending && !held.lost => {
                    return Some(due);
                }
                _ => {
                    self.extend_queue.pop();
                }
            }
        }
        None
    }

    pub(super) fn extend_due(&mut self) {
        let now = Instant::now();
        while let Some(due) = self.next_extend_due() {
            if due > now {
                break;
            }
            let Some(Reverse((_, key))) = self.extend_queue.pop() else {
                break;
            };
            let Some(held) = self.held.get_mut(&key) else {
                continue;
            };
            held.extending = true;
            let request = v1::ExtendLeaseRequest {
                queue: self.ctx.config.queue.as_str().to_owned(),
                id: held.id.clone(),
                lease_token: held.token.clone(),
                extend_by: self.ctx.config.lease.map(duration_to_proto),
            };
            // Half the lease is left now: a quarter for the answer leaves time to try again.
            let limit = (held.lease / 4).max(Duration::from_millis(50));
            let mut client = self.ctx.client.clone();
            let permits = Arc::clone(&self.extend_permits);
            let extend = async move {
                let _permit = permits.acquire_owned().await;
                let answer = match tokio::time::timeout(limit, client.extend_lease(request)).await {
                    Ok(answer) => answer.map(tonic::Response::into_inner),
                    Err(_) => Err(tonic::Status::deadline_exceeded("extension timed out")),
                };
                Extended {
                    received: Instant::now(),
                    received_wall: SystemTime::now(),
                    answer,
                }
            };
            let task = self.extends.spawn(extend.in_current_span());
            self.extend_keys.insert(task.id(), key);
        }
    }

    pub(super) fn on_extended(&mut self, done: Result<(tokio::task::Id, Extended), JoinError>) {
        let task = done.as_ref().map_or_else(JoinError::id, |(task, _)| *task);
        let Some(key) = self.extend_keys.remove(&task) else {
            return;
        };
        let Some(held) = self.held.get_mut(&key) else {
            return;
        };
        held.extending = false;
        let Extended {
            received,
            received_wall,
            answer,
        } = match done {
            Ok((_, extended)) => extended,
            Err(err) => {
                // Possible where the gateway's code runs in this process (`cascade
                // standalone`): the event is still held, so its extension is tried again as
                // one that failed in transit is.
                tracing::error!(error = %err, "worker.extend.task_failed");
                Extended {
                    received: Instant::now(),
                    received_wall: SystemTime::now(),
                    answer: Err(tonic::Status::internal("the extension's task failed")),
                }
            }
        };
        match answer {
            Ok(extended) => {
                held.lease = remaining_lease(
                    self.ctx.config.lease,
                    extended.lease_expires_at.as_ref(),
                    received_wall,
                );
                held.deadline = received + held.lease;
                held.next_extend = extend_at(received, held.lease);
                self.extend_queue.push(Reverse((held.next_extend, key)));
                self.ctx.shared.stats.add(Counter::Extended, 1);
            }
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::NotFound
                ) =>
            {
                tracing::warn!(id = %held.id, message = %status.message(), "worker.lease.lost");
                self.ctx.shared.stats.add(Counter::LeasesLost, 1);
                if held.event.is_some() {
                    self.held.remove(&key);
                    self.waiting.retain(|waiting| *waiting != key);
                } else {
                    held.lost = true;
                }
            }
            Err(status) => {
                tracing::warn!(id = %held.id, code = ?status.code(), message = %status.message(), "worker.extend.failed; trying again");
                held.next_extend = Instant::now() + extend_retry_pause(held.lease);
                self.extend_queue.push(Reverse((held.next_extend, key)));
            }
        }
    }
}
