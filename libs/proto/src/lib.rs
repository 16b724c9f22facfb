//! Cascade's protobuf messages and gRPC services, generated from `proto/`.
//!
//! - `v1`: the public contract (DESIGN §3): `Ingest`, `Worker`, `Admin`, `Handler`.
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

/// For gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("cascade_descriptor");
