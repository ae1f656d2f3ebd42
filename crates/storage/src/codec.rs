//! Binary encoding of the Raft types: little-endian, explicit lengths, no padding, no
//! self-description. Used for the write-ahead log, the snapshot file and the hard-state file,
//! and meant to be reused by the network transport.
//!
//! | type | layout |
//! |---|---|
//! | bytes | `len: u32`, then `len` bytes |
//! | [`HardState`] | `term: u64, vote: u64, commit: u64` (24 bytes) |
//! | [`Entry`] | `index: u64, term: u64, kind: u8` (0 normal, 1 conf change), `data: bytes` |
//! | [`ConfState`] | `n: u32`, `n` voters `u64`, `m: u32`, `m` learners `u64` |
//! | [`SnapshotMeta`] | `index: u64, term: u64, conf: ConfState` |
//! | [`Snapshot`] | `meta: SnapshotMeta, data: bytes` |
//!
//! Decoding never panics and never allocates more than the input could hold: every length is
//! checked against a stated maximum and against the bytes remaining before anything is
//! allocated. Decoding is purely syntactic: it does not check that a `ConfState` is sorted or
//! that an index is non-zero; the Raft core validates what it is given.
//!
//! The `put_*`/`get_*` functions work on a [`Writer`]/[`Reader`] so that values can be embedded
//! in larger messages; `encode_*`/`decode_*` handle one value in a buffer of its own, and
//! `decode_*` refuses trailing bytes.

use std::fmt;
use waverunner_raft::{
    Bytes, ConfState, Entry, EntryKind, HardState, NodeId, Snapshot, SnapshotMeta,
};

/// Largest `data` of an [`Entry`] that [`get_entry`] accepts: a value of Redis's 512 MiB
/// limit plus 1 MiB for its key, the command and the envelope.
pub const MAX_ENTRY_DATA: usize = (512 << 20) + (1 << 20);
/// Largest `data` of a [`Snapshot`] that [`get_snapshot`] accepts: 4 GiB less 1 MiB (lengths
/// are `u32`, and the record that holds it needs room for the metadata). Snapshots are
/// streamed to a file and mapped, never whole in memory; at 1 GiB a replica could not
/// snapshot about 8 million keys of 100-byte values (this bound is about 30 million).
pub const MAX_SNAPSHOT_DATA: usize = (4 << 30) - (1 << 20);
/// Largest number of voters, and of learners, that [`get_conf_state`] accepts.
pub const MAX_MEMBERS: usize = 4096;
/// Encoded size of a [`HardState`].
pub const HARD_STATE_LEN: usize = 24;
/// Encoded size of an [`Entry`] without its data.
pub const ENTRY_OVERHEAD: usize = 8 + 8 + 1 + 4;

/// Why a buffer could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// The input ended early: `wanted` more bytes were needed, `remaining` were left.
    Truncated {
        /// Bytes the next field needs.
        wanted: usize,
        /// Bytes left in the input.
        remaining: usize,
    },
    /// A length or count is larger than its maximum.
    TooLong {
        /// The field.
        what: &'static str,
        /// The length found.
        len: u64,
        /// The largest accepted.
        max: u64,
    },
    /// A field holds a value outside its domain (an unknown enum tag).
    Invalid {
        /// The field.
        what: &'static str,
        /// The value found.
        value: u64,
    },
    /// The value ended before the input did.
    Trailing {
        /// Unread bytes.
        extra: usize,
    },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Truncated { wanted, remaining } => {
                write!(f, "truncated: needed {wanted} more bytes, {remaining} left")
            }
            CodecError::TooLong { what, len, max } => {
                write!(f, "{what} of {len} exceeds the maximum of {max}")
            }
            CodecError::Invalid { what, value } => write!(f, "invalid {what}: {value}"),
            CodecError::Trailing { extra } => write!(f, "{extra} unexpected trailing bytes"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Appends little-endian fields to a byte buffer.
#[derive(Clone, Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// An empty writer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    /// A writer that appends to `buf` (its content is kept).
    pub fn from_vec(buf: Vec<u8>) -> Writer {
        Writer { buf }
    }

    /// Appends one byte.
    pub fn put_u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends a `u32`, little-endian.
    pub fn put_u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends a `u64`, little-endian.
    pub fn put_u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends `b` as a `u32` length then the bytes.
    ///
    /// # Panics
    /// If `b` is 4 GiB or longer (no value we encode may be; callers bound sizes first).
    pub fn put_bytes(&mut self, b: &[u8]) {
        let len = u32::try_from(b.len()).expect("byte string longer than u32::MAX");
        self.put_u32(len);
        self.buf.extend_from_slice(b);
    }

    /// Appends what `write` writes, as [`Writer::put_bytes`] lays it out, without building
    /// it elsewhere first (a snapshot of gigabytes is written once).
    ///
    /// # Panics
    /// If `write` wrote 4 GiB or more.
    pub fn put_bytes_from(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let at = self.buf.len();
        self.put_u32(0);
        write(&mut self.buf);
        let len = self.buf.len() - at - 4;
        let len = u32::try_from(len).expect("byte string longer than u32::MAX");
        self.buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }

    /// Appends raw bytes without a length.
    pub fn put_raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Bytes written so far (including any the buffer held initially).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The buffer.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads little-endian fields from a byte slice, checking bounds on every read.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes, without a length prefix.
    pub fn get_raw(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if n > self.remaining() {
            return Err(CodecError::Truncated {
                wanted: n,
                remaining: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Reads one byte.
    pub fn get_u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.get_raw(1)?[0])
    }

    /// Reads a little-endian `u32`.
    pub fn get_u32(&mut self) -> Result<u32, CodecError> {
        let b = self.get_raw(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Reads a little-endian `u64`.
    pub fn get_u64(&mut self) -> Result<u64, CodecError> {
        let b = self.get_raw(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// Reads a `u32` length and that many bytes; fails if the length exceeds `max` or the
    /// bytes remaining (checked before the caller allocates anything).
    pub fn get_bytes(&mut self, max: usize) -> Result<&'a [u8], CodecError> {
        let len = self.get_u32()? as usize;
        if len > max {
            return Err(CodecError::TooLong {
                what: "byte string",
                len: len as u64,
                max: max as u64,
            });
        }
        self.get_raw(len)
    }

    /// Succeeds if every byte was read.
    pub fn finish(self) -> Result<(), CodecError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(CodecError::Trailing { extra }),
        }
    }
}

// ------------------------------------------------------------------------------ hard state

/// Appends a [`HardState`] ([`HARD_STATE_LEN`] bytes).
pub fn put_hard_state(w: &mut Writer, hs: &HardState) {
    w.put_u64(hs.term);
    w.put_u64(hs.vote);
    w.put_u64(hs.commit);
}

/// Reads a [`HardState`].
pub fn get_hard_state(r: &mut Reader<'_>) -> Result<HardState, CodecError> {
    Ok(HardState {
        term: r.get_u64()?,
        vote: r.get_u64()?,
        commit: r.get_u64()?,
    })
}

/// Encodes a [`HardState`] into a buffer of its own.
pub fn encode_hard_state(hs: &HardState) -> Vec<u8> {
    let mut w = Writer::with_capacity(HARD_STATE_LEN);
    put_hard_state(&mut w, hs);
    w.into_inner()
}

/// Decodes [`encode_hard_state`]'s output exactly.
pub fn decode_hard_state(buf: &[u8]) -> Result<HardState, CodecError> {
    let mut r = Reader::new(buf);
    let hs = get_hard_state(&mut r)?;
    r.finish()?;
    Ok(hs)
}

// ------------------------------------------------------------------------------ entries

/// Encoded size of `e`.
pub fn encoded_entry_len(e: &Entry) -> usize {
    ENTRY_OVERHEAD + e.data.len()
}

/// Appends an [`Entry`].
///
/// # Panics
/// If `e.data` is 4 GiB or longer. Data longer than [`MAX_ENTRY_DATA`] encodes but does not
/// decode: bound it before encoding.
pub fn put_entry(w: &mut Writer, e: &Entry) {
    w.put_u64(e.index);
    w.put_u64(e.term);
    w.put_u8(match e.kind {
        EntryKind::Normal => 0,
        EntryKind::ConfChange => 1,
    });
    w.put_bytes(&e.data);
}

/// Reads an [`Entry`] whose data is at most [`MAX_ENTRY_DATA`] bytes.
pub fn get_entry(r: &mut Reader<'_>) -> Result<Entry, CodecError> {
    get_entry_with(r, Bytes::copy_from_slice)
}

/// Reads an [`Entry`] like [`get_entry`], its data made by `data` from the bytes in the input
/// (a slice of a shared buffer the input lives in, to decode a large value without a copy).
pub fn get_entry_with(
    r: &mut Reader<'_>,
    data: impl FnOnce(&[u8]) -> Bytes,
) -> Result<Entry, CodecError> {
    let index = r.get_u64()?;
    let term = r.get_u64()?;
    let kind = match r.get_u8()? {
        0 => EntryKind::Normal,
        1 => EntryKind::ConfChange,
        k => {
            return Err(CodecError::Invalid {
                what: "entry kind",
                value: k as u64,
            })
        }
    };
    let data = data(r.get_bytes(MAX_ENTRY_DATA)?);
    Ok(Entry {
        term,
        index,
        kind,
        data,
    })
}

/// Encodes an [`Entry`] into a buffer of its own (see [`put_entry`]).
pub fn encode_entry(e: &Entry) -> Vec<u8> {
    let mut w = Writer::with_capacity(encoded_entry_len(e));
    put_entry(&mut w, e);
    w.into_inner()
}

/// Decodes [`encode_entry`]'s output exactly.
pub fn decode_entry(buf: &[u8]) -> Result<Entry, CodecError> {
    let mut r = Reader::new(buf);
    let e = get_entry(&mut r)?;
    r.finish()?;
    Ok(e)
}

// ------------------------------------------------------------------------------ membership

fn put_ids(w: &mut Writer, ids: &[NodeId]) {
    let n = u32::try_from(ids.len()).expect("member list longer than u32::MAX");
    w.put_u32(n);
    for id in ids {
        w.put_u64(*id);
    }
}

fn get_ids(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<NodeId>, CodecError> {
    let n = r.get_u32()? as usize;
    if n > MAX_MEMBERS {
        return Err(CodecError::TooLong {
            what,
            len: n as u64,
            max: MAX_MEMBERS as u64,
        });
    }
    if n * 8 > r.remaining() {
        return Err(CodecError::Truncated {
            wanted: n * 8,
            remaining: r.remaining(),
        });
    }
    (0..n).map(|_| r.get_u64()).collect()
}

/// Appends a [`ConfState`].
pub fn put_conf_state(w: &mut Writer, c: &ConfState) {
    put_ids(w, &c.voters);
    put_ids(w, &c.learners);
}

/// Reads a [`ConfState`] with at most [`MAX_MEMBERS`] voters and learners each. The lists are
/// returned as found (not checked for order or duplicates).
pub fn get_conf_state(r: &mut Reader<'_>) -> Result<ConfState, CodecError> {
    Ok(ConfState {
        voters: get_ids(r, "voter count")?,
        learners: get_ids(r, "learner count")?,
    })
}

// ------------------------------------------------------------------------------ snapshots

/// Appends a [`SnapshotMeta`].
pub fn put_snapshot_meta(w: &mut Writer, m: &SnapshotMeta) {
    w.put_u64(m.index);
    w.put_u64(m.term);
    put_conf_state(w, &m.conf);
}

/// Reads a [`SnapshotMeta`].
pub fn get_snapshot_meta(r: &mut Reader<'_>) -> Result<SnapshotMeta, CodecError> {
    Ok(SnapshotMeta {
        index: r.get_u64()?,
        term: r.get_u64()?,
        conf: get_conf_state(r)?,
    })
}

/// Appends a [`Snapshot`].
///
/// # Panics
/// If `s.data` is 4 GiB or longer; data longer than [`MAX_SNAPSHOT_DATA`] does not decode.
pub fn put_snapshot(w: &mut Writer, s: &Snapshot) {
    put_snapshot_meta(w, &s.meta);
    w.put_bytes(&s.data);
}

/// Reads a [`Snapshot`] whose data is at most [`MAX_SNAPSHOT_DATA`] bytes.
pub fn get_snapshot(r: &mut Reader<'_>) -> Result<Snapshot, CodecError> {
    let meta = get_snapshot_meta(r)?;
    let data = r.get_bytes(MAX_SNAPSHOT_DATA)?.to_vec();
    Ok(Snapshot {
        meta,
        data: data.into(),
    })
}

/// Encodes a [`Snapshot`] into a buffer of its own (see [`put_snapshot`]).
pub fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    let members = s.meta.conf.voters.len() + s.meta.conf.learners.len();
    let mut w = Writer::with_capacity(8 + 8 + 8 + 8 * members + 4 + s.data.len());
    put_snapshot(&mut w, s);
    w.into_inner()
}

/// Decodes [`encode_snapshot`]'s output exactly.
pub fn decode_snapshot(buf: &[u8]) -> Result<Snapshot, CodecError> {
    let mut r = Reader::new(buf);
    let s = get_snapshot(&mut r)?;
    r.finish()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny xorshift64* PRNG: deterministic garbage without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.0 = x;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    #[test]
    fn bytes_written_in_place_are_laid_out_as_put_bytes() {
        for data in [&b""[..], b"x", &[7u8; 300]] {
            let (mut a, mut b) = (Writer::new(), Writer::new());
            a.put_u8(1);
            b.put_u8(1);
            a.put_bytes(data);
            b.put_bytes_from(|out| out.extend_from_slice(data));
            assert_eq!(a.into_inner(), b.into_inner());
        }
    }

    fn entry(index: u64, term: u64, kind: EntryKind, data: &[u8]) -> Entry {
        Entry {
            term,
            index,
            kind,
            data: data.to_vec().into(),
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            meta: SnapshotMeta {
                index: 42,
                term: 7,
                conf: ConfState {
                    voters: vec![1, 2, 3],
                    learners: vec![9],
                },
            },
            data: b"state machine bytes".to_vec().into(),
        }
    }

    #[test]
    fn round_trips() {
        let hs = HardState {
            term: 5,
            vote: 3,
            commit: u64::MAX,
        };
        assert_eq!(encode_hard_state(&hs).len(), HARD_STATE_LEN);
        assert_eq!(decode_hard_state(&encode_hard_state(&hs)), Ok(hs));

        for e in [
            entry(1, 1, EntryKind::Normal, b""),
            entry(u64::MAX, 9, EntryKind::Normal, &[0xAB; 1000]),
            entry(7, 2, EntryKind::ConfChange, &[2, 4, 0, 0, 0, 0, 0, 0, 0]),
        ] {
            let buf = encode_entry(&e);
            assert_eq!(buf.len(), encoded_entry_len(&e));
            assert_eq!(decode_entry(&buf), Ok(e));
        }

        let s = snapshot();
        assert_eq!(decode_snapshot(&encode_snapshot(&s)), Ok(s));
        let empty = Snapshot::default();
        assert_eq!(decode_snapshot(&encode_snapshot(&empty)), Ok(empty));
    }

    #[test]
    fn exact_layout() {
        let e = entry(0x0102, 0x03, EntryKind::ConfChange, b"xy");
        let want: Vec<u8> = [
            &0x0102u64.to_le_bytes()[..],
            &3u64.to_le_bytes(),
            &[1],
            &2u32.to_le_bytes(),
            b"xy",
        ]
        .concat();
        assert_eq!(encode_entry(&e), want);
    }

    #[test]
    fn embedded_values_share_a_buffer() {
        let mut w = Writer::new();
        let a = entry(1, 1, EntryKind::Normal, b"a");
        let b = entry(2, 1, EntryKind::Normal, b"bb");
        put_entry(&mut w, &a);
        put_snapshot(&mut w, &snapshot());
        put_entry(&mut w, &b);
        let buf = w.into_inner();
        let mut r = Reader::new(&buf);
        assert_eq!(get_entry(&mut r), Ok(a));
        assert_eq!(get_snapshot(&mut r), Ok(snapshot()));
        assert_eq!(get_entry(&mut r), Ok(b));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let e = encode_entry(&entry(3, 4, EntryKind::Normal, b"hello"));
        let s = encode_snapshot(&snapshot());
        let h = encode_hard_state(&HardState::default());
        for n in 0..e.len() {
            assert!(decode_entry(&e[..n]).is_err(), "entry prefix {n}");
        }
        for n in 0..s.len() {
            assert!(decode_snapshot(&s[..n]).is_err(), "snapshot prefix {n}");
        }
        for n in 0..h.len() {
            assert!(decode_hard_state(&h[..n]).is_err(), "hard state prefix {n}");
        }
        let mut longer = e.clone();
        longer.push(0);
        assert_eq!(
            decode_entry(&longer),
            Err(CodecError::Trailing { extra: 1 })
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let mut e = encode_entry(&entry(3, 4, EntryKind::Normal, b""));
        e[16] = 7;
        assert_eq!(
            decode_entry(&e),
            Err(CodecError::Invalid {
                what: "entry kind",
                value: 7
            })
        );
        // A huge length must be refused before anything is allocated.
        let mut w = Writer::new();
        w.put_u64(1);
        w.put_u64(1);
        w.put_u8(0);
        w.put_u32(u32::MAX);
        assert!(matches!(
            decode_entry(w.as_slice()),
            Err(CodecError::TooLong { .. })
        ));
        let mut w = Writer::new();
        w.put_u64(1);
        w.put_u64(1);
        w.put_u32(u32::MAX); // voter count
        assert!(matches!(
            decode_snapshot(w.as_slice()),
            Err(CodecError::TooLong { .. })
        ));
        let mut w = Writer::new();
        w.put_u64(1);
        w.put_u64(1);
        w.put_u32(MAX_MEMBERS as u32); // plausible count, but the bytes are not there
        assert!(matches!(
            decode_snapshot(w.as_slice()),
            Err(CodecError::Truncated { .. })
        ));
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let valid = [
            encode_entry(&entry(5, 6, EntryKind::Normal, b"payload")),
            encode_snapshot(&snapshot()),
            encode_hard_state(&HardState {
                term: 1,
                vote: 2,
                commit: 3,
            }),
        ];
        let mut decoded = 0;
        for i in 0..5000 {
            let input = if i % 2 == 0 {
                let n = rng.below(200) as usize;
                rng.bytes(n)
            } else {
                // Mutate a valid encoding: flip bytes, cut or extend it.
                let mut v = valid[rng.below(3) as usize].clone();
                for _ in 0..=rng.below(4) {
                    let at = rng.below(v.len() as u64) as usize;
                    v[at] ^= 1 << rng.below(8);
                }
                match rng.below(3) {
                    0 => v.truncate(rng.below(v.len() as u64 + 1) as usize),
                    1 => {
                        let n = rng.below(8) as usize;
                        v.extend(rng.bytes(n))
                    }
                    _ => {}
                }
                v
            };
            decoded += decode_entry(&input).is_ok() as u32;
            decoded += decode_snapshot(&input).is_ok() as u32;
            decoded += decode_hard_state(&input).is_ok() as u32;
            let mut r = Reader::new(&input);
            while get_entry(&mut r).is_ok() {}
        }
        // Some mutated inputs still decode (a flipped data byte); most must not.
        assert!(decoded > 0 && decoded < 5000, "decoded {decoded}");
    }
}
