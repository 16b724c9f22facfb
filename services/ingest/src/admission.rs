//! What clients can make the gateway hold, bounded:
//! - requests in flight, all clients together, at most `grpc.max_requests_in_flight`: one
//!   more is shed at once with RESOURCE_EXHAUSTED (health checks are not counted), and a
//!   request holds its place until its response is sent;
//! - bytes of responses not yet read (a client that asks for large events and never reads
//!   them holds them in the gateway's memory): each response that carries payloads
//!   ([`Admission::reserve`]) takes its size from `grpc.max_unread_response_bytes`, and at
//!   most `grpc.max_unread_response_bytes_per_connection` of it for one connection, until it
//!   has been handed to HTTP/2; a response that does not fit is refused with
//!   RESOURCE_EXHAUSTED, so the others are served.
//!
//! A response body is handed to HTTP/2 in pieces of [`PIECE`] bytes, each only once the
//! connection has room for it under the client's flow-control window: what a client does
//! not read stays in the body, counted, not in HTTP/2's send buffers.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use cascade_service::Settings;
use futures::future::{Either, Ready, ready};
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use tonic::codegen::http;
use tower::{Layer, Service};

use crate::IngestError;
use crate::peer::Peer;

/// The largest piece of a response handed to HTTP/2 at once.
const PIECE: usize = 64 << 10;
/// The health service: never shed, so that probes tell a busy gateway from a dead one.
const HEALTH: &str = "/grpc.health.v1.Health/";

pub(crate) struct Admission {
    requests: Arc<Semaphore>,
    max_requests: usize,
    unread: Arc<Semaphore>,
    max_unread: usize,
    max_unread_per_connection: usize,
}

impl Admission {
    pub fn new(settings: &Settings) -> Arc<Admission> {
        let grpc = &settings.grpc;
        let bytes = |n: u64| usize::try_from(n).unwrap_or(Semaphore::MAX_PERMITS);
        let max_requests = grpc.max_requests_in_flight as usize;
        let max_unread = bytes(grpc.max_unread_response_bytes).min(Semaphore::MAX_PERMITS);
        Arc::new(Admission {
            requests: Arc::new(Semaphore::new(max_requests)),
            max_requests,
            unread: Arc::new(Semaphore::new(max_unread)),
            max_unread,
            max_unread_per_connection: bytes(grpc.max_unread_response_bytes_per_connection),
        })
    }

    /// Reserves `size` bytes for a response to `peer`'s client, held until the response
    /// has been handed to HTTP/2: put it in the response's extensions.
    pub fn reserve(&self, peer: Option<&Peer>, size: usize) -> Result<Reserved, IngestError> {
        let refused = |what: String| IngestError::Busy(what);
        if let Some(peer) = peer {
            let unread = peer.unread().load(Ordering::Acquire);
            if unread.saturating_add(size) > self.max_unread_per_connection {
                return Err(refused(format!(
                    "this connection has {unread} bytes of responses its client has not read, and a {size}-byte response would pass grpc.max_unread_response_bytes_per_connection ({}); read the responses, or use more connections",
                    self.max_unread_per_connection
                )));
            }
        }
        let permits = u32::try_from(size).unwrap_or(u32::MAX);
        let permit = Arc::clone(&self.unread)
            .try_acquire_many_owned(permits)
            .map_err(|_| {
                refused(format!(
                    "the gateway holds grpc.max_unread_response_bytes ({}) of responses that clients have not read; retry with backoff",
                    self.max_unread
                ))
            })?;
        if let Some(peer) = peer {
            peer.unread().fetch_add(size, Ordering::AcqRel);
        }
        Ok(Reserved(Arc::new(Mutex::new(Some(Held {
            _bytes: permit,
            peer: peer.cloned(),
            size,
        })))))
    }
}

/// `message` as the answer to `peer`'s client, with its bytes reserved (see
/// [`Admission::reserve`]).
pub(crate) fn respond<T: prost::Message>(
    admission: &Admission,
    peer: Option<&Peer>,
    message: T,
) -> Result<tonic::Response<T>, IngestError> {
    let reserved = admission.reserve(peer, message.encoded_len())?;
    Ok(with_reservation(message, reserved))
}

/// `message` as a response holding `reserved` until it is sent.
pub(crate) fn with_reservation<T>(message: T, reserved: Reserved) -> tonic::Response<T> {
    let mut response = tonic::Response::new(message);
    response.extensions_mut().insert(reserved);
    response
}

/// A response's reservation, in its extensions until the layer moves it to the body.
#[derive(Clone)]
pub(crate) struct Reserved(Arc<Mutex<Option<Held>>>);

impl Reserved {
    fn take(&self) -> Option<Held> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

struct Held {
    _bytes: OwnedSemaphorePermit,
    peer: Option<Peer>,
    size: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(peer) = &self.peer {
            peer.unread().fetch_sub(self.size, Ordering::AcqRel);
        }
    }
}

/// A request's place among those in flight, until its response is sent.
struct InFlight {
    _place: OwnedSemaphorePermit,
    peer: Option<Peer>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(peer) = &self.peer {
            peer.finished();
        }
    }
}

#[derive(Clone)]
pub(crate) struct AdmissionLayer {
    admission: Arc<Admission>,
}

impl AdmissionLayer {
    pub fn new(admission: Arc<Admission>) -> AdmissionLayer {
        AdmissionLayer { admission }
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = Admitted<S>;

    fn layer(&self, inner: S) -> Admitted<S> {
        Admitted {
            inner,
            admission: Arc::clone(&self.admission),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Admitted<S> {
    inner: S,
    admission: Arc<Admission>,
}

type Answer<E> = Result<http::Response<tonic::body::Body>, E>;

impl<S, B> Service<http::Request<B>> for Admitted<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Either<
        Either<Pin<Box<dyn Future<Output = Answer<S::Error>> + Send>>, S::Future>,
        Ready<Answer<S::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path().starts_with(HEALTH) {
            return Either::Left(Either::Right(self.inner.call(request)));
        }
        let Ok(place) = Arc::clone(&self.admission.requests).try_acquire_owned() else {
            let status = Status::resource_exhausted(format!(
                "the gateway has grpc.max_requests_in_flight ({}) requests in flight; retry with backoff",
                self.admission.max_requests
            ));
            return Either::Right(ready(Ok(status.into_http())));
        };
        let peer = Peer::of(request.extensions()).cloned();
        if let Some(peer) = &peer {
            peer.started();
        }
        let in_flight = InFlight {
            _place: place,
            peer,
        };
        let answered = self.inner.call(request);
        Either::Left(Either::Left(Box::pin(async move {
            let response = answered.await?;
            let held = response
                .extensions()
                .get::<Reserved>()
                .and_then(Reserved::take);
            Ok(response.map(|body| {
                tonic::body::Body::new(Holding {
                    inner: body,
                    rest: Bytes::new(),
                    held,
                    in_flight: Some(in_flight),
                })
            }))
        })))
    }
}

/// A response body that hands its data over in pieces, holding its reservation and its
/// place in flight until it ends or is dropped.
struct Holding {
    inner: tonic::body::Body,
    /// What is left of the data frame being handed over.
    rest: Bytes,
    held: Option<Held>,
    in_flight: Option<InFlight>,
}

impl Body for Holding {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if !this.rest.is_empty() {
            let piece = this.rest.split_to(this.rest.len().min(PIECE));
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(frame) => frame,
        };
        match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(mut data) => {
                    let piece = data.split_to(data.len().min(PIECE));
                    this.rest = data;
                    Poll::Ready(Some(Ok(Frame::data(piece))))
                }
                // Trailers: the data was all handed over.
                Err(frame) => {
                    this.held = None;
                    Poll::Ready(Some(Ok(frame)))
                }
            },
            Some(Err(e)) => Poll::Ready(Some(Err(e))),
            None => {
                this.held = None;
                this.in_flight = None;
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        hint.set_lower(hint.lower() + rest);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + rest);
        }
        hint
    }
}
