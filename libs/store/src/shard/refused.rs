//! Hand-offs a queue refused. The sender has already let go of the event (it left its queue
//! when the handler advanced it), so the receiver keeps it: in the dead-letter queue of the
//! queue it was meant for, with the refusal as its reason, where an operator can see and
//! redrive it.

use cascade_core::{QueueName, Timestamp};

use super::state::{Refused, State};
use crate::error::StoreError;
use crate::kv::Txn;
use crate::observe::{DeadLetterCause, MoveStep};

/// Where a refused hand-off goes when the queue it was meant for has no dead-letter queue
/// that could exist.
pub const UNDELIVERABLE: &str = "cascade.undeliverable";

impl State {
    /// Dead-letters a refused delivery: counted as a failed hand-off and logged.
    pub fn dead_letter_refused(
        &mut self,
        txn: &mut Txn<'_>,
        now: Timestamp,
        refused: Refused,
    ) -> Result<(), StoreError> {
        let Refused {
            error,
            delivery: mut d,
        } = refused;
        let target = self.refused_target(txn, &d.queue)?;
        let family = self.family(&d.queue);
        self.settings
            .observer
            .move_failed(&family, MoveStep::HandOff);
        self.settings
            .observer
            .dead_lettered(&family, DeadLetterCause::Refused);
        tracing::warn!(
            queue = %d.queue,
            id = %d.id,
            dead_letter_queue = %target,
            %error,
            "store.hand_off.refused"
        );
        let from = std::mem::replace(&mut d.queue, target);
        self.deliver_dead_letter(txn, now, d, &from, format!("hand-off refused: {error}"))
    }

    /// The dead-letter queue of `queue` if it has one that can exist, else `UNDELIVERABLE`.
    fn refused_target(&self, txn: &Txn<'_>, queue: &QueueName) -> Result<QueueName, StoreError> {
        let configured = match self.resolve(txn, queue)? {
            Some(resolved) => resolved.rec.config.dead_letter_queue_for(queue),
            None => queue.dead_letter_default(),
        };
        Ok(configured
            .unwrap_or_else(|_| QueueName::parse(UNDELIVERABLE).expect("a valid queue name")))
    }
}
