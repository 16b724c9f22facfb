//! `cascade rm explain`: prints the resource manager's latest decisions with why, as the
//! process running it serves them on its admin port (`GET /rm/explain`). A plain HTTP/1.0
//! GET over a TCP stream: one short text answer needs no HTTP client library.

use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use cascade_resource_manager::EXPLAIN_PATH;

use crate::cli::CliError;

/// How long the whole exchange may take: the answer is a small table, already rendered.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Answers longer than this are refused: the table has one line per stage.
const MAX_ANSWER: u64 = 16 << 20;

#[derive(clap::Subcommand)]
pub enum RmCommand {
    /// Print, per stage, the inputs of the latest decision and why it got what it got.
    Explain {
        /// The admin (HTTP) address of the process running the resource manager.
        #[arg(long, env = "CASCADE_HTTP_ADDR", default_value = "127.0.0.1:7701")]
        http_addr: String,
        #[command(flatten)]
        token: AdminToken,
    },
}

/// The token of an identity with the admin role on `*`, which the admin port's pages need
/// when authentication is on.
#[derive(clap::Args)]
pub struct AdminToken {
    /// The bearer token of a cluster admin, for a cluster with authentication on (better in
    /// CASCADE_TOKEN than on a command line, where other users of the machine can see it).
    #[arg(long, env = "CASCADE_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl AdminToken {
    /// The token, if given; bad usage if it could not go in a header as it is (printable
    /// ASCII only: anything else could end the header and start another).
    pub fn get(&self) -> Result<Option<&str>, CliError> {
        match self.token.as_deref() {
            Some(token) if !token.bytes().all(|b| b.is_ascii_graphic()) => Err(CliError::usage(
                "--token (or CASCADE_TOKEN)",
                "not printable ASCII without spaces or line breaks",
            )),
            token => Ok(token),
        }
    }
}

pub async fn rm(command: RmCommand) -> anyhow::Result<()> {
    match command {
        RmCommand::Explain { http_addr, token } => {
            let (status, body) = http_get(&http_addr, EXPLAIN_PATH, token.get()?).await?;
            if status != 200 {
                bail!(
                    "{}{EXPLAIN_PATH} answered {status}: {}",
                    admin_host_port(&http_addr),
                    body.trim_end()
                );
            }
            out!("{body}");
        }
    }
    Ok(())
}

/// The `host:port` of an admin address given with or without `http://` (as `--addr` takes
/// the gateway's) and a trailing slash. The admin port speaks plain HTTP only.
pub fn admin_host_port(given: &str) -> &str {
    let addr = given.strip_prefix("http://").unwrap_or(given);
    addr.strip_suffix('/').unwrap_or(addr)
}

/// `GET path` from `addr` (`host:port`, or `http://host:port`), with `token` (checked by
/// [`AdminToken::get`]) as a bearer token if given: the status code and the body as text.
pub async fn http_get(
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let addr = admin_host_port(addr);
    let authorization = match token {
        Some(token) => format!("Authorization: Bearer {token}\r\n"),
        None => String::new(),
    };
    tokio::time::timeout(HTTP_TIMEOUT, exchange(addr, path, &authorization))
        .await
        .map_err(|_| {
            CliError::unreachable_admin_port(addr, format!("no answer within {HTTP_TIMEOUT:?}"))
        })?
}

async fn exchange(addr: &str, path: &str, authorization: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| CliError::unreachable_admin_port(addr, e))?;
    // HTTP/1.0: the server closes after one answer and sends no chunked encoding.
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n{authorization}\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .with_context(|| format!("send the request to {addr}"))?;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .await
        .with_context(|| format!("read the answer from {addr}"))?;
    parse_answer(&answer).with_context(|| format!("read the answer from {addr}"))
}

fn parse_answer(answer: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(answer);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("no end of headers");
    };
    let status_line = head.lines().next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("not an HTTP status line: {status_line:?}"))?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_split_into_status_and_body() {
        let answer = b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nline 1\nline 2\n";
        let (status, body) = parse_answer(answer).expect("valid");
        assert_eq!((status, body.as_str()), (200, "line 1\nline 2\n"));
        assert!(parse_answer(b"HTTP/1.0 200 OK\r\n").is_err());
        assert!(parse_answer(b"garbage\r\n\r\n").is_err());
    }
}
