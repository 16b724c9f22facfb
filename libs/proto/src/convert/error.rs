//! The crate's one error type: what a conversion refuses, and a failure that arrived from
//! another service as a `bus::v1::Status`.

use cascade_core::Code;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// A field is missing or invalid; the error names its dotted path and what is valid.
    #[error(transparent)]
    Invalid(#[from] cascade_core::Error),
    /// A failure reported by another service (its `Status` on the bus), kept as it came.
    #[error("{message}")]
    Status { code: Code, message: String },
}

impl ConvertError {
    /// The status code a client sees.
    pub fn code(&self) -> Code {
        match self {
            ConvertError::Invalid(err) => err.code(),
            ConvertError::Status { code, .. } => *code,
        }
    }

    /// The gRPC status of this error, for the gateway to return as is.
    pub fn to_tonic(&self) -> tonic::Status {
        tonic::Status::new(
            tonic::Code::from_i32(self.code().grpc_code()),
            self.to_string(),
        )
    }
}
