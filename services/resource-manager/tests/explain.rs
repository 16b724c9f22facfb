//! `explain::render` prints one aligned line per stage with its figures and the reasons.

mod common;

use cascade_resource_manager::explain::render;
use cascade_resource_manager::{Planner, ResourceManagerSettings};
use common::*;

#[test]
fn the_table_shows_each_stage_with_why() {
    let mut history = history();
    measured(&mut history, "orders.charge", 100, 4, 5.0, 1_900);
    measured(&mut history, "orders.email", 100, 4, 5.0, 3_000);
    let specs = [
        spec("orders.charge", 2, 0, 4),
        spec("orders.email", 1, 0, 10),
    ];
    let settings = ResourceManagerSettings {
        total_handlers: 6,
        ..settings()
    };
    let now = current(&[("orders.charge", 4), ("orders.email", 4)]);
    let decisions = Planner::new().step(&history, &specs, &now, &settings, at(100));
    let table = render(&decisions, &settings, at(100));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert_eq!(
        lines[0],
        "at 2024-05-01T12:01:40.000000Z: 6 of 6 handlers assigned, target drain 1m"
    );
    assert!(
        lines[1].starts_with("STAGE          PRIO  NOW  NEW  BATCH  READY"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("orders.charge     2    4    4     16  1,900"),
        "{table}"
    );
    assert!(
        lines[2].ends_with(
            "needs 6.3 handlers to drain 1,900 events in 1m at 5.0/s per handler; capped by max 4"
        ),
        "{table}"
    );
    assert!(
        lines[3].contains("budget short: wanted 10 of 6, 4 taken by higher priorities"),
        "{table}"
    );
    assert_eq!(
        decisions[0].to_string(),
        "priority 2: needs 6.3 handlers to drain 1,900 events in 1m at 5.0/s per handler; capped by max 4"
    );
}
