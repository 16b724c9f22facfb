//! Failures on the bus: any error with a [`Code`] becomes a `bus::v1::Status`, and a status
//! received becomes a [`ConvertError::Status`] again with the same code and message. Each
//! service maps its own error enum with [`status`]; this crate knows no store.

use cascade_core::Code;

use super::ConvertError;
use crate::bus::v1 as bus;

/// A status with `code` and `message`.
pub fn status(code: Code, message: impl Into<String>) -> bus::Status {
    bus::Status {
        code: code.grpc_code(),
        message: message.into(),
    }
}

impl From<&ConvertError> for bus::Status {
    fn from(err: &ConvertError) -> bus::Status {
        status(err.code(), err.to_string())
    }
}

impl From<&cascade_core::Error> for bus::Status {
    fn from(err: &cascade_core::Error) -> bus::Status {
        status(err.code(), err.to_string())
    }
}

impl From<bus::Status> for ConvertError {
    /// An unknown or OK (0) number is a peer's bug: it becomes INTERNAL, the number kept in
    /// the message.
    fn from(received: bus::Status) -> ConvertError {
        match code_from_grpc(received.code) {
            Some(code) => ConvertError::Status {
                code,
                message: received.message,
            },
            None => ConvertError::Status {
                code: Code::Internal,
                message: format!(
                    "a service answered with status code {}: {}",
                    received.code, received.message
                ),
            },
        }
    }
}

/// The [`Code`] of a gRPC status number; `None` for OK and numbers Cascade never uses.
pub fn code_from_grpc(number: i32) -> Option<Code> {
    const CODES: [Code; 10] = [
        Code::InvalidArgument,
        Code::NotFound,
        Code::AlreadyExists,
        Code::FailedPrecondition,
        Code::ResourceExhausted,
        Code::Unavailable,
        Code::Internal,
        Code::DataLoss,
        Code::PermissionDenied,
        Code::Unauthenticated,
    ];
    CODES.into_iter().find(|code| code.grpc_code() == number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        let invalid = ConvertError::from(cascade_core::Error::invalid("items[2].id", "too long"));
        let sent = bus::Status::from(&invalid);
        assert_eq!(sent.code, 3);
        assert_eq!(sent.message, "items[2].id: too long");
        let back = ConvertError::from(sent);
        assert_eq!(back.code(), Code::InvalidArgument);
        assert_eq!(back.to_string(), "items[2].id: too long");
        assert_eq!(back.to_tonic().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn every_code_maps_back_and_unknown_numbers_are_internal() {
        for number in [3, 5, 6, 7, 8, 9, 13, 14, 15, 16] {
            let code = code_from_grpc(number).expect("a Cascade code");
            assert_eq!(code.grpc_code(), number);
        }
        assert_eq!(code_from_grpc(0), None);
        let odd = ConvertError::from(status_number(2, "boom"));
        assert_eq!(odd.code(), Code::Internal);
        assert_eq!(
            odd.to_string(),
            "a service answered with status code 2: boom"
        );
    }

    fn status_number(code: i32, message: &str) -> bus::Status {
        bus::Status {
            code,
            message: message.into(),
        }
    }
}
