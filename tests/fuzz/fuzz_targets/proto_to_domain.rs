//! Requests as the gateway and the services receive them: any bytes, decoded as one of the
//! API's or the bus's messages, then converted to domain types the way the edge does (and,
//! when valid, on to the shard's command at a fixed time). Conversion returns a value or a
//! `ConvertError`, never a panic (no overflow in time arithmetic, no slicing past a
//! boundary), and what it accepts converts back to a message that is accepted again.
#![no_main]

use cascade_core::Timestamp;
use cascade_proto::bus::v1 as bus;
use cascade_proto::convert;
use cascade_proto::v1;
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// 2026-01-01T00:00:00Z, in microseconds: the gateway's clock for every input.
const NOW_MICROS: u64 = 1_767_225_600_000_000;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    let now = Timestamp::from_micros(NOW_MICROS);
    match which % 12 {
        0 => decoded(bytes, |request: v1::EnqueueBatchRequest| {
            let items = convert::enqueue_batch_from_proto(request);
            for item in items.into_iter().flatten() {
                let _ = item.into_command(now);
            }
        }),
        1 => decoded(bytes, |r: v1::TakeRequest| {
            drop(convert::take_from_proto(&r));
            drop(convert::completions_from_proto(r.completions))
        }),
        2 => decoded(bytes, |r: v1::CompleteRequest| {
            drop(convert::completions_from_proto(r.completions))
        }),
        3 => decoded(bytes, |request: v1::UpdateRequest| {
            if let Ok(item) = convert::update_from_proto(request) {
                let _ = item.into_update(now);
            }
        }),
        4 => decoded(bytes, |pipeline: v1::Pipeline| {
            if let Ok(domain) = convert::pipeline_from_proto(&pipeline) {
                let back = convert::pipeline_to_proto(&domain);
                let again = convert::pipeline_from_proto(&back);
                assert_eq!(
                    again.as_ref(),
                    Ok(&domain),
                    "a pipeline survives a round trip"
                );
            }
        }),
        5 => decoded(bytes, |request: v1::CreateQueueRequest| {
            if let Ok((_, config)) = convert::create_queue_from_proto(&request) {
                let back = convert::queue_config_to_proto(&config);
                let again = convert::queue_config_from_proto(Some(&back), "config");
                assert_eq!(again, Ok(config), "a queue config survives a round trip");
            }
        }),
        6 => decoded(bytes, |r: v1::RedriveRequest| {
            drop(convert::redrive_from_proto(&r))
        }),
        7 => decoded(bytes, |r: v1::ListDeadLettersRequest| {
            drop(convert::list_dead_letters_from_proto(&r))
        }),
        8 => decoded(bytes, |r: v1::ListQueuesRequest| {
            drop(convert::list_queues_from_proto(&r))
        }),
        9 => decoded(bytes, |d: bus::Delivery| {
            drop(convert::delivery_from_proto(d, "delivery"))
        }),
        10 => decoded(bytes, |e: bus::ScheduleEntry| {
            drop(convert::schedule_entry_from_proto(&e, "entry"))
        }),
        _ => decoded(bytes, |e: v1::Event| drop(convert::event_from_proto(e))),
    }
});

/// Runs `convert` on `bytes` decoded as message `M`; bytes that are not one are done with.
fn decoded<M: Message + Default>(bytes: &[u8], convert: impl FnOnce(M)) {
    if let Ok(message) = M::decode(bytes) {
        convert(message);
    }
}
