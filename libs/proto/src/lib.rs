//! Cascade's protobuf messages and gRPC services, generated from `proto/`.
//!
//! - `v1`: the public contract: `Ingest`, `Worker`, `Admin`, `Handler`.
//! - `bus::v1`: what services say to each other on the bus.
//! - `convert`: the one conversion between these messages and validated domain types.

#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("cascade.v1");
}

pub mod bus {
    #[allow(clippy::all, clippy::pedantic)]
    pub mod v1 {
        tonic::include_proto!("cascade.bus.v1");
    }
}

pub mod convert;

impl bus::v1::dispatcher_request::Op {
    /// A bounded name for logs and the `op` label of `cascade_bus_request_duration_seconds`
    /// (never a queue name).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Enqueue(_) => "enqueue",
            Self::Get(_) => "get",
            Self::Update(_) => "update",
            Self::Delete(_) => "delete",
            Self::Take(_) => "take",
            Self::Complete(_) => "complete",
            Self::Extend(_) => "extend",
            Self::CreateQueue(_) => "create_queue",
            Self::GetQueue(_) => "get_queue",
            Self::ListQueues(_) => "list_queues",
            Self::DeleteQueue(_) => "delete_queue",
            Self::PurgeQueue(_) => "purge_queue",
            Self::QueueStats(_) => "queue_stats",
            Self::ListDeadLetters(_) => "list_dead_letters",
            Self::Redrive(_) => "redrive",
            Self::Activate(_) => "activate",
            Self::Deliver(_) => "deliver",
            Self::ApplyPipeline(_) => "apply_pipeline",
            Self::GetPipeline(_) => "get_pipeline",
            Self::ListPipelines(_) => "list_pipelines",
        }
    }
}

/// For gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cascade_descriptor");

/// The metadata key of a status that refuses a request whole for what its items are rather
/// than for who sent it or the server's state: nothing of it was applied, and the same items
/// sent in smaller requests (one by one, say) each get a verdict of their own. Its value
/// names the reason ([`RefusedWhole::as_str`]).
pub const REFUSED_WHOLE_KEY: &str = "cascade-refused-whole";

/// Why a request was refused whole ([`REFUSED_WHOLE_KEY`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedWhole {
    /// More items than `ingest.max_batch_items`.
    TooManyItems,
    /// More bytes than the gateway reads in one request (`ingest.max_batch_bytes`).
    TooLarge,
    /// An item outside the caller's grants: the status names it.
    ForbiddenItem,
}

impl RefusedWhole {
    const ALL: [RefusedWhole; 3] = [
        RefusedWhole::TooManyItems,
        RefusedWhole::TooLarge,
        RefusedWhole::ForbiddenItem,
    ];

    /// The reason a [`REFUSED_WHOLE_KEY`] value names; `None` for one this build does not know.
    pub fn parse(value: &str) -> Option<RefusedWhole> {
        RefusedWhole::ALL.into_iter().find(|r| r.as_str() == value)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RefusedWhole::TooManyItems => "too-many-items",
            RefusedWhole::TooLarge => "too-large",
            RefusedWhole::ForbiddenItem => "forbidden-item",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RefusedWhole;

    #[test]
    fn a_refusal_reads_back_as_it_was_written() {
        for reason in RefusedWhole::ALL {
            assert_eq!(RefusedWhole::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(RefusedWhole::parse("too-slow"), None);
    }
}
