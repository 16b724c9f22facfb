//! The gateway's one error type and its one mapping to a gRPC status code ([`IngestError::code`]):
//! a failed RPC returns `Status::new(err.code(), err.to_string())`, a failed item of a batch
//! carries the same code number and message.

use cascade_bus::BusError;
use cascade_core::Code;
use cascade_proto::convert::{ConvertError, field_at};
use cascade_proto::{RefusedWhole, mark_refused_whole};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A field is invalid (INVALID_ARGUMENT naming it); found before anything reaches a shard.
    #[error(transparent)]
    Invalid(#[from] ConvertError),
    /// A payload is larger than this gateway accepts or than one bus message carries.
    #[error("{field}: {size} bytes is over the limit of {limit} bytes ({why})")]
    TooLarge {
        field: String,
        size: u64,
        limit: u64,
        why: String,
    },
    /// A request names a pipeline, and there is none by that name (`name` is quoted and cut).
    #[error("{field}: no pipeline named {name}; apply it with ApplyPipeline first")]
    NoSuchPipeline { field: String, name: String },
    /// What a shard answered (an error reply, or a failed item of a batch), passed on as is.
    #[error("{message}")]
    Shard { code: i32, message: String },
    /// The bus did not carry the request to the shard, or the answer back.
    #[error("shard {shard}: {source}{}", retry_hint(source))]
    Bus {
        shard: u32,
        #[source]
        source: BusError,
    },
    /// The gateway holds as much as it may for its clients (requests, unread responses).
    #[error("{0}")]
    Busy(String),
    /// Too many requests are waiting for one shard: backpressure.
    #[error(
        "shard {shard} has {pending} requests waiting to be sent; retry with backoff (with the same id or idempotency key)"
    )]
    Overloaded { shard: u32, pending: usize },
    /// A shard answered something that does not fit the request: a bug on one side.
    #[error("shard {shard} answered {got} to {asked}")]
    BadReply {
        shard: u32,
        asked: &'static str,
        got: String,
    },
    /// The caller may not do this, is over a quota, or names a handler URL outside the
    /// allow-list; `field` names the request's part that was refused.
    #[error("{field}: {source}")]
    Security {
        field: String,
        #[source]
        source: cascade_security::SecurityError,
    },
    /// A request refused whole for what its items are (how many, how large, one outside the
    /// caller's grants): the inner error says which, and its status carries
    /// `REFUSED_WHOLE_KEY` so that a client can send the items again in smaller requests.
    /// `forbidden`: the indices of the items outside the caller's grants, in order.
    #[error("{refusal}")]
    RefusedWhole {
        reason: RefusedWhole,
        refusal: Box<IngestError>,
        forbidden: Vec<usize>,
    },
    /// The gateway stopped before the request could be sent.
    #[error(
        "the gateway is shutting down; retry on another replica (with the same id or idempotency key)"
    )]
    ShuttingDown,
    #[error("cannot listen on grpc.addr {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A setting that the gateway cannot start with.
    #[error(transparent)]
    Setting(#[from] cascade_service::ServiceError),
    #[error("build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("serve gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The status page could not follow the shards' stats.
    #[error("subscribe to {subject}: {source}")]
    Subscribe {
        subject: String,
        #[source]
        source: BusError,
    },
}

impl IngestError {
    /// The status code a client sees: the one mapping from this crate's errors to gRPC.
    pub fn code(&self) -> tonic::Code {
        match self {
            IngestError::Invalid(err) => grpc(err.code()),
            IngestError::TooLarge { .. }
            | IngestError::Overloaded { .. }
            | IngestError::Busy(_) => tonic::Code::ResourceExhausted,
            IngestError::NoSuchPipeline { .. } => tonic::Code::NotFound,
            // 0 (OK) in an error is the peer's bug, not a success.
            IngestError::Shard { code: 0, .. } => tonic::Code::Internal,
            IngestError::Shard { code, .. } => tonic::Code::from_i32(*code),
            IngestError::Bus { source, .. } | IngestError::Subscribe { source, .. } => {
                grpc(source.code())
            }
            IngestError::RefusedWhole { refusal, .. } => refusal.code(),
            IngestError::ShuttingDown => tonic::Code::Unavailable,
            IngestError::Security { source, .. } => grpc(source.code()),
            IngestError::BadReply { .. }
            | IngestError::Listen { .. }
            | IngestError::Setting(_)
            | IngestError::Reflection(_)
            | IngestError::Serve(_) => tonic::Code::Internal,
        }
    }

    /// The field of the request the error is about, as its message names it; empty if none.
    pub fn field(&self) -> &str {
        match self {
            IngestError::Invalid(ConvertError::Invalid(e)) => e.field(),
            IngestError::TooLarge { field, .. }
            | IngestError::NoSuchPipeline { field, .. }
            | IngestError::Security { field, .. } => field,
            IngestError::RefusedWhole { refusal, .. } => refusal.field(),
            _ => "",
        }
    }

    /// The error of one item of a request, found at the item's root (`queue`), placed under
    /// the item (`prefix` `items[2]`: field and message `items[2].queue`). Errors that name
    /// no field of the request (a shard's, the bus's) stay as they are.
    pub fn under(self, prefix: &str) -> IngestError {
        let placed = |field: &str| field_at(prefix, field);
        match self {
            IngestError::Invalid(ConvertError::Invalid(err)) => {
                let field = placed(err.field());
                IngestError::Invalid(ConvertError::Invalid(err.with_field(field)))
            }
            IngestError::TooLarge {
                field,
                size,
                limit,
                why,
            } => IngestError::TooLarge {
                field: placed(&field),
                size,
                limit,
                why,
            },
            IngestError::NoSuchPipeline { field, name } => IngestError::NoSuchPipeline {
                field: placed(&field),
                name,
            },
            IngestError::Security { field, source } => IngestError::Security {
                field: placed(&field),
                source,
            },
            other => other,
        }
    }

    /// The per-item `code` of a batch result (same numbers as gRPC).
    pub fn item_code(&self) -> i32 {
        self.code() as i32
    }

    /// INVALID_ARGUMENT for `field`, found by the gateway itself.
    pub fn invalid(field: &str, reason: impl Into<String>) -> IngestError {
        IngestError::Invalid(ConvertError::Invalid(cascade_core::Error::invalid(
            field, reason,
        )))
    }

    /// This error as the refusal of a whole request, for `reason` (for items outside the
    /// caller's grants, `refusing_forbidden`, which lists them).
    pub fn refusing_whole(self, reason: RefusedWhole) -> IngestError {
        debug_assert_ne!(reason, RefusedWhole::ForbiddenItem, "list them");
        IngestError::RefusedWhole {
            reason,
            refusal: Box::new(self),
            forbidden: Vec::new(),
        }
    }

    /// This error, the first forbidden item's, as the refusal of a whole request whose items
    /// `forbidden` (ascending indices) are outside the caller's grants.
    pub fn refusing_forbidden(self, forbidden: Vec<usize>) -> IngestError {
        IngestError::RefusedWhole {
            reason: RefusedWhole::ForbiddenItem,
            refusal: Box::new(self),
            forbidden,
        }
    }

    /// A shard's failure, kept with its code and message.
    pub fn shard(code: i32, message: impl Into<String>) -> IngestError {
        IngestError::Shard {
            code,
            message: message.into(),
        }
    }
}

impl From<cascade_core::Error> for IngestError {
    fn from(err: cascade_core::Error) -> IngestError {
        IngestError::Invalid(ConvertError::Invalid(err))
    }
}

impl From<IngestError> for tonic::Status {
    fn from(err: IngestError) -> tonic::Status {
        let mut status = tonic::Status::new(err.code(), err.to_string());
        if let IngestError::RefusedWhole {
            reason, forbidden, ..
        } = err
        {
            mark_refused_whole(&mut status, reason, &forbidden);
        }
        status
    }
}

/// Quotes client input for a message: escaped, and cut after 40 characters so hostile input
/// stays short.
pub(crate) fn excerpt(input: &str) -> String {
    const MAX_CHARS: usize = 40;
    match input.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &input[..cut]),
        None => format!("{input:?}"),
    }
}

fn grpc(code: Code) -> tonic::Code {
    tonic::Code::from_i32(code.grpc_code())
}

/// UNAVAILABLE means the request may not have been applied: say that retrying is safe.
fn retry_hint(err: &BusError) -> &'static str {
    match err.code() {
        Code::Unavailable => "; the request is safe to retry with the same id or idempotency key",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_items_error_is_placed_under_the_item() {
        let placed = |err: IngestError| {
            let err = err.under("items[2]");
            (err.field().to_owned(), err.to_string())
        };
        assert_eq!(
            placed(IngestError::invalid("queue", "must not be empty")),
            (
                "items[2].queue".to_owned(),
                "items[2].queue: must not be empty".to_owned()
            )
        );
        let (field, message) = placed(IngestError::TooLarge {
            field: "advance.payload".into(),
            size: 9,
            limit: 8,
            why: "ingest.max_payload".into(),
        });
        assert_eq!(field, "items[2].advance.payload");
        assert!(
            message.starts_with("items[2].advance.payload: 9 bytes"),
            "{message}"
        );
        let (field, message) = placed(IngestError::NoSuchPipeline {
            field: "pipeline".into(),
            name: "'orders'".into(),
        });
        assert_eq!(field, "items[2].pipeline");
        assert!(
            message.starts_with("items[2].pipeline: no pipeline"),
            "{message}"
        );
        let (field, message) = placed(IngestError::ShuttingDown);
        assert_eq!(field, "");
        assert!(
            message.starts_with("the gateway is shutting down"),
            "{message}"
        );
    }

    #[test]
    fn shard_codes_pass_through_and_zero_is_a_bug() {
        let stale = IngestError::shard(9, "lease is not current");
        let status = tonic::Status::from(stale);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(status.message(), "lease is not current");
        assert_eq!(IngestError::shard(0, "odd").code(), tonic::Code::Internal);
        assert_eq!(
            IngestError::shard(4, "late").code(),
            tonic::Code::DeadlineExceeded
        );
    }

    #[test]
    fn an_unavailable_shard_says_which_and_that_a_retry_is_safe() {
        let err = IngestError::Bus {
            shard: 3,
            source: BusError::NoResponders {
                subject: "cascade.c.dispatcher.3".into(),
            },
        };
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert_eq!(err.item_code(), 14);
        let message = err.to_string();
        assert!(message.starts_with("shard 3: no responders"), "{message}");
        assert!(message.ends_with("safe to retry with the same id or idempotency key"));
        let big = IngestError::Bus {
            shard: 0,
            source: BusError::TooLarge { size: 2, max: 1 },
        };
        assert_eq!(big.code(), tonic::Code::ResourceExhausted);
        assert!(!big.to_string().contains("retry"));
    }

    #[test]
    fn errors_travel_between_tasks_and_into_anyhow() {
        fn sendable<T: std::error::Error + Send + Sync + 'static>() {}
        sendable::<IngestError>();
        assert_eq!(
            excerpt(&"x".repeat(100)),
            format!("{:?}...", "x".repeat(40))
        );
    }
}
