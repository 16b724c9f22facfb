//! Record frame layout: `len: u32 LE | crc32c: u32 LE | lsn: u64 LE | payload[len]`.
//!
//! The checksum covers the lsn bytes and the payload, so a frame copied to the wrong place or a
//! payload cut short is caught. `len` itself is not covered: the scanner in `scan` therefore
//! never trusts a frame that claims to run past the end of the file without further checks.

use crc32c::{crc32c, crc32c_append};

use super::Lsn;

/// Bytes before the payload: len, crc and lsn.
pub(crate) const FRAME_HEADER_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) payload_len: u32,
    pub(crate) crc: u32,
    pub(crate) lsn: Lsn,
}

impl FrameHeader {
    pub(crate) fn decode(bytes: &[u8; FRAME_HEADER_LEN]) -> FrameHeader {
        let [l0, l1, l2, l3, c0, c1, c2, c3, rest @ ..] = *bytes;
        FrameHeader {
            payload_len: u32::from_le_bytes([l0, l1, l2, l3]),
            crc: u32::from_le_bytes([c0, c1, c2, c3]),
            lsn: u64::from_le_bytes(rest),
        }
    }

    /// Header plus payload, in bytes.
    pub(crate) fn frame_len(&self) -> u64 {
        FRAME_HEADER_LEN as u64 + u64::from(self.payload_len)
    }

    pub(crate) fn checksum_matches(&self, payload: &[u8]) -> bool {
        debug_assert_eq!(payload.len() as u64, u64::from(self.payload_len));
        checksum(self.lsn, payload) == self.crc
    }
}

pub(crate) fn checksum(lsn: Lsn, payload: &[u8]) -> u32 {
    crc32c_append(crc32c(&lsn.to_le_bytes()), payload)
}

/// Appends one frame to `buf`. The caller has checked that the payload fits in a `u32`.
pub(crate) fn encode_into(buf: &mut Vec<u8>, lsn: Lsn, payload: &[u8], payload_len: u32) {
    debug_assert_eq!(payload.len() as u64, u64::from(payload_len));
    buf.reserve(FRAME_HEADER_LEN + payload.len());
    buf.extend_from_slice(&payload_len.to_le_bytes());
    buf.extend_from_slice(&checksum(lsn, payload).to_le_bytes());
    buf.extend_from_slice(&lsn.to_le_bytes());
    buf.extend_from_slice(payload);
}

/// Finds the first position in `bytes` where a complete, checksum-valid frame for `lsn` starts.
/// Only used on the recovery path, to tell a torn tail from damage with good records after it.
pub(crate) fn find_valid_frame(bytes: &[u8], lsn: Lsn) -> Option<usize> {
    let wanted = lsn.to_le_bytes();
    let last_start = bytes.len().checked_sub(FRAME_HEADER_LEN)?;
    (0..=last_start).find(|&start| {
        let Some(header_bytes) = bytes
            .get(start..start + FRAME_HEADER_LEN)
            .and_then(|slice| <&[u8; FRAME_HEADER_LEN]>::try_from(slice).ok())
        else {
            return false;
        };
        if header_bytes[8..] != wanted {
            return false;
        }
        let header = FrameHeader::decode(header_bytes);
        let payload_start = start + FRAME_HEADER_LEN;
        let Some(payload_end) = payload_start.checked_add(header.payload_len as usize) else {
            return false;
        };
        bytes
            .get(payload_start..payload_end)
            .is_some_and(|payload| header.checksum_matches(payload))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(lsn: Lsn, payload: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        let len = u32::try_from(payload.len()).expect("test payloads are small");
        encode_into(&mut buf, lsn, payload, len);
        buf
    }

    #[test]
    fn encode_then_decode_header() {
        let bytes = frame(7, b"hello");
        assert_eq!(bytes.len(), FRAME_HEADER_LEN + 5);
        let header_bytes: &[u8; FRAME_HEADER_LEN] =
            bytes[..FRAME_HEADER_LEN].try_into().expect("16 bytes");
        let header = FrameHeader::decode(header_bytes);
        assert_eq!(header.payload_len, 5);
        assert_eq!(header.lsn, 7);
        assert_eq!(header.frame_len(), 21);
        assert!(header.checksum_matches(b"hello"));
        assert!(!header.checksum_matches(b"hellp"));
    }

    #[test]
    fn checksum_covers_the_lsn() {
        assert_ne!(checksum(1, b"x"), checksum(2, b"x"));
        assert_ne!(
            checksum(0, &[]),
            0,
            "an all-zero header must not look valid"
        );
    }

    #[test]
    fn find_valid_frame_skips_lookalikes() {
        let mut bytes = vec![0xAA; 3];
        // A header with the right lsn but a wrong checksum comes first.
        let mut fake = frame(9, b"abc");
        fake[4] ^= 1;
        bytes.extend_from_slice(&fake);
        let real_at = bytes.len();
        bytes.extend_from_slice(&frame(9, b"abc"));
        assert_eq!(find_valid_frame(&bytes, 9), Some(real_at));
        assert_eq!(find_valid_frame(&bytes, 10), None);
        assert_eq!(find_valid_frame(&bytes[..bytes.len() - 1], 9), None);
    }
}
