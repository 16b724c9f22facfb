//! Every value of the shard store. Each starts with a format version byte; a value of a
//! version this build does not read, or one that fails its checks, is a `Malformed` error that
//! names the record.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use cascade_core::{EventId, EventState, QueueConfig, QueueName, Timestamp};

use super::bytes::{Malformed, Reader, Writer};

mod pipeline;

pub use pipeline::{decode_pipeline, encode_pipeline};

const V1: u8 = 1;
/// The compact layout of events, queue records, counters and family sums: small numbers as
/// varints, times as differences, and no event ID in an event's value (its key holds it).
/// Every sled entry costs its bytes more than once on disk, and these records are most of a
/// store's entries. Records of either version are read, for good: a queue record may never
/// change again after it was written; changed ones are written as V2.
const V2: u8 = 2;

/// How a queue record came to be.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// Created by `CreateQueue`.
    Explicit,
    /// A name ending in `*`: gives the config of every matching queue; holds no events.
    Template,
    /// A queue that matched a template when its first event arrived; removed once empty.
    FromTemplate,
    /// Created on first use as the dead-letter queue of another queue.
    DeadLetter,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRecord {
    pub id: u64,
    pub name: QueueName,
    pub config: QueueConfig,
    pub kind: QueueKind,
    pub created_at: Timestamp,
}

/// Current counts and running totals of one queue.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub ready: u64,
    pub delayed: u64,
    pub leased: u64,
    pub dead_lettered: u64,
    pub enqueued_total: u64,
    pub completed_total: u64,
    pub expired_leases_total: u64,
    pub retries_total: u64,
}

/// An event as stored. `seq` is its insertion sequence (the tie-break of the ready order),
/// `lease_epoch` the shard-wide epoch of its current or last lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub id: EventId,
    pub state: EventState,
    pub activate_at: Timestamp,
    pub attempts: u32,
    pub created_at: Timestamp,
    pub version: u64,
    pub seq: u64,
    pub lease_epoch: u64,
    pub lease_expires_at: Option<Timestamp>,
    pub headers: BTreeMap<String, String>,
    pub payload: Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupRecord {
    pub event_id: EventId,
    /// The activation time the original enqueue answered with.
    pub activate_at: Timestamp,
    pub seq: u64,
    pub expires_at: Timestamp,
}

/// A hand-off waiting in the outbox until its receiver acknowledges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandOff {
    /// Tell the activation timer to activate `(queue, id, version)` at `at`.
    Schedule {
        queue: QueueName,
        id: EventId,
        version: u64,
        at: Timestamp,
    },
    /// Enqueue an event into a queue this shard does not own (advance, dead letter, redrive).
    Deliver(Delivery),
}

// A hand-off's delivery is a domain value; the encoding below is the store's.
pub use cascade_core::commands::Delivery;

pub fn encode_queue(rec: &QueueRecord) -> Vec<u8> {
    let mut w = Writer::with_capacity(64);
    w.u8(V2)
        .varint(rec.id)
        .short_str(rec.name.as_str())
        .u8(match rec.kind {
            QueueKind::Explicit => 0,
            QueueKind::Template => 1,
            QueueKind::FromTemplate => 2,
            QueueKind::DeadLetter => 3,
        })
        .u64(rec.created_at.as_micros());
    encode_config(&mut w, &rec.config, V2);
    w.finish()
}

pub fn decode_queue(buf: &[u8]) -> Result<QueueRecord, Malformed> {
    let mut r = Reader::new(buf, "queue record");
    let version = r.version_in(V1..=V2)?;
    let id = u64_in(&mut r, version)?;
    let name =
        QueueName::parse(&string_in(&mut r, version)?).map_err(|e| r.malformed(&e.to_string()))?;
    let kind = match r.u8()? {
        0 => QueueKind::Explicit,
        1 => QueueKind::Template,
        2 => QueueKind::FromTemplate,
        3 => QueueKind::DeadLetter,
        _ => return Err(r.malformed("unknown queue kind")),
    };
    let created_at = Timestamp::from_micros(r.u64()?);
    let config = decode_config(&mut r, version)?;
    r.finish()?;
    Ok(QueueRecord {
        id,
        name,
        config,
        kind,
        created_at,
    })
}

/// A queue's config in the layout of `version` (pipeline records keep V1's).
fn encode_config(w: &mut Writer, c: &QueueConfig, version: u8) {
    let dead_letter_queue = c.dead_letter_queue.as_ref().map_or("", |q| q.as_str());
    if version == V1 {
        w.u64(micros(c.lease))
            .u32(c.max_attempts)
            .u64(micros(c.backoff_initial))
            .u64(micros(c.backoff_max))
            .str(dead_letter_queue)
            .u64(c.max_payload_bytes)
            .u32(c.priority)
            .u64(micros(c.dedup_window));
    } else {
        w.varint(micros(c.lease))
            .varint(u64::from(c.max_attempts))
            .varint(micros(c.backoff_initial))
            .varint(micros(c.backoff_max))
            .short_str(dead_letter_queue)
            .varint(c.max_payload_bytes)
            .varint(u64::from(c.priority))
            .varint(micros(c.dedup_window));
    }
}

fn decode_config(r: &mut Reader<'_>, version: u8) -> Result<QueueConfig, Malformed> {
    let lease = Duration::from_micros(u64_in(r, version)?);
    let max_attempts = u32_in(r, version, "max_attempts")?;
    let backoff_initial = Duration::from_micros(u64_in(r, version)?);
    let backoff_max = Duration::from_micros(u64_in(r, version)?);
    let dlq = string_in(r, version)?;
    let dead_letter_queue = if dlq.is_empty() {
        None
    } else {
        Some(QueueName::parse(&dlq).map_err(|e| r.malformed(&e.to_string()))?)
    };
    Ok(QueueConfig {
        lease,
        max_attempts,
        backoff_initial,
        backoff_max,
        dead_letter_queue,
        max_payload_bytes: u64_in(r, version)?,
        priority: u32_in(r, version, "priority")?,
        dedup_window: Duration::from_micros(u64_in(r, version)?),
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A number as `version` wrote it: fixed-width in V1, a varint in V2.
fn u64_in(r: &mut Reader<'_>, version: u8) -> Result<u64, Malformed> {
    if version == V1 { r.u64() } else { r.varint() }
}

/// A 32-bit number as `version` wrote it.
fn u32_in(r: &mut Reader<'_>, version: u8, what: &str) -> Result<u32, Malformed> {
    if version == V1 {
        return r.u32();
    }
    u32::try_from(r.varint()?).map_err(|_| r.malformed(&format!("{what} beyond 32 bits")))
}

/// A string as `version` wrote it: after a 4-byte length in V1, a varint one in V2.
fn string_in(r: &mut Reader<'_>, version: u8) -> Result<String, Malformed> {
    if version == V1 {
        r.string()
    } else {
        r.short_string()
    }
}

fn queue_name(r: &mut Reader<'_>) -> Result<QueueName, Malformed> {
    let s = r.string()?;
    QueueName::parse(&s).map_err(|e| r.malformed(&e.to_string()))
}

fn event_id(r: &mut Reader<'_>) -> Result<EventId, Malformed> {
    let s = r.string()?;
    EventId::parse(&s).map_err(|e| r.malformed(&e.to_string()))
}

pub fn encode_counters(c: &Counters) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    w.u8(V2);
    write_counters(&mut w, c);
    w.finish()
}

pub fn decode_counters(buf: &[u8]) -> Result<Counters, Malformed> {
    let mut r = Reader::new(buf, "queue counters");
    let version = r.version_in(V1..=V2)?;
    let c = read_counters(&mut r, version)?;
    r.finish()?;
    Ok(c)
}

/// A template family's sums: its members' counters added up, and how many members hold a
/// counters record.
pub fn encode_family(counters: &Counters, members: u64) -> Vec<u8> {
    let mut w = Writer::with_capacity(24);
    w.u8(V2);
    write_counters(&mut w, counters);
    w.varint(members);
    w.finish()
}

pub fn decode_family(buf: &[u8]) -> Result<(Counters, u64), Malformed> {
    let mut r = Reader::new(buf, "family sums");
    let version = r.version_in(V1..=V2)?;
    let counters = read_counters(&mut r, version)?;
    let members = u64_in(&mut r, version)?;
    r.finish()?;
    Ok((counters, members))
}

fn write_counters(w: &mut Writer, c: &Counters) {
    w.varint(c.ready)
        .varint(c.delayed)
        .varint(c.leased)
        .varint(c.dead_lettered)
        .varint(c.enqueued_total)
        .varint(c.completed_total)
        .varint(c.expired_leases_total)
        .varint(c.retries_total);
}

fn read_counters(r: &mut Reader<'_>, version: u8) -> Result<Counters, Malformed> {
    let mut next = || u64_in(r, version);
    Ok(Counters {
        ready: next()?,
        delayed: next()?,
        leased: next()?,
        dead_lettered: next()?,
        enqueued_total: next()?,
        completed_total: next()?,
        expired_leases_total: next()?,
        retries_total: next()?,
    })
}

fn encode_state(s: EventState) -> u8 {
    match s {
        EventState::Delayed => 1,
        EventState::Ready => 2,
        EventState::Leased => 3,
    }
}

fn decode_state(r: &mut Reader<'_>) -> Result<EventState, Malformed> {
    match r.u8()? {
        1 => Ok(EventState::Delayed),
        2 => Ok(EventState::Ready),
        3 => Ok(EventState::Leased),
        _ => Err(r.malformed("unknown event state")),
    }
}

fn encode_headers(w: &mut Writer, headers: &BTreeMap<String, String>) {
    w.u32(u32::try_from(headers.len()).expect("header count is validated"));
    for (k, v) in headers {
        w.str(k).str(v);
    }
}

fn decode_headers(r: &mut Reader<'_>) -> Result<BTreeMap<String, String>, Malformed> {
    let n = r.u32()?;
    let mut headers = BTreeMap::new();
    for _ in 0..n {
        let k = r.string()?;
        let v = r.string()?;
        headers.insert(k, v);
    }
    Ok(headers)
}

/// The payload is stored with its CRC32C, checked on every decode: a corrupted payload is
/// never delivered. The event's ID is its key's (`keys::event`), not repeated here.
pub fn encode_event(e: &EventRecord) -> Vec<u8> {
    let mut w = Writer::with_capacity(48 + e.payload.len());
    let created = e.created_at.as_micros();
    w.u8(V2)
        .u8(encode_state(e.state))
        .u64(created)
        .delta(e.activate_at.as_micros(), created)
        .varint(u64::from(e.attempts))
        .varint(e.version)
        .varint(e.seq)
        .varint(e.lease_epoch);
    match e.lease_expires_at {
        None => w.u8(0),
        Some(t) => w.u8(1).delta(t.as_micros(), created),
    };
    w.varint(e.headers.len() as u64);
    for (k, v) in &e.headers {
        w.short_str(k).short_str(v);
    }
    w.u32(crc32c::crc32c(&e.payload)).short_bytes(&e.payload);
    w.finish()
}

/// The event record `buf` stored under `key`.
pub fn decode_event(key: &[u8], buf: &[u8]) -> Result<EventRecord, Malformed> {
    let mut r = Reader::new(buf, "event record");
    let e = match r.version_in(V1..=V2)? {
        V1 => decode_event_v1(&mut r)?,
        _ => decode_event_v2(&mut r, key)?,
    };
    r.finish()?;
    Ok(e)
}

fn decode_event_v2(r: &mut Reader<'_>, key: &[u8]) -> Result<EventRecord, Malformed> {
    let id = super::keys::decode_event_key(key)?.1;
    let state = decode_state(r)?;
    let created = r.u64()?;
    let activate_at = Timestamp::from_micros(r.delta(created)?);
    let attempts = u32_in(r, V2, "attempts")?;
    let (version, seq, lease_epoch) = (r.varint()?, r.varint()?, r.varint()?);
    let lease_expires_at = match r.u8()? {
        0 => None,
        1 => Some(Timestamp::from_micros(r.delta(created)?)),
        _ => return Err(r.malformed("unknown lease marker")),
    };
    let mut headers = BTreeMap::new();
    for _ in 0..r.varint()? {
        let k = r.short_string()?;
        headers.insert(k, r.short_string()?);
    }
    let crc = r.u32()?;
    let payload = checked_payload(r.short_bytes()?, crc, &id)?;
    Ok(EventRecord {
        id,
        state,
        activate_at,
        attempts,
        created_at: Timestamp::from_micros(created),
        version,
        seq,
        lease_epoch,
        lease_expires_at,
        headers,
        payload,
    })
}

/// The layout before V2, with the ID in the value.
fn decode_event_v1(r: &mut Reader<'_>) -> Result<EventRecord, Malformed> {
    let id = event_id(r)?;
    let state = decode_state(r)?;
    let activate_at = Timestamp::from_micros(r.u64()?);
    let attempts = r.u32()?;
    let created_at = Timestamp::from_micros(r.u64()?);
    let version = r.u64()?;
    let seq = r.u64()?;
    let lease_epoch = r.u64()?;
    let lease_expires_at = match r.u64()? {
        0 => None,
        t => Some(Timestamp::from_micros(t)),
    };
    let headers = decode_headers(r)?;
    let crc = r.u32()?;
    let payload = checked_payload(r.bytes()?, crc, &id)?;
    Ok(EventRecord {
        id,
        state,
        activate_at,
        attempts,
        created_at,
        version,
        seq,
        lease_epoch,
        lease_expires_at,
        headers,
        payload,
    })
}

fn checked_payload(payload: &[u8], crc: u32, id: &EventId) -> Result<Bytes, Malformed> {
    if crc32c::crc32c(payload) != crc {
        return Err(Malformed(format!(
            "event record {}: payload checksum mismatch",
            id.as_str()
        )));
    }
    Ok(Bytes::copy_from_slice(payload))
}

pub fn encode_dedup(d: &DedupRecord) -> Vec<u8> {
    Writer::with_capacity(48)
        .u8(V1)
        .str(d.event_id.as_str())
        .u64(d.activate_at.as_micros())
        .u64(d.seq)
        .u64(d.expires_at.as_micros())
        .finish()
}

pub fn decode_dedup(buf: &[u8]) -> Result<DedupRecord, Malformed> {
    let mut r = Reader::new(buf, "dedup record");
    r.expect_version(V1)?;
    let d = DedupRecord {
        event_id: event_id(&mut r)?,
        activate_at: Timestamp::from_micros(r.u64()?),
        seq: r.u64()?,
        expires_at: Timestamp::from_micros(r.u64()?),
    };
    r.finish()?;
    Ok(d)
}

pub fn encode_hand_off(h: &HandOff) -> Vec<u8> {
    let mut w = Writer::with_capacity(64);
    w.u8(V1);
    match h {
        HandOff::Schedule {
            queue,
            id,
            version,
            at,
        } => {
            w.u8(1)
                .str(queue.as_str())
                .str(id.as_str())
                .u64(*version)
                .u64(at.as_micros());
        }
        HandOff::Deliver(d) => {
            w.u8(2);
            encode_delivery(&mut w, d);
        }
    }
    w.finish()
}

pub fn decode_hand_off(buf: &[u8]) -> Result<HandOff, Malformed> {
    let mut r = Reader::new(buf, "outbox entry");
    r.expect_version(V1)?;
    let h = match r.u8()? {
        1 => HandOff::Schedule {
            queue: queue_name(&mut r)?,
            id: event_id(&mut r)?,
            version: r.u64()?,
            at: Timestamp::from_micros(r.u64()?),
        },
        2 => HandOff::Deliver(decode_delivery(&mut r)?),
        _ => return Err(r.malformed("unknown hand-off kind")),
    };
    r.finish()?;
    Ok(h)
}

fn encode_delivery(w: &mut Writer, d: &Delivery) {
    w.str(d.queue.as_str())
        .str(d.id.as_str())
        .u64(d.activate_at.as_micros())
        .u64(d.created_at.as_micros());
    encode_headers(w, &d.headers);
    w.u32(crc32c::crc32c(&d.payload)).bytes(&d.payload);
}

fn decode_delivery(r: &mut Reader<'_>) -> Result<Delivery, Malformed> {
    let queue = queue_name(r)?;
    let id = event_id(r)?;
    let activate_at = Timestamp::from_micros(r.u64()?);
    let created_at = Timestamp::from_micros(r.u64()?);
    let headers = decode_headers(r)?;
    let crc = r.u32()?;
    let payload = Bytes::copy_from_slice(r.bytes()?);
    if crc32c::crc32c(&payload) != crc {
        return Err(r.malformed("payload checksum mismatch"));
    }
    Ok(Delivery {
        queue,
        id,
        payload,
        headers,
        activate_at,
        created_at,
    })
}

pub fn encode_u64(v: u64) -> Vec<u8> {
    Writer::with_capacity(9).u8(V1).u64(v).finish()
}

pub fn decode_u64(buf: &[u8], what: &'static str) -> Result<u64, Malformed> {
    let mut r = Reader::new(buf, what);
    r.expect_version(V1)?;
    let v = r.u64()?;
    r.finish()?;
    Ok(v)
}

/// The cluster a store belongs to: its name and shard count, fixed at creation.
pub fn encode_cluster(name: &str, shards: u32) -> Vec<u8> {
    Writer::default().u8(V1).u32(shards).str(name).finish()
}

/// Which store of its cluster a store is (`dispatcher-0`).
pub fn encode_store_name(name: &str) -> Vec<u8> {
    Writer::default().u8(V1).str(name).finish()
}

pub fn decode_store_name(buf: &[u8]) -> Result<String, Malformed> {
    let mut r = Reader::new(buf, "store name");
    r.expect_version(V1)?;
    let name = r.string()?;
    r.finish()?;
    Ok(name)
}

pub fn decode_cluster(buf: &[u8]) -> Result<(String, u32), Malformed> {
    let mut r = Reader::new(buf, "store cluster");
    r.expect_version(V1)?;
    let shards = r.u32()?;
    let name = r.string()?;
    r.finish()?;
    Ok((name, shards))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_event() -> EventRecord {
        EventRecord {
            id: EventId::parse("order-1").expect("valid id"),
            state: EventState::Leased,
            activate_at: Timestamp::from_micros(10),
            attempts: 2,
            created_at: Timestamp::from_micros(5),
            version: 3,
            seq: 99,
            lease_epoch: 7,
            lease_expires_at: Some(Timestamp::from_micros(40)),
            headers: BTreeMap::from([("traceparent".to_string(), "00-ab".to_string())]),
            payload: b"hello".to_vec().into(),
        }
    }

    fn key_of(e: &EventRecord) -> Vec<u8> {
        super::super::keys::event(4, e.id.as_str())
    }

    #[test]
    fn event_round_trips() {
        let e = sample_event();
        assert_eq!(decode_event(&key_of(&e), &encode_event(&e)), Ok(e));
        let plain = EventRecord {
            lease_expires_at: None,
            activate_at: Timestamp::from_micros(1),
            headers: BTreeMap::new(),
            ..sample_event()
        };
        assert_eq!(
            decode_event(&key_of(&plain), &encode_event(&plain)),
            Ok(plain)
        );
    }

    /// Stores written before V2 hold V1 events and counters: they are read as they are.
    #[test]
    fn v1_records_are_still_read() {
        let e = sample_event();
        let mut w = Writer::default();
        w.u8(V1)
            .str(e.id.as_str())
            .u8(3)
            .u64(10)
            .u32(2)
            .u64(5)
            .u64(3)
            .u64(99)
            .u64(7)
            .u64(40)
            .u32(1)
            .str("traceparent")
            .str("00-ab")
            .u32(crc32c::crc32c(b"hello"))
            .bytes(b"hello");
        assert_eq!(decode_event(&key_of(&e), &w.finish()), Ok(e));
        let mut w = Writer::default();
        w.u8(V1);
        for n in 1..=8 {
            w.u64(n);
        }
        let counters = decode_counters(&w.finish()).expect("V1 counters");
        assert_eq!((counters.ready, counters.retries_total), (1, 8));
        let q = sample_queue();
        let c = &q.config;
        let mut w = Writer::default();
        w.u8(V1)
            .u64(q.id)
            .str(q.name.as_str())
            .u8(3)
            .u64(1)
            .u64(c.lease.as_micros() as u64)
            .u32(c.max_attempts)
            .u64(c.backoff_initial.as_micros() as u64)
            .u64(c.backoff_max.as_micros() as u64)
            .str("inbox.dlq2")
            .u64(c.max_payload_bytes)
            .u32(c.priority)
            .u64(c.dedup_window.as_micros() as u64);
        assert_eq!(decode_queue(&w.finish()), Ok(q));
    }

    fn sample_queue() -> QueueRecord {
        QueueRecord {
            id: 4,
            name: QueueName::parse("inbox.dlq").expect("valid"),
            config: QueueConfig {
                dead_letter_queue: Some(QueueName::parse("inbox.dlq2").expect("valid")),
                ..QueueConfig::default()
            },
            kind: QueueKind::DeadLetter,
            created_at: Timestamp::from_micros(1),
        }
    }

    #[test]
    fn flipped_payload_byte_is_refused() {
        let e = sample_event();
        let mut buf = encode_event(&e);
        let last = buf.len() - 1;
        buf[last] ^= 0x01;
        let err = decode_event(&key_of(&e), &buf).expect_err("corrupt payload must not decode");
        assert!(err.0.contains("checksum"), "{err}");
    }

    #[test]
    fn counters_and_family_sums_round_trip() {
        let c = Counters {
            ready: 1,
            delayed: 300,
            enqueued_total: u64::MAX,
            ..Counters::default()
        };
        assert_eq!(decode_counters(&encode_counters(&c)), Ok(c));
        assert_eq!(decode_family(&encode_family(&c, 70_000)), Ok((c, 70_000)));
    }

    #[test]
    fn queue_and_hand_off_round_trip() {
        let q = QueueRecord {
            id: 4,
            name: QueueName::parse("inbox:*").expect("valid"),
            config: QueueConfig::default(),
            kind: QueueKind::Template,
            created_at: Timestamp::from_micros(1),
        };
        assert_eq!(decode_queue(&encode_queue(&q)), Ok(q));
        assert_eq!(
            decode_queue(&encode_queue(&sample_queue())),
            Ok(sample_queue())
        );
        let h = HandOff::Deliver(Delivery {
            queue: QueueName::parse("p.b").expect("valid"),
            id: EventId::parse("x").expect("valid"),
            payload: vec![1, 2, 3].into(),
            headers: BTreeMap::new(),
            activate_at: Timestamp::from_micros(3),
            created_at: Timestamp::from_micros(2),
        });
        assert_eq!(decode_hand_off(&encode_hand_off(&h)), Ok(h));
    }

    #[test]
    fn other_version_is_refused() {
        let mut buf = encode_counters(&Counters::default());
        buf[0] = 9;
        assert!(decode_counters(&buf).is_err());
    }
}
