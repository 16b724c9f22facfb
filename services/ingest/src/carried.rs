//! Completions a `Take` carries: those of the take's own shard go with its first poll, as
//! many as fit in its bus message (the shard applies them once the take has chosen its
//! events, in the same writer step); the others go through the complete coalescer once that
//! poll has answered, and that poll then does not wait, so they are not held back by a long
//! poll. So a take that fails has applied none of them, and one that answers has applied
//! them all, each with its own result, placed in the client's request.

use cascade_proto::ITEM_RESULT_BYTES;
use cascade_proto::convert::CompletionItem;
use cascade_proto::v1::CompletionResult;

use crate::IngestError;
use crate::coalesce::{Batch, Coalescer, Sized};
use crate::gateway::{Prepared, scatter};
use crate::worker::CompleteBatch;

pub(crate) struct Carried {
    /// For the take's shard, with its first poll, and their bytes; `at_take` their places
    /// in the request.
    with_take: Vec<CompletionItem>,
    with_take_bytes: usize,
    at_take: Vec<usize>,
    /// For other shards, beyond the take's room, or refused already; with their places.
    elsewhere: Vec<(usize, Prepared<CompletionItem>)>,
    results: Vec<Option<CompletionResult>>,
    /// The take's first poll answered: every completion has been sent.
    sent: bool,
}

impl Carried {
    /// `room`: bytes the take's bus message has for the completions it carries.
    pub fn split(shard: u32, prepared: Vec<Prepared<CompletionItem>>, room: usize) -> Carried {
        let mut carried = Carried {
            with_take: Vec::new(),
            with_take_bytes: 0,
            at_take: Vec::new(),
            elsewhere: Vec::new(),
            results: (0..prepared.len()).map(|_| None).collect(),
            sent: false,
        };
        let mut room = room;
        for (index, item) in prepared.into_iter().enumerate() {
            // Its result comes back in the take's reply, which has the same room: a failure's
            // message may be longer than the completion.
            let cost = |sized: &Sized<CompletionItem>| sized.bytes.max(ITEM_RESULT_BYTES);
            match item {
                Ok((owner, sized)) if owner == shard && cost(&sized) <= room => {
                    room -= cost(&sized);
                    carried.with_take_bytes += sized.bytes;
                    carried.with_take.push(sized.item);
                    carried.at_take.push(index);
                }
                other => carried.elsewhere.push((index, other)),
            }
        }
        carried
    }

    /// The completions a poll carries, and their bytes: those for the take's shard with the
    /// first poll, none with the next ones.
    pub fn for_poll(&mut self) -> (Vec<CompletionItem>, usize) {
        let bytes = std::mem::take(&mut self.with_take_bytes);
        (std::mem::take(&mut self.with_take), bytes)
    }

    /// Whether completions still go elsewhere once the take's first poll answers: that poll
    /// should not wait.
    pub fn sends_elsewhere(&self) -> bool {
        !self.sent && !self.elsewhere.is_empty()
    }

    /// Whether results are owed: completions were sent, so a later failed poll must still
    /// answer them (with no events) rather than fail the request.
    pub fn owed(&self) -> bool {
        self.sent && !self.results.is_empty()
    }

    /// The take's poll answered with `answered` for the completions it carried (none after
    /// the first poll); after the first, sends the other shards' completions.
    pub async fn poll_answered(
        &mut self,
        shard: u32,
        answered: Vec<CompletionResult>,
        complete: &Coalescer<CompleteBatch>,
    ) -> Result<(), IngestError> {
        if self.sent {
            return Ok(());
        }
        self.sent = true;
        if answered.len() != self.at_take.len() {
            return Err(IngestError::BadReply {
                shard,
                asked: "a take with completions",
                got: format!(
                    "{} completion results for {} completions",
                    answered.len(),
                    self.at_take.len()
                ),
            });
        }
        for (index, mut result) in std::mem::take(&mut self.at_take).into_iter().zip(answered) {
            CompleteBatch::place_at(&mut result, index);
            self.results[index] = Some(result);
        }
        let elsewhere = std::mem::take(&mut self.elsewhere);
        let places: Vec<usize> = elsewhere.iter().map(|(index, _)| *index).collect();
        let outcomes = scatter(complete, elsewhere).await;
        for (index, result) in places.into_iter().zip(outcomes) {
            self.results[index] = Some(result);
        }
        Ok(())
    }

    /// Every completion's result, in request order.
    pub fn into_results(self) -> Vec<CompletionResult> {
        self.results
            .into_iter()
            .map(|result| {
                // Every place is filled once sent (`scatter` answers every item it is given).
                result.unwrap_or_else(|| CompleteBatch::failed(&IngestError::ShuttingDown))
            })
            .collect()
    }
}
