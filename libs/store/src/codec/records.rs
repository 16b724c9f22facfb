//! Every value of the shard store. Each starts with a format version byte; a value written by
//! another version, or one that fails its checks, is a `Malformed` error that names the record.

use std::collections::BTreeMap;
use std::time::Duration;

use cascade_core::{EventId, EventState, QueueConfig, QueueName, Timestamp};

use super::bytes::{Malformed, Reader, Writer};

mod pipeline;

pub use pipeline::{decode_pipeline, encode_pipeline};

const V1: u8 = 1;

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
    pub payload: Vec<u8>,
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
    let mut w = Writer::with_capacity(96);
    w.u8(V1).u64(rec.id).str(rec.name.as_str());
    w.u8(match rec.kind {
        QueueKind::Explicit => 0,
        QueueKind::Template => 1,
        QueueKind::FromTemplate => 2,
        QueueKind::DeadLetter => 3,
    });
    w.u64(rec.created_at.as_micros());
    encode_config(&mut w, &rec.config);
    w.finish()
}

pub fn decode_queue(buf: &[u8]) -> Result<QueueRecord, Malformed> {
    let mut r = Reader::new(buf, "queue record");
    r.expect_version(V1)?;
    let id = r.u64()?;
    let name = queue_name(&mut r)?;
    let kind = match r.u8()? {
        0 => QueueKind::Explicit,
        1 => QueueKind::Template,
        2 => QueueKind::FromTemplate,
        3 => QueueKind::DeadLetter,
        _ => return Err(r.malformed("unknown queue kind")),
    };
    let created_at = Timestamp::from_micros(r.u64()?);
    let config = decode_config(&mut r)?;
    r.finish()?;
    Ok(QueueRecord {
        id,
        name,
        config,
        kind,
        created_at,
    })
}

fn encode_config(w: &mut Writer, c: &QueueConfig) {
    w.u64(micros(c.lease))
        .u32(c.max_attempts)
        .u64(micros(c.backoff_initial))
        .u64(micros(c.backoff_max))
        .str(c.dead_letter_queue.as_ref().map_or("", |q| q.as_str()))
        .u64(c.max_payload_bytes)
        .u32(c.priority)
        .u64(micros(c.dedup_window));
}

fn decode_config(r: &mut Reader<'_>) -> Result<QueueConfig, Malformed> {
    let lease = Duration::from_micros(r.u64()?);
    let max_attempts = r.u32()?;
    let backoff_initial = Duration::from_micros(r.u64()?);
    let backoff_max = Duration::from_micros(r.u64()?);
    let dlq = r.string()?;
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
        max_payload_bytes: r.u64()?,
        priority: r.u32()?,
        dedup_window: Duration::from_micros(r.u64()?),
    })
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
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
    let mut w = Writer::with_capacity(65);
    w.u8(V1);
    write_counters(&mut w, c);
    w.finish()
}

pub fn decode_counters(buf: &[u8]) -> Result<Counters, Malformed> {
    let mut r = Reader::new(buf, "queue counters");
    r.expect_version(V1)?;
    let c = read_counters(&mut r)?;
    r.finish()?;
    Ok(c)
}

/// A template family's sums: its members' counters added up, and how many members hold a
/// counters record.
pub fn encode_family(counters: &Counters, members: u64) -> Vec<u8> {
    let mut w = Writer::with_capacity(73);
    w.u8(V1);
    write_counters(&mut w, counters);
    w.u64(members);
    w.finish()
}

pub fn decode_family(buf: &[u8]) -> Result<(Counters, u64), Malformed> {
    let mut r = Reader::new(buf, "family sums");
    r.expect_version(V1)?;
    let counters = read_counters(&mut r)?;
    let members = r.u64()?;
    r.finish()?;
    Ok((counters, members))
}

fn write_counters(w: &mut Writer, c: &Counters) {
    w.u64(c.ready)
        .u64(c.delayed)
        .u64(c.leased)
        .u64(c.dead_lettered)
        .u64(c.enqueued_total)
        .u64(c.completed_total)
        .u64(c.expired_leases_total)
        .u64(c.retries_total);
}

fn read_counters(r: &mut Reader<'_>) -> Result<Counters, Malformed> {
    Ok(Counters {
        ready: r.u64()?,
        delayed: r.u64()?,
        leased: r.u64()?,
        dead_lettered: r.u64()?,
        enqueued_total: r.u64()?,
        completed_total: r.u64()?,
        expired_leases_total: r.u64()?,
        retries_total: r.u64()?,
    })
}

fn encode_state(s: EventState) -> u8 {
    match s {
        EventState::Delayed => 1,
        EventState::Ready => 2,
        EventState::Leased => 3,
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
/// never delivered.
pub fn encode_event(e: &EventRecord) -> Vec<u8> {
    let mut w = Writer::with_capacity(96 + e.payload.len());
    w.u8(V1)
        .str(e.id.as_str())
        .u8(encode_state(e.state))
        .u64(e.activate_at.as_micros())
        .u32(e.attempts)
        .u64(e.created_at.as_micros())
        .u64(e.version)
        .u64(e.seq)
        .u64(e.lease_epoch)
        .u64(e.lease_expires_at.map_or(0, |t| t.as_micros()));
    encode_headers(&mut w, &e.headers);
    w.u32(crc32c::crc32c(&e.payload)).bytes(&e.payload);
    w.finish()
}

pub fn decode_event(buf: &[u8]) -> Result<EventRecord, Malformed> {
    let mut r = Reader::new(buf, "event record");
    r.expect_version(V1)?;
    let id = event_id(&mut r)?;
    let state = match r.u8()? {
        1 => EventState::Delayed,
        2 => EventState::Ready,
        3 => EventState::Leased,
        _ => return Err(r.malformed("unknown event state")),
    };
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
    let headers = decode_headers(&mut r)?;
    let crc = r.u32()?;
    let payload = r.bytes()?.to_vec();
    r.finish()?;
    if crc32c::crc32c(&payload) != crc {
        return Err(Malformed(format!(
            "event record {}: payload checksum mismatch",
            id.as_str()
        )));
    }
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
    let payload = r.bytes()?.to_vec();
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
            payload: b"hello".to_vec(),
        }
    }

    #[test]
    fn event_round_trips() {
        let e = sample_event();
        assert_eq!(decode_event(&encode_event(&e)), Ok(e));
    }

    #[test]
    fn flipped_payload_byte_is_refused() {
        let mut buf = encode_event(&sample_event());
        let last = buf.len() - 1;
        buf[last] ^= 0x01;
        let err = decode_event(&buf).expect_err("corrupt payload must not decode");
        assert!(err.0.contains("checksum"), "{err}");
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
        let h = HandOff::Deliver(Delivery {
            queue: QueueName::parse("p.b").expect("valid"),
            id: EventId::parse("x").expect("valid"),
            payload: vec![1, 2, 3],
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
