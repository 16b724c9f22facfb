//! Every key of the shard store. One byte of prefix names the keyspace; numbers are big-endian
//! and fixed-width, so byte order is the order we scan in (time, then sequence). A variable-length
//! component (an event ID, a dedup key) is only ever the last one.

use super::bytes::{Malformed, Reader, Writer};

/// Bumped when any key or value layout changes; stored under `meta/format` and checked on open.
/// Format 2 added the template index, the family sums and the queue count, which the shard
/// keeps in step with every change so that opening a store need not scan every queue.
/// Format 3 writes events, queue records, counters and family sums in their compact V2
/// layouts, which earlier builds cannot read.
pub const FORMAT_VERSION: u64 = 3;

/// Whether this build opens a store of `format`. Older stores are carried forward: what
/// format 2 adds is built when the shard opens a format 1 store, the timer drops its legacy
/// index, and V1 records are read as they are and written as V2 when they next change.
pub fn readable_format(format: u64) -> bool {
    (1..=FORMAT_VERSION).contains(&format)
}

pub(crate) const META: u8 = 0x00;
pub(crate) const QUEUE: u8 = 0x01;
pub(crate) const PIPELINE: u8 = 0x02;
pub(crate) const COUNTERS: u8 = 0x03;
pub(crate) const TEMPLATE: u8 = 0x04;
pub(crate) const FAMILY: u8 = 0x05;
pub(crate) const EVENT: u8 = 0x10;
pub(crate) const READY: u8 = 0x11;
pub(crate) const LEASE: u8 = 0x12;
pub(crate) const DEDUP: u8 = 0x20;
pub(crate) const DEDUP_AGE: u8 = 0x21;
pub(crate) const OUTBOX: u8 = 0x30;
pub(crate) const RECEIVED: u8 = 0x31;
pub(crate) const SCHEDULE: u8 = 0x40;
/// An index of the timer's entries by event, which earlier builds wrote for a cancel that now
/// names the entry's time: read only to carry such a store forward (`Timer::open`, repair).
pub(crate) const LEGACY_SCHEDULE_INDEX: u8 = 0x41;

/// A key of keyspace `prefix` named by `name` alone.
fn named(prefix: u8, name: &str) -> Vec<u8> {
    Writer::default().u8(prefix).raw(name.as_bytes()).finish()
}

/// Every key of keyspace `prefix`.
fn whole(prefix: u8) -> (Vec<u8>, Vec<u8>) {
    (vec![prefix], vec![prefix + 1])
}

pub fn meta(name: &str) -> Vec<u8> {
    named(META, name)
}

/// Queue and template records, by name (templates included: their name ends in `*`).
pub fn queue(name: &str) -> Vec<u8> {
    named(QUEUE, name)
}

pub fn queue_name_of(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&[QUEUE])
}

pub fn queue_space() -> (Vec<u8>, Vec<u8>) {
    whole(QUEUE)
}

/// Pipeline records, by name. Every shard holds every pipeline.
pub fn pipeline(name: &str) -> Vec<u8> {
    named(PIPELINE, name)
}

pub fn pipeline_space() -> (Vec<u8>, Vec<u8>) {
    whole(PIPELINE)
}

/// The index of templates among the queue records: a template's name, no value.
pub fn template(name: &str) -> Vec<u8> {
    named(TEMPLATE, name)
}

pub fn template_name_of(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&[TEMPLATE])
}

pub fn template_space() -> (Vec<u8>, Vec<u8>) {
    whole(TEMPLATE)
}

/// The sums of the queues a template covers, by the family's name (the template's, or its
/// dead-letter family's).
pub fn family(name: &str) -> Vec<u8> {
    named(FAMILY, name)
}

pub fn family_name_of(key: &[u8]) -> Option<&[u8]> {
    key.strip_prefix(&[FAMILY])
}

pub fn family_space() -> (Vec<u8>, Vec<u8>) {
    whole(FAMILY)
}

pub fn counters(qid: u64) -> Vec<u8> {
    Writer::default().u8(COUNTERS).u64(qid).finish()
}

pub fn event(qid: u64, id: &str) -> Vec<u8> {
    Writer::default()
        .u8(EVENT)
        .u64(qid)
        .raw(id.as_bytes())
        .finish()
}

/// `(queue id, event ID)` of an event key.
pub fn decode_event_key(key: &[u8]) -> Result<(u64, cascade_core::EventId), Malformed> {
    let mut r = Reader::new(key, "event key");
    if r.u8()? != EVENT {
        return Err(r.malformed("wrong prefix"));
    }
    let qid = r.u64()?;
    let id = std::str::from_utf8(r.rest()).map_err(|_| r.malformed("invalid utf-8"))?;
    let id = cascade_core::EventId::parse(id).map_err(|e| r.malformed(&e.to_string()))?;
    Ok((qid, id))
}

/// All events of one queue, in ID order.
pub fn event_space(qid: u64) -> (Vec<u8>, Vec<u8>) {
    let start = Writer::default().u8(EVENT).u64(qid).finish();
    let end = Writer::default().u8(EVENT).u64(qid + 1).finish();
    (start, end)
}

pub fn ready(qid: u64, activate_at: u64, seq: u64) -> Vec<u8> {
    Writer::default()
        .u8(READY)
        .u64(qid)
        .u64(activate_at)
        .u64(seq)
        .finish()
}

/// `(queue id, activate_at, seq)` of a ready key.
pub fn decode_ready(key: &[u8]) -> Result<(u64, u64, u64), Malformed> {
    let mut r = Reader::new(key, "ready key");
    if r.u8()? != READY {
        return Err(r.malformed("wrong prefix"));
    }
    let parts = (r.u64()?, r.u64()?, r.u64()?);
    r.finish()?;
    Ok(parts)
}

pub fn ready_space(qid: u64) -> (Vec<u8>, Vec<u8>) {
    let start = Writer::default().u8(READY).u64(qid).finish();
    let end = Writer::default().u8(READY).u64(qid + 1).finish();
    (start, end)
}

pub fn lease(deadline: u64, qid: u64, id: &str) -> Vec<u8> {
    Writer::default()
        .u8(LEASE)
        .u64(deadline)
        .u64(qid)
        .raw(id.as_bytes())
        .finish()
}

/// Leases whose deadline is at or before `now`.
pub fn lease_due_space(now: u64) -> (Vec<u8>, Vec<u8>) {
    let end = Writer::default()
        .u8(LEASE)
        .u64(now.saturating_add(1))
        .finish();
    (vec![LEASE], end)
}

pub fn decode_lease(key: &[u8]) -> Result<(u64, u64, String), Malformed> {
    let mut r = Reader::new(key, "lease key");
    if r.u8()? != LEASE {
        return Err(r.malformed("wrong prefix"));
    }
    let deadline = r.u64()?;
    let qid = r.u64()?;
    let id = String::from_utf8(r.rest().to_vec()).map_err(|_| Malformed("lease key: id".into()))?;
    Ok((deadline, qid, id))
}

/// Dedup entry: `kind` separates client IDs (`b'i'`) from idempotency keys (`b'k'`).
pub fn dedup(queue: &str, kind: u8, key: &str) -> Vec<u8> {
    let len = u8::try_from(queue.len()).expect("queue names are at most 200 bytes");
    Writer::default()
        .u8(DEDUP)
        .u8(len)
        .raw(queue.as_bytes())
        .u8(kind)
        .raw(key.as_bytes())
        .finish()
}

pub fn dedup_age(seq: u64) -> Vec<u8> {
    Writer::default().u8(DEDUP_AGE).u64(seq).finish()
}

pub fn dedup_age_space() -> (Vec<u8>, Vec<u8>) {
    whole(DEDUP_AGE)
}

pub fn outbox(seq: u64) -> Vec<u8> {
    Writer::default().u8(OUTBOX).u64(seq).finish()
}

pub fn outbox_space() -> (Vec<u8>, Vec<u8>) {
    whole(OUTBOX)
}

pub fn seq_of(key: &[u8], what: &'static str) -> Result<u64, Malformed> {
    let mut r = Reader::new(key, what);
    r.u8()?;
    r.u64()
}

/// The highest hand-off sequence applied from one source shard.
pub fn received(source: u32) -> Vec<u8> {
    Writer::default().u8(RECEIVED).u32(source).finish()
}

/// Activation timer: `(activate_at, queue, id, version)`.
pub fn schedule(at: u64, queue: &str, id: &str, version: u64) -> Vec<u8> {
    let len = u8::try_from(queue.len()).expect("queue names are at most 200 bytes");
    Writer::default()
        .u8(SCHEDULE)
        .u64(at)
        .u8(len)
        .raw(queue.as_bytes())
        .u64(version)
        .raw(id.as_bytes())
        .finish()
}

/// The legacy index keyspace (`LEGACY_SCHEDULE_INDEX`), whole.
pub fn legacy_schedule_index_space() -> (Vec<u8>, Vec<u8>) {
    whole(LEGACY_SCHEDULE_INDEX)
}

/// A legacy index key as earlier builds wrote it.
#[cfg(test)]
pub fn legacy_schedule_index(queue: &str, id: &str, version: u64) -> Vec<u8> {
    let len = u8::try_from(queue.len()).expect("queue names are at most 200 bytes");
    Writer::default()
        .u8(LEGACY_SCHEDULE_INDEX)
        .u8(len)
        .raw(queue.as_bytes())
        .u64(version)
        .raw(id.as_bytes())
        .finish()
}

/// Schedule keys with `from <= at <= up_to`.
pub fn schedule_range(from: u64, up_to: u64) -> (Vec<u8>, Vec<u8>) {
    let start = Writer::default().u8(SCHEDULE).u64(from).finish();
    let end = Writer::default()
        .u8(SCHEDULE)
        .u64(up_to.saturating_add(1))
        .finish();
    (start, end)
}

/// `(at, queue, id, version)` of a schedule key.
pub fn decode_schedule(key: &[u8]) -> Result<(u64, String, String, u64), Malformed> {
    let mut r = Reader::new(key, "schedule key");
    if r.u8()? != SCHEDULE {
        return Err(r.malformed("wrong prefix"));
    }
    let at = r.u64()?;
    let (queue, id, version) = queue_id_version(&mut r, "schedule key")?;
    Ok((at, queue, id, version))
}

/// `(queue, id, version)` of a legacy index key (`LEGACY_SCHEDULE_INDEX`: its prefix, the
/// queue with its length first, the version, the ID).
pub fn decode_legacy_schedule_index(key: &[u8]) -> Result<(String, String, u64), Malformed> {
    let mut r = Reader::new(key, "schedule index key");
    if r.u8()? != LEGACY_SCHEDULE_INDEX {
        return Err(r.malformed("wrong prefix"));
    }
    queue_id_version(&mut r, "schedule index key")
}

/// The rest of a timer key: the queue (its length first), the version, the ID.
fn queue_id_version(r: &mut Reader<'_>, what: &str) -> Result<(String, String, u64), Malformed> {
    let len = r.u8()? as usize;
    let rest = r.rest();
    if rest.len() < len + 8 {
        return Err(Malformed(format!("{what}: too short")));
    }
    let queue =
        String::from_utf8(rest[..len].to_vec()).map_err(|_| Malformed(format!("{what}: queue")))?;
    let mut tail = Reader::new(&rest[len..], "timer key");
    let version = tail.u64()?;
    let id =
        String::from_utf8(tail.rest().to_vec()).map_err(|_| Malformed(format!("{what}: id")))?;
    Ok((queue, id, version))
}

/// The key just after `key` in byte order: resume a scan after the last key seen.
pub fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = Vec::with_capacity(key.len() + 1);
    next.extend_from_slice(key);
    next.push(0);
    next
}

/// The first key past every key that starts with `prefix` (which is never all `0xff`: every
/// key starts with a keyspace byte below it).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            break;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_keys_sort_by_time_then_sequence() {
        let a = ready(1, 100, 9);
        let b = ready(1, 101, 1);
        let c = ready(1, 101, 2);
        assert!(a < b && b < c);
        let (start, end) = ready_space(1);
        assert!(start < a && c < end);
        assert!(ready(2, 0, 0) >= end);
    }

    #[test]
    fn lease_and_schedule_keys_round_trip() {
        let key = lease(55, 3, "01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert_eq!(
            decode_lease(&key),
            Ok((55, 3, "01ARZ3NDEKTSV4RRFFQ69G5FAV".to_string()))
        );
        let (_, due_end) = lease_due_space(55);
        assert!(key < due_end);
        let (_, not_due_end) = lease_due_space(54);
        assert!(key >= not_due_end);
        let s = schedule(7, "inbox:42", "abc", 3);
        assert_eq!(
            decode_schedule(&s),
            Ok((7, "inbox:42".to_string(), "abc".to_string(), 3))
        );
    }
}
