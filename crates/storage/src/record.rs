//! Record framing, shared by every file the crate writes.
//!
//! ```text
//! offset  0  u32  header_crc  CRC-32C of bytes 4..16
//! offset  4  u32  len         payload length
//! offset  8  u32  body_crc    CRC-32C of the payload
//! offset 12  u8   type        RecordType
//! offset 13  [u8; 3]          zero
//! offset 16  payload
//! ```
//!
//! The header has a checksum of its own so that a damaged length is never trusted, and so that
//! recovery can cheaply test every byte offset after a bad record for a valid one (which tells a
//! torn tail from damage in the middle of a file) without hashing megabytes at each offset.

use crate::crc::crc32c;

/// Size of the frame header.
pub(crate) const HEADER_LEN: usize = 16;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum RecordType {
    /// First record of a WAL segment: magic, version, first index.
    SegmentHeader = 1,
    /// One log entry (`codec::put_entry`).
    Entry = 2,
    /// The whole snapshot file's content (`codec::put_snapshot`).
    Snapshot = 3,
    /// One copy of the hard state (see `hardstate.rs`).
    HardState = 4,
}

/// Starts a record at the end of `buf`: reserves the header, returns where it starts. Write
/// the payload into `buf`, then call [`finish`].
pub(crate) fn begin(buf: &mut Vec<u8>) -> usize {
    let start = buf.len();
    buf.resize(start + HEADER_LEN, 0);
    start
}

/// Completes the record started at `start`: everything after its header is the payload.
pub(crate) fn finish(buf: &mut [u8], start: usize, ty: RecordType) {
    let len = buf.len() - start - HEADER_LEN;
    let len = u32::try_from(len).expect("record payload longer than u32::MAX");
    let body_crc = crc32c(&buf[start + HEADER_LEN..]);
    buf[start..start + HEADER_LEN].copy_from_slice(&header(len, body_crc, ty));
}

/// The header of a record whose payload is `len` bytes with checksum `body_crc` (for a
/// payload streamed to a file, whose header is written last).
pub(crate) fn header(len: u32, body_crc: u32, ty: RecordType) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[4..8].copy_from_slice(&len.to_le_bytes());
    h[8..12].copy_from_slice(&body_crc.to_le_bytes());
    h[12] = ty as u8;
    let header_crc = crc32c(&h[4..16]);
    h[0..4].copy_from_slice(&header_crc.to_le_bytes());
    h
}

/// A record found in a buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame<'a> {
    /// The type byte (not yet checked against [`RecordType`]).
    pub ty: u8,
    /// The payload, its checksum verified.
    pub payload: &'a [u8],
    /// Offset just past the record.
    pub end: usize,
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Parses the record at `off`. `Err` says why the bytes there are not a complete, intact record
/// with a payload of at most `max_payload` bytes.
pub(crate) fn parse(
    data: &[u8],
    off: usize,
    max_payload: usize,
) -> Result<Frame<'_>, &'static str> {
    let rest = data.get(off..).unwrap_or(&[]);
    if rest.len() < HEADER_LEN {
        return Err("incomplete record header");
    }
    let h = &rest[..HEADER_LEN];
    if crc32c(&h[4..16]) != le32(&h[0..4]) {
        return Err("record header checksum mismatch");
    }
    let len = le32(&h[4..8]) as usize;
    if len > max_payload {
        return Err("record length exceeds the limit");
    }
    if len > rest.len() - HEADER_LEN {
        return Err("record extends past the end of the file");
    }
    let payload = &rest[HEADER_LEN..HEADER_LEN + len];
    if crc32c(payload) != le32(&h[8..12]) {
        return Err("record payload checksum mismatch");
    }
    Ok(Frame {
        ty: h[12],
        payload,
        end: off + HEADER_LEN + len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &[u8], ty: RecordType) -> Vec<u8> {
        let mut buf = Vec::new();
        let start = begin(&mut buf);
        buf.extend_from_slice(payload);
        finish(&mut buf, start, ty);
        buf
    }

    #[test]
    fn round_trip_and_every_bit_flip_is_caught() {
        let buf = record(b"some payload", RecordType::Entry);
        let f = parse(&buf, 0, 100).unwrap();
        assert_eq!(
            (f.ty, f.payload, f.end),
            (2, &b"some payload"[..], buf.len())
        );
        for i in 0..buf.len() * 8 {
            let mut bad = buf.clone();
            bad[i / 8] ^= 1 << (i % 8);
            // Bytes 13..16 are reserved zeros covered by the header checksum too.
            assert!(parse(&bad, 0, 100).is_err(), "bit {i}");
        }
        for n in 0..buf.len() {
            assert!(parse(&buf[..n], 0, 100).is_err());
        }
        assert_eq!(parse(&buf, 0, 5), Err("record length exceeds the limit"));
    }

    #[test]
    fn zeros_are_never_a_record() {
        // A file extended by the file system but never written reads as zeros: that must look
        // like a torn tail, not like data.
        assert!(parse(&[0u8; 64], 0, 100).is_err());
        assert!(parse(&[0xFFu8; 64], 0, 100).is_err());
    }
}
