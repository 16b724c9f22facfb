use std::collections::{BTreeMap, HashMap};

use cascade_core::Timestamp;

use super::*;

fn completion(outcome: Option<ProtoOutcome>) -> v1::Completion {
    v1::Completion {
        queue: "jobs".into(),
        id: "e1".into(),
        lease_token: "000000000000002a".into(),
        outcome,
    }
}

#[test]
fn takes_default_and_bound_their_fields() {
    let request = v1::TakeRequest {
        queue: "jobs".into(),
        ..v1::TakeRequest::default()
    };
    let take = take_from_proto(&request).expect("valid");
    assert_eq!((take.max_events, take.lease, take.wait), (1, None, None));
    let request = v1::TakeRequest {
        queue: "jobs".into(),
        max_events: 100,
        lease: Some(duration_to_proto(Duration::from_secs(5))),
        wait: Some(duration_to_proto(Duration::from_secs(20))),
        worker_id: "w1".into(),
        completions: Vec::new(),
    };
    let take = take_from_proto(&request).expect("valid");
    assert_eq!(take.max_events, 100);
    assert_eq!(take.lease, Some(Duration::from_secs(5)));
    assert_eq!(take.wait, Some(Duration::from_secs(20)));
    let too_many = v1::TakeRequest {
        max_events: MAX_TAKE_EVENTS + 1,
        ..request.clone()
    };
    let err = take_from_proto(&too_many).expect_err("too many");
    assert_eq!(
        err.to_string(),
        "max_events: must be at most 10000, got 10001"
    );
    let short = v1::TakeRequest {
        lease: Some(duration_to_proto(Duration::from_millis(10))),
        ..request.clone()
    };
    let err = take_from_proto(&short).expect_err("short lease");
    assert!(
        err.to_string()
            .starts_with("lease: must be between 100ms and 24h"),
        "{err}"
    );
    let template = v1::TakeRequest {
        queue: "inbox:*".into(),
        ..request
    };
    assert!(take_from_proto(&template).is_err());
}

#[test]
fn completions_convert_every_outcome() {
    let advance = ProtoOutcome::Advance(v1::Advance {
        to: "ship".into(),
        payload: Some(b"next".to_vec().into()),
        headers: HashMap::from([("k".to_owned(), "v".to_owned())]),
        delay: Some(duration_to_proto(Duration::from_secs(1))),
    });
    let item = completion_from_proto(completion(Some(advance))).expect("valid");
    assert_eq!(item.token, LeaseToken(42));
    assert_eq!(item.id.as_str(), "e1");
    match item.outcome {
        Outcome::Advance {
            to, payload, delay, ..
        } => {
            assert_eq!(to.as_deref(), Some("ship"));
            assert_eq!(payload.as_deref(), Some(&b"next"[..]));
            assert_eq!(delay, Some(Duration::from_secs(1)));
        }
        other => panic!("not an advance: {other:?}"),
    }
    let next_stage = ProtoOutcome::Advance(v1::Advance::default());
    let item = completion_from_proto(completion(Some(next_stage))).expect("valid");
    assert!(matches!(
        item.outcome,
        Outcome::Advance {
            to: None,
            delay: None,
            ..
        }
    ));
    let cases = [
        (ProtoOutcome::Ack(v1::Ack {}), Outcome::Ack),
        (ProtoOutcome::Release(v1::Release {}), Outcome::Release),
        (
            ProtoOutcome::Retry(v1::Retry::default()),
            Outcome::Retry {
                delay: None,
                reason: None,
            },
        ),
        (
            ProtoOutcome::Retry(v1::Retry {
                delay: Some(duration_to_proto(Duration::ZERO)),
                reason: "HTTP 500: down".into(),
            }),
            Outcome::Retry {
                delay: Some(Duration::ZERO),
                reason: Some("HTTP 500: down".into()),
            },
        ),
        (
            ProtoOutcome::Reschedule(v1::Reschedule {
                activate_at: Some(prost_types::Timestamp {
                    seconds: 7,
                    nanos: 0,
                }),
            }),
            Outcome::Reschedule {
                activate_at: Timestamp::from_micros(7_000_000),
            },
        ),
        (
            ProtoOutcome::DeadLetter(v1::DeadLetter {
                reason: "poison".into(),
            }),
            Outcome::DeadLetter {
                reason: "poison".into(),
            },
        ),
    ];
    for (given, expected) in cases {
        let message = completion(Some(given));
        let item = completion_from_proto(message.clone()).expect("valid");
        assert_eq!(item.outcome, expected);
        assert_eq!(item.into_proto(), message, "back to the same message");
    }
}

#[test]
fn bad_completions_name_their_field() {
    let results = completions_from_proto(vec![
        completion(Some(ProtoOutcome::Ack(v1::Ack {}))),
        completion(None),
        v1::Completion {
            lease_token: "xyz".into(),
            ..completion(Some(ProtoOutcome::Ack(v1::Ack {})))
        },
        completion(Some(ProtoOutcome::Reschedule(v1::Reschedule {
            activate_at: None,
        }))),
        completion(Some(ProtoOutcome::Advance(v1::Advance {
            to: "a b".into(),
            ..v1::Advance::default()
        }))),
        completion(Some(ProtoOutcome::Retry(v1::Retry {
            delay: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
            reason: String::new(),
        }))),
        v1::Completion {
            id: String::new(),
            ..completion(Some(ProtoOutcome::Ack(v1::Ack {})))
        },
    ]);
    assert!(results[0].is_ok());
    let messages: Vec<String> = results[1..]
        .iter()
        .map(|r| r.as_ref().expect_err("invalid").to_string())
        .collect();
    let expected_starts = [
        "outcome: must be one of ack, advance",
        "lease_token: must be the 16 hex digits returned by Take, got 3 bytes",
        "reschedule.activate_at: must be set",
        "advance.to: must be 1-200 bytes",
        "retry.delay: must not be negative",
        "id: must be 1-128 bytes",
    ];
    for (message, start) in messages.iter().zip(expected_starts) {
        assert!(
            message.starts_with(start),
            "{message} does not start with {start}"
        );
    }
}

#[test]
fn handler_outcomes_share_the_rules() {
    let ack = handle_outcome_from_proto(Some(HandleOutcome::Ack(v1::Ack {})), "outcome");
    assert_eq!(ack, Ok(Outcome::Ack));
    let none = handle_outcome_from_proto(None, "").expect_err("missing");
    assert!(
        none.to_string().starts_with("outcome: must be one of"),
        "{none}"
    );
}

#[test]
fn extends() {
    let request = v1::ExtendLeaseRequest {
        queue: "jobs".into(),
        id: "e1".into(),
        lease_token: "00000000000000ff".into(),
        extend_by: None,
    };
    let item = extend_from_proto(&request).expect("valid");
    assert_eq!((item.token, item.extend_by), (LeaseToken(255), None));
    let long = v1::ExtendLeaseRequest {
        extend_by: Some(duration_to_proto(Duration::from_secs(90_000))),
        ..request
    };
    let err = extend_from_proto(&long).expect_err("too long");
    assert!(
        err.to_string().starts_with("extend_by: must be between"),
        "{err}"
    );
}

#[test]
fn every_outcome_survives_the_gateways_validation() {
    let outcomes = [
        Outcome::Ack,
        Outcome::Advance {
            to: Some("ship".into()),
            payload: Some(b"next".to_vec().into()),
            headers: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            delay: Some(Duration::from_millis(1500)),
        },
        Outcome::Advance {
            to: None,
            payload: None,
            headers: BTreeMap::new(),
            delay: None,
        },
        Outcome::Retry {
            delay: None,
            reason: None,
        },
        Outcome::Retry {
            delay: Some(Duration::ZERO),
            reason: Some("timed out".into()),
        },
        Outcome::Reschedule {
            activate_at: Timestamp::from_micros(1_714_564_800_250_001),
        },
        Outcome::Release,
        Outcome::DeadLetter {
            reason: "HTTP 400: bad".into(),
        },
    ];
    for outcome in outcomes {
        let sent = completion_to_proto("jobs", "e1", "000000000000002a", outcome.clone());
        let back = completion_from_proto(sent).expect("valid");
        assert_eq!(back.outcome, outcome);
    }
}
