//! The dispatcher's one error type: why a shard could not start or stopped, and why one
//! request failed. Each variant maps to one status code (`DispatcherError::code`).

use cascade_core::Code;
use cascade_core::error::cut_to;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert::{self, ConvertError};
use cascade_proto::{ITEM_FIELD_BYTES, ITEM_MESSAGE_BYTES};
use cascade_service::ShardError;
use cascade_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DispatcherError {
    /// A shard could not start, or stopped; boxed, as it is large and rare.
    #[error(transparent)]
    Shard(Box<ShardError>),

    // ---- one request ----
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Convert(#[from] ConvertError),
    #[error("request: {reason}")]
    BadRequest { reason: String },
    #[error(
        "queue '{queue}' belongs to shard {owner}, not to dispatcher shard {shard}: every service must use the same cluster.shards"
    )]
    WrongShard {
        queue: String,
        owner: u32,
        shard: u32,
    },
    #[error(
        "{what} is {size} bytes, more than the bus carries ({max} bytes): raise the bus's max_payload or make it smaller"
    )]
    TooLarge {
        what: String,
        size: usize,
        max: usize,
    },
    /// A purge or a redrive the shard's stop cut short, after some of its steps.
    #[error(
        "the shard is stopping: the {what} ended after {done} events; run it again for the rest"
    )]
    CutShort { what: &'static str, done: u64 },
}

impl From<ShardError> for DispatcherError {
    fn from(err: ShardError) -> DispatcherError {
        DispatcherError::Shard(Box::new(err))
    }
}

/// What a requester hears of a store that failed (its disk, its data).
const STORE_FAILED: &str = "the shard's store failed and the shard stopped (its log says why); its requests fail until it is restarted, which replays its log: retry later, with the same id or idempotency key";

impl DispatcherError {
    pub fn code(&self) -> Code {
        match self {
            DispatcherError::Store(e) => e.code(),
            DispatcherError::Convert(e) => e.code(),
            DispatcherError::BadRequest { .. } => Code::InvalidArgument,
            DispatcherError::WrongShard { .. } => Code::FailedPrecondition,
            DispatcherError::TooLarge { .. } => Code::ResourceExhausted,
            DispatcherError::CutShort { .. } => Code::Unavailable,
            DispatcherError::Shard(e) => e.code(),
        }
    }

    /// The field of the request the error is about, as its message names it; empty if none.
    pub fn field(&self) -> &str {
        match self {
            DispatcherError::Convert(ConvertError::Invalid(e))
            | DispatcherError::Store(StoreError::Invalid(e)) => e.field(),
            _ => "",
        }
    }

    /// One item's failure as a batch reply carries it: its code, message and field, cut to
    /// `ITEM_MESSAGE_BYTES` and `ITEM_FIELD_BYTES` so that the reply fits the request the
    /// gateway sized for it (`cascade_proto::ITEM_RESULT_BYTES`).
    pub fn item_failure(&self) -> (i32, String, String) {
        let mut status = self.to_status();
        status.message = cut(status.message, ITEM_MESSAGE_BYTES);
        (
            status.code,
            status.message,
            cut(self.field().to_owned(), ITEM_FIELD_BYTES),
        )
    }

    /// The status a requester receives.
    pub fn to_status(&self) -> bus::Status {
        match self {
            // The store itself failed: what it says names this machine's files and is for the
            // shard's own log (`store.fatal`), not for the clients the gateway passes it to.
            DispatcherError::Store(e) if e.is_fault() => {
                convert::status(e.code(), STORE_FAILED.to_owned())
            }
            // A store error's message carries every cause, down to the OS's word for it.
            DispatcherError::Store(e) => {
                convert::status(e.code(), cascade_core::error::describe(e))
            }
            other => convert::status(other.code(), other.to_string()),
        }
    }
}

/// `text` cut to at most `max` bytes, on a character boundary, ending in "…" if cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let ellipsis = '…';
        text.truncate(cut_to(&text, max - ellipsis.len_utf8()).len());
        text.push(ellipsis);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_keep_code_and_message() {
        let stale = DispatcherError::from(StoreError::StaleLease {
            queue: "jobs".into(),
            id: "a".into(),
        });
        let sent = stale.to_status();
        assert_eq!(sent.code, 9);
        assert!(sent.message.contains("not current"), "{}", sent.message);
    }

    #[test]
    fn an_item_failure_is_cut_to_its_bounds_on_a_character_boundary() {
        let long = DispatcherError::from(StoreError::EventNotFound {
            queue: "jobs".into(),
            id: "é".repeat(ITEM_MESSAGE_BYTES),
        });
        let (code, message, field) = long.item_failure();
        assert_eq!(code, Code::NotFound.grpc_code());
        assert!(message.len() <= ITEM_MESSAGE_BYTES, "{}", message.len());
        assert!(
            message.starts_with("event 'éé") && message.ends_with("é…"),
            "{message}"
        );
        assert_eq!(field, "");

        let short = DispatcherError::from(StoreError::EventNotFound {
            queue: "jobs".into(),
            id: "a".into(),
        });
        assert_eq!(
            short.item_failure().1,
            "event 'a' not found in queue 'jobs'"
        );
    }

    #[test]
    fn a_failed_store_keeps_its_code_and_not_its_paths() {
        let failed = DispatcherError::from(StoreError::Fsync {
            path: "/var/lib/cascade/dispatcher-0/wal/00000001.log".into(),
            source: std::io::Error::other("Input/output error"),
        });
        let sent = failed.to_status();
        assert_eq!(sent.code, failed.code().grpc_code());
        assert_eq!(sent.message, STORE_FAILED);
        assert!(!sent.message.contains("/var/lib"), "{}", sent.message);
    }

    #[test]
    fn a_purge_cut_short_is_unavailable_and_says_how_far_it_got() {
        let cut = DispatcherError::CutShort {
            what: "purge",
            done: 20_000,
        };
        let sent = cut.to_status();
        assert_eq!(sent.code, Code::Unavailable.grpc_code());
        assert_eq!(
            sent.message,
            "the shard is stopping: the purge ended after 20000 events; run it again for the rest"
        );
    }
}
