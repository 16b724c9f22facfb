//! An activation the dispatcher does not take stays scheduled and is sent again after a
//! short pause, until the dispatcher answers OK; then it is forgotten.

use std::time::Duration;

use crate::harness::Harness;

#[tokio::test]
async fn retries_until_acknowledged() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    *timer.refuse.lock().expect("refuse") = 2;
    timer.schedule("x", Duration::from_millis(100)).await;
    let fired = timer.wait_fired("x", 1).await;
    assert_eq!(
        *timer.refuse.lock().expect("refuse"),
        0,
        "refused twice first"
    );
    // Two pauses of 200ms before the third attempt.
    assert!(fired[0].late_by >= 350_000, "{:?}", fired[0]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(timer.fired().len(), 1);
    timer.stop().await;
}
