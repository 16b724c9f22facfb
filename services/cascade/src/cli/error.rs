//! What a client command says when it cannot do its job: one line,
//! `error: <what happened>: <why>; <what to do>`, hints that name `cascade` commands, never a
//! backtrace, and an exit code a script can branch on.

use std::fmt;
use std::process::ExitCode;

use cascade_client::ClientError;
use tonic::{Code, Status};

/// The exit codes, as the help and the docs list them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The server refused the request, or the command failed.
    Refused = 1,
    /// The command line is wrong; nothing was sent.
    Usage = 2,
    /// Nothing that speaks Cascade's gRPC answered at the address.
    Connect = 3,
}

#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    what: String,
    why: String,
    todo: Option<String>,
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.what.is_empty() {
            true => write!(f, "{}", self.why)?,
            false => write!(f, "{}: {}", self.what, self.why)?,
        }
        match &self.todo {
            Some(todo) => write!(f, "; {todo}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for CliError {}

/// The RPC names a server message may mention, and the command that does the same here.
const COMMANDS: [(&str, &str); 2] = [
    ("CreateQueue", "`cascade queue create`"),
    ("ApplyPipeline", "`cascade pipeline apply`"),
];

impl CliError {
    /// A flag or argument the command cannot use, e.g. `--delay 5 parsecs`.
    pub fn usage(what: impl Into<String>, why: impl fmt::Display) -> CliError {
        CliError {
            exit: Exit::Usage,
            what: what.into(),
            why: why.to_string(),
            todo: Some("see the command's --help".into()),
        }
    }

    pub fn failed(what: impl Into<String>, why: impl fmt::Display) -> CliError {
        CliError {
            exit: Exit::Refused,
            what: what.into(),
            why: why.to_string(),
            todo: None,
        }
    }

    /// A failure that says everything itself (a service that could not start, say).
    pub fn message(text: impl fmt::Display) -> CliError {
        CliError::failed("", text)
    }

    pub fn connect(addr: &str, error: ClientError) -> CliError {
        match error {
            ClientError::BadAddress { reason, .. } if about_tls(&reason) => CliError {
                exit: Exit::Usage,
                what: format!("cannot set up TLS to {addr}"),
                todo: Some(tls_todo(&reason).into()),
                why: reason,
            },
            ClientError::BadAddress { reason, .. } => CliError {
                exit: Exit::Usage,
                what: format!("'{addr}' is not a gateway address"),
                why: reason,
                todo: Some("give --addr (or CASCADE_ADDR) like http://127.0.0.1:7700".into()),
            },
            ClientError::Connect { reason, .. } => unreachable_gateway(addr, reason),
            ClientError::Credentials { what, reason } => CliError {
                exit: Exit::Usage,
                what: format!("cannot use {what}"),
                why: reason,
                todo: Some("give a readable PEM file, or a token of printable characters".into()),
            },
            ClientError::Option { field, reason } => CliError {
                exit: Exit::Usage,
                what: format!("client option {field}"),
                why: reason.into(),
                todo: None,
            },
        }
    }

    /// Nothing answered at `addr`, an admin (HTTP) address: `cascade top`, `cascade rm`.
    pub fn unreachable_admin_port(addr: &str, why: impl fmt::Display) -> CliError {
        CliError {
            exit: Exit::Connect,
            what: format!("no answer from the admin port at {addr}"),
            why: why.to_string(),
            todo: Some(
                "is it running? point --http-addr (or CASCADE_HTTP_ADDR) at its admin port (7701 by default)"
                    .into(),
            ),
        }
    }

    /// The server's answer to `what` (e.g. "cannot ack 'e1' in jobs"): a refusal with its
    /// reason, or, when the answer never came from a Cascade gateway, a connection failure.
    pub fn refused(addr: &str, what: impl Into<String>, status: Status) -> CliError {
        let message = status.message();
        if message.contains("mapped from HTTP status code") {
            return CliError {
                exit: Exit::Connect,
                what: format!("{addr} is not Cascade's gRPC port"),
                why: "it answered plain HTTP: this is the admin HTTP port, not gRPC".into(),
                todo: Some(
                    "point --addr (or CASCADE_ADDR) at the gateway's gRPC port (--grpc-addr, 7700 by default; the admin port is 7701)"
                        .into(),
                ),
            };
        }
        if std::error::Error::source(&status).is_some() {
            // The transport failed: the call never reached a server that answered it.
            return unreachable_gateway(addr, cascade_client::innermost_cause(&status));
        }
        let why = COMMANDS
            .iter()
            .fold(message.to_string(), |text, (rpc, cli)| {
                text.replace(&format!("with {rpc}"), &format!("with {cli}"))
            });
        let todo = (!why.contains("; "))
            .then(|| todo_for(status.code(), &why))
            .flatten();
        CliError {
            exit: Exit::Refused,
            what: what.into(),
            why,
            todo,
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.exit as u8)
    }
}

/// Whether a failure to connect is the TLS handshake's or its files': the advice is then
/// about certificates, not about whether the gateway runs.
fn about_tls(reason: &str) -> bool {
    let reason = reason.to_lowercase();
    ["certificate", "alert", "handshake", "tls", "https://"]
        .iter()
        .any(|word| reason.contains(word))
}

fn tls_todo(reason: &str) -> &'static str {
    match reason.contains("https://") {
        true => {
            "give --addr (or CASCADE_ADDR) like https://127.0.0.1:7700 with --ca, --cert and --key"
        }
        false => {
            "check --ca (the CA that signed the gateway's certificate), and --cert and --key (a client certificate the gateway's client CA signed) when the gateway asks for one"
        }
    }
}

fn unreachable_gateway(addr: &str, reason: String) -> CliError {
    if about_tls(&reason) {
        return CliError {
            exit: Exit::Connect,
            what: format!("cannot connect to Cascade at {addr}"),
            todo: Some(tls_todo(&reason).into()),
            why: reason,
        };
    }
    let refused = reason.to_lowercase().contains("connection refused");
    CliError {
        exit: Exit::Connect,
        what: format!("cannot connect to Cascade at {addr}"),
        why: if refused {
            "connection refused".into()
        } else {
            reason
        },
        todo: Some(
            "is it running? start it with `cascade standalone`, or point --addr (or CASCADE_ADDR) at a running gateway"
                .into(),
        ),
    }
}

fn todo_for(code: Code, why: &str) -> Option<String> {
    let todo = match code {
        Code::FailedPrecondition if why.starts_with("lease token") => {
            "the event is no longer leased to you: take it again with `cascade take QUEUE`"
        }
        Code::NotFound if why.starts_with("event ") => {
            "check the queue and the ID; an acked, deleted or dead-lettered event has left its queue (dead letters: `cascade dlq list QUEUE.dlq`)"
        }
        Code::Unavailable | Code::DeadlineExceeded => {
            "try again; if it lasts, see the server's log and /readyz on its admin port"
        }
        _ => return None,
    };
    Some(todo.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_what_why_and_what_to_do() {
        let status = Status::failed_precondition(
            "lease token for event 'e1' in queue 'jobs' is not current: the lease expired or was completed",
        );
        let error = CliError::refused("http://x", "cannot ack 'e1' in jobs", status);
        assert_eq!(error.exit, Exit::Refused);
        assert_eq!(
            error.to_string(),
            "cannot ack 'e1' in jobs: lease token for event 'e1' in queue 'jobs' is not current: the lease expired or was completed; the event is no longer leased to you: take it again with `cascade take QUEUE`"
        );
    }

    #[test]
    fn rpc_names_become_commands_and_a_servers_own_hint_is_kept() {
        let status = Status::not_found(
            "queue 'q' does not exist; create it with CreateQueue, or create a template such as 'q*' that matches it",
        );
        let error = CliError::refused("http://x", "cannot enqueue to q", status);
        assert_eq!(
            error.to_string(),
            "cannot enqueue to q: queue 'q' does not exist; create it with `cascade queue create`, or create a template such as 'q*' that matches it"
        );
    }

    #[test]
    fn an_http_answer_is_the_admin_port() {
        let status =
            Status::unimplemented("grpc-status header missing, mapped from HTTP status code 404");
        let error = CliError::refused("http://127.0.0.1:7701", "cannot get queue q", status);
        assert_eq!(error.exit, Exit::Connect);
        assert!(
            error
                .to_string()
                .contains("this is the admin HTTP port, not gRPC"),
            "{error}"
        );
    }
}
