//! Authentication of every call, before any service sees it: a layer reads the caller's
//! credentials (`authorization: Bearer <token>` metadata, the connection's client
//! certificate) and puts the [`Caller`] they prove into the request, or answers
//! UNAUTHENTICATED itself, so that a call without valid credentials changes nothing. Health
//! checks stay open to probes; connections from inside the process are the process itself.
//! What each caller may then do is checked by each call (`authorize`).

use std::sync::Arc;
use std::task::{Context, Poll};

use cascade_security::{Authenticator, Caller, Credentials};
use cascade_telemetry::audit;
use futures::future::{Either, Ready, ready};
use tonic::Status;
use tonic::codegen::http;
use tower::{Layer, Service};

use crate::peer::Peer;
use crate::server::is_health_check;

#[derive(Clone)]
pub(crate) struct AuthLayer {
    authenticator: Arc<Authenticator>,
}

impl AuthLayer {
    pub fn new(authenticator: Arc<Authenticator>) -> AuthLayer {
        AuthLayer { authenticator }
    }
}

impl<S> Layer<S> for AuthLayer {
    type Service = Authenticated<S>;

    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated {
            inner,
            authenticator: Arc::clone(&self.authenticator),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Authenticated<S> {
    inner: S,
    authenticator: Arc<Authenticator>,
}

impl<S, B, R> Service<http::Request<B>> for Authenticated<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    R: Default,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<http::Response<R>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        match self.caller(&request) {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                Either::Left(self.inner.call(request))
            }
            Err(status) => {
                audit_refusal(&request, &status);
                Either::Right(ready(Ok(status.into_http())))
            }
        }
    }
}

/// An administrative change refused for want of credentials is audited too (its request,
/// not read, names no queue).
fn audit_refusal<B>(request: &http::Request<B>, status: &Status) {
    let Some(action) = crate::audit::action_of(request.uri().path()) else {
        return;
    };
    let peer = Peer::describe_of(request.extensions());
    audit::record(
        "unauthenticated",
        &peer,
        action,
        "",
        Err((status.code(), status.message().to_owned())),
    );
}

impl<S> Authenticated<S> {
    fn caller<B>(&self, request: &http::Request<B>) -> Result<Caller, Status> {
        let peer = Peer::of(request.extensions());
        if is_health_check(request.uri().path()) || peer.is_some_and(Peer::is_in_process) {
            return Ok(Caller::Unrestricted);
        }
        let bearer = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(cascade_security::bearer_token);
        let credentials = Credentials {
            bearer,
            certificate_names: peer.map_or(&[], Peer::certificate_names),
        };
        self.authenticator
            .authenticate(credentials)
            .map_err(|e| Status::unauthenticated(e.to_string()))
    }
}

/// The caller the layer found for a request.
pub(crate) fn caller<T>(request: &tonic::Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("the call reached a service without being authenticated"))
}
