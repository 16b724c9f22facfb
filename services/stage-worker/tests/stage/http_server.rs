//! An HTTP handler served by the test (axum on 127.0.0.1 port 0): it records each request
//! and answers as the test's closure says, given the call's number (0-based).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct Received {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

type Respond = dyn Fn(usize, &Received) -> Response + Send + Sync;

struct Shared {
    received: Mutex<Vec<Received>>,
    respond: Box<Respond>,
}

pub struct HandlerServer {
    pub url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl HandlerServer {
    pub async fn start(
        respond: impl Fn(usize, &Received) -> Response + Send + Sync + 'static,
    ) -> HandlerServer {
        let shared = Arc::new(Shared {
            received: Mutex::new(Vec::new()),
            respond: Box::new(respond),
        });
        let app = axum::Router::new()
            .route("/handle", post(handle))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind port 0");
        let addr = listener.local_addr().expect("bound address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve the handler");
        });
        HandlerServer {
            url: format!("http://{addr}/handle"),
            shared,
            task,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().expect("received").clone()
    }
}

impl Drop for HandlerServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let received = Received {
        at: Instant::now(),
        headers,
        body: body.to_vec(),
    };
    let call = {
        let mut all = shared.received.lock().expect("received");
        all.push(received.clone());
        all.len() - 1
    };
    (shared.respond)(call, &received)
}

/// A response with `status`, `headers` and `body`.
pub fn reply(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder
        .body(Body::from(body.to_owned()))
        .expect("a valid response")
}

/// The time between two calls.
pub fn gap(first: &Received, second: &Received) -> Duration {
    second.at.duration_since(first.at)
}
