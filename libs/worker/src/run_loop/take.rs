//! Taking: one long-poll `Take` at a time, when no taken event waits and a handler slot is
//! free, carrying the outcomes known by then. It runs in its own task so that the loop never
//! drops it while it may still lease events; failures that may pass are retried after a
//! pause that doubles, and the outcomes a failed take carried go to the completer (those
//! the gateway refused it for, outside the worker's grants, fail instead).

use std::cmp::Reverse;
use std::time::SystemTime;

use cascade_client::is_refused_whole;
use cascade_core::Outcome;
use cascade_proto::convert::duration_to_proto;
use cascade_proto::v1;
use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::Instrument;

use super::{Held, State, TAKE_PAUSE_FIRST, TAKE_PAUSE_MAX, TAKE_SLACK, Took};
use crate::complete::{completions_of, fail_forbidden, fits_one_request, may_pass, record_results};
use crate::lease::{extend_at, remaining_lease};
use crate::stats::Counter;
use crate::trace;
use crate::{Handler, WorkerError};

impl<H: Handler> State<H> {
    pub(super) fn maybe_take(&mut self) {
        let slot_free = self.handlers.len() < self.knobs.concurrency as usize;
        if self.stopping || self.take.is_some() || !self.waiting.is_empty() || !slot_free {
            return;
        }
        if self.take_pause_until.is_some() {
            return;
        }
        let config = &self.ctx.config;
        if fits_one_request(&self.carried, config.completion_batch) {
            self.take_carried = std::mem::take(&mut self.carried);
        }
        let request = v1::TakeRequest {
            queue: config.queue.as_str().to_owned(),
            max_events: self.knobs.batch,
            lease: config.lease.map(duration_to_proto),
            wait: Some(duration_to_proto(config.poll_wait)),
            worker_id: config.worker_id.clone(),
            completions: completions_of(&self.take_carried),
        };
        let limit = config.poll_wait + TAKE_SLACK;
        let mut client = self.ctx.client.clone();
        let queue = config.queue.clone();
        let taking = async move {
            let answer = match tokio::time::timeout(limit, client.take(request)).await {
                Ok(answer) => answer.map(tonic::Response::into_inner),
                Err(_) => Err(tonic::Status::deadline_exceeded(
                    "no answer to the take within its long poll",
                )),
            };
            if let Ok(taken) = &answer {
                trace::record_take(queue.as_str(), taken);
            }
            Took {
                received: Instant::now(),
                received_wall: SystemTime::now(),
                answer,
            }
        };
        self.take = Some(tokio::spawn(taking.in_current_span()));
    }

    pub(super) async fn on_took(&mut self, took: Result<Took, JoinError>) {
        let carried = std::mem::take(&mut self.take_carried);
        let took = match took {
            Ok(took) => took,
            Err(err) => Took {
                received: Instant::now(),
                received_wall: SystemTime::now(),
                answer: Err(tonic::Status::internal(format!(
                    "the take task failed: {err}"
                ))),
            },
        };
        let carried_any = !carried.is_empty();
        match &took.answer {
            Ok(response) if response.completions.len() == carried.len() => {
                // Those whose shard could not be reached wait for their retry there.
                let again = record_results(carried, &response.completions, &self.ctx.shared.stats);
                self.send_to_completer(again).await;
            }
            _ if !carried_any => {}
            // Not applied (a take that fails applies none), or not known to be (no answer, or
            // one from a gateway that does not carry completions): sent on their own, where
            // one that did apply is refused as stale and changes nothing. Those the gateway
            // refused the take for (outside the worker's grants) fail here.
            answer => {
                let carried = match answer {
                    Err(status) => fail_forbidden(carried, status, &self.ctx.shared.stats)
                        .unwrap_or_else(|carried| carried),
                    Ok(_) => carried,
                };
                tracing::debug!(count = carried.len(), "worker.take.completions_sent_alone");
                self.send_to_completer(carried).await;
            }
        }
        let response = match took.answer {
            Ok(response) => response,
            Err(status) => return self.on_take_failed(status, carried_any).await,
        };
        self.takes_failed_in_a_row = 0;
        self.ctx
            .shared
            .stats
            .add(Counter::Taken, response.events.len() as u64);
        for leased in response.events {
            let Some(event) = leased.event else {
                tracing::error!("worker.take.event_missing");
                continue;
            };
            let lease = remaining_lease(
                self.ctx.config.lease,
                leased.lease_expires_at.as_ref(),
                took.received_wall,
            );
            let held = Held {
                id: event.id.clone(),
                token: leased.lease_token,
                event: Some(event),
                lease,
                deadline: took.received + lease,
                next_extend: extend_at(took.received, lease),
                extending: false,
                lost: false,
            };
            if self.stopping || self.knobs.concurrency == 0 {
                self.complete(&held, Outcome::Release);
                continue;
            }
            let key = self.next_key;
            self.next_key += 1;
            self.extend_queue.push(Reverse((held.next_extend, key)));
            self.held.insert(key, held);
            self.waiting.push_back(key);
        }
    }

    /// `carried`: the take carried completions, which may be what was refused (a grant, a
    /// limit): they went on their own (less those outside the worker's grants, which
    /// failed), and the take is tried again without them, at once.
    pub(super) async fn on_take_failed(&mut self, status: tonic::Status, carried: bool) {
        self.ctx.shared.stats.add(Counter::TakeFailures, 1);
        if self.stopping {
            // No more takes anyway; a gateway that is stopping too may have cut this one.
            tracing::debug!(code = ?status.code(), "worker.take.failed while draining");
            return;
        }
        if carried && (is_refused_whole(&status) || !may_pass(status.code())) {
            tracing::warn!(
                code = ?status.code(),
                message = %status.message(),
                "worker.take.refused with completions; they were dealt with alone, taking again"
            );
            return;
        }
        if may_pass(status.code()) {
            self.takes_failed_in_a_row = self.takes_failed_in_a_row.saturating_add(1);
            let doublings = self.takes_failed_in_a_row.saturating_sub(1).min(16);
            let pause = (TAKE_PAUSE_FIRST * 2u32.pow(doublings)).min(TAKE_PAUSE_MAX);
            tracing::warn!(
                code = ?status.code(),
                message = %status.message(),
                pause = ?pause,
                "worker.take.failed; trying again"
            );
            self.take_pause_until = Some(Instant::now() + pause);
            return;
        }
        tracing::error!(
            queue = %self.ctx.config.queue,
            code = ?status.code(),
            message = %status.message(),
            "worker.take.refused; stopping"
        );
        self.fatal = Some(WorkerError::Take {
            queue: self.ctx.config.queue.to_string(),
            code: status.code(),
            message: status.message().to_owned(),
        });
        self.begin_drain().await;
    }
}
