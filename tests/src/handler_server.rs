//! An HTTP handler served by the test (axum on 127.0.0.1 port 0), one path per stage
//! (`/<stage>`), that fails a share of its calls with 500 at random and records every call:
//! which event (`cascade-event-id`), which stage (`cascade-stage`), which attempt
//! (`cascade-attempt`), what it answered and when. A failure says why in its body
//! (`FAILURE_BODY`), as a real handler would. The random draws come from a seeded RNG,
//! so the share of failures is the same from run to run (which call gets them depends on
//! the order the calls arrive in).

use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The body of every 500 the handler answers.
pub const FAILURE_BODY: &str = "store is down";

/// One call the handler answered.
#[derive(Clone, Debug)]
pub struct Call {
    pub id: String,
    /// From the `cascade-stage` header.
    pub stage: String,
    pub attempt: u32,
    /// The request's body: the event's payload.
    pub payload: Vec<u8>,
    pub status: u16,
    pub at: Instant,
}

impl Call {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

struct Shared {
    calls: Mutex<Vec<Call>>,
    rng: Mutex<fastrand::Rng>,
    fail_percent: u32,
}

pub struct HandlerServer {
    base: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl HandlerServer {
    /// Answers 500 to `fail_percent` % of calls, drawn from an RNG seeded with `seed`, and
    /// 200 to the others.
    pub async fn start(fail_percent: u32, seed: u64) -> HandlerServer {
        let shared = Arc::new(Shared {
            calls: Mutex::new(Vec::new()),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            fail_percent,
        });
        let app = axum::Router::new()
            .route("/{stage}", post(handle))
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind port 0");
        let addr = listener.local_addr().expect("bound address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve the handler");
        });
        HandlerServer {
            base: format!("http://{addr}"),
            shared,
            task,
        }
    }

    /// The handler URL of `stage`.
    pub fn url(&self, stage: &str) -> String {
        format!("{}/{stage}", self.base)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().expect("calls").clone()
    }

    /// How many calls were answered so far.
    pub fn call_count(&self) -> usize {
        self.shared.calls.lock().expect("calls").len()
    }

    /// The events `stage` answered 2xx at least once so far.
    pub fn succeeded_ids(&self, stage: &str) -> std::collections::HashSet<String> {
        let calls = self.shared.calls.lock().expect("calls");
        calls
            .iter()
            .filter(|c| c.stage == stage && c.succeeded())
            .map(|c| c.id.clone())
            .collect()
    }

    /// Calls of `stage` answered 2xx so far.
    pub fn successes(&self, stage: &str) -> usize {
        let calls = self.shared.calls.lock().expect("calls");
        calls
            .iter()
            .filter(|c| c.stage == stage && c.succeeded())
            .count()
    }
}

/// The value of header `name`, empty when absent or not text.
pub fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

impl Drop for HandlerServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(path_stage): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, &'static str) {
    let header = |name: &str| header(&headers, name);
    let stage = header("cascade-stage");
    let fail = shared.rng.lock().expect("rng").u32(0..100) < shared.fail_percent;
    // A call without the protocol's headers, or on another stage's path, is answered 400
    // (a dead letter) and recorded, so that the test's checks see it.
    let status = if stage != path_stage || header("cascade-event-id").is_empty() {
        StatusCode::BAD_REQUEST
    } else if fail {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let call = Call {
        id: header("cascade-event-id"),
        stage,
        attempt: header("cascade-attempt").parse().unwrap_or(0),
        payload: body.to_vec(),
        status: status.as_u16(),
        at: Instant::now(),
    };
    shared.calls.lock().expect("calls").push(call);
    let said = match status {
        StatusCode::INTERNAL_SERVER_ERROR => FAILURE_BODY,
        _ => "",
    };
    (status, said)
}
