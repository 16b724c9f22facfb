//! The audit log: one structured line (target [`AUDIT_TARGET`], message `audit`) per
//! administrative change — a queue created, deleted or purged, a pipeline applied, dead
//! letters redriven, credentials reloaded — with who (a client's identity and address, or
//! what acted on its own, such as `settings`), what (the action and the queue, pipeline or
//! file), and the outcome (`ok` with what changed, or the status code and message of the
//! refusal). The time is the log line's. Written whatever the log level.

pub use crate::init::AUDIT_TARGET;

/// Writes one audit line: `identity` is the caller's (`anonymous` with authentication
/// off, `operator` for what the operator's files did), `peer` where the call came from.
pub fn record(
    identity: &str,
    peer: &str,
    action: &'static str,
    resource: &str,
    outcome: Result<String, (tonic::Code, String)>,
) {
    match outcome {
        Ok(change) => tracing::info!(
            target: AUDIT_TARGET,
            action,
            resource,
            identity,
            peer,
            outcome = "ok",
            change,
            "audit"
        ),
        Err((code, reason)) => tracing::info!(
            target: AUDIT_TARGET,
            action,
            resource,
            identity,
            peer,
            outcome = ?code,
            reason,
            "audit"
        ),
    }
}
