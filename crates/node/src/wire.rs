//! The control-plane wire format between replicas: checksummed, versioned, length-prefixed
//! frames over TCP, and the binary encoding of Raft messages inside them.
//!
//! Frame: `magic u32 | version u8 | kind u8 | reserved u16 | len u32 | crc32 u32 | payload`,
//! little-endian; the CRC-32C covers the payload. A frame whose payload would exceed
//! [`MAX_FRAME`] (an InstallSnapshot) is sent as a stream of [`Frame::Chunk`]s and reassembled.

use waverunner_raft::{Bytes, CampaignKind, Message, MessageBody};
use waverunner_storage::codec::{
    get_entry_with, get_snapshot_meta, put_entry, put_snapshot_meta, CodecError, Reader, Writer,
};
use waverunner_storage::crc::{crc32c, crc32c_update};

/// `WRTP` little-endian.
pub const MAGIC: u32 = 0x5054_5257;
/// Version of this format.
pub const VERSION: u8 = 1;
/// Bytes of the frame header.
pub const HEADER_LEN: usize = 16;
/// Where a frame's kind sits in its header (after the magic and the version).
pub const KIND_AT: usize = 5;
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
/// The kind of a chunk frame (a piece of a message larger than [`MAX_FRAME`]).
pub const K_CHUNK: u8 = 5;
const K_ADVERTISE: u8 = 6;

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
    /// Second frame on an outbound connection: where the sender listens for replicas. Lets a
    /// replica answer a peer whose address it has not learned yet (a joining replica and its
    /// leader); addresses from the replicated log take precedence.
    Advertise {
        /// The sender's control-plane TCP address.
        raft: std::net::SocketAddr,
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError(pub String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed frame: {}", self.0)
    }
}

impl std::error::Error for WireError {}

// ------------------------------------------------------------------ primitives

/// Largest byte string inside a frame (an entry's data, a context, a command).
const MAX_FIELD: usize = MAX_REASSEMBLED;

impl From<CodecError> for WireError {
    fn from(e: CodecError) -> WireError {
        WireError(e.to_string())
    }
}

fn get_bool(r: &mut Reader) -> Result<bool, WireError> {
    match r.get_u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(WireError("bad boolean".into())),
    }
}

fn get_vec(r: &mut Reader) -> Result<Vec<u8>, WireError> {
    Ok(r.get_bytes(MAX_FIELD)?.to_vec())
}

// ------------------------------------------------------------------ Raft types

/// Encodes a Raft message.
pub fn encode_message(m: &Message, out: &mut Vec<u8>) {
    let mut w = Writer::from_vec(std::mem::take(out));
    w.put_u64(m.from);
    w.put_u64(m.to);
    w.put_u64(m.term);
    match &m.body {
        MessageBody::PreVote {
            last_index,
            last_term,
        } => {
            w.put_u8(1);
            w.put_u64(*last_index);
            w.put_u64(*last_term);
        }
        MessageBody::PreVoteResponse { reject } => {
            w.put_u8(2);
            w.put_u8(*reject as u8);
        }
        MessageBody::Vote {
            last_index,
            last_term,
            kind,
        } => {
            w.put_u8(3);
            w.put_u64(*last_index);
            w.put_u64(*last_term);
            w.put_u8(match kind {
                CampaignKind::Election => 0,
                CampaignKind::Forced => 1,
                CampaignKind::Accelerate => 2,
            });
        }
        MessageBody::VoteResponse {
            reject,
            accelerated,
        } => {
            w.put_u8(4);
            w.put_u8(*reject as u8);
            w.put_u8(*accelerated as u8);
        }
        MessageBody::Append {
            prev_index,
            prev_term,
            entries,
            commit,
        } => {
            w.put_u8(5);
            w.put_u64(*prev_index);
            w.put_u64(*prev_term);
            w.put_u64(*commit);
            w.put_u32(entries.len() as u32);
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
            w.put_u8(6);
            w.put_u8(*reject as u8);
            w.put_u64(*index);
            w.put_u64(*hint_index);
            w.put_u64(*hint_term);
            w.put_u8(*recovering as u8);
        }
        MessageBody::Heartbeat { commit, context } => {
            w.put_u8(7);
            w.put_u64(*commit);
            w.put_bytes(context);
        }
        MessageBody::HeartbeatResponse { context } => {
            w.put_u8(8);
            w.put_bytes(context);
        }
        MessageBody::Keepalive => w.put_u8(15),
        MessageBody::KeepaliveResponse => w.put_u8(16),
        MessageBody::InstallSnapshot {
            meta,
            total,
            offset,
            data,
        } => {
            w.put_u8(9);
            put_snapshot_meta(&mut w, meta);
            w.put_u64(*total);
            w.put_u64(*offset);
            w.put_bytes(data);
        }
        MessageBody::SnapshotProgress { index, received } => {
            w.put_u8(14);
            w.put_u64(*index);
            w.put_u64(*received);
        }
        MessageBody::TimeoutNow => w.put_u8(10),
        MessageBody::ReadIndex { context } => {
            w.put_u8(11);
            w.put_bytes(context);
        }
        MessageBody::ReadIndexResponse { context, index } => {
            w.put_u8(12);
            w.put_bytes(context);
            w.put_u64(*index);
        }
        MessageBody::ReadIndexRefused { context } => {
            w.put_u8(13);
            w.put_bytes(context);
        }
    }
    *out = w.into_inner();
}

/// Decodes a Raft message; never panics on garbage.
pub fn decode_message(b: &[u8]) -> Result<Message, WireError> {
    decode_message_in(b, None)
}

/// Decodes a message whose bytes `b` lie inside `owner` (when given): entry data become
/// slices of `owner` instead of copies.
fn decode_message_in(b: &[u8], owner: Option<&Bytes>) -> Result<Message, WireError> {
    let mut r = Reader::new(b);
    let from = r.get_u64()?;
    let to = r.get_u64()?;
    let term = r.get_u64()?;
    let body = match r.get_u8()? {
        1 => MessageBody::PreVote {
            last_index: r.get_u64()?,
            last_term: r.get_u64()?,
        },
        2 => MessageBody::PreVoteResponse {
            reject: get_bool(&mut r)?,
        },
        3 => MessageBody::Vote {
            last_index: r.get_u64()?,
            last_term: r.get_u64()?,
            kind: match r.get_u8()? {
                0 => CampaignKind::Election,
                1 => CampaignKind::Forced,
                2 => CampaignKind::Accelerate,
                _ => return Err(WireError("bad campaign kind".into())),
            },
        },
        4 => MessageBody::VoteResponse {
            reject: get_bool(&mut r)?,
            accelerated: get_bool(&mut r)?,
        },
        5 => {
            let prev_index = r.get_u64()?;
            let prev_term = r.get_u64()?;
            let commit = r.get_u64()?;
            let n = r.get_u32()? as usize;
            // An entry takes at least 21 bytes: bound the allocation by the input.
            if n > r.remaining() / 21 {
                return Err(WireError("entry count longer than the frame".into()));
            }
            let entries = (0..n)
                .map(|_| {
                    get_entry_with(&mut r, |d| match owner {
                        Some(o) => o.slice_ref(d),
                        None => Bytes::copy_from_slice(d),
                    })
                    .map_err(WireError::from)
                })
                .collect::<Result<_, _>>()?;
            MessageBody::Append {
                prev_index,
                prev_term,
                entries,
                commit,
            }
        }
        6 => MessageBody::AppendResponse {
            reject: get_bool(&mut r)?,
            index: r.get_u64()?,
            hint_index: r.get_u64()?,
            hint_term: r.get_u64()?,
            recovering: get_bool(&mut r)?,
        },
        7 => MessageBody::Heartbeat {
            commit: r.get_u64()?,
            context: get_vec(&mut r)?,
        },
        8 => MessageBody::HeartbeatResponse {
            context: get_vec(&mut r)?,
        },
        15 => MessageBody::Keepalive,
        16 => MessageBody::KeepaliveResponse,
        9 => {
            let meta = get_snapshot_meta(&mut r)?;
            let total = r.get_u64()?;
            let offset = r.get_u64()?;
            let d = r.get_bytes(MAX_FRAME)?;
            MessageBody::InstallSnapshot {
                meta,
                total,
                offset,
                // The piece stays in the frame's buffer when there is one.
                data: match owner {
                    Some(o) => o.slice_ref(d),
                    None => Bytes::copy_from_slice(d),
                },
            }
        }
        14 => MessageBody::SnapshotProgress {
            index: r.get_u64()?,
            received: r.get_u64()?,
        },
        10 => MessageBody::TimeoutNow,
        11 => MessageBody::ReadIndex {
            context: get_vec(&mut r)?,
        },
        12 => MessageBody::ReadIndexResponse {
            context: get_vec(&mut r)?,
            index: r.get_u64()?,
        },
        13 => MessageBody::ReadIndexRefused {
            context: get_vec(&mut r)?,
        },
        _ => return Err(WireError("unknown message type".into())),
    };
    r.finish()?;
    Ok(Message {
        from,
        to,
        term,
        body,
    })
}

// ------------------------------------------------------------------ frames

/// About the encoded size of `m`: its buffer is allocated once, not doubled up to a large
/// value's size.
fn size_hint(m: &Message) -> usize {
    let data: usize = match &m.body {
        MessageBody::Append { entries, .. } => entries.iter().map(|e| e.data.len() + 32).sum(),
        MessageBody::InstallSnapshot { data, meta, .. } => {
            data.len() + 64 + 8 * (meta.conf.voters.len() + meta.conf.learners.len())
        }
        _ => 0,
    };
    data + 64
}

fn payload_of(f: &Frame) -> (u8, Vec<u8>) {
    let mut w = Writer::new();
    let kind = match f {
        Frame::Hello { node } => {
            w.put_u64(*node);
            K_HELLO
        }
        Frame::Raft(m) => {
            let mut p = Vec::with_capacity(size_hint(m));
            encode_message(m, &mut p);
            return (K_RAFT, p);
        }
        Frame::Forward {
            req,
            client,
            seq,
            command,
        } => {
            w = Writer::with_capacity(command.len() + 32);
            w.put_u64(*req);
            w.put_u64(*client);
            w.put_u64(*seq);
            w.put_bytes(command);
            K_FORWARD
        }
        Frame::ForwardNack { req, leader } => {
            w.put_u64(*req);
            w.put_u64(*leader);
            K_FORWARD_NACK
        }
        Frame::Advertise { raft } => {
            w.put_bytes(raft.to_string().as_bytes());
            K_ADVERTISE
        }
        Frame::Chunk {
            total,
            offset,
            kind,
            bytes,
        } => {
            put_chunk_fields(&mut w, *total, *offset, *kind, bytes.len());
            w.put_raw(bytes);
            K_CHUNK
        }
    };
    (kind, w.into_inner())
}

fn put_header(kind: u8, payload: &[u8], out: &mut Vec<u8>) {
    let mut w = Writer::from_vec(std::mem::take(out));
    w.put_u32(MAGIC);
    w.put_u8(VERSION);
    w.put_u8(kind);
    w.put_raw(&[0, 0]);
    w.put_u32(payload.len() as u32);
    w.put_u32(crc32c(payload));
    w.put_raw(payload);
    *out = w.into_inner();
}

/// Encodes `f` as one frame, or as several chunk frames when it is larger than [`MAX_FRAME`].
pub fn encode_frames(f: &Frame, out: &mut Vec<u8>) {
    if let Some(l) = encode_or_large(f, out) {
        l.write_to(out).expect("writing to memory");
    }
}

/// A message too large for one frame, encoded once, written as chunk frames
/// ([`Large::write_to`], or one at a time with [`Large::chunk`]).
pub struct Large {
    kind: u8,
    payload: Vec<u8>,
}

impl Large {
    /// Writes the chunk frames to `w`, each piece straight from the payload.
    pub fn write_to<W: std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        for i in 0..self.chunks() {
            let (head, piece) = self.chunk(i);
            w.write_all(&head)?;
            w.write_all(piece)?;
        }
        Ok(())
    }

    /// How many chunk frames it takes.
    pub fn chunks(&self) -> usize {
        self.payload.len().div_ceil(CHUNK)
    }

    /// The piece of chunk frame `i` (below [`Large::chunks`]).
    fn piece(&self, i: usize) -> &[u8] {
        let start = i * CHUNK;
        &self.payload[start..(start + CHUNK).min(self.payload.len())]
    }

    /// Chunk frame `i` (below [`Large::chunks`]): its header with the chunk fields, and its
    /// piece, never copied into a frame of its own.
    pub fn chunk(&self, i: usize) -> (Vec<u8>, &[u8]) {
        assert!(
            self.payload.len() <= MAX_REASSEMBLED,
            "message over the reassembly bound"
        );
        let start = i * CHUNK;
        let piece = self.piece(i);
        let mut fields = Writer::with_capacity(CHUNK_FIELDS);
        put_chunk_fields(
            &mut fields,
            self.payload.len() as u32,
            start as u32,
            self.kind,
            piece.len(),
        );
        let fields = fields.into_inner();
        debug_assert_eq!(fields.len(), CHUNK_FIELDS);
        let mut head = Writer::with_capacity(HEADER_LEN + CHUNK_FIELDS);
        head.put_u32(MAGIC);
        head.put_u8(VERSION);
        head.put_u8(K_CHUNK);
        head.put_raw(&[0, 0]);
        head.put_u32((fields.len() + piece.len()) as u32);
        head.put_u32(crc32c_update(crc32c(&fields), piece));
        head.put_raw(&fields);
        (head.into_inner(), piece)
    }
}

/// Appends `f` to `out` as one frame, or, when it is larger than [`MAX_FRAME`], returns it
/// encoded for [`Large`]'s writers (a sender writes it without copying it into a batch).
pub fn encode_or_large(f: &Frame, out: &mut Vec<u8>) -> Option<Large> {
    let (kind, payload) = payload_of(f);
    if payload.len() <= MAX_FRAME {
        put_header(kind, &payload, out);
        return None;
    }
    Some(Large { kind, payload })
}

/// About how many bytes `f`'s payload takes, without encoding it: whether encoding it is
/// bulk work (a sender encodes frames above [`MAX_FRAME`] off its thread).
pub fn payload_hint(f: &Frame) -> usize {
    match f {
        Frame::Raft(m) => size_hint(m),
        Frame::Forward { command, .. } => command.len() + 32,
        Frame::Chunk { bytes, .. } => bytes.len() + CHUNK_FIELDS,
        _ => 64,
    }
}

/// Bytes of a chunk frame's payload before its piece: total, offset, kind, piece length.
const CHUNK_FIELDS: usize = 13;

/// A chunk frame's payload up to its piece (the one writer of the layout [`split_chunk`]
/// reads): `total u32 | offset u32 | kind u8 | piece length u32`, the piece follows.
fn put_chunk_fields(w: &mut Writer, total: u32, offset: u32, kind: u8, piece_len: usize) {
    w.put_u32(total);
    w.put_u32(offset);
    w.put_u8(kind);
    w.put_u32(u32::try_from(piece_len).expect("a chunk is smaller than a frame"));
}

/// A chunk frame's payload without copying its piece: (total, offset, kind, piece).
pub fn split_chunk(payload: &[u8]) -> Result<(u32, u32, u8, &[u8]), WireError> {
    let mut r = Reader::new(payload);
    let total = r.get_u32()?;
    let offset = r.get_u32()?;
    let kind = r.get_u8()?;
    let piece = r.get_bytes(MAX_FRAME)?;
    r.finish()?;
    Ok((total, offset, kind, piece))
}

/// The header of a frame: its kind and payload length, checked.
pub fn decode_header(h: &[u8; HEADER_LEN]) -> Result<(u8, usize, u32), WireError> {
    let mut r = Reader::new(h);
    if r.get_u32()? != MAGIC {
        return Err(WireError("bad magic (not a Waverunner replica?)".into()));
    }
    if r.get_u8()? != VERSION {
        return Err(WireError("unsupported version".into()));
    }
    let kind = r.get_u8()?;
    r.get_raw(2)?;
    let len = r.get_u32()? as usize;
    let crc = r.get_u32()?;
    if len > MAX_FRAME + 64 {
        return Err(WireError("frame too large".into()));
    }
    Ok((kind, len, crc))
}

/// Decodes the payload of a frame of `kind` whose checksum was `crc`.
pub fn decode_payload(kind: u8, crc: u32, payload: &[u8]) -> Result<Frame, WireError> {
    if crc32c(payload) != crc {
        return Err(WireError("checksum mismatch".into()));
    }
    decode_kind(kind, payload)
}

/// Decodes a (possibly reassembled) payload of `kind`.
pub fn decode_kind(kind: u8, payload: &[u8]) -> Result<Frame, WireError> {
    let mut r = Reader::new(payload);
    let f = match kind {
        K_HELLO => Frame::Hello { node: r.get_u64()? },
        K_RAFT => return decode_message(payload).map(Frame::Raft),
        K_FORWARD => Frame::Forward {
            req: r.get_u64()?,
            client: r.get_u64()?,
            seq: r.get_u64()?,
            command: get_vec(&mut r)?,
        },
        K_FORWARD_NACK => Frame::ForwardNack {
            req: r.get_u64()?,
            leader: r.get_u64()?,
        },
        K_ADVERTISE => {
            let text = std::str::from_utf8(r.get_bytes(64)?)
                .map_err(|_| WireError("advertised address is not text".into()))?;
            Frame::Advertise {
                raft: text
                    .parse()
                    .map_err(|_| WireError("advertised address is not ip:port".into()))?,
            }
        }
        K_CHUNK => {
            let (total, offset, kind, piece) = split_chunk(payload)?;
            return Ok(Frame::Chunk {
                total,
                offset,
                kind,
                bytes: piece.to_vec(),
            });
        }
        _ => return Err(WireError("unknown frame kind".into())),
    };
    r.finish()?;
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
            return Err(WireError("bad chunk stream".into()));
        }
        if offset == 0 {
            self.buf = Vec::with_capacity(total);
            self.kind = kind;
            self.total = total;
        }
        if offset != self.buf.len() || total != self.total || kind != self.kind {
            return Err(WireError("chunk out of order".into()));
        }
        if self.buf.len() + bytes.len() > total {
            return Err(WireError("chunk past the stream's end".into()));
        }
        self.buf.extend_from_slice(bytes);
        if self.buf.len() < total {
            return Ok(None);
        }
        let payload = Bytes::from(std::mem::take(&mut self.buf));
        if self.kind == K_RAFT {
            // Entry data stay in the reassembled buffer: a 64 MiB value is not copied again.
            return decode_message_in(&payload, Some(&payload))
                .map(Frame::Raft)
                .map(Some);
        }
        decode_kind(self.kind, &payload).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waverunner_raft::{ConfState, Entry, EntryKind, SnapshotMeta};

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
            data: vec![i as u8; 5].into(),
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
        roundtrip(msg(MessageBody::Keepalive));
        roundtrip(msg(MessageBody::KeepaliveResponse));
        roundtrip(msg(MessageBody::TimeoutNow));
        roundtrip(msg(MessageBody::ReadIndex { context: vec![1] }));
        roundtrip(msg(MessageBody::ReadIndexResponse {
            context: vec![1],
            index: 8,
        }));
        roundtrip(msg(MessageBody::ReadIndexRefused { context: vec![2] }));
        roundtrip(Frame::Forward {
            req: 1,
            client: 2,
            seq: 3,
            command: b"cmd".to_vec(),
        });
        roundtrip(Frame::ForwardNack { req: 1, leader: 3 });
        roundtrip(Frame::Advertise {
            raft: "127.0.0.1:7001".parse().unwrap(),
        });
        roundtrip(Frame::Advertise {
            raft: "[::1]:7001".parse().unwrap(),
        });
    }

    #[test]
    fn snapshot_pieces_and_progress_roundtrip() {
        let meta = SnapshotMeta {
            index: 10,
            term: 2,
            conf: ConfState {
                voters: vec![1, 2, 3],
                learners: vec![4],
            },
        };
        let data: Vec<u8> = (0..1000).map(|i| (i * 7) as u8).collect();
        roundtrip(msg(MessageBody::InstallSnapshot {
            meta: meta.clone(),
            total: 5000,
            offset: 2000,
            data: data.into(),
        }));
        roundtrip(msg(MessageBody::InstallSnapshot {
            meta,
            total: 0,
            offset: 0,
            data: Bytes::new(),
        }));
        roundtrip(msg(MessageBody::SnapshotProgress {
            index: 10,
            received: 3000,
        }));
    }

    #[test]
    fn a_large_message_is_streamed_in_chunks() {
        let data: Vec<u8> = (0..3 * MAX_FRAME).map(|i| (i * 7) as u8).collect();
        let f = msg(MessageBody::Append {
            prev_index: 9,
            prev_term: 2,
            entries: vec![Entry {
                term: 2,
                index: 10,
                kind: EntryKind::Normal,
                data: data.into(),
            }],
            commit: 9,
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
            for k in 0..8 {
                let _ = decode_kind(k, &b);
            }
            let _ = decode_message(&b);
        }
        assert_eq!(
            decode_payload(K_HELLO, 0, &[0; 8]),
            Err(WireError("checksum mismatch".into()))
        );
    }
}
