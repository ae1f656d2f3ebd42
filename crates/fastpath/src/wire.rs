//! The fast-path wire format (`c/wire.h`, docs/interfaces.md §1): one 64-byte little-endian
//! header followed by `len` payload bytes.

use std::fmt;

/// Size of the fixed header in bytes (`FP_HDR_LEN`).
pub const HDR_LEN: usize = 64;
/// Magic number, bytes `W V R N` on the wire (`FP_MAGIC`).
pub const MAGIC: u32 = 0x4E52_5657;
/// Wire format version (`FP_VERSION`).
pub const VERSION: u8 = 1;
/// Largest payload a packet may carry (`FP_MAX_PAYLOAD`).
pub const MAX_PAYLOAD: u16 = 1400;
/// Group id of a replica set's fast path on the wire (the header's `group_id`): what a
/// replica's data plane and its native clients use (one replica set per address).
pub const GROUP: u32 = 1;
/// Header flag: a write whose reply does not read state (`FP_F_BLIND_WRITE`).
pub const F_BLIND_WRITE: u16 = 1;
/// Header flag: an empty entry pushed by the leader while idle (`FP_F_HEARTBEAT`).
pub const F_HEARTBEAT: u16 = 2;
/// Header flag: a client's read (`FP_F_READ`). The handler passes it to the host, which
/// serves it linearizably with reads batched behind one entry (`docs/handoff.md` "Reads
/// while On"): a read is never an entry of its own.
pub const F_READ: u16 = 4;

/// Type byte of a client's operation to the leader (`FP_CLIENT_REQUEST`).
pub const CLIENT_REQUEST: u8 = MsgType::ClientRequest as u8;
/// Type byte of the leader's append to followers (`FP_APPEND`).
pub const APPEND: u8 = MsgType::Append as u8;
/// Type byte of a follower's acknowledgement (`FP_ACK`).
pub const ACK: u8 = MsgType::Ack as u8;
/// Type byte of a follower's refusal (`FP_REJECT`).
pub const REJECT: u8 = MsgType::Reject as u8;
/// Type byte of a follower's retransmission request (`FP_RETX_REQ`).
pub const RETX_REQ: u8 = MsgType::RetxReq as u8;
/// Type byte of the leader's reply to a client (`FP_CLIENT_REPLY`).
pub const CLIENT_REPLY: u8 = MsgType::ClientReply as u8;

/// Message types (byte 5 of the header, `FP_CLIENT_REQUEST` ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MsgType {
    /// A client's operation, to the leader (`FP_CLIENT_REQUEST = 1`).
    ClientRequest = 1,
    /// Leader to followers: one entry after (`index`, `log_term`) (`FP_APPEND = 2`).
    Append = 2,
    /// Follower to leader: my log ends at `index` (`FP_ACK = 3`).
    Ack = 3,
    /// Follower to leader: refused an append (`FP_REJECT = 4`).
    Reject = 4,
    /// Follower to leader: saw a gap, please retransmit after `index` (`FP_RETX_REQ = 5`).
    RetxReq = 5,
    /// Leader to client: the request committed at `index` (`FP_CLIENT_REPLY = 6`).
    ClientReply = 6,
}

impl MsgType {
    /// Every message type, in wire order.
    pub const ALL: [MsgType; 6] = [
        MsgType::ClientRequest,
        MsgType::Append,
        MsgType::Ack,
        MsgType::Reject,
        MsgType::RetxReq,
        MsgType::ClientReply,
    ];

    /// The type with wire value `v`, if any.
    pub fn from_u8(v: u8) -> Option<MsgType> {
        MsgType::ALL.into_iter().find(|t| *t as u8 == v)
    }

    /// The C name without the `FP_` prefix, e.g. `"CLIENT_REQUEST"` (used by the test vectors).
    pub fn name(self) -> &'static str {
        match self {
            MsgType::ClientRequest => "CLIENT_REQUEST",
            MsgType::Append => "APPEND",
            MsgType::Ack => "ACK",
            MsgType::Reject => "REJECT",
            MsgType::RetxReq => "RETX_REQ",
            MsgType::ClientReply => "CLIENT_REPLY",
        }
    }

    /// The type called `name` (as returned by [`MsgType::name`]).
    pub fn from_name(name: &str) -> Option<MsgType> {
        MsgType::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// Why a buffer is not a valid fast-path packet (the C `FP_ERR_*` codes of `fp_parse`).
///
/// The checks run in declaration order; the first that fails is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WireError {
    /// Shorter than the 64-byte header (`FP_ERR_SHORT = -1`).
    Short,
    /// The magic number is not [`MAGIC`] (`FP_ERR_MAGIC = -2`).
    Magic,
    /// The version is not [`VERSION`] (`FP_ERR_VERSION = -3`).
    Version,
    /// The type is not a known [`MsgType`] (`FP_ERR_TYPE = -4`).
    Type,
    /// `len` exceeds [`MAX_PAYLOAD`] or the buffer holds fewer than `len` payload bytes
    /// (`FP_ERR_LEN = -5`).
    Len,
    /// The reserved field is not zero (`FP_ERR_RESERVED = -6`).
    Reserved,
}

impl WireError {
    /// Every error, in check order.
    pub const ALL: [WireError; 6] = [
        WireError::Short,
        WireError::Magic,
        WireError::Version,
        WireError::Type,
        WireError::Len,
        WireError::Reserved,
    ];

    /// The C return code (`FP_ERR_*`, negative).
    pub fn code(self) -> i32 {
        match self {
            WireError::Short => -1,
            WireError::Magic => -2,
            WireError::Version => -3,
            WireError::Type => -4,
            WireError::Len => -5,
            WireError::Reserved => -6,
        }
    }

    /// The error with C return code `code`, if any.
    pub fn from_code(code: i32) -> Option<WireError> {
        WireError::ALL.into_iter().find(|e| e.code() == code)
    }

    /// The C name without the `FP_ERR_` prefix, e.g. `"SHORT"` (used by the test vectors).
    pub fn name(self) -> &'static str {
        match self {
            WireError::Short => "SHORT",
            WireError::Magic => "MAGIC",
            WireError::Version => "VERSION",
            WireError::Type => "TYPE",
            WireError::Len => "LEN",
            WireError::Reserved => "RESERVED",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Short => {
                write!(f, "fast-path packet shorter than the {HDR_LEN}-byte header")
            }
            WireError::Magic => write!(
                f,
                "fast-path packet has a bad magic number (want {MAGIC:#010x})"
            ),
            WireError::Version => write!(
                f,
                "fast-path packet has an unsupported version (want {VERSION})"
            ),
            WireError::Type => write!(f, "fast-path packet has an unknown message type"),
            WireError::Len => write!(
                f,
                "fast-path payload length exceeds {MAX_PAYLOAD} bytes or the bytes received"
            ),
            WireError::Reserved => write!(f, "fast-path header's reserved field is not zero"),
        }
    }
}

impl std::error::Error for WireError {}

/// The decoded 64-byte fast-path header: a `#[repr(C)]` mirror of the C `struct fp_hdr`, field
/// for field (host byte order; the wire is little-endian).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`] in a valid packet.
    pub magic: u32,
    /// [`VERSION`] in a valid packet.
    pub version: u8,
    /// Message type (C field `type`): [`CLIENT_REQUEST`] ... [`CLIENT_REPLY`] in a valid packet
    /// (see [`MsgType`]).
    pub kind: u8,
    /// [`F_BLIND_WRITE`], [`F_HEARTBEAT`], [`F_READ`].
    pub flags: u16,
    /// Replication group; a packet of another group goes to the host untouched.
    pub group_id: u32,
    /// Payload length in bytes (at most [`MAX_PAYLOAD`]).
    pub len: u16,
    /// Must be 0.
    pub reserved: u16,
    /// Sender's term (0 in CLIENT_REQUEST).
    pub term: u64,
    /// Sender node id; the client id in CLIENT_REQUEST.
    pub from: u64,
    /// APPEND: prev log index; ACK / REJECT / RETX_REQ: follower last log index;
    /// CLIENT_REPLY: the committed index.
    pub index: u64,
    /// APPEND: prev log term; REJECT / RETX_REQ: follower last log term.
    pub log_term: u64,
    /// APPEND, CLIENT_REPLY: leader commit index.
    pub commit: u64,
    /// Client request sequence number (CLIENT_REQUEST, CLIENT_REPLY); 0 otherwise.
    pub seq: u64,
}

const _: () = assert!(std::mem::size_of::<Header>() == HDR_LEN);
const _: () = assert!(std::mem::align_of::<Header>() == 8);

impl Header {
    /// A header of group `group_id` with the magic and version set and every other field zero
    /// (set `kind` and the rest with struct update syntax).
    ///
    /// The registers hold a 64-bit group id but the wire carries 32 bits.
    ///
    /// # Panics
    /// If `group_id` does not fit in 32 bits (such a group cannot be addressed on the wire).
    pub fn new(group_id: u64) -> Header {
        let group_id = u32::try_from(group_id)
            .unwrap_or_else(|_| panic!("group id {group_id} does not fit the 32-bit wire field"));
        Header {
            magic: MAGIC,
            version: VERSION,
            group_id,
            ..Header::default()
        }
    }

    /// A header of type `t` in group 0 (magic and version set, every other field zero).
    pub fn of(t: MsgType) -> Header {
        Header {
            kind: t as u8,
            ..Header::new(0)
        }
    }

    /// The message type, if the type byte is a known one.
    pub fn msg_type(&self) -> Option<MsgType> {
        MsgType::from_u8(self.kind)
    }

    /// The 64 wire bytes of this header, every field written verbatim (no validation).
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..4].copy_from_slice(&self.magic.to_le_bytes());
        b[4] = self.version;
        b[5] = self.kind;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.group_id.to_le_bytes());
        b[12..14].copy_from_slice(&self.len.to_le_bytes());
        b[14..16].copy_from_slice(&self.reserved.to_le_bytes());
        let words = [
            self.term,
            self.from,
            self.index,
            self.log_term,
            self.commit,
            self.seq,
        ];
        for (i, w) in words.iter().enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// The message type byte of packet `buf` (C field `type`), read without validating the
    /// rest: what routes a passed-up packet to the client front-end or to the host.
    pub fn kind_of(buf: &[u8]) -> Option<u8> {
        (buf.len() >= HDR_LEN).then(|| buf[5])
    }

    /// Appends the 64-byte wire header and then `payload` to `buf`.
    ///
    /// The header is written verbatim, like the C `fp_write`: set `len` to `payload.len()`
    /// yourself (a mismatch is written as given, so tests can build invalid packets).
    pub fn encode(&self, payload: &[u8], buf: &mut Vec<u8>) {
        buf.extend_from_slice(&self.to_bytes());
        buf.extend_from_slice(payload);
    }

    /// Parses and validates a packet exactly as the C `fp_parse` does, returning the header and
    /// its `len`-byte payload (bytes after the payload are ignored).
    pub fn decode(buf: &[u8]) -> Result<(Header, &[u8]), WireError> {
        if buf.len() < HDR_LEN {
            return Err(WireError::Short);
        }
        let u16_at = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(buf[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(buf[o..o + 8].try_into().expect("8 bytes"));
        let h = Header {
            magic: u32_at(0),
            version: buf[4],
            kind: buf[5],
            flags: u16_at(6),
            group_id: u32_at(8),
            len: u16_at(12),
            reserved: u16_at(14),
            term: u64_at(16),
            from: u64_at(24),
            index: u64_at(32),
            log_term: u64_at(40),
            commit: u64_at(48),
            seq: u64_at(56),
        };
        if h.magic != MAGIC {
            return Err(WireError::Magic);
        }
        if h.version != VERSION {
            return Err(WireError::Version);
        }
        if h.msg_type().is_none() {
            return Err(WireError::Type);
        }
        if h.len > MAX_PAYLOAD || usize::from(h.len) > buf.len() - HDR_LEN {
            return Err(WireError::Len);
        }
        if h.reserved != 0 {
            return Err(WireError::Reserved);
        }
        Ok((h, &buf[HDR_LEN..HDR_LEN + usize::from(h.len)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_is_wvrn_on_the_wire() {
        assert_eq!(&Header::of(MsgType::Ack).to_bytes()[0..4], b"WVRN");
    }

    #[test]
    fn roundtrip_with_payload() {
        let mut h = Header::of(MsgType::ClientRequest);
        h.len = 3;
        h.seq = 0x0102_0304_0506_0708;
        h.flags = F_BLIND_WRITE;
        let mut buf = Vec::new();
        h.encode(b"abc", &mut buf);
        buf.push(0xff); // trailing bytes are ignored
        let (d, p) = Header::decode(&buf).unwrap();
        assert_eq!(d, h);
        assert_eq!(p, b"abc");
    }

    #[test]
    fn kind_of_reads_the_type_of_a_whole_header_only() {
        for t in MsgType::ALL {
            let b = Header::of(t).to_bytes();
            assert_eq!(Header::kind_of(&b), Some(t as u8));
            assert_eq!(Header::kind_of(&b[..HDR_LEN - 1]), None);
        }
        assert_eq!(Header::kind_of(&[]), None);
    }

    #[test]
    fn names_and_codes_roundtrip() {
        for t in MsgType::ALL {
            assert_eq!(MsgType::from_name(t.name()), Some(t));
            assert_eq!(MsgType::from_u8(t as u8), Some(t));
        }
        for e in WireError::ALL {
            assert_eq!(WireError::from_code(e.code()), Some(e));
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(MsgType::from_u8(0), None);
        assert_eq!(MsgType::from_u8(7), None);
    }
}
