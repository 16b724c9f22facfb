//! A cancelled entry never fires.

use std::time::Duration;

use crate::harness::Harness;

#[tokio::test]
async fn cancel() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    timer.schedule("kept", Duration::from_millis(200)).await;
    timer.schedule("dropped", Duration::from_millis(150)).await;
    timer.cancel("dropped").await;
    timer.wait_fired("kept", 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(timer.fired().iter().all(|f| f.id != "dropped"));
    timer.stop().await;
}
