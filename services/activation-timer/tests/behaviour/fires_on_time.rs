//! Entries fire at their time, in time order, each exactly once; an entry already due
//! fires at once.

use std::time::Duration;

use cascade_core::{Clock, SystemClock};

use crate::ON_TIME_US;
use crate::harness::Harness;

#[tokio::test]
async fn fires_on_time() {
    let mut timer = Harness::start(Duration::from_secs(60)).await;
    // Far enough ahead that "past" is scheduled before "a" is due, however slow the calls.
    timer.schedule("b", Duration::from_millis(1000)).await;
    timer.schedule("a", Duration::from_millis(600)).await;
    timer
        .schedule_at(
            "past",
            SystemClock.now().saturating_sub(Duration::from_secs(1)),
        )
        .await;

    timer.wait_fired("b", 1).await;
    let fired = timer.fired();
    let order: Vec<&str> = fired.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(order, ["past", "a", "b"]);
    for f in fired.iter().filter(|f| f.id != "past") {
        assert!((0..ON_TIME_US).contains(&f.late_by), "{f:?}");
        assert_eq!(f.version, 1);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        timer.fired().len(),
        3,
        "an acknowledged entry never fires again"
    );
    timer.stop().await;
}
