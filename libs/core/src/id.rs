//! Event ids and idempotency keys.
//!
//! A server id is a ULID: 48 bits of Unix milliseconds then 80 random bits, written as 26 chars
//! of Crockford base32, so string order is time order. Within one millisecond this process
//! increments the random part, so its ids are strictly increasing. A client id is any
//! 1-128 bytes of `[A-Za-z0-9._:-]`.

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::text::{check_token, is_queue_char};
use crate::time::Timestamp;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const ENCODED_LEN: usize = 26;
const RANDOM_BITS: u32 = 80;
const RANDOM_MASK: u128 = (1 << RANDOM_BITS) - 1;
const MAX_MILLIS: u64 = (1 << 48) - 1;
/// The longest event ID (or idempotency key) a client may give.
pub const MAX_ID_BYTES: usize = 128;
const ID_RULE: &str = "must be 1-128 bytes of [A-Za-z0-9._:-]";

/// The last id generated: (milliseconds, random part).
static LAST_GENERATED: Mutex<(u64, u128)> = Mutex::new((0, 0));

/// An event's id, unique within its queue.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventId(String);

impl EventId {
    /// A new server id for `now`; strictly after the previous one generated in the same ms.
    pub fn generate(now: Timestamp) -> EventId {
        let millis = now.as_millis().min(MAX_MILLIS);
        let mut last = LAST_GENERATED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let random = match *last {
            (last_millis, last_random) if last_millis == millis && last_random < RANDOM_MASK => {
                last_random + 1
            }
            _ => fastrand::u128(..) & RANDOM_MASK,
        };
        *last = (millis, random);
        drop(last);
        EventId::from_parts(millis, random)
    }

    /// The server id with these parts (milliseconds above 2^48-1 are clamped, random masked).
    pub fn from_parts(millis: u64, random: u128) -> EventId {
        let value = (u128::from(millis.min(MAX_MILLIS)) << RANDOM_BITS) | (random & RANDOM_MASK);
        let text = (0..ENCODED_LEN)
            .map(|i| {
                let shift = 5 * (ENCODED_LEN - 1 - i);
                char::from(ALPHABET[((value >> shift) & 31) as usize])
            })
            .collect();
        EventId(text)
    }

    /// Validates a client-given id (server ids are valid client ids too).
    pub fn parse(input: &str) -> Result<EventId, Error> {
        check_token(input, "id", MAX_ID_BYTES, is_queue_char, ID_RULE)?;
        Ok(EventId(input.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The time encoded in an id with the server layout; `None` for other ids.
    pub fn generated_at(&self) -> Option<Timestamp> {
        let bytes = self.0.as_bytes();
        if bytes.len() != ENCODED_LEN || bytes[0] > b'7' {
            return None;
        }
        let mut value: u128 = 0;
        for &byte in bytes {
            let digit = ALPHABET.iter().position(|&a| a == byte)?;
            value = (value << 5) | digit as u128;
        }
        Some(Timestamp::from_millis((value >> RANDOM_BITS) as u64))
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for EventId {
    type Err = Error;

    fn from_str(input: &str) -> Result<EventId, Error> {
        EventId::parse(input)
    }
}

impl TryFrom<String> for EventId {
    type Error = Error;

    fn try_from(input: String) -> Result<EventId, Error> {
        check_token(&input, "id", MAX_ID_BYTES, is_queue_char, ID_RULE)?;
        Ok(EventId(input))
    }
}

impl From<EventId> for String {
    fn from(id: EventId) -> String {
        id.0
    }
}

impl Borrow<str> for EventId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// A producer's key for exactly-once enqueue: 1-256 bytes of UTF-8 without control characters.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(input: &str) -> Result<IdempotencyKey, Error> {
        check_token(
            input,
            "idempotency_key",
            256,
            |c| !c.is_control(),
            "must be 1-256 bytes of UTF-8 without control characters",
        )?;
        Ok(IdempotencyKey(input.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = Error;

    fn try_from(input: String) -> Result<IdempotencyKey, Error> {
        IdempotencyKey::parse(&input)
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> String {
        key.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serialises the tests that generate ids, since the monotonic state is process-wide.
    static GENERATING: Mutex<()> = Mutex::new(());

    fn generating() -> std::sync::MutexGuard<'static, ()> {
        GENERATING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[test]
    fn server_ids_are_26_crockford_chars_and_roundtrip() {
        let _guard = generating();
        let now = Timestamp::from_micros(1_714_564_800_123_456);
        let id = EventId::generate(now);
        assert_eq!(id.as_str().len(), 26);
        assert!(id.as_str().bytes().all(|b| ALPHABET.contains(&b)), "{id}");
        assert!(!id.as_str().contains(['I', 'L', 'O', 'U']));
        assert_eq!(EventId::parse(id.as_str()), Ok(id.clone()));
        assert_eq!(
            id.generated_at(),
            Some(Timestamp::from_millis(1_714_564_800_123))
        );
    }

    #[test]
    fn id_order_is_time_order() {
        let _guard = generating();
        let mut previous = EventId::generate(Timestamp::from_millis(1));
        for millis in [2, 999, 1_000, 1_714_564_800_000, MAX_MILLIS] {
            let next = EventId::generate(Timestamp::from_millis(millis));
            assert!(previous < next, "{previous} !< {next}");
            previous = next;
        }
        let low = EventId::from_parts(5, RANDOM_MASK);
        let high = EventId::from_parts(6, 0);
        assert!(low < high);
        assert_eq!(EventId::from_parts(0, 0).as_str(), "0".repeat(26));
        assert_eq!(
            EventId::from_parts(MAX_MILLIS, RANDOM_MASK).as_str(),
            format!("7{}", "Z".repeat(25))
        );
    }

    #[test]
    fn ids_within_one_millisecond_increase() {
        let _guard = generating();
        let now = Timestamp::from_millis(1_800_000_000_000);
        let ids: Vec<EventId> = (0..1_000).map(|_| EventId::generate(now)).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn client_ids() {
        for good in ["a", "order-42", "user:7.job_3", &"x".repeat(128)] {
            assert_eq!(
                EventId::parse(good).map(|id| id.to_string()),
                Ok(good.to_owned())
            );
        }
        assert_eq!(
            EventId::parse("order-42").expect("valid").generated_at(),
            None
        );
        let err = EventId::parse("a/b").expect_err("slash");
        assert_eq!(
            err.to_string(),
            "id: must be 1-128 bytes of [A-Za-z0-9._:-], got '/' at byte 1"
        );
        let err = EventId::parse(&"x".repeat(129)).expect_err("long");
        assert_eq!(
            err.to_string(),
            "id: must be 1-128 bytes of [A-Za-z0-9._:-], got 129 bytes"
        );
        assert!(EventId::parse("").is_err());
        assert!(EventId::parse("a b").is_err());
    }

    #[test]
    fn idempotency_keys() {
        assert!(IdempotencyKey::parse("payment 42 / ünïcode").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(256)).is_ok());
        let err = IdempotencyKey::parse("a\tb").expect_err("tab");
        assert_eq!(err.field(), "idempotency_key");
        assert!(
            err.to_string()
                .contains("without control characters, got '\\t' at byte 1")
        );
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(257)).is_err());
    }
}
