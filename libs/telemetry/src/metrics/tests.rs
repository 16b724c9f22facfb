use super::*;

fn sample_everything(metrics: &Metrics) {
    metrics.enqueue_total("inbox:*", EnqueueResult::Ok).inc();
    metrics
        .enqueue_total("inbox:*", EnqueueResult::Duplicate)
        .inc();
    metrics
        .enqueue_duration_seconds(EnqueueRpc::EnqueueBatch)
        .observe(0.003);
    metrics.set_queue_depth("orders.validate", 2, QueueState::Delayed, 7);
    metrics.set_queue_depth("orders.validate", 2, QueueState::Ready, 3);
    metrics.set_queue_depth("orders.validate", 2, QueueState::Leased, 1);
    metrics
        .dead_letter_total("orders.validate", DeadLetterReason::MaxAttempts)
        .inc();
    metrics.lease_expired_total("orders.validate").inc_by(2);
    metrics
        .move_failed_total("orders.validate", FailedMove::HandOff)
        .inc();
    metrics.set_disk(StoreKind::Dispatcher, 1, 4096, true);
    metrics.activation_lateness_seconds().observe(0.002);
    metrics
        .commit_batch_size(StoreKind::Dispatcher)
        .observe(64.0);
    metrics
        .fsync_duration_seconds(StoreKind::Timer)
        .observe(0.0004);
    metrics
        .checkpoint_hold_seconds(StoreKind::Dispatcher)
        .observe(0.08);
    metrics
        .handler_duration_seconds("orders.validate", HandlerOutcome::Advance)
        .observe(0.02);
    metrics
        .bus_request_duration_seconds("enqueue", BusResult::Ok)
        .observe(0.001);
    metrics.set_rm_desired_handlers("orders.validate", 4);
    metrics.set_stage_handlers("orders.validate", 3);
}

#[test]
fn render_has_every_metric_with_help_type_and_labels() {
    let metrics = Metrics::new();
    sample_everything(&metrics);
    let text = metrics.render();
    for name in METRIC_NAMES {
        // Counters are described without `_total` and sampled with it.
        let described = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            text.contains(&format!("# HELP {described} ")),
            "HELP of {name}\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {described} ")),
            "TYPE of {name}\n{text}"
        );
        assert!(
            text.contains(&format!("\n{name}")),
            "a sample of {name}\n{text}"
        );
    }
    for sample in [
        r#"cascade_enqueue_total{queue="inbox:*",result="ok"} 1"#,
        r#"cascade_enqueue_total{queue="inbox:*",result="duplicate"} 1"#,
        r#"cascade_enqueue_duration_seconds_count{rpc="enqueue_batch"} 1"#,
        r#"cascade_queue_depth{queue="orders.validate",state="delayed",shard="2"} 7"#,
        r#"cascade_queue_depth{queue="orders.validate",state="ready",shard="2"} 3"#,
        r#"cascade_queue_depth{queue="orders.validate",state="leased",shard="2"} 1"#,
        r#"cascade_dead_letter_total{queue="orders.validate",reason="max_attempts"} 1"#,
        r#"cascade_lease_expired_total{queue="orders.validate"} 2"#,
        r#"cascade_move_failed_total{queue="orders.validate",step="hand_off"} 1"#,
        r#"cascade_disk_free_bytes{store="dispatcher",shard="1"} 4096"#,
        r#"cascade_disk_alarm{store="dispatcher",shard="1"} 1"#,
        r#"cascade_activation_lateness_seconds_bucket{le="0.0025"} 1"#,
        r#"cascade_commit_batch_size_bucket{le="64.0",store="dispatcher"} 1"#,
        r#"cascade_commit_batch_size_bucket{le="4096.0",store="dispatcher"} 1"#,
        r#"cascade_fsync_duration_seconds_count{store="timer"} 1"#,
        r#"cascade_checkpoint_hold_seconds_bucket{le="0.1",store="dispatcher"} 1"#,
        r#"cascade_handler_duration_seconds_count{stage="orders.validate",outcome="advance"} 1"#,
        r#"cascade_bus_request_duration_seconds_count{op="enqueue",result="ok"} 1"#,
        r#"cascade_rm_desired_handlers{stage="orders.validate"} 4"#,
        r#"cascade_stage_handlers{stage="orders.validate"} 3"#,
        "# UNIT cascade_fsync_duration_seconds seconds",
    ] {
        assert!(text.contains(sample), "missing {sample}\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "{text}");
}

#[test]
fn clones_share_one_registry_and_forgetting_drops_series() {
    let metrics = Metrics::new();
    let clone = metrics.clone();
    clone.set_queue_depth("inbox:*", 0, QueueState::Ready, 5);
    clone.set_rm_desired_handlers("orders.ship", 2);
    let text = metrics.render();
    assert!(text.contains(r#"cascade_queue_depth{queue="inbox:*",state="ready",shard="0"} 5"#));
    metrics.forget_queue_depth("inbox:*", 0);
    metrics.forget_stage("orders.ship");
    let text = metrics.render();
    assert!(!text.contains(r#"queue="inbox:*""#), "{text}");
    assert!(!text.contains("orders.ship"), "{text}");
    // A fresh registry starts empty: no sharing between instances.
    assert!(!Metrics::new().render().contains("inbox"));
}

#[test]
fn depth_saturates_instead_of_wrapping() {
    let metrics = Metrics::new();
    metrics.set_queue_depth("q", 0, QueueState::Ready, u64::MAX);
    assert!(
        metrics
            .render()
            .contains(&format!("shard=\"0\"}} {}", i64::MAX))
    );
}

#[test]
fn docs_describe_every_metric_and_label_value() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let doc = std::fs::read_to_string(path).expect("docs/metrics.md");
    for name in METRIC_NAMES {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/metrics.md lacks {name}"
        );
    }
    let values = QueueState::ALL
        .iter()
        .map(|v| v.as_str())
        .chain(EnqueueResult::ALL.iter().map(|v| v.as_str()))
        .chain(EnqueueRpc::ALL.iter().map(|v| v.as_str()))
        .chain(DeadLetterReason::ALL.iter().map(|v| v.as_str()))
        .chain(FailedMove::ALL.iter().map(|v| v.as_str()))
        .chain(StoreKind::ALL.iter().map(|v| v.as_str()))
        .chain(HandlerOutcome::ALL.iter().map(|v| v.as_str()))
        .chain(BusResult::ALL.iter().map(|v| v.as_str()));
    for value in values {
        assert!(
            doc.contains(&format!("`{value}`")),
            "docs/metrics.md lacks label value {value}"
        );
    }
}
