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
mod item_result;
mod refused;

pub use item_result::{ITEM_FIELD_BYTES, ITEM_MESSAGE_BYTES, ITEM_RESULT_BYTES};

pub use refused::{
    FORBIDDEN_ITEMS_KEY, REFUSED_WHOLE_KEY, RefusedWhole, item_list, mark_refused_whole,
    parse_item_list,
};

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
