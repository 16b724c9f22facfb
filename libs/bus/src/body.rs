//! What a message or a reply carries: the bytes that travel on NATS, or, on the local bus,
//! the value itself (a protobuf message, or a [`Typed`] value of the sender's own type), so
//! that a request between two services of one process is not encoded only to be decoded
//! again on the other side. The two are interchangeable: a value is encoded whenever someone
//! asks for bytes (or at the NATS edge), and bytes are decoded whenever someone asks for a
//! message.

use std::any::{Any, TypeId};

use bytes::Bytes;

use crate::BusError;

pub(crate) enum Body {
    Encoded(Bytes),
    Value(Box<dyn Value>),
}

/// A value that travels as itself.
pub(crate) trait Value: Any + Send + Sync {
    fn encoded_len(&self) -> usize;
    fn encode(&self) -> Bytes;
    fn into_encoded(self: Box<Self>) -> Bytes;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<M: prost::Message + Sync + 'static> Value for M {
    fn encoded_len(&self) -> usize {
        prost::Message::encoded_len(self)
    }

    fn encode(&self) -> Bytes {
        Bytes::from(self.encode_to_vec())
    }

    fn into_encoded(self: Box<Self>) -> Bytes {
        self.encode()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// A request of the sender's own type (validated domain values, say) that a receiver in the
/// same process takes as it is ([`crate::Message::take_typed`]); on NATS it travels as the
/// bytes `encode` makes of it. `len` is its encoded size, or a bound on it, as the sender
/// measured it: what `max_payload` limits on the local bus, where nothing is encoded.
pub struct Typed<T> {
    value: T,
    len: usize,
    encode: fn(T) -> Bytes,
}

impl<T> Typed<T> {
    pub fn new(value: T, len: usize, encode: fn(T) -> Bytes) -> Typed<T> {
        Typed { value, len, encode }
    }
}

impl<T: Clone + Send + Sync + 'static> Value for Typed<T> {
    fn encoded_len(&self) -> usize {
        self.len
    }

    fn encode(&self) -> Bytes {
        (self.encode)(self.value.clone())
    }

    fn into_encoded(self: Box<Self>) -> Bytes {
        (self.encode)(self.value)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// What a receiver gets from [`Body::into_typed`]: the sender's value, or a message decoded.
#[derive(Debug)]
pub enum Received<T, M> {
    Value(T),
    Message(M),
}

impl Body {
    pub(crate) fn value<M: prost::Message + Sync + 'static>(message: M) -> Body {
        Body::Value(Box::new(message))
    }

    /// Its size on the wire, which is what `max_payload` limits whichever way it travels.
    pub(crate) fn len(&self) -> usize {
        match self {
            Body::Encoded(bytes) => bytes.len(),
            Body::Value(value) => value.encoded_len(),
        }
    }

    /// The bytes, encoded now if it is a value.
    pub(crate) fn bytes(&self) -> Bytes {
        match self {
            Body::Encoded(bytes) => bytes.clone(),
            Body::Value(value) => value.encode(),
        }
    }

    pub(crate) fn into_bytes(self) -> Bytes {
        match self {
            Body::Encoded(bytes) => bytes,
            Body::Value(value) => value.into_encoded(),
        }
    }

    /// A copy for one more receiver: values are encoded once and shared as bytes.
    pub(crate) fn share(&mut self) -> Body {
        if let Body::Value(_) = self {
            let value = std::mem::replace(self, Body::Encoded(Bytes::new()));
            *self = Body::Encoded(value.into_bytes());
        }
        Body::Encoded(self.bytes())
    }

    /// The message of type `M`: the value itself if it is one, else decoded.
    pub(crate) fn into_message<M: prost::Message + Default + 'static>(
        self,
        subject: &str,
    ) -> Result<M, BusError> {
        let bytes = match self {
            Body::Value(value) if Any::type_id(&*value) == TypeId::of::<M>() => {
                let message = value.into_any().downcast::<M>();
                return Ok(*message.expect("the type was checked just above"));
            }
            other => other.into_bytes(),
        };
        M::decode(bytes).map_err(|err| BusError::Decode {
            subject: subject.to_owned(),
            reason: err.to_string(),
        })
    }

    /// The [`Typed`] value of type `T` if it is one, else the message of type `M` (decoded,
    /// or itself).
    pub(crate) fn into_typed<T: 'static, M: prost::Message + Default + 'static>(
        self,
        subject: &str,
    ) -> Result<Received<T, M>, BusError> {
        match self {
            Body::Value(value) if Any::type_id(&*value) == TypeId::of::<Typed<T>>() => {
                let typed = value.into_any().downcast::<Typed<T>>();
                Ok(Received::Value(
                    typed.expect("the type was checked just above").value,
                ))
            }
            other => other.into_message(subject).map(Received::Message),
        }
    }
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the content: it may hold user data.
        let kind = match self {
            Body::Encoded(_) => "Body::Encoded",
            Body::Value(_) => "Body::Value",
        };
        f.debug_struct(kind).field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    #[derive(Clone, PartialEq, prost::Message)]
    struct Greeting {
        #[prost(string, tag = "1")]
        text: String,
    }

    /// The same wire format under another name, as a test's own view of a message may be.
    #[derive(Clone, PartialEq, prost::Message)]
    struct SameWire {
        #[prost(string, tag = "1")]
        words: String,
    }

    fn hello() -> Greeting {
        Greeting {
            text: "hello".into(),
        }
    }

    #[test]
    fn a_value_is_taken_as_itself_or_decoded_as_another_type() {
        let body = Body::value(hello());
        assert_eq!(body.len(), prost::Message::encoded_len(&hello()));
        assert_eq!(body.bytes(), hello().encode_to_vec());
        assert_eq!(body.into_message::<Greeting>("s").expect("itself"), hello());
        let other: SameWire = Body::value(hello()).into_message("s").expect("decoded");
        assert_eq!(other.words, "hello");
    }

    #[test]
    fn bytes_are_decoded_and_garbage_is_a_decode_error() {
        let body = Body::Encoded(Bytes::from(hello().encode_to_vec()));
        assert_eq!(
            body.into_message::<Greeting>("s").expect("decoded"),
            hello()
        );
        let garbage = Body::Encoded(Bytes::from_static(&[0x0a, 0xff]));
        let err = garbage.into_message::<Greeting>("s").expect_err("garbage");
        assert!(matches!(err, BusError::Decode { .. }), "{err}");
    }

    /// A sender's own type: here a greeting's text, encoded as a `Greeting`.
    fn typed(text: &str) -> Body {
        let encode = |text: String| Bytes::from(Greeting { text }.encode_to_vec());
        Body::Value(Box::new(Typed::new(text.to_owned(), 99, encode)))
    }

    #[test]
    fn a_typed_value_is_taken_as_itself_or_as_the_message_it_encodes_to() {
        let body = typed("hello");
        assert_eq!(body.len(), 99, "the length its sender measured");
        assert_eq!(body.bytes(), hello().encode_to_vec());
        match typed("hello").into_typed::<String, Greeting>("s") {
            Ok(Received::Value(text)) => assert_eq!(text, "hello"),
            other => panic!("not the value itself: {other:?}"),
        }
        // Across NATS, or taken as another type: the message it encodes to.
        let encoded = Body::Encoded(typed("hello").into_bytes());
        match encoded.into_typed::<String, Greeting>("s") {
            Ok(Received::Message(greeting)) => assert_eq!(greeting, hello()),
            other => panic!("not decoded: {other:?}"),
        }
        match typed("hello").into_typed::<u64, Greeting>("s") {
            Ok(Received::Message(greeting)) => assert_eq!(greeting, hello()),
            other => panic!("not decoded: {other:?}"),
        }
    }

    #[test]
    fn a_shared_value_is_encoded_once_for_every_receiver() {
        let mut body = Body::value(hello());
        let copy = body.share();
        assert!(matches!(body, Body::Encoded(_)));
        assert_eq!(copy.bytes(), body.bytes());
    }
}
