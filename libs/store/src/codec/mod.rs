//! The one place that knows how keys and values are laid out on disk (see `keys` and
//! `records`). Formats are versioned: keys by `keys::FORMAT_VERSION`, values by a leading byte.

pub mod bytes;
pub mod keys;
pub mod records;

pub use bytes::Malformed;

/// Checks that a stored value decodes as the record its key says it holds (payload checksums
/// included). Used by `durable::verify`; keys of index-only keyspaces hold no checked value.
pub fn check_entry(key: &[u8], value: &[u8]) -> Result<(), Malformed> {
    let Some(&prefix) = key.first() else {
        return Err(Malformed("empty key".into()));
    };
    match prefix {
        keys::QUEUE => records::decode_queue(value).map(drop),
        keys::PIPELINE => records::decode_pipeline(value).map(drop),
        keys::COUNTERS => records::decode_counters(value).map(drop),
        keys::TEMPLATE if value.is_empty() => Ok(()),
        keys::TEMPLATE => Err(Malformed("template index entry: holds a value".into())),
        keys::FAMILY => records::decode_family(value).map(drop),
        keys::EVENT => records::decode_event(key, value).map(drop),
        keys::DEDUP => records::decode_dedup(value).map(drop),
        keys::OUTBOX => records::decode_hand_off(value).map(drop),
        keys::META if key == keys::meta("cluster").as_slice() => {
            records::decode_cluster(value).map(drop)
        }
        keys::META if key == keys::meta("store").as_slice() => {
            records::decode_store_name(value).map(drop)
        }
        keys::META | keys::RECEIVED | keys::LEGACY_SCHEDULE_INDEX => {
            records::decode_u64(value, "number").map(drop)
        }
        keys::READY => keys::decode_ready(key).map(drop),
        keys::LEASE => keys::decode_lease(key).map(drop),
        keys::SCHEDULE => keys::decode_schedule(key).map(drop),
        keys::DEDUP_AGE => keys::seq_of(key, "dedup age key").map(drop),
        other => Err(Malformed(format!("unknown key prefix {other:#04x}"))),
    }
}
