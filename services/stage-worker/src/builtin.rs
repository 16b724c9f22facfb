//! Built-in handlers, **for demos and tests only**: they do no useful work.
//!
//! - `log`: logs the event (queue, id, attempt, payload size) and advances;
//! - `noop`: advances;
//! - `sleep:<ms>`: sleeps that many milliseconds, then advances;
//! - `fail:<percent>`: fails that share of calls at random (a retry with the queue's
//!   backoff), and advances the others.
//!
//! "Advances" means: to the next stage, or an ack at the last stage or on a plain queue.

use std::time::Duration;

use cascade_core::{Event, Outcome};
use cascade_worker::{BoxedHandler, Handler, HandlerError};

use crate::stage::advance;

/// The handler named `name` if it is a built-in one: `Some(Err(why))` when the name is a
/// built-in's with a bad argument.
pub(crate) fn builtin(name: &str) -> Option<Result<BoxedHandler, String>> {
    let (base, argument) = match name.split_once(':') {
        Some((base, argument)) => (base, Some(argument)),
        None => (name, None),
    };
    let built = match (base, argument) {
        ("log", None) => Ok(BoxedHandler::new(Log)),
        ("noop", None) => Ok(BoxedHandler::new(Noop)),
        ("sleep", Some(millis)) => millis
            .trim()
            .parse::<u64>()
            .map(|ms| BoxedHandler::new(Sleep(Duration::from_millis(ms))))
            .map_err(|_| format!("sleep:<ms> needs a number of milliseconds, got {millis:?}")),
        ("fail", Some(percent)) => match percent.trim().parse::<f64>() {
            Ok(share) if (0.0..=100.0).contains(&share) => Ok(BoxedHandler::new(Fail(share))),
            _ => Err(format!("fail:<percent> needs 0 to 100, got {percent:?}")),
        },
        ("log" | "noop", Some(_)) => Err(format!("{base} takes no argument")),
        ("sleep" | "fail", None) => Err(format!("{base} needs an argument: {base}:<n>")),
        _ => return None,
    };
    Some(built)
}

struct Log;

impl Handler for Log {
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        tracing::info!(
            queue = %event.queue,
            id = %event.id,
            attempt,
            payload_bytes = event.payload.len(),
            "builtin.log"
        );
        Ok(advance())
    }
}

struct Noop;

impl Handler for Noop {
    async fn handle(&self, _event: &Event, _attempt: u32) -> Result<Outcome, HandlerError> {
        Ok(advance())
    }
}

struct Sleep(Duration);

impl Handler for Sleep {
    async fn handle(&self, _event: &Event, _attempt: u32) -> Result<Outcome, HandlerError> {
        tokio::time::sleep(self.0).await;
        Ok(advance())
    }
}

/// Fails this percentage of calls.
struct Fail(f64);

impl Handler for Fail {
    async fn handle(&self, _event: &Event, _attempt: u32) -> Result<Outcome, HandlerError> {
        if fastrand::f64() * 100.0 < self.0 {
            return Err(format!("builtin fail: failing {}% of calls on purpose", self.0).into());
        }
        Ok(advance())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cascade_core::{EventId, EventState, QueueName, Timestamp};

    use super::*;

    fn event() -> Event {
        Event {
            id: EventId::parse("e1").expect("id"),
            queue: QueueName::parse("jobs").expect("queue"),
            payload: Default::default(),
            headers: BTreeMap::new(),
            activate_at: Timestamp::ZERO,
            state: EventState::Leased,
            attempts: 1,
            created_at: Timestamp::ZERO,
            version: 1,
            lease_expires_at: None,
        }
    }

    async fn call(name: &str) -> Result<Outcome, HandlerError> {
        let handler = builtin(name).expect("a built-in").expect("valid");
        handler.handle(&event(), 1).await
    }

    #[tokio::test]
    async fn builtins_advance_or_fail_as_named() {
        for name in ["log", "noop", "sleep:1", "fail:0"] {
            assert_eq!(call(name).await.expect(name), advance(), "{name}");
        }
        assert!(call("fail:100").await.is_err());
    }

    #[test]
    fn bad_names_and_arguments() {
        assert!(builtin("echo").is_none());
        for bad in [
            "sleep:soon",
            "sleep",
            "fail:101",
            "fail:-1",
            "fail",
            "log:1",
        ] {
            assert!(
                matches!(builtin(bad), Some(Err(_))),
                "{bad} should be refused"
            );
        }
    }
}
