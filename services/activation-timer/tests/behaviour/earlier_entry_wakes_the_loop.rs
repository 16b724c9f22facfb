//! A new entry due before the one the timer sleeps for wakes it: it fires on time.

use std::time::Duration;

use crate::ON_TIME_US;
use crate::harness::Harness;

#[tokio::test]
async fn earlier_entry_wakes_the_loop() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    timer.schedule("far", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    timer.schedule("near", Duration::from_millis(150)).await;
    let fired = timer.wait_fired("near", 1).await;
    assert!(
        (0..ON_TIME_US).contains(&fired[0].late_by),
        "{:?}",
        fired[0]
    );
    assert!(timer.fired().iter().all(|f| f.id != "far"));
    timer.stop().await;
}
