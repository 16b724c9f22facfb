//! The records and keys a shard keeps in sled and in its log: any bytes given to any of
//! their decoders give a value or `Malformed`, never a panic; a log record (a batch) that
//! decodes encodes back to the same bytes.
#![no_main]

use cascade_store::codec::{keys, records};
use cascade_store::kv::Batch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else {
        return;
    };
    match which % 13 {
        0 => {
            if let Ok(batch) = Batch::decode(bytes) {
                assert_eq!(batch.encode(), bytes, "a batch re-encodes to its bytes");
            }
        }
        1 => drop(records::decode_queue(bytes)),
        2 => drop(records::decode_counters(bytes)),
        // The first bytes as a key (its ID, if any, is the event's), the rest as the value.
        3 => {
            let (key, value) = bytes.split_at(bytes.len().min(12));
            drop(records::decode_event(key, value));
            drop(records::decode_event(&keys::event(1, "fuzz"), value));
        }
        4 => drop(records::decode_dedup(bytes)),
        5 => drop(records::decode_hand_off(bytes)),
        6 => drop(records::decode_u64(bytes, "fuzz")),
        7 => drop(records::decode_cluster(bytes)),
        8 => drop(records::decode_pipeline(bytes)),
        9 => drop(keys::decode_ready(bytes)),
        10 => drop(keys::decode_lease(bytes)),
        11 => drop(keys::decode_schedule(bytes)),
        _ => drop(Batch::decode(bytes)),
    }
});
