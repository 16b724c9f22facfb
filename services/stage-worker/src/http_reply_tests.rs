//! Every rule of `outcome_of_reply`, one row each.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};

use super::*;

/// 2024-05-01T12:00:00Z.
const NOW: Timestamp = Timestamp::from_micros(1_714_564_800_000_000);

/// (what the row shows, status, headers, body, expected outcome)
type Row<'a> = (&'a str, u16, Vec<(&'a str, &'a [u8])>, &'a [u8], Expect);

enum Expect {
    Is(Outcome),
    /// An error naming this header.
    BadHeader(&'static str),
}

fn advance_with(
    to: Option<&str>,
    payload: Option<&[u8]>,
    headers: &[(&str, &str)],
    delay: Option<Duration>,
) -> Outcome {
    Outcome::Advance {
        to: to.map(str::to_owned),
        payload: payload.map(Bytes::copy_from_slice),
        headers: headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
        delay,
    }
}

fn next() -> Outcome {
    advance_with(None, None, &[], None)
}

fn retry(delay: Option<Duration>, reason: &str) -> Outcome {
    Outcome::Retry {
        delay,
        reason: Some(reason.to_owned()),
    }
}

fn dead(reason: &str) -> Outcome {
    Outcome::DeadLetter {
        reason: reason.to_owned(),
    }
}

fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).expect("header name"),
            HeaderValue::from_bytes(value).expect("header value"),
        );
    }
    map
}

#[test]
fn replies_map_to_outcomes() {
    let secs = Duration::from_secs;
    let long_body = "x".repeat(300);
    let rows: Vec<Row<'_>> = vec![
        ("200 advances", 200, vec![], b"ignored", Expect::Is(next())),
        ("204 advances", 204, vec![], b"", Expect::Is(next())),
        (
            "2xx with a delay advances later",
            200,
            vec![("cascade-delay", b"2.5")],
            b"",
            Expect::Is(advance_with(
                None,
                None,
                &[],
                Some(Duration::from_millis(2500)),
            )),
        ),
        (
            "payload replace carries the body",
            200,
            vec![("cascade-payload", b"replace")],
            b"next payload",
            Expect::Is(advance_with(None, Some(b"next payload"), &[], None)),
        ),
        (
            "cascade-h- headers go to the next stage",
            200,
            vec![("cascade-h-tenant", b"acme"), ("x-other", b"dropped")],
            b"",
            Expect::Is(advance_with(None, None, &[("tenant", "acme")], None)),
        ),
        (
            "Cascade's own headers sent back are left as they are",
            200,
            vec![
                ("cascade-h-tenant", b"acme"),
                ("cascade-h-cascade-last-failure", b"timed out"),
            ],
            b"",
            Expect::Is(advance_with(None, None, &[("tenant", "acme")], None)),
        ),
        (
            "explicit ack",
            200,
            vec![("cascade-outcome", b"ack")],
            b"",
            Expect::Is(Outcome::Ack),
        ),
        (
            "explicit outcomes ignore case and spaces",
            200,
            vec![("cascade-outcome", b" ACK ")],
            b"",
            Expect::Is(Outcome::Ack),
        ),
        (
            "explicit advance",
            200,
            vec![("cascade-outcome", b"advance")],
            b"",
            Expect::Is(next()),
        ),
        (
            "advance to a named stage",
            200,
            vec![
                ("cascade-outcome", b"advance:ship"),
                ("cascade-delay", b"1"),
            ],
            b"",
            Expect::Is(advance_with(Some("ship"), None, &[], Some(secs(1)))),
        ),
        (
            "advance: without a stage",
            200,
            vec![("cascade-outcome", b"advance:")],
            b"",
            Expect::BadHeader(OUTCOME_HEADER),
        ),
        (
            "retry with a delay",
            200,
            vec![("cascade-outcome", b"retry"), ("cascade-delay", b"30")],
            b"",
            Expect::Is(retry(Some(secs(30)), "HTTP 200")),
        ),
        (
            "retry without a delay uses the backoff",
            200,
            vec![("cascade-outcome", b"retry")],
            b"",
            Expect::Is(retry(None, "HTTP 200")),
        ),
        (
            "retry says why in cascade-reason",
            200,
            vec![
                ("cascade-outcome", b"retry"),
                ("cascade-reason", b" stock service down "),
            ],
            b"",
            Expect::Is(retry(None, "stock service down")),
        ),
        (
            "reschedule at a time",
            200,
            vec![
                ("cascade-outcome", b"reschedule"),
                ("cascade-activate-at", b"2024-05-02T00:00:00Z"),
            ],
            b"",
            Expect::Is(Outcome::Reschedule {
                activate_at: Timestamp::from_micros(1_714_608_000_000_000),
            }),
        ),
        (
            "reschedule after a delay",
            200,
            vec![("cascade-outcome", b"reschedule"), ("cascade-delay", b"60")],
            b"",
            Expect::Is(Outcome::Reschedule {
                activate_at: NOW.saturating_add(secs(60)),
            }),
        ),
        (
            "reschedule without a time",
            200,
            vec![("cascade-outcome", b"reschedule")],
            b"",
            Expect::BadHeader(ACTIVATE_AT_HEADER),
        ),
        (
            "reschedule at a malformed time",
            200,
            vec![
                ("cascade-outcome", b"reschedule"),
                ("cascade-activate-at", b"tomorrow"),
            ],
            b"",
            Expect::BadHeader(ACTIVATE_AT_HEADER),
        ),
        (
            "dead-letter with a reason",
            200,
            vec![
                ("cascade-outcome", b"dead-letter"),
                ("cascade-reason", b"bad order"),
            ],
            b"",
            Expect::Is(dead("bad order")),
        ),
        (
            "dead-letter without a reason quotes the body",
            422,
            vec![("cascade-outcome", b"dead_letter")],
            b"no such sku",
            Expect::Is(dead("HTTP 422: no such sku")),
        ),
        (
            "a 4xx says why in cascade-reason",
            422,
            vec![("cascade-reason", b"bad sku")],
            b"{\"error\": \"no such sku\"}",
            Expect::Is(dead("bad sku")),
        ),
        (
            "an explicit outcome wins over the status",
            500,
            vec![("cascade-outcome", b"ack")],
            b"",
            Expect::Is(Outcome::Ack),
        ),
        (
            "an unknown outcome",
            200,
            vec![("cascade-outcome", b"maybe")],
            b"",
            Expect::BadHeader(OUTCOME_HEADER),
        ),
        (
            "a malformed delay",
            200,
            vec![("cascade-delay", b"soon")],
            b"",
            Expect::BadHeader(DELAY_HEADER),
        ),
        (
            "a negative delay",
            200,
            vec![("cascade-delay", b"-1")],
            b"",
            Expect::BadHeader(DELAY_HEADER),
        ),
        (
            "an unknown payload mode",
            200,
            vec![("cascade-payload", b"append")],
            b"",
            Expect::BadHeader(PAYLOAD_HEADER),
        ),
        (
            "429 with Retry-After",
            429,
            vec![("retry-after", b"7")],
            b"slow down",
            Expect::Is(retry(Some(secs(7)), "HTTP 429: slow down")),
        ),
        (
            "503 with Retry-After",
            503,
            vec![("retry-after", b"3")],
            b"",
            Expect::Is(retry(Some(secs(3)), "HTTP 503")),
        ),
        (
            "503 with an HTTP-date Retry-After uses the backoff",
            503,
            vec![("retry-after", b"Wed, 21 Oct 2015 07:28:00 GMT")],
            b"",
            Expect::Is(retry(None, "HTTP 503")),
        ),
        (
            "503 without Retry-After",
            503,
            vec![],
            b"",
            Expect::Is(retry(None, "HTTP 503")),
        ),
        (
            "400 dead-letters with the body",
            400,
            vec![],
            b"  missing field\n\"sku\"  ",
            Expect::Is(dead("HTTP 400: missing field \"sku\"")),
        ),
        (
            "404 with no body",
            404,
            vec![],
            b"",
            Expect::Is(dead("HTTP 404")),
        ),
        (
            "a long body is cut",
            400,
            vec![],
            long_body.as_bytes(),
            Expect::Is(dead(&format!("HTTP 400: {}...", "x".repeat(200)))),
        ),
        (
            "500 retries with the backoff",
            500,
            vec![],
            b"boom",
            Expect::Is(retry(None, "HTTP 500: boom")),
        ),
        (
            "5xx with cascade-delay",
            502,
            vec![("cascade-delay", b"4")],
            b"",
            Expect::Is(retry(Some(secs(4)), "HTTP 502")),
        ),
        (
            "an unfollowed redirect retries",
            302,
            vec![],
            b"",
            Expect::Is(retry(None, "HTTP 302")),
        ),
    ];
    for (name, status, pairs, body, expect) in rows {
        let map = headers(&pairs);
        let reply = Reply {
            status,
            headers: &map,
            body,
        };
        let got = outcome_of_reply(&reply, NOW);
        match (expect, got) {
            (Expect::Is(want), Ok(outcome)) => assert_eq!(outcome, want, "{name}"),
            (Expect::BadHeader(want), Err(StageWorkerError::BadReply { header, .. })) => {
                assert_eq!(header, want, "{name}")
            }
            (_, got) => panic!("{name}: unexpected {got:?}"),
        }
    }
}

#[test]
fn bad_replies_say_what_is_wrong() {
    let map = headers(&[("cascade-delay", b"soon")]);
    let reply = Reply {
        status: 200,
        headers: &map,
        body: b"",
    };
    let err = outcome_of_reply(&reply, NOW).expect_err("bad delay");
    assert_eq!(
        err.to_string(),
        "the handler's response: cascade-delay: must be a number of seconds such as 30 or 0.5, got \"soon\""
    );
}

#[test]
fn long_reasons_are_cut_at_a_character_boundary() {
    let reason = "é".repeat(3000);
    let map = headers(&[
        ("cascade-outcome", b"dead-letter"),
        ("cascade-reason", reason.as_bytes()),
    ]);
    let reply = Reply {
        status: 200,
        headers: &map,
        body: b"",
    };
    match outcome_of_reply(&reply, NOW) {
        Ok(Outcome::DeadLetter { reason }) => {
            assert_eq!(reason.len(), MAX_DEAD_LETTER_REASON_BYTES);
            assert!(reason.chars().all(|c| c == 'é'));
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
}
