//! The checker's rules, on hand-made histories: a clean one passes, and each kind of
//! fault is counted under its own name.

use super::*;

const PIPELINE: Line = Line::Pipeline { stages: 3 };

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One plain-queue event and one pipeline event, sent at `t0` with a 100 ms delay,
/// delivered and done once each.
fn clean(t0: Instant) -> History {
    let h = History::default();
    h.enqueued("q1", Line::Queue, b"a", t0, ms(100));
    h.delivered("q1", 0, b"a", t0 + ms(150), true);
    h.acked("q1", t0 + ms(160));
    h.enqueued("p1", PIPELINE, b"b", t0, ms(100));
    for stage in 0..3 {
        h.delivered("p1", stage, b"b", t0 + ms(150 + 10 * stage as u64), true);
    }
    h
}

#[tokio::test]
async fn a_clean_history_passes_and_retries_are_only_counted() {
    let t0 = Instant::now();
    let h = clean(t0);
    // A failed handler call retried, and an ack lost in flight then redelivered.
    h.delivered("p1", 1, b"b", t0 + ms(155), false);
    h.enqueued("q2", Line::Queue, b"c", t0, ms(0));
    h.delivered("q2", 0, b"c", t0 + ms(10), true);
    h.ack_unknown("q2");
    let counts = h.check(Duration::ZERO);
    assert!(counts.clean(), "{counts}");
    assert_eq!((counts.enqueued, counts.redelivered), (3, 1), "{counts}");
}

#[tokio::test]
async fn each_fault_is_counted_under_its_name() {
    let t0 = Instant::now();

    let h = clean(t0);
    h.enqueued("q-lost", Line::Queue, b"x", t0, ms(0));
    h.enqueued("p-lost", PIPELINE, b"x", t0, ms(0));
    h.delivered("p-lost", 0, b"x", t0 + ms(1), true);
    h.enqueued("q-unacked", Line::Queue, b"x", t0, ms(0));
    h.delivered("q-unacked", 0, b"x", t0 + ms(1), true);
    assert_eq!(h.check(Duration::ZERO).lost, 3);

    let h = clean(t0);
    h.delivered("q1", 0, b"a", t0 + ms(170), true);
    h.delivered("p1", 0, b"b", t0 + ms(200), true);
    assert_eq!(h.check(Duration::ZERO).duplicated_after_ack, 2);

    // The last stage: a second success is a duplicate unless a fault came between.
    let h = clean(t0);
    h.delivered("p1", 2, b"b", t0 + ms(500), true);
    assert_eq!(h.check(Duration::ZERO).duplicated_after_ack, 1);
    h.fault(t0 + ms(300), t0 + ms(400));
    assert!(h.check(Duration::ZERO).clean());

    let h = clean(t0);
    h.delivered("nobody-sent-me", 0, b"x", t0, true);
    assert_eq!(h.check(Duration::ZERO).unexpected, 1);

    let h = clean(t0);
    h.enqueued("early", Line::Queue, b"x", t0, ms(1_000));
    h.delivered("early", 0, b"x", t0 + ms(700), true);
    h.acked("early", t0 + ms(710));
    assert_eq!(h.check(Duration::ZERO).early, 1);
    assert!(h.check(ms(300)).clean(), "within a 300 ms step");

    let h = clean(t0);
    h.delivered("p1", 1, b"B", t0 + ms(158), false);
    assert_eq!(h.check(Duration::ZERO).corrupt, 1);
}
