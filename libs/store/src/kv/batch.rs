//! A batch of key writes: the unit of atomicity. One state transition of the shard becomes one
//! batch, which is one write-ahead-log record and, at a checkpoint, part of one sled batch.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::codec::Malformed;
use crate::codec::bytes::{Reader, Writer};

const V1: u8 = 1;
/// Ops a lookup scans before the batch indexes its keys. A take of `n` events reads `n`
/// events in one batch, so without the index its reads cost `n²`: a quarter of a second of
/// the writer for a take of 10,000 (the engine benchmark's `take-sizes`).
const SCANNED_OPS: usize = 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `fresh`: the writer knows the key is absent below the overlay, so if it is deleted again
    /// before a checkpoint, it never needs to reach sled at all (write absorption).
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        fresh: bool,
    },
    Delete {
        key: Vec<u8>,
    },
}

impl Op {
    fn key(&self) -> &[u8] {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Batch {
    ops: Vec<Op>,
    /// Once the batch is longer than `SCANNED_OPS`: for each key's hash, the position of the
    /// last op whose key has that hash.
    index: Option<KeyIndex>,
}

/// Positions by key hash. Two keys with one hash share an entry, which then names the later
/// op of the two; a lookup that finds another key there scans (see `lookup`), so keys made to
/// collide cost a batch no more than it cost before it had an index. The hash is a fast one
/// (a take of 100 hashes each of its 300 writes and 100 reads), seeded at random.
#[derive(Clone)]
struct KeyIndex {
    hashes: foldhash::fast::RandomState,
    latest: HashMap<u64, usize, BuildHasherDefault<HashedAlready>>,
}

impl KeyIndex {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hashes.hash_one(key)
    }

    /// `at` is the latest op that writes `key` so far.
    fn note(&mut self, key: &[u8], at: usize) {
        let hash = self.hash(key);
        self.latest.insert(hash, at);
    }
}

/// A batch's failure message shows its ops, not this.
impl std::fmt::Debug for KeyIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyIndex({} hashes)", self.latest.len())
    }
}

/// The index's keys are hashes already: used as they are.
#[derive(Default)]
struct HashedAlready(u64);

impl Hasher for HashedAlready {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, _: &[u8]) {
        unreachable!("the index hashes only u64 keys");
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

impl PartialEq for Batch {
    fn eq(&self, other: &Batch) -> bool {
        self.ops == other.ops
    }
}

impl Eq for Batch {}

impl Batch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.push(Op::Put {
            key,
            value,
            fresh: false,
        });
    }

    /// Put a key the caller has just checked to be absent.
    pub fn put_fresh(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.push(Op::Put {
            key,
            value,
            fresh: true,
        });
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.push(Op::Delete { key });
    }

    fn push(&mut self, op: Op) {
        self.ops.push(op);
        let at = self.ops.len() - 1;
        match &mut self.index {
            Some(index) => index.note(self.ops[at].key(), at),
            None if self.ops.len() > SCANNED_OPS => {
                let mut index = KeyIndex {
                    hashes: foldhash::fast::RandomState::default(),
                    // Room for a few times the ops that made the batch index them.
                    latest: HashMap::with_capacity_and_hasher(4 * SCANNED_OPS, Default::default()),
                };
                for (at, op) in self.ops.iter().enumerate() {
                    index.note(op.key(), at);
                }
                self.index = Some(index);
            }
            None => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The keys the batch writes or deletes, in order, a key once per op.
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.ops.iter().map(Op::key)
    }

    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// This batch's own latest write to `key`: `Some(None)` if it deletes it.
    pub fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        let scan = match &self.index {
            None => &self.ops[..],
            Some(index) => self.may_hold(key, index.latest.get(&index.hash(key)).copied()),
        };
        scan.iter().rev().find_map(|op| match op {
            Op::Put { key: k, value, .. } if k == key => Some(Some(value.as_slice())),
            Op::Delete { key: k } if k == key => Some(None),
            _ => None,
        })
    }

    /// The ops that may write `key`, given the position of the last op whose key has the
    /// same hash (`None`: there is none).
    fn may_hold(&self, key: &[u8], same_hash: Option<usize>) -> &[Op] {
        match same_hash {
            // No op's key has this hash, so no op has this key.
            None => &[],
            Some(at) if self.ops[at].key() == key => &self.ops[at..=at],
            // Another key with the same hash was written later: this key's ops are earlier.
            Some(at) => &self.ops[..at],
        }
    }

    pub fn encoded_len(&self) -> usize {
        5 + self
            .ops
            .iter()
            .map(|op| match op {
                Op::Put { key, value, .. } => 9 + key.len() + value.len(),
                Op::Delete { key } => 5 + key.len(),
            })
            .sum::<usize>()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.encoded_len());
        w.u8(V1)
            .u32(u32::try_from(self.ops.len()).expect("batches are far below 4G ops"));
        for op in &self.ops {
            match op {
                Op::Put { key, value, fresh } => {
                    w.u8(if *fresh { 2 } else { 1 }).bytes(key).bytes(value);
                }
                Op::Delete { key } => {
                    w.u8(3).bytes(key);
                }
            }
        }
        w.finish()
    }

    pub fn decode(buf: &[u8]) -> Result<Batch, Malformed> {
        let mut r = Reader::new(buf, "log record");
        r.expect_version(V1)?;
        let n = r.u32()? as usize;
        let mut ops = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let op = match r.u8()? {
                tag @ (1 | 2) => Op::Put {
                    key: r.bytes()?.to_vec(),
                    value: r.bytes()?.to_vec(),
                    fresh: tag == 2,
                },
                3 => Op::Delete {
                    key: r.bytes()?.to_vec(),
                },
                _ => return Err(r.malformed("unknown op")),
            };
            ops.push(op);
        }
        r.finish()?;
        Ok(Batch { ops, index: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lookup() {
        let mut b = Batch::default();
        b.put(b"a".to_vec(), b"1".to_vec());
        b.put_fresh(b"b".to_vec(), vec![]);
        b.delete(b"a".to_vec());
        let encoded = b.encode();
        assert_eq!(encoded.len(), b.encoded_len());
        assert_eq!(Batch::decode(&encoded), Ok(b.clone()));
        assert_eq!(b.lookup(b"a"), Some(None));
        assert_eq!(b.lookup(b"b"), Some(Some(&[][..])));
        assert_eq!(b.lookup(b"c"), None);
        assert!(Batch::decode(&encoded[..encoded.len() - 1]).is_err());
    }

    #[test]
    fn a_long_batch_finds_each_keys_latest_write() {
        let mut b = Batch::default();
        for i in 0..200u32 {
            b.put(format!("k{i}").into_bytes(), i.to_be_bytes().to_vec());
            if i % 3 == 0 {
                b.delete(format!("k{}", i / 2).into_bytes());
            }
        }
        b.put(b"k7".to_vec(), b"again".to_vec());
        assert!(b.index.is_some(), "a batch this long is indexed");
        let scanned = Batch {
            ops: b.ops.clone(),
            index: None,
        };
        for i in 0..220u32 {
            let key = format!("k{i}").into_bytes();
            assert_eq!(b.lookup(&key), scanned.lookup(&key), "k{i}");
        }
        assert_eq!(b.lookup(b"k7"), Some(Some(&b"again"[..])));
        assert_eq!(b.lookup(b"k0"), Some(None));
        assert_eq!(b.lookup(b"k300"), None);
        assert_eq!(Batch::decode(&b.encode()), Ok(scanned));
    }

    #[test]
    fn a_key_sharing_its_hash_with_a_later_write_is_found_before_it() {
        let mut b = Batch::default();
        b.put(b"a".to_vec(), b"1".to_vec());
        b.put(b"a".to_vec(), b"2".to_vec());
        b.put(b"b".to_vec(), b"3".to_vec());
        // As if "a" and "b" had one hash: the index then names the op of "b".
        assert_eq!(b.may_hold(b"a", Some(2)), &b.ops[..2]);
        assert_eq!(b.may_hold(b"b", Some(2)), &b.ops[2..]);
        assert!(b.may_hold(b"c", None).is_empty());
    }
}
