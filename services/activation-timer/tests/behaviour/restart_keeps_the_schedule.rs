//! The schedule survives a restart: what came due while the timer was down fires at once
//! when it is back, what is still ahead fires on time.

use std::time::Duration;

use crate::ON_TIME_US;
use crate::harness::Harness;

#[tokio::test]
async fn restart_keeps_the_schedule() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    timer.schedule("missed", Duration::from_millis(300)).await;
    timer.schedule("ahead", Duration::from_millis(900)).await;
    timer.stop().await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        timer.fired().is_empty(),
        "nothing fires while the timer is down"
    );

    timer.restart_stopped().await;
    let missed = timer.wait_fired("missed", 1).await;
    assert!(missed[0].late_by >= 0);
    let ahead = timer.wait_fired("ahead", 1).await;
    assert!(
        (0..ON_TIME_US).contains(&ahead[0].late_by),
        "{:?}",
        ahead[0]
    );
    assert_eq!(timer.fired().len(), 2);
    timer.stop().await;
}
