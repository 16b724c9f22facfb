//! The shard's limits: refused with INVALID_ARGUMENT naming the limit, nothing written, and
//! the queue count kept across deletes and a reopen.

use cascade_core::{Code, QueueConfig};

use crate::durable::Maintenance;
use crate::kv::Kv;
use crate::shard::tests::{at, cmd, open, pipeline, q};
use crate::shard::{EnqueueCmd, Shard, ShardLimits, ShardSettings};

fn limited(max_queues: u64, max_pipelines: usize, max_stages: usize) -> ShardSettings {
    ShardSettings {
        limits: ShardLimits {
            max_queues,
            max_pipelines,
            max_stages,
            ..ShardLimits::default()
        },
        ..ShardSettings::default()
    }
}

fn assert_limit(err: crate::error::StoreError, field: &str, limit: &str) {
    assert_eq!(err.code(), Code::InvalidArgument, "{err}");
    let text = err.to_string();
    assert!(text.starts_with(&format!("{field}: ")), "{text}");
    assert!(text.contains(limit), "{text}");
}

#[test]
fn queues_and_templates_count_and_per_user_queues_do_not() {
    let (_d, mut s) = open(limited(3, 100, 32));
    let config = QueueConfig::default;
    s.create_queue(at(0), q("a"), config()).expect("a");
    s.create_queue(at(0), q("inbox:*"), config())
        .expect("template");
    // Made from the template, and a dead-letter queue made on first use: not counted.
    for user in ["inbox:u1", "inbox:u2", "inbox:u3"] {
        s.enqueue(
            at(0),
            EnqueueCmd {
                queue: q(user),
                ..cmd("x")
            },
        )
        .expect("per-user enqueue");
    }
    s.create_queue(at(0), q("b"), config()).expect("b");
    // Creating one again is no new queue.
    s.create_queue(at(0), q("b"), config()).expect("b again");
    let err = s.create_queue(at(0), q("c"), config()).expect_err("over");
    assert_limit(err, "name", "limits.max_queues (3)");
    assert!(s.get_queue(&q("c")).is_err(), "nothing written");
    // A queue made from a template becomes counted when created explicitly.
    let err = s
        .create_queue(at(0), q("inbox:u1"), config())
        .expect_err("over");
    assert_limit(err, "name", "limits.max_queues");
    s.delete_queue(&q("a"), false).expect("delete");
    s.create_queue(at(0), q("inbox:u1"), config())
        .expect("room again");
    let err = s
        .create_queue(at(0), q("c"), config())
        .expect_err("full again");
    assert_limit(err, "name", "this shard holds 3 queues and templates");
}

#[test]
fn the_count_survives_a_reopen() {
    let (dir, mut s) = open(limited(2, 100, 32));
    s.create_queue(at(0), q("a"), QueueConfig::default())
        .expect("a");
    s.create_queue(at(0), q("b*"), QueueConfig::default())
        .expect("b*");
    let layer = s.kv_mut().freeze();
    crate::kv::checkpoint::write(s.kv().db(), s.kv().dir(), &layer, 1).expect("checkpoint");
    s.kv_mut().finish_checkpoint();
    drop(s);
    let kv = Kv::open(&dir.path().join("state"), 1 << 20).expect("reopen");
    let mut s = Shard::new(kv, limited(2, 100, 32)).expect("shard");
    let err = s
        .create_queue(at(1), q("c"), QueueConfig::default())
        .expect_err("still full");
    assert_limit(err, "name", "this shard holds 2 queues");
}

#[test]
fn pipelines_and_their_stages_are_bounded() {
    let (_d, mut s) = open(limited(4, 2, 3));
    let err = s
        .apply_pipeline(at(0), pipeline("wide", &["a", "b", "c", "d"]))
        .expect_err("4 stages");
    assert_limit(err, "stages", "4 stages is more than limits.max_stages (3)");
    s.apply_pipeline(at(0), pipeline("one", &["a", "b"]))
        .expect("one");
    // Stage queues count: 2 of 4 taken, so 3 more do not fit.
    let err = s
        .apply_pipeline(at(0), pipeline("two", &["a", "b", "c"]))
        .expect_err("queues");
    assert_limit(err, "stages", "limits.max_queues (4)");
    assert!(s.get_pipeline("two").is_err(), "nothing written");
    s.apply_pipeline(at(0), pipeline("two", &["a", "b"]))
        .expect("two");
    let err = s
        .apply_pipeline(at(0), pipeline("three", &["a"]))
        .expect_err("pipelines");
    assert_limit(
        err,
        "name",
        "2 pipelines exist, the most limits.max_pipelines (2)",
    );
    // Re-applying one that exists is no new pipeline, and its stages are counted already.
    s.apply_pipeline(at(1), pipeline("one", &["a", "b"]))
        .expect("re-apply");
}

/// A shard whose events may carry `max_event_bytes`, with the queues `jobs` and `next`.
fn jobs_and_next_within(max_event_bytes: usize) -> (tempfile::TempDir, Shard) {
    let (dir, mut s) = open(ShardSettings {
        limits: ShardLimits {
            max_event_bytes,
            ..ShardLimits::default()
        },
        ..ShardSettings::default()
    });
    for name in ["jobs", "next"] {
        s.create_queue(at(0), q(name), QueueConfig::default())
            .expect("create");
    }
    (dir, s)
}

/// An update or an advance that would leave an event with more payload and headers than
/// one message carries whole is refused naming its field, and changes nothing: an event
/// too large to take, or to hand on, would stop its queue or its shard's hand-offs.
#[test]
fn an_event_grown_past_what_a_message_carries_is_refused() {
    let (_d, mut s) = jobs_and_next_within(1000);
    let mut big = cmd(&"p".repeat(600));
    big.headers.insert("a".into(), "h".repeat(300));
    let id = s.enqueue(at(0), big).expect("900 bytes or so").id;

    let grown = cascade_core::EventUpdate {
        headers: [("b".to_owned(), "h".repeat(200))].into(),
        ..cascade_core::EventUpdate::default()
    };
    let err = s
        .update(at(0), &q("jobs"), id.as_str(), grown)
        .expect_err("over 1000 bytes");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.to_string().starts_with("headers: event '"), "{err}");

    let taken = s.take(at(0), &q("jobs"), 1, None).expect("take");
    let advance = cascade_core::Outcome::Advance {
        to: Some("next".into()),
        payload: Some("q".repeat(800).into_bytes().into()),
        headers: Default::default(),
        delay: None,
    };
    let err = s
        .complete(at(0), &q("jobs"), id.as_str(), taken[0].token, advance)
        .expect_err("800 bytes of payload beside 300 of headers");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err}");
    assert!(err.to_string().starts_with("advance.payload: "), "{err}");
    let event = s.get(&q("jobs"), id.as_str()).expect("still there");
    assert_eq!(event.payload.len(), 600, "unchanged");
}

/// What the store adds does not count against the bound, and only growth past it is
/// refused: an event as large as it may be is retried (gaining a last failure), advanced by
/// a worker that traces (its `traceparent` left out rather than the advance refused), and
/// an event stored larger under an earlier bound still moves on as it is.
#[test]
fn an_event_at_its_bound_still_retries_and_advances() {
    let (_d, mut s) = jobs_and_next_within(1000);
    let at_bound = s
        .enqueue(at(0), cmd(&"p".repeat(1000)))
        .expect("enqueue")
        .id;
    let over = s
        .enqueue(at(0), cmd(&"p".repeat(1200)))
        .expect("enqueue")
        .id;
    let taken = s.take(at(0), &q("jobs"), 2, None).expect("take");
    let retry = cascade_core::Outcome::Retry {
        delay: Some(std::time::Duration::ZERO),
        reason: Some("r".repeat(1000)),
    };
    s.complete(at(0), &q("jobs"), at_bound.as_str(), taken[0].token, retry)
        .expect("retried, the last failure on top");
    let traced = |payload: Option<bytes::Bytes>| cascade_core::Outcome::Advance {
        to: Some("next".into()),
        payload,
        headers: [(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
        )]
        .into(),
        delay: None,
    };
    s.complete(
        at(0),
        &q("jobs"),
        over.as_str(),
        taken[1].token,
        traced(None),
    )
    .expect("stored larger before: moves on as it is");
    let again = s.take(at(1), &q("jobs"), 1, None).expect("take");
    s.complete(
        at(1),
        &q("jobs"),
        at_bound.as_str(),
        again[0].token,
        traced(None),
    )
    .expect("advanced untraced");
    let moved = s.get(&q("next"), at_bound.as_str()).expect("moved");
    assert!(
        !moved.headers.contains_key("cascade-last-failure"),
        "left with the queue it failed in"
    );
    assert!(!moved.headers.contains_key("traceparent"));
}
