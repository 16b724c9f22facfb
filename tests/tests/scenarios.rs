//! Every scenario in both modes: `standalone::*` against `cascade standalone` (one process,
//! in-process bus), `distributed::*` against a real nats-server with ingest, two dispatcher
//! and two activation-timer processes. Two shards in both.

cascade_e2e::scenario_tests!(
    delayed_event_is_takeable_only_after_its_time,
    ready_events_come_in_activation_then_insertion_order,
    expired_lease_redelivers_with_one_more_attempt,
    client_id_and_idempotency_key_dedup,
    update_payload_and_activation_time_then_delete,
    leased_event_refuses_update_and_delete,
    template_queues_need_no_creation,
    dead_letter_after_max_attempts_then_redrive,
    reschedule_moves_the_event_to_a_new_time,
    long_poll_take_wakes_when_an_event_arrives,
    enqueue_batch_answers_each_item,
    stats_count_every_state,
    purge_and_forced_delete_remove_a_large_queue_in_steps,
    bad_requests_get_clear_errors,
    killed_dispatcher_loses_no_acknowledged_event,
    advance_to_the_other_shard_arrives_exactly_once,
    headers_travel_with_the_event,
    pipeline_walks_its_stages_and_acks_after_the_last,
    advance_to_a_named_stage_jumps,
    reapplied_pipeline_keeps_its_events,
    a_take_carries_the_completions_of_the_last,
    a_failed_take_applies_none_of_its_completions,
);
