//! `cascade_handler_duration_seconds{stage, outcome}`: each handler call timed from the
//! event handed to the handler to its answer. `outcome` is what the handler answered
//! (`advance` at the last stage too, where the worker acks), `error` for a failed call,
//! and `timeout` for a call dropped unanswered (its timeout passed, or shutdown cut it).

use std::sync::OnceLock;
use std::time::Instant;

use cascade_core::{Event, Outcome};
use cascade_telemetry::Metrics;
use cascade_telemetry::metrics::{HandlerOutcome, Histogram};
use cascade_worker::{BoxedHandler, Handler, HandlerError};

/// A handler, timed. An outcome's histogram is made at its first call and kept, so that a
/// call costs an `Instant` and one observation, and a stage shows only the outcomes it had
/// (each is 17 series: a stage with every outcome made up front cost 13 KiB of `/metrics`).
pub(crate) struct TimedHandler {
    inner: BoxedHandler,
    stage: String,
    metrics: Metrics,
    /// One histogram per outcome, in `HandlerOutcome::ALL` order.
    durations: Vec<OnceLock<Histogram>>,
}

impl TimedHandler {
    /// `stage`: the stage's queue name, `<pipeline>.<stage>`.
    pub fn new(inner: BoxedHandler, stage: &str, metrics: &Metrics) -> TimedHandler {
        TimedHandler {
            inner,
            stage: stage.to_owned(),
            metrics: metrics.clone(),
            durations: HandlerOutcome::ALL
                .iter()
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    fn observe(&self, outcome: HandlerOutcome, started: Instant) {
        let Some(index) = HandlerOutcome::ALL.iter().position(|o| *o == outcome) else {
            return;
        };
        let histogram = self.durations[index]
            .get_or_init(|| self.metrics.handler_duration_seconds(&self.stage, outcome));
        histogram.observe(started.elapsed().as_secs_f64());
    }
}

impl Handler for TimedHandler {
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        let mut call = Call {
            timed: self,
            started: Instant::now(),
            answered: false,
        };
        let answer = self.inner.handle(event, attempt).await;
        call.answered = true;
        let outcome = match &answer {
            Ok(outcome) => label(outcome),
            Err(_) => HandlerOutcome::Error,
        };
        self.observe(outcome, call.started);
        answer
    }
}

/// Observes `timeout` if the call is dropped before the handler answered.
struct Call<'a> {
    timed: &'a TimedHandler,
    started: Instant,
    answered: bool,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.timed.observe(HandlerOutcome::Timeout, self.started);
        }
    }
}

fn label(outcome: &Outcome) -> HandlerOutcome {
    match outcome {
        Outcome::Ack => HandlerOutcome::Ack,
        Outcome::Advance { .. } => HandlerOutcome::Advance,
        Outcome::Retry { .. } => HandlerOutcome::Retry,
        Outcome::Reschedule { .. } => HandlerOutcome::Reschedule,
        Outcome::Release => HandlerOutcome::Release,
        Outcome::DeadLetter { .. } => HandlerOutcome::DeadLetter,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    struct Answers(Result<Outcome, &'static str>, Duration);

    impl Handler for Answers {
        async fn handle(&self, _: &Event, _: u32) -> Result<Outcome, HandlerError> {
            tokio::time::sleep(self.1).await;
            self.0.clone().map_err(HandlerError::from)
        }
    }

    fn event() -> Event {
        Event {
            id: cascade_core::EventId::parse("e1").expect("id"),
            queue: cascade_core::QueueName::parse("orders.validate").expect("queue"),
            payload: Default::default(),
            headers: Default::default(),
            activate_at: cascade_core::Timestamp::ZERO,
            state: cascade_core::EventState::Leased,
            attempts: 1,
            created_at: cascade_core::Timestamp::ZERO,
            version: 1,
            lease_expires_at: None,
        }
    }

    #[tokio::test]
    async fn outcomes_errors_and_timeouts_are_observed_per_stage() {
        let metrics = Metrics::new();
        let timed = |answer, after| {
            TimedHandler::new(
                BoxedHandler::new(Answers(answer, after)),
                "orders.validate",
                &metrics,
            )
        };
        let event = event();
        let advancing = timed(Ok(Outcome::Release), Duration::ZERO);
        advancing.handle(&event, 1).await.expect("answer");
        let failing = timed(Err("down"), Duration::ZERO);
        failing.handle(&event, 1).await.expect_err("fails");
        let slow = timed(Ok(Outcome::Ack), Duration::from_secs(60));
        let cut = tokio::time::timeout(Duration::from_millis(10), slow.handle(&event, 1)).await;
        assert!(cut.is_err(), "timed out");
        let text = metrics.render();
        for sample in [
            r#"cascade_handler_duration_seconds_count{stage="orders.validate",outcome="release"} 1"#,
            r#"cascade_handler_duration_seconds_count{stage="orders.validate",outcome="error"} 1"#,
            r#"cascade_handler_duration_seconds_count{stage="orders.validate",outcome="timeout"} 1"#,
        ] {
            assert!(text.contains(sample), "{sample}\n{text}");
        }
        assert!(
            !text.contains(r#"outcome="ack""#),
            "made only when met\n{text}"
        );
    }
}
