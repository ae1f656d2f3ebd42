//! The control-plane wire format between replicas: checksummed, versioned, length-prefixed
//! frames over TCP, and the binary encoding of Raft messages inside them.
//!
//! Frame: `magic u32 | version u8 | kind u8 | reserved u16 | len u32 | crc32 u32 | payload`,
//! little-endian; the CRC-32 covers the payload. A frame whose payload would exceed
//! [`MAX_FRAME`] (an InstallSnapshot) is sent as a stream of [`Frame::Chunk`]s and reassembled.

use waverunner_raft::{
    CampaignKind, ConfState, Entry, EntryKind, Message, MessageBody, Snapshot, SnapshotMeta,
};

/// `WRTP` little-endian.
pub const MAGIC: u32 = 0x5054_5257;
/// Version of this format.
pub const VERSION: u8 = 1;
/// Bytes of the frame header.
pub const HEADER_LEN: usize = 16;
/// Largest payload of one frame.
pub const MAX_FRAME: usize = 1 << 20;
/// Payload bytes per chunk of a large message.
pub const CHUNK: usize = 256 << 10;
/// Largest message reassembled from chunks (a snapshot).
pub const MAX_REASSEMBLED: usize = 1 << 30;

const K_HELLO: u8 = 1;
const K_RAFT: u8 = 2;
const K_FORWARD: u8 = 3;
const K_FORWARD_NACK: u8 = 4;
const K_CHUNK: u8 = 5;

/// One frame between replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// First frame on a connection: who is speaking.
    Hello {
        /// The sender's node id.
        node: u64,
    },
    /// A Raft message.
    Raft(Message),
    /// A client command a follower forwards to the leader. The leader proposes it with the
    /// origin in the entry; the origin answers its client when it applies the entry.
    Forward {
        /// The forwarding replica's request id.
        req: u64,
        /// Client session id (0: no session).
        client: u64,
        /// Client sequence number in its session.
        seq: u64,
        /// The state-machine command.
        command: Vec<u8>,
    },
    /// The receiver of a [`Frame::Forward`] is not the leader (`leader`: who it thinks is).
    ForwardNack {
        /// The forwarded request id.
        req: u64,
        /// The leader as the receiver knows it (0: unknown).
        leader: u64,
    },
    /// A piece of an encoded frame too large for one frame.
    Chunk {
        /// Total length of the encoded frame payload being streamed.
        total: u32,
        /// Offset of these bytes in it.
        offset: u32,
        /// Kind of the frame being streamed.
        kind: u8,
        /// The bytes.
        bytes: Vec<u8>,
    },
}

/// Why bytes could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireError(pub &'static str);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed frame: {}", self.0)
    }
}

impl std::error::Error for WireError {}

// ------------------------------------------------------------------ primitives

/// Appends little-endian primitives to a buffer.
pub struct Writer<'a>(pub &'a mut Vec<u8>);

impl Writer<'_> {
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    /// A u32.
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A u64.
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(u32::try_from(b.len()).expect("field under 4 GiB"));
        self.0.extend_from_slice(b);
    }
    /// A length-prefixed list of u64.
    pub fn ids(&mut self, v: &[u64]) {
        self.u32(v.len() as u32);
        for x in v {
            self.u64(*x);
        }
    }
}

/// Reads little-endian primitives, every length checked against what is left.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError("truncated"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    /// One byte.
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// Length-prefixed bytes.
    pub fn bytes(&mut self) -> Result<Vec<u8>, WireError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    /// A length-prefixed list of u64.
    pub fn ids(&mut self) -> Result<Vec<u64>, WireError> {
        let n = self.u32()? as usize;
        if n > self.0.len() / 8 {
            return Err(WireError("id list longer than the frame"));
        }
        (0..n).map(|_| self.u64()).collect()
    }
    /// A boolean byte (0 or 1).
    pub fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError("bad boolean")),
        }
    }
    /// Fails unless everything was read.
    pub fn end(&self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError("trailing bytes"))
        }
    }
}

// ------------------------------------------------------------------ Raft types

fn put_entry(w: &mut Writer, e: &Entry) {
    w.u64(e.term);
    w.u64(e.index);
    w.u8(match e.kind {
        EntryKind::Normal => 0,
        EntryKind::ConfChange => 1,
    });
    w.bytes(&e.data);
}

fn get_entry(r: &mut Reader) -> Result<Entry, WireError> {
    let term = r.u64()?;
    let index = r.u64()?;
    let kind = match r.u8()? {
        0 => EntryKind::Normal,
        1 => EntryKind::ConfChange,
        _ => return Err(WireError("bad entry kind")),
    };
    Ok(Entry {
        term,
        index,
        kind,
        data: r.bytes()?,
    })
}

fn put_snapshot(w: &mut Writer, s: &Snapshot) {
    w.u64(s.meta.index);
    w.u64(s.meta.term);
    w.ids(&s.meta.conf.voters);
    w.ids(&s.meta.conf.learners);
    w.bytes(&s.data);
}

fn get_snapshot(r: &mut Reader) -> Result<Snapshot, WireError> {
    let index = r.u64()?;
    let term = r.u64()?;
    let voters = r.ids()?;
    let learners = r.ids()?;
    Ok(Snapshot {
        meta: SnapshotMeta {
            index,
            term,
            conf: ConfState { voters, learners },
        },
        data: r.bytes()?,
    })
}

/// Encodes a Raft message.
pub fn encode_message(m: &Message, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u64(m.from);
    w.u64(m.to);
    w.u64(m.term);
    match &m.body {
        MessageBody::PreVote {
            last_index,
            last_term,
        } => {
            w.u8(1);
            w.u64(*last_index);
            w.u64(*last_term);
        }
        MessageBody::PreVoteResponse { reject } => {
            w.u8(2);
            w.u8(*reject as u8);
        }
        MessageBody::Vote {
            last_index,
            last_term,
            kind,
        } => {
            w.u8(3);
            w.u64(*last_index);
            w.u64(*last_term);
            w.u8(match kind {
                CampaignKind::Election => 0,
                CampaignKind::Forced => 1,
                CampaignKind::Accelerate => 2,
            });
        }
        MessageBody::VoteResponse {
            reject,
            accelerated,
        } => {
            w.u8(4);
            w.u8(*reject as u8);
            w.u8(*accelerated as u8);
        }
        MessageBody::Append {
            prev_index,
            prev_term,
            entries,
            commit,
        } => {
            w.u8(5);
            w.u64(*prev_index);
            w.u64(*prev_term);
            w.u64(*commit);
            w.u32(entries.len() as u32);
            for e in entries {
                put_entry(&mut w, e);
            }
        }
        MessageBody::AppendResponse {
            reject,
            index,
            hint_index,
            hint_term,
            recovering,
        } => {
            w.u8(6);
            w.u8(*reject as u8);
            w.u64(*index);
            w.u64(*hint_index);
            w.u64(*hint_term);
            w.u8(*recovering as u8);
        }
        MessageBody::Heartbeat { commit, context } => {
            w.u8(7);
            w.u64(*commit);
            w.bytes(context);
        }
        MessageBody::HeartbeatResponse { context } => {
            w.u8(8);
            w.bytes(context);
        }
        MessageBody::InstallSnapshot { snapshot } => {
            w.u8(9);
            put_snapshot(&mut w, snapshot);
        }
        MessageBody::TimeoutNow => w.u8(10),
        MessageBody::ReadIndex { context } => {
            w.u8(11);
            w.bytes(context);
        }
        MessageBody::ReadIndexResponse { context, index } => {
            w.u8(12);
            w.bytes(context);
            w.u64(*index);
        }
    }
}

/// Decodes a Raft message; never panics on garbage.
pub fn decode_message(b: &[u8]) -> Result<Message, WireError> {
    let mut r = Reader(b);
    let from = r.u64()?;
    let to = r.u64()?;
    let term = r.u64()?;
    let body = match r.u8()? {
        1 => MessageBody::PreVote {
            last_index: r.u64()?,
            last_term: r.u64()?,
        },
        2 => MessageBody::PreVoteResponse { reject: r.bool()? },
        3 => MessageBody::Vote {
            last_index: r.u64()?,
            last_term: r.u64()?,
            kind: match r.u8()? {
                0 => CampaignKind::Election,
                1 => CampaignKind::Forced,
                2 => CampaignKind::Accelerate,
                _ => return Err(WireError("bad campaign kind")),
            },
        },
        4 => MessageBody::VoteResponse {
            reject: r.bool()?,
            accelerated: r.bool()?,
        },
        5 => {
            let prev_index = r.u64()?;
            let prev_term = r.u64()?;
            let commit = r.u64()?;
            let n = r.u32()? as usize;
            // An entry takes at least 21 bytes: bound the allocation by the input.
            if n > r.0.len() / 21 {
                return Err(WireError("entry count longer than the frame"));
            }
            let entries = (0..n)
                .map(|_| get_entry(&mut r))
                .collect::<Result<_, _>>()?;
            MessageBody::Append {
                prev_index,
                prev_term,
                entries,
                commit,
            }
        }
        6 => MessageBody::AppendResponse {
            reject: r.bool()?,
            index: r.u64()?,
            hint_index: r.u64()?,
            hint_term: r.u64()?,
            recovering: r.bool()?,
        },
        7 => MessageBody::Heartbeat {
            commit: r.u64()?,
            context: r.bytes()?,
        },
        8 => MessageBody::HeartbeatResponse {
            context: r.bytes()?,
        },
        9 => MessageBody::InstallSnapshot {
            snapshot: get_snapshot(&mut r)?,
        },
        10 => MessageBody::TimeoutNow,
        11 => MessageBody::ReadIndex {
            context: r.bytes()?,
        },
        12 => MessageBody::ReadIndexResponse {
            context: r.bytes()?,
            index: r.u64()?,
        },
        _ => return Err(WireError("unknown message type")),
    };
    r.end()?;
    Ok(Message {
        from,
        to,
        term,
        body,
    })
}

// ------------------------------------------------------------------ frames

fn payload_of(f: &Frame) -> (u8, Vec<u8>) {
    let mut p = Vec::new();
    let mut w = Writer(&mut p);
    let kind = match f {
        Frame::Hello { node } => {
            w.u64(*node);
            K_HELLO
        }
        Frame::Raft(m) => {
            encode_message(m, &mut p);
            K_RAFT
        }
        Frame::Forward {
            req,
            client,
            seq,
            command,
        } => {
            w.u64(*req);
            w.u64(*client);
            w.u64(*seq);
            w.bytes(command);
            K_FORWARD
        }
        Frame::ForwardNack { req, leader } => {
            w.u64(*req);
            w.u64(*leader);
            K_FORWARD_NACK
        }
        Frame::Chunk {
            total,
            offset,
            kind,
            bytes,
        } => {
            w.u32(*total);
            w.u32(*offset);
            w.u8(*kind);
            w.bytes(bytes);
            K_CHUNK
        }
    };
    (kind, p)
}

fn put_header(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u32(MAGIC);
    w.u8(VERSION);
    w.u8(kind);
    w.0.extend_from_slice(&[0, 0]);
    w.u32(payload.len() as u32);
    w.u32(crc32fast::hash(payload));
    out.extend_from_slice(payload);
}

/// Encodes `f` as one frame, or as several chunk frames when it is larger than [`MAX_FRAME`].
pub fn encode_frames(f: &Frame, out: &mut Vec<u8>) {
    let (kind, payload) = payload_of(f);
    if payload.len() <= MAX_FRAME {
        put_header(kind, &payload, out);
        return;
    }
    assert!(
        payload.len() <= MAX_REASSEMBLED,
        "message over the reassembly bound"
    );
    let total = payload.len() as u32;
    for (i, piece) in payload.chunks(CHUNK).enumerate() {
        let chunk = Frame::Chunk {
            total,
            offset: (i * CHUNK) as u32,
            kind,
            bytes: piece.to_vec(),
        };
        let (k, p) = payload_of(&chunk);
        put_header(k, &p, out);
    }
}

/// The header of a frame: its kind and payload length, checked.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<(u8, usize, u32), WireError> {
    let mut r = Reader(h);
    if r.u32()? != MAGIC {
        return Err(WireError("bad magic (not a Waverunner replica?)"));
    }
    if r.u8()? != VERSION {
        return Err(WireError("unsupported version"));
    }
    let kind = r.u8()?;
    r.take(2)?;
    let len = r.u32()? as usize;
    let crc = r.u32()?;
    if len > MAX_FRAME + 64 {
        return Err(WireError("frame too large"));
    }
    Ok((kind, len, crc))
}

/// Decodes the payload of a frame of `kind` whose checksum was `crc`.
pub fn decode_payload(kind: u8, crc: u32, payload: &[u8]) -> Result<Frame, WireError> {
    if crc32fast::hash(payload) != crc {
        return Err(WireError("checksum mismatch"));
    }
    decode_kind(kind, payload)
}

/// Decodes a (possibly reassembled) payload of `kind`.
pub fn decode_kind(kind: u8, payload: &[u8]) -> Result<Frame, WireError> {
    let mut r = Reader(payload);
    let f = match kind {
        K_HELLO => Frame::Hello { node: r.u64()? },
        K_RAFT => return decode_message(payload).map(Frame::Raft),
        K_FORWARD => Frame::Forward {
            req: r.u64()?,
            client: r.u64()?,
            seq: r.u64()?,
            command: r.bytes()?,
        },
        K_FORWARD_NACK => Frame::ForwardNack {
            req: r.u64()?,
            leader: r.u64()?,
        },
        K_CHUNK => Frame::Chunk {
            total: r.u32()?,
            offset: r.u32()?,
            kind: r.u8()?,
            bytes: r.bytes()?,
        },
        _ => return Err(WireError("unknown frame kind")),
    };
    r.end()?;
    Ok(f)
}

/// Reassembles chunk streams (one at a time per connection; bounded by [`MAX_REASSEMBLED`]).
#[derive(Default)]
pub struct Reassembly {
    buf: Vec<u8>,
    kind: u8,
    total: usize,
}

impl Reassembly {
    /// Feeds a chunk; returns the whole frame once the last chunk arrived.
    pub fn push(
        &mut self,
        total: u32,
        offset: u32,
        kind: u8,
        bytes: &[u8],
    ) -> Result<Option<Frame>, WireError> {
        let (total, offset) = (total as usize, offset as usize);
        if total > MAX_REASSEMBLED || kind == K_CHUNK {
            return Err(WireError("bad chunk stream"));
        }
        if offset == 0 {
            self.buf.clear();
            self.kind = kind;
            self.total = total;
        }
        if offset != self.buf.len() || total != self.total || kind != self.kind {
            return Err(WireError("chunk out of order"));
        }
        if self.buf.len() + bytes.len() > total {
            return Err(WireError("chunk past the stream's end"));
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() < total {
            return Ok(None);
        }
        let payload = std::mem::take(&mut self.buf);
        decode_kind(self.kind, &payload).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(f: Frame) {
        let mut out = Vec::new();
        encode_frames(&f, &mut out);
        let mut rest = &out[..];
        let mut re = Reassembly::default();
        loop {
            let h: [u8; HEADER_LEN] = rest[..HEADER_LEN].try_into().unwrap();
            let (kind, len, crc) = decode_header(&h).unwrap();
            let g = decode_payload(kind, crc, &rest[HEADER_LEN..HEADER_LEN + len]).unwrap();
            rest = &rest[HEADER_LEN + len..];
            let g = match g {
                Frame::Chunk {
                    total,
                    offset,
                    kind,
                    bytes,
                } => match re.push(total, offset, kind, &bytes).unwrap() {
                    Some(g) => g,
                    None => continue,
                },
                g => g,
            };
            assert_eq!(g, f);
            assert!(rest.is_empty());
            return;
        }
    }

    fn msg(body: MessageBody) -> Frame {
        Frame::Raft(Message {
            from: 1,
            to: 2,
            term: 7,
            body,
        })
    }

    #[test]
    fn every_frame_round_trips() {
        let e = |i| Entry {
            term: 3,
            index: i,
            kind: EntryKind::Normal,
            data: vec![i as u8; 5],
        };
        roundtrip(Frame::Hello { node: 9 });
        roundtrip(msg(MessageBody::PreVote {
            last_index: 4,
            last_term: 2,
        }));
        roundtrip(msg(MessageBody::PreVoteResponse { reject: true }));
        roundtrip(msg(MessageBody::Vote {
            last_index: 4,
            last_term: 2,
            kind: CampaignKind::Accelerate,
        }));
        roundtrip(msg(MessageBody::VoteResponse {
            reject: false,
            accelerated: true,
        }));
        roundtrip(msg(MessageBody::Append {
            prev_index: 4,
            prev_term: 2,
            entries: vec![e(5), e(6)],
            commit: 3,
        }));
        roundtrip(msg(MessageBody::AppendResponse {
            reject: true,
            index: 1,
            hint_index: 2,
            hint_term: 3,
            recovering: true,
        }));
        roundtrip(msg(MessageBody::Heartbeat {
            commit: 5,
            context: b"ctx".to_vec(),
        }));
        roundtrip(msg(MessageBody::HeartbeatResponse { context: vec![] }));
        roundtrip(msg(MessageBody::TimeoutNow));
        roundtrip(msg(MessageBody::ReadIndex { context: vec![1] }));
        roundtrip(msg(MessageBody::ReadIndexResponse {
            context: vec![1],
            index: 8,
        }));
        roundtrip(Frame::Forward {
            req: 1,
            client: 2,
            seq: 3,
            command: b"cmd".to_vec(),
        });
        roundtrip(Frame::ForwardNack { req: 1, leader: 3 });
    }

    #[test]
    fn a_large_snapshot_is_streamed_in_chunks() {
        let data: Vec<u8> = (0..3 * MAX_FRAME).map(|i| (i * 7) as u8).collect();
        let f = msg(MessageBody::InstallSnapshot {
            snapshot: Snapshot {
                meta: SnapshotMeta {
                    index: 10,
                    term: 2,
                    conf: ConfState {
                        voters: vec![1, 2, 3],
                        learners: vec![4],
                    },
                },
                data,
            },
        });
        let mut out = Vec::new();
        encode_frames(&f, &mut out);
        assert!(out.len() > 3 * MAX_FRAME);
        assert_eq!(out[5], K_CHUNK, "sent as chunks");
        roundtrip(f);
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut good = Vec::new();
        encode_message(
            &Message {
                from: 1,
                to: 2,
                term: 3,
                body: MessageBody::Append {
                    prev_index: 1,
                    prev_term: 1,
                    entries: vec![],
                    commit: 1,
                },
            },
            &mut good,
        );
        for n in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b: Vec<u8> = if n % 2 == 0 {
                (0..(x % 200)).map(|i| (x >> (i % 56)) as u8).collect()
            } else {
                good.clone()
            };
            if !b.is_empty() {
                let i = (x as usize) % b.len();
                b[i] ^= (x >> 8) as u8 | 1;
                b.truncate((x >> 20) as usize % (b.len() + 1));
            }
            for k in 0..7 {
                let _ = decode_kind(k, &b);
            }
            let _ = decode_message(&b);
        }
        assert_eq!(
            decode_payload(K_HELLO, 0, &[0; 8]),
            Err(WireError("checksum mismatch"))
        );
    }
}
