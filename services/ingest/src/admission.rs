//! What clients can make the gateway hold, bounded:
//! - requests in flight, all clients together, at most `grpc.max_requests_in_flight`: one
//!   more is shed at once with RESOURCE_EXHAUSTED (health checks are not counted), and a
//!   request holds its place until its response is sent and every shard poll it started
//!   has ended (a `Take` whose client went away leaves its poll running: [`Place`]);
//! - bytes of responses not yet read (a client that asks for large events and never reads
//!   them holds them in the gateway's memory): each response that carries payloads
//!   ([`Admission::reserve`]) takes its size from `grpc.max_unread_response_bytes`, and at
//!   most `grpc.max_unread_response_bytes_per_connection` of it for one connection, until it
//!   has been handed to HTTP/2; a response that does not fit is refused with
//!   RESOURCE_EXHAUSTED, so the others are served. A `Take` is checked before it leases
//!   anything ([`Admission::room`]: a refusal after would cost its events an attempt) and
//!   its response counted whatever its size, so the limit may be passed by the `Take`s
//!   that found room at once.
//!
//! A response body is handed to HTTP/2 in pieces of [`PIECE`] bytes, each only once the
//! connection has room for it under the client's flow-control window: what a client does
//! not read stays in the body, counted, not in HTTP/2's send buffers.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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
use crate::server::{is_health_check, is_reflection};

/// The largest piece of a response handed to HTTP/2 at once.
const PIECE: usize = 64 << 10;

pub(crate) struct Admission {
    requests: Arc<Semaphore>,
    max_requests: usize,
    /// Bytes of responses held for clients, all connections together.
    unread: Arc<AtomicUsize>,
    max_unread: usize,
    max_unread_per_connection: usize,
}

impl Admission {
    pub fn new(settings: &Settings) -> Arc<Admission> {
        let grpc = &settings.grpc;
        let bytes = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        let max_requests = (grpc.max_requests_in_flight as usize).min(Semaphore::MAX_PERMITS);
        Arc::new(Admission {
            requests: Arc::new(Semaphore::new(max_requests)),
            max_requests,
            unread: Arc::new(AtomicUsize::new(0)),
            max_unread: bytes(grpc.max_unread_response_bytes),
            max_unread_per_connection: bytes(grpc.max_unread_response_bytes_per_connection),
        })
    }

    /// Reserves `size` bytes for a response to `peer`'s client, held until the response
    /// has been handed to HTTP/2: put it in the response's extensions. RESOURCE_EXHAUSTED
    /// when the connection's or everyone's unread bytes would pass their limit.
    pub fn reserve(&self, peer: Option<&Peer>, size: usize) -> Result<Reserved, IngestError> {
        if let Some(peer) = peer
            && !add_within(peer.unread(), size, self.max_unread_per_connection)
        {
            return Err(self.connection_full(peer));
        }
        if !add_within(&self.unread, size, self.max_unread) {
            if let Some(peer) = peer {
                peer.unread().fetch_sub(size, Ordering::AcqRel);
            }
            return Err(self.gateway_full());
        }
        Ok(self.held(peer, size))
    }

    /// RESOURCE_EXHAUSTED, before any work, when `peer`'s connection or the gateway already
    /// holds as many unread bytes as it may: for a `Take`, whose events would be leased (an
    /// attempt counted) before its response's size is known.
    pub fn room(&self, peer: Option<&Peer>) -> Result<(), IngestError> {
        if let Some(peer) = peer
            && peer.unread().load(Ordering::Acquire) >= self.max_unread_per_connection
        {
            return Err(self.connection_full(peer));
        }
        match self.unread.load(Ordering::Acquire) >= self.max_unread {
            true => Err(self.gateway_full()),
            false => Ok(()),
        }
    }

    /// Holds `size` bytes for a response whatever the limits say (a `Take` that found room
    /// before it leased its events): the next ones are refused until it is read.
    pub fn reserve_anyway(&self, peer: Option<&Peer>, size: usize) -> Reserved {
        if let Some(peer) = peer {
            peer.unread().fetch_add(size, Ordering::AcqRel);
        }
        self.unread.fetch_add(size, Ordering::AcqRel);
        self.held(peer, size)
    }

    fn held(&self, peer: Option<&Peer>, size: usize) -> Reserved {
        Reserved(Arc::new(Mutex::new(Some(Held {
            unread: Arc::clone(&self.unread),
            peer: peer.cloned(),
            size,
        }))))
    }

    fn connection_full(&self, peer: &Peer) -> IngestError {
        IngestError::Busy(format!(
            "this connection holds {} bytes of responses its client has not read, as many as grpc.max_unread_response_bytes_per_connection ({}) allows; read the responses, or use more connections",
            peer.unread().load(Ordering::Acquire),
            self.max_unread_per_connection
        ))
    }

    fn gateway_full(&self) -> IngestError {
        IngestError::Busy(format!(
            "the gateway holds grpc.max_unread_response_bytes ({}) of responses that clients have not read; retry with backoff",
            self.max_unread
        ))
    }
}

/// Adds `size` to `count` if the sum stays within `limit`; whether it did.
fn add_within(count: &AtomicUsize, size: usize, limit: usize) -> bool {
    count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(size).filter(|sum| *sum <= limit)
        })
        .is_ok()
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
    unread: Arc<AtomicUsize>,
    peer: Option<Peer>,
    size: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.unread.fetch_sub(self.size, Ordering::AcqRel);
        if let Some(peer) = &self.peer {
            peer.unread().fetch_sub(self.size, Ordering::AcqRel);
        }
    }
}

/// A request's place among those in flight, in its extensions: a `Take` lends it to each
/// shard poll it starts, so that polls left running by clients that went away (a deadline
/// shorter than the wait, a cancel) count until they end, and cannot pile up on the shards.
#[derive(Clone)]
pub(crate) struct Place {
    _permit: Arc<OwnedSemaphorePermit>,
}

/// A request's place among those in flight (none for a health check, which is never shed),
/// and its count on its connection (a health `Watch` keeps the connection from being idle),
/// until its response is sent.
struct InFlight {
    _place: Option<Place>,
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
    type Future =
        Either<Pin<Box<dyn Future<Output = Answer<S::Error>> + Send>>, Ready<Answer<S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // Health checks are never shed: probes tell a busy gateway from a dead one. Neither
        // is reflection counted: its sessions have no end.
        let path = request.uri().path();
        let place = match is_health_check(path) || is_reflection(path) {
            true => None,
            false => match Arc::clone(&self.admission.requests).try_acquire_owned() {
                Ok(permit) => Some(Place {
                    _permit: Arc::new(permit),
                }),
                Err(_) => {
                    let status = Status::resource_exhausted(format!(
                        "the gateway has grpc.max_requests_in_flight ({}) requests in flight; retry with backoff",
                        self.admission.max_requests
                    ));
                    return Either::Right(ready(Ok(status.into_http())));
                }
            },
        };
        if let Some(place) = &place {
            request.extensions_mut().insert(place.clone());
        }
        let peer = Peer::of(request.extensions()).cloned();
        if let Some(peer) = &peer {
            peer.started();
        }
        let in_flight = InFlight {
            _place: place,
            peer,
        };
        let answered = self.inner.call(request);
        Either::Left(Box::pin(async move {
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
        }))
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
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        // The upper bound first: a lower bound above the upper one panics.
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint.set_lower(inner.lower().saturating_add(rest));
        hint
    }
}
