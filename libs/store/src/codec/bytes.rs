//! Primitive encoders for keys and values: big-endian fixed-width numbers (byte order = sort
//! order), and for values only varints and signed differences (few bytes for small numbers);
//! byte strings prefixed with their length. Every read is bounds-checked: a short or
//! malformed buffer is a `Malformed` error naming what was being read, never a panic.

use std::fmt;

/// Why a stored key or value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub struct Writer {
    buf: Vec<u8>,
}

/// Room for most keys without growing: growth was a tenth of the writer thread's time.
impl Default for Writer {
    fn default() -> Self {
        Writer::with_capacity(64)
    }
}

impl Writer {
    pub fn with_capacity(capacity: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(capacity),
        }
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A byte string prefixed with its u32 length.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        let len = u32::try_from(v.len()).expect("values are bounded far below 4 GiB");
        self.u32(len);
        self.buf.extend_from_slice(v);
        self
    }

    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    /// A number in 7-bit groups, low first (LEB128): one byte below 128. For values only,
    /// never keys, whose order it would not keep.
    pub fn varint(&mut self, mut v: u64) -> &mut Self {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }

    /// The difference `v - base`, signed, as a varint: near numbers in few bytes. Wrapping,
    /// so that any two numbers round-trip.
    pub fn delta(&mut self, v: u64, base: u64) -> &mut Self {
        let d = v.wrapping_sub(base) as i64;
        self.varint(((d << 1) ^ (d >> 63)) as u64)
    }

    /// A byte string prefixed with its varint length.
    pub fn short_bytes(&mut self, v: &[u8]) -> &mut Self {
        self.varint(v.len() as u64);
        self.buf.extend_from_slice(v);
        self
    }

    pub fn short_str(&mut self, v: &str) -> &mut Self {
        self.short_bytes(v.as_bytes())
    }

    /// Bytes with no length prefix: only as the last component of a key.
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// `what` names the record being decoded, for the error message.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.buf.len() < n {
            return Err(Malformed(format!(
                "{}: needed {n} more bytes, {} left",
                self.what,
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, Malformed> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64, Malformed> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub fn string(&mut self) -> Result<String, Malformed> {
        let b = self.bytes()?;
        self.utf8(b)
    }

    pub fn varint(&mut self) -> Result<u64, Malformed> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                break;
            }
            v |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.malformed("a number longer than 64 bits"))
    }

    /// What `Writer::delta` wrote against the same `base`.
    pub fn delta(&mut self, base: u64) -> Result<u64, Malformed> {
        let z = self.varint()?;
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        Ok(base.wrapping_add(d as u64))
    }

    pub fn short_bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = usize::try_from(self.varint()?).map_err(|_| self.malformed("length"))?;
        self.take(len)
    }

    pub fn short_string(&mut self) -> Result<String, Malformed> {
        let b = self.short_bytes()?;
        self.utf8(b)
    }

    fn utf8(&self, b: &[u8]) -> Result<String, Malformed> {
        String::from_utf8(b.to_vec())
            .map_err(|_| Malformed(format!("{}: invalid utf-8", self.what)))
    }

    /// Everything left (the last component of a key).
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    pub fn expect_version(&mut self, version: u8) -> Result<(), Malformed> {
        self.version_in(version..=version).map(drop)
    }

    /// The record's format version, if this build reads it.
    pub fn version_in(&mut self, readable: std::ops::RangeInclusive<u8>) -> Result<u8, Malformed> {
        let found = self.u8()?;
        if !readable.contains(&found) {
            return Err(Malformed(format!(
                "{}: format version {found}, this build reads {} to {}",
                self.what,
                readable.start(),
                readable.end()
            )));
        }
        Ok(found)
    }

    pub fn malformed(&self, reason: &str) -> Malformed {
        Malformed(format!("{}: {reason}", self.what))
    }

    pub fn finish(self) -> Result<(), Malformed> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Malformed(format!(
                "{}: {} trailing bytes",
                self.what,
                self.buf.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_short_buffer() {
        let buf = Writer::default()
            .u8(1)
            .u32(7)
            .u64(u64::MAX - 1)
            .str("héllo")
            .raw(b"tail")
            .finish();
        let mut r = Reader::new(&buf, "test");
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.string().as_deref(), Ok("héllo"));
        assert_eq!(r.rest(), b"tail");
        assert!(r.finish().is_ok());
        let mut short = Reader::new(&buf[..3], "test");
        assert!(short.u32().is_err());
    }

    #[test]
    fn varints_round_trip_in_few_bytes() {
        let numbers = [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        for n in numbers {
            let buf = Writer::default().varint(n).finish();
            assert_eq!(Reader::new(&buf, "test").varint(), Ok(n), "{n}");
        }
        assert_eq!(Writer::default().varint(127).finish().len(), 1);
        assert_eq!(Writer::default().varint(u64::MAX).finish().len(), 10);
        for (v, base) in [(5, 10), (10, 5), (0, u64::MAX), (u64::MAX, 0), (7, 7)] {
            let buf = Writer::default().delta(v, base).short_str("é").finish();
            let mut r = Reader::new(&buf, "test");
            assert_eq!(r.delta(base), Ok(v), "{v} against {base}");
            assert_eq!(r.short_string().as_deref(), Ok("é"));
            assert!(r.finish().is_ok());
        }
        assert_eq!(Writer::default().delta(9, 10).finish(), [1]);
        let too_long = [0xff; 10];
        assert!(Reader::new(&too_long, "test").varint().is_err());
        assert!(Reader::new(&[0x80], "test").varint().is_err());
    }

    #[test]
    fn big_endian_sorts_numerically() {
        let a = Writer::default().u64(255).finish();
        let b = Writer::default().u64(256).finish();
        assert!(a < b);
    }
}
