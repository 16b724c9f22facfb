//! How large one item's result in a batch reply can be, so that a gateway can size a request
//! whose reply always fits one bus message.

/// The most bytes of a failure's message a shard puts in one item's result of a batch reply
/// (an enqueue's, a completion's); a longer one is cut. Every message the shard writes for an
/// item fits whole, even with names and IDs at their limits.
pub const ITEM_MESSAGE_BYTES: usize = 640;
/// The same for the field a failure names (`items[2].headers["…"]`).
pub const ITEM_FIELD_BYTES: usize = 256;
/// The most bytes one item's result takes in a batch reply, framing included: an enqueue's
/// answer (its ID, queue and time, at their limits) or a failure cut to the bounds above. A
/// gateway puts at most the bus's `max_payload` over this many items in one request, so
/// that the reply fits one bus message whatever each item's outcome: a reply too large
/// could only say that the request failed, after the shard had applied its items.
pub const ITEM_RESULT_BYTES: usize = 1024;

#[cfg(test)]
mod tests {
    use cascade_core::MAX_ID_BYTES;
    use cascade_core::queue::MAX_QUEUE_NAME_BYTES;
    use prost::Message;

    use super::*;
    use crate::v1::{
        CompleteResponse, CompletionResult, EnqueueBatchResponse, EnqueueResponse, EnqueueResult,
    };

    #[test]
    fn an_answer_at_every_limit_fits_its_bound() {
        let ok = EnqueueResult {
            ok: Some(EnqueueResponse {
                id: "i".repeat(MAX_ID_BYTES),
                duplicate: true,
                queue: "q".repeat(MAX_QUEUE_NAME_BYTES),
                activate_at: Some(prost_types::Timestamp {
                    seconds: i64::MAX,
                    nanos: 999_999_999,
                }),
            }),
            ..EnqueueResult::default()
        };
        let failed = EnqueueResult {
            ok: None,
            code: i32::MAX,
            message: "m".repeat(ITEM_MESSAGE_BYTES),
            field: "f".repeat(ITEM_FIELD_BYTES),
        };
        let reply = EnqueueBatchResponse {
            results: vec![ok, failed],
        };
        assert!(
            reply.encoded_len() <= 2 * ITEM_RESULT_BYTES,
            "{}",
            reply.encoded_len()
        );
        let completion = CompleteResponse {
            results: vec![CompletionResult {
                code: i32::MAX,
                message: "m".repeat(ITEM_MESSAGE_BYTES),
                field: "f".repeat(ITEM_FIELD_BYTES),
            }],
        };
        assert!(completion.encoded_len() <= ITEM_RESULT_BYTES);
    }
}
