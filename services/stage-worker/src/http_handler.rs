//! The HTTP handler: POSTs the event's payload to the stage's URL, with the event's identity
//! and headers as request headers, and reads the outcome from the response
//! ([`crate::http_reply`]). Connection errors and timeouts are failures: a retry with the
//! queue's backoff. Redirects are not followed: a handler's URL is meant to be exact.

use std::time::{Duration, SystemTime};

use cascade_client::ClientOptions;
use cascade_core::event::TRACE_CONTEXT_HEADERS;
use cascade_core::{Event, Outcome, QueueConfig, Timestamp};
use cascade_worker::{Handler, HandlerError};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::StageWorkerError;
use crate::http_reply::{EVENT_HEADER_PREFIX, Reply, outcome_of_reply};
use crate::stage::StageContext;

/// The largest response body read: the largest payload a queue may allow, since with
/// `cascade-payload: replace` the body is the next stage's payload.
const MAX_BODY_BYTES: usize = QueueConfig::MAX_PAYLOAD_LIMIT as usize;

pub struct HttpHandler {
    client: reqwest::Client,
    url: reqwest::Url,
    /// `url` as failures say it ([`shown`]).
    shown: String,
    stage: StageContext,
    /// `Bearer <handler_token>`.
    authorization: Option<HeaderValue>,
}

impl HttpHandler {
    /// A request that takes longer than `timeout` (body included) fails. `credentials`:
    /// the CA to trust for an https:// URL (beside the system's), a client certificate to
    /// present, and a token sent as `authorization: Bearer`.
    pub fn new(
        url: &str,
        timeout: Duration,
        stage: StageContext,
        credentials: &ClientOptions,
    ) -> Result<HttpHandler, StageWorkerError> {
        // An unparsable URL is not quoted: it may hold a secret the parse could not find.
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| StageWorkerError::Handler(format!("the handler's url: {e}")))?;
        let shown = shown(&parsed);
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(StageWorkerError::Handler(format!(
                "url {shown:?}: must be http:// or https://"
            )));
        }
        let failed =
            |e: reqwest::Error| StageWorkerError::Handler(format!("http client: {}", chain(&e)));
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout);
        if let Some(ca) = &credentials.ca_pem {
            for certificate in reqwest::Certificate::from_pem_bundle(ca).map_err(failed)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let Some((cert, key)) = &credentials.identity_pem {
            let pem = [cert.as_slice(), b"\n", key.as_slice()].concat();
            builder = builder.identity(reqwest::Identity::from_pem(&pem).map_err(failed)?);
        }
        let authorization = match &credentials.token {
            Some(token) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        StageWorkerError::setting(
                            "handler_token",
                            "must be printable ASCII without line breaks",
                        )
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(HttpHandler {
            client: builder.build().map_err(failed)?,
            shown,
            url: parsed,
            stage,
            authorization,
        })
    }
}

/// `url` as failures may say it: without a user name, a password or a query (where
/// webhooks often carry a token), for what a failure says is kept in the event's
/// `cascade-last-failure` and in dead letters' reasons, which consumers read.
fn shown(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    // Only a URL that cannot have them refuses; it has none to hide.
    let _ = shown.set_password(None);
    let _ = shown.set_username("");
    if shown.query().is_some() {
        shown.set_query(Some("..."));
    }
    shown.to_string()
}

impl Handler for HttpHandler {
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        let failed =
            |e: reqwest::Error| format!("POST {}: {}", self.shown, chain(&e.without_url()));
        let mut headers = request_headers(event, attempt, &self.stage);
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        let mut response = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(event.payload.clone())
            .send()
            .await
            .map_err(failed)?;
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(format!(
                    "POST {}: the response body is over {MAX_BODY_BYTES} bytes",
                    self.shown
                )
                .into());
            }
            body.extend_from_slice(&chunk);
        }
        let reply = Reply {
            status: response.status().as_u16(),
            headers: response.headers(),
            body: &body,
        };
        let now = Timestamp::from_system_time(SystemTime::now());
        Ok(outcome_of_reply(&reply, now)?)
    }
}

/// `cascade-event-id`, `cascade-queue`, `cascade-pipeline` and `cascade-stage` (on a
/// pipeline's stage), `cascade-attempt` (1-based), `traceparent`/`tracestate` (the handler
/// call's span when traces are exported, else the event's own, if any), and every event
/// header as `cascade-h-<name>`. The body's `content-type` is the
/// event's `content-type` header, else `application/octet-stream`. A header value HTTP
/// cannot carry (a control character) is left out and logged.
pub(crate) fn request_headers(event: &Event, attempt: u32, stage: &StageContext) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let mut put = |name: &str, value: &str| {
        let parsed = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        );
        match parsed {
            (Ok(name), Ok(value)) => {
                headers.insert(name, value);
            }
            _ => tracing::warn!(id = %event.id, header = name, "http.header.unsendable"),
        }
    };
    put("cascade-event-id", event.id.as_str());
    put("cascade-queue", event.queue.as_str());
    if let Some(pipeline) = &stage.pipeline {
        put("cascade-pipeline", pipeline);
    }
    if let Some(name) = &stage.stage {
        put("cascade-stage", name);
    }
    put("cascade-attempt", &attempt.to_string());
    for (name, value) in &event.headers {
        // The trace context also travels under its own names, for the handler's tracing.
        if TRACE_CONTEXT_HEADERS.contains(&name.as_str()) {
            put(name, value);
        }
        put(&format!("{EVENT_HEADER_PREFIX}{name}"), value);
    }
    let content_type = event
        .headers
        .get("content-type")
        .map_or("application/octet-stream", String::as_str);
    put(CONTENT_TYPE.as_str(), content_type);
    if cascade_telemetry::is_recording() {
        // The handler call's span (`worker.handle`) is the handler's parent: the call stays
        // in the event's trace, one level below the span the event carries.
        cascade_telemetry::inject_into_http(&cascade_telemetry::current_context(), &mut headers);
    }
    headers
}

/// An error with its causes, which reqwest's own message leaves out ("connection refused").
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cascade_core::{EventId, EventState, QueueName};

    use super::*;

    fn event(headers: &[(&str, &str)]) -> Event {
        Event {
            id: EventId::parse("order-1").expect("id"),
            queue: QueueName::parse("orders.ship").expect("queue"),
            payload: b"{}".to_vec().into(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            activate_at: Timestamp::ZERO,
            state: EventState::Leased,
            attempts: 3,
            created_at: Timestamp::ZERO,
            version: 1,
            lease_expires_at: None,
        }
    }

    fn stage(pipeline: Option<&str>, name: Option<&str>) -> StageContext {
        StageContext {
            queue: QueueName::parse("orders.ship").expect("queue"),
            pipeline: pipeline.map(str::to_owned),
            stage: name.map(str::to_owned),
            last: false,
        }
    }

    fn get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A failure's text is kept in the event's headers and dead letters' reasons, which
    /// consumers read: the URL's password stays out of it.
    #[tokio::test]
    async fn failures_name_the_url_without_its_password_or_query() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        // Takes each connection and closes it at once: every call fails.
        tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                drop(connection);
            }
        });
        let handler = HttpHandler::new(
            &format!("http://shipper:s3cret@{addr}/ship?token=t0ken"),
            Duration::from_secs(10),
            stage(None, None),
            &ClientOptions::default(),
        )
        .expect("handler");
        let failure = handler
            .handle(&event(&[]), 1)
            .await
            .expect_err("the connection is closed")
            .to_string();
        assert!(
            !failure.contains("s3cret") && !failure.contains("t0ken"),
            "{failure}"
        );
        assert!(
            failure.starts_with(&format!("POST http://{addr}/ship?...: ")),
            "{failure}"
        );
    }

    #[test]
    fn requests_carry_the_event_and_its_headers() {
        let sent = event(&[
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("Tenant", "acme"),
            ("content-type", "application/json"),
        ]);
        let headers = request_headers(&sent, 3, &stage(Some("orders"), Some("ship")));
        assert_eq!(get(&headers, "cascade-event-id"), Some("order-1"));
        assert_eq!(get(&headers, "cascade-queue"), Some("orders.ship"));
        assert_eq!(get(&headers, "cascade-pipeline"), Some("orders"));
        assert_eq!(get(&headers, "cascade-stage"), Some("ship"));
        assert_eq!(get(&headers, "cascade-attempt"), Some("3"));
        assert_eq!(
            get(&headers, "traceparent"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(
            get(&headers, "cascade-h-traceparent"),
            get(&headers, "traceparent")
        );
        // HTTP header names are case-insensitive: they travel in lowercase.
        assert_eq!(get(&headers, "cascade-h-tenant"), Some("acme"));
        assert_eq!(get(&headers, "content-type"), Some("application/json"));
    }

    #[test]
    fn plain_queues_send_no_pipeline_and_unsendable_values_are_left_out() {
        let sent = event(&[("note", "line\nbreak"), ("ok", "fine")]);
        let headers = request_headers(&sent, 1, &stage(None, None));
        assert_eq!(get(&headers, "cascade-pipeline"), None);
        assert_eq!(get(&headers, "cascade-stage"), None);
        assert_eq!(get(&headers, "cascade-h-note"), None);
        assert_eq!(get(&headers, "cascade-h-ok"), Some("fine"));
        assert_eq!(get(&headers, "traceparent"), None);
        assert_eq!(
            get(&headers, "content-type"),
            Some("application/octet-stream")
        );
    }

    #[test]
    fn only_http_urls_are_handlers() {
        let timeout = Duration::from_secs(1);
        assert!(
            HttpHandler::new(
                "http://127.0.0.1:1/x",
                timeout,
                stage(None, None),
                &ClientOptions::default()
            )
            .is_ok()
        );
        assert!(
            HttpHandler::new(
                "ftp://host/x",
                timeout,
                stage(None, None),
                &ClientOptions::default()
            )
            .is_err()
        );
        assert!(
            HttpHandler::new(
                "not a url",
                timeout,
                stage(None, None),
                &ClientOptions::default()
            )
            .is_err()
        );
    }
}
