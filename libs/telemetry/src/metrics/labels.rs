//! Label values. Every label has a closed set of values, or a name from configuration
//! (a queue family or a stage), never a per-user name: each distinct value is a time
//! series that Prometheus keeps.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// An enum whose variants are label values, written as given.
macro_rules! label_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.as_str(), encoder)
            }
        }
    };
}

label_enum! {
    /// The state label of `cascade_queue_depth`.
    QueueState { Delayed = "delayed", Ready = "ready", Leased = "leased" }
}

label_enum! {
    /// Whether an enqueue stored a new event or matched one in the dedup window.
    EnqueueResult { Ok = "ok", Duplicate = "duplicate" }
}

label_enum! {
    /// The gRPC method that enqueued.
    EnqueueRpc { Enqueue = "enqueue", EnqueueBatch = "enqueue_batch" }
}

label_enum! {
    DeadLetterReason {
        /// A retry or an expired lease found `attempts` at `max_attempts`.
        MaxAttempts = "max_attempts",
        /// The handler asked for it (`DeadLetter` outcome).
        Requested = "requested",
        /// An advance its next queue refused (no such queue, the ID taken there).
        Refused = "refused",
    }
}

label_enum! {
    /// Which move of an event failed (`cascade_move_failed_total`).
    FailedMove {
        /// To the dead-letter queue: the event went back to its queue instead.
        DeadLetter = "dead_letter",
        /// To the next queue: the event went to a dead-letter queue instead (or, when the
        /// handler's own advance was refused, stayed leased until its lease ended).
        HandOff = "hand_off",
    }
}

label_enum! {
    /// Which write-ahead log a commit or fsync belongs to.
    StoreKind { Dispatcher = "dispatcher", Timer = "timer" }
}

label_enum! {
    /// How a handler call ended: its outcome, or why there was none.
    HandlerOutcome {
        Ack = "ack",
        Advance = "advance",
        Retry = "retry",
        Reschedule = "reschedule",
        Release = "release",
        DeadLetter = "dead_letter",
        /// The handler failed (transport error, bad answer); the worker retries the event.
        Error = "error",
        /// The handler did not answer within its timeout.
        Timeout = "timeout",
    }
}

label_enum! {
    /// How a bus request ended.
    BusResult { Ok = "ok", Error = "error", Timeout = "timeout" }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct EnqueueLabels {
    pub queue: String,
    pub result: EnqueueResult,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct RpcLabels {
    pub rpc: EnqueueRpc,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct DepthLabels {
    pub queue: String,
    pub state: QueueState,
    pub shard: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct DeadLetterLabels {
    pub queue: String,
    pub reason: DeadLetterReason,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct FailedMoveLabels {
    pub queue: String,
    pub step: FailedMove,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StoreShardLabels {
    pub store: StoreKind,
    pub shard: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct QueueLabels {
    pub queue: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StoreLabels {
    pub store: StoreKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct HandlerLabels {
    pub stage: String,
    pub outcome: HandlerOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct BusLabels {
    /// A `&'static str`, so that only a name written in the code can become a label.
    pub op: &'static str,
    pub result: BusResult,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(crate) struct StageLabels {
    pub stage: String,
}
