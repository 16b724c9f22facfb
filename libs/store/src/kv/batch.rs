//! A batch of key writes: the unit of atomicity. One state transition of the shard becomes one
//! batch, which is one write-ahead-log record and, at a checkpoint, part of one sled batch.

use crate::codec::Malformed;
use crate::codec::bytes::{Reader, Writer};

const V1: u8 = 1;

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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    ops: Vec<Op>,
}

impl Batch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(Op::Put {
            key,
            value,
            fresh: false,
        });
    }

    /// Put a key the caller has just checked to be absent.
    pub fn put_fresh(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(Op::Put {
            key,
            value,
            fresh: true,
        });
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(Op::Delete { key });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn into_ops(self) -> Vec<Op> {
        self.ops
    }

    /// This batch's own latest write to `key`: `Some(None)` if it deletes it.
    pub fn lookup(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.ops.iter().rev().find_map(|op| match op {
            Op::Put { key: k, value, .. } if k == key => Some(Some(value.as_slice())),
            Op::Delete { key: k } if k == key => Some(None),
            _ => None,
        })
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
        Ok(Batch { ops })
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
}
