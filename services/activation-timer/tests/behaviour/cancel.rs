//! A cancelled entry never fires.

use std::time::Duration;

use crate::harness::Harness;

#[tokio::test]
async fn cancel() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    // "dropped" is due before "kept", so once "kept" fired, "dropped" would have; it is due
    // far enough ahead that the cancel lands first however slow the calls.
    timer.schedule("kept", Duration::from_millis(800)).await;
    timer.schedule("dropped", Duration::from_millis(600)).await;
    timer.cancel("dropped").await;
    timer.wait_fired("kept", 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(timer.fired().iter().all(|f| f.id != "dropped"));
    timer.stop().await;
}
