//! An entry beyond the in-memory horizon stays on disk and is loaded in time to fire on
//! time.

use std::time::Duration;

use crate::ON_TIME_US;
use crate::harness::Harness;

#[tokio::test]
async fn far_entries_load_in_time() {
    let mut timer = Harness::start(Duration::from_millis(200)).await;
    timer.schedule("far", Duration::from_millis(900)).await;
    let fired = timer.wait_fired("far", 1).await;
    assert!(
        (0..ON_TIME_US).contains(&fired[0].late_by),
        "{:?}",
        fired[0]
    );
    timer.stop().await;
}
