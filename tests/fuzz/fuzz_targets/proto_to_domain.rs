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
        0 => {
            let Ok(request) = v1::EnqueueBatchRequest::decode(bytes) else {
                return;
            };
            for (i, item) in convert::enqueue_batch_from_proto(request)
                .into_iter()
                .enumerate()
            {
                if let Ok(item) = item {
                    let _ = item.into_command(now, &format!("items[{i}]"));
                }
            }
        }
        1 => {
            let Ok(request) = v1::TakeRequest::decode(bytes) else {
                return;
            };
            let _ = convert::take_from_proto(&request);
        }
        2 => {
            let Ok(request) = v1::CompleteRequest::decode(bytes) else {
                return;
            };
            let _ = convert::completions_from_proto(request);
        }
        3 => {
            let Ok(request) = v1::UpdateRequest::decode(bytes) else {
                return;
            };
            if let Ok(item) = convert::update_from_proto(request) {
                let _ = item.into_update(now);
            }
        }
        4 => {
            let Ok(pipeline) = v1::Pipeline::decode(bytes) else {
                return;
            };
            if let Ok(domain) = convert::pipeline_from_proto(&pipeline) {
                let back = convert::pipeline_to_proto(&domain);
                let again = convert::pipeline_from_proto(&back);
                assert_eq!(
                    again.as_ref(),
                    Ok(&domain),
                    "a pipeline survives a round trip"
                );
            }
        }
        5 => {
            let Ok(request) = v1::CreateQueueRequest::decode(bytes) else {
                return;
            };
            if let Ok((_, config)) = convert::create_queue_from_proto(&request) {
                let back = convert::queue_config_to_proto(&config);
                let again = convert::queue_config_from_proto(Some(&back), "config");
                assert_eq!(again, Ok(config), "a queue config survives a round trip");
            }
        }
        6 => {
            let Ok(request) = v1::RedriveRequest::decode(bytes) else {
                return;
            };
            let _ = convert::redrive_from_proto(&request);
        }
        7 => {
            let Ok(request) = v1::ListDeadLettersRequest::decode(bytes) else {
                return;
            };
            let _ = convert::list_dead_letters_from_proto(&request);
        }
        8 => {
            let Ok(request) = v1::ListQueuesRequest::decode(bytes) else {
                return;
            };
            let _ = convert::list_queues_from_proto(&request);
        }
        9 => {
            let Ok(delivery) = bus::Delivery::decode(bytes) else {
                return;
            };
            let _ = convert::delivery_from_proto(delivery, "delivery");
        }
        10 => {
            let Ok(entry) = bus::ScheduleEntry::decode(bytes) else {
                return;
            };
            let _ = convert::schedule_entry_from_proto(&entry, "entry");
        }
        _ => {
            let Ok(event) = v1::Event::decode(bytes) else {
                return;
            };
            let _ = convert::event_from_proto(event);
        }
    }
});
