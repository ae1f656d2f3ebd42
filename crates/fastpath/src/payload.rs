//! The payloads inside fast-path packets, mirrored from `c/payload.h` (the one owner of their
//! layout): the **entry envelope** (a client request's payload and the data of the log entry it
//! becomes) and the **client reply** (status, leader, body), with the reply status codes.
//! Every user — the native client, the replica, both data planes, the host logic — reads and
//! writes them through this module; the XDP program through the header.

/// First byte of an entry envelope.
pub const ENV_TAG: u8 = 1;
/// First byte of a member record entry (the replica's address book).
pub const ENTRY_MEMBER_RECORD: u8 = 2;
/// Offset of `origin` (u64) in an envelope.
pub const ENV_OFF_ORIGIN: usize = 1;
/// Offset of `req` (u64).
pub const ENV_OFF_REQ: usize = 9;
/// Offset of `client` (u64).
pub const ENV_OFF_CLIENT: usize = 17;
/// Offset of `seq` (u64).
pub const ENV_OFF_SEQ: usize = 25;
/// Offset of `now_ms` (u64): the leader's clock, stamped when it orders the request.
pub const ENV_OFF_NOW_MS: usize = 33;
/// Offset of the command's length (u32).
pub const ENV_OFF_LEN: usize = 41;
/// Bytes of an envelope before the command.
pub const ENV_PREFIX: usize = 45;

/// Offset of the status byte in a client reply.
pub const REPLY_OFF_STATUS: usize = 0;
/// Offset of the leader's id (u64) in a client reply.
pub const REPLY_OFF_LEADER: usize = 1;
/// Bytes of a client reply before its body.
pub const REPLY_PREFIX: usize = 9;

/// Reply status: applied; the body is the result.
pub const STATUS_OK: u8 = 0;
/// Reply status: refused as invalid and never applied; the body says why.
pub const STATUS_ERROR: u8 = 1;
/// Reply status: not applied now (no leader, busy, stale); retrying is safe.
pub const STATUS_RETRY: u8 = 2;
/// Reply status: timed out inside the cluster; it may or may not have been applied.
pub const STATUS_UNKNOWN: u8 = 3;

/// Why bytes are not a valid envelope or reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayloadError {
    /// Fewer bytes than the layout needs.
    Short,
    /// The first byte is not [`ENV_TAG`].
    Tag(u8),
    /// The command's length does not match the bytes after the prefix.
    Length {
        /// The length field.
        said: u64,
        /// Bytes present after the prefix.
        present: u64,
    },
    /// The command is longer than the caller allows.
    TooLong(u64),
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadError::Short => f.write_str("payload too short"),
            PayloadError::Tag(t) => write!(f, "not an entry envelope (first byte {t})"),
            PayloadError::Length { said, present } => {
                write!(f, "envelope says {said} command bytes, {present} follow")
            }
            PayloadError::TooLong(n) => write!(f, "command of {n} bytes is too long"),
        }
    }
}

impl std::error::Error for PayloadError {}

/// The data of a normal log entry: who asked, for which session, when, and the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Replica that took the request from its client and answers it once applied (0: a
    /// client of the leader's data plane, which the leader answers).
    pub origin: u64,
    /// That replica's request id.
    pub req: u64,
    /// Client session id (0: no session, no deduplication).
    pub client: u64,
    /// Sequence number within the session.
    pub seq: u64,
    /// The leader's clock when it ordered the entry (ms since the Unix epoch).
    pub now_ms: u64,
    /// The state-machine command.
    pub command: Vec<u8>,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Envelope {
    /// Encodes the envelope as entry data.
    pub fn encode(&self) -> Vec<u8> {
        self.as_ref().encode()
    }

    /// The envelope with its command borrowed.
    pub fn as_ref(&self) -> EnvelopeRef<'_> {
        EnvelopeRef {
            origin: self.origin,
            req: self.req,
            client: self.client,
            seq: self.seq,
            now_ms: self.now_ms,
            command: &self.command,
        }
    }

    /// Decodes entry data; a command longer than `max_command` bytes is refused.
    pub fn decode(b: &[u8], max_command: usize) -> Result<Envelope, PayloadError> {
        EnvelopeRef::parse(b, max_command).map(|e| e.to_owned())
    }
}

/// An envelope read in place: the command borrowed from the bytes (a datagram decoded
/// without copying its command first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvelopeRef<'a> {
    /// See [`Envelope::origin`].
    pub origin: u64,
    /// See [`Envelope::req`].
    pub req: u64,
    /// See [`Envelope::client`].
    pub client: u64,
    /// See [`Envelope::seq`].
    pub seq: u64,
    /// See [`Envelope::now_ms`].
    pub now_ms: u64,
    /// The state-machine command.
    pub command: &'a [u8],
}

impl<'a> EnvelopeRef<'a> {
    /// Reads entry data; a command longer than `max_command` bytes is refused.
    pub fn parse(b: &'a [u8], max_command: usize) -> Result<EnvelopeRef<'a>, PayloadError> {
        let tag = *b.first().ok_or(PayloadError::Short)?;
        if tag != ENV_TAG {
            return Err(PayloadError::Tag(tag));
        }
        if b.len() < ENV_PREFIX {
            return Err(PayloadError::Short);
        }
        let len = u32::from_le_bytes(b[ENV_OFF_LEN..ENV_PREFIX].try_into().expect("4 bytes"));
        let present = b.len() - ENV_PREFIX;
        if len as usize != present {
            return Err(PayloadError::Length {
                said: u64::from(len),
                present: present as u64,
            });
        }
        if present > max_command {
            return Err(PayloadError::TooLong(present as u64));
        }
        Ok(EnvelopeRef {
            origin: u64_at(b, ENV_OFF_ORIGIN),
            req: u64_at(b, ENV_OFF_REQ),
            client: u64_at(b, ENV_OFF_CLIENT),
            seq: u64_at(b, ENV_OFF_SEQ),
            now_ms: u64_at(b, ENV_OFF_NOW_MS),
            command: &b[ENV_PREFIX..],
        })
    }

    /// Encodes the envelope as entry data (the command copied once, into it).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ENV_PREFIX + self.command.len());
        out.push(ENV_TAG);
        for v in [self.origin, self.req, self.client, self.seq, self.now_ms] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        let len = u32::try_from(self.command.len()).expect("a command under 4 GiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(self.command);
        debug_assert_eq!(out.len(), ENV_PREFIX + self.command.len());
        out
    }

    /// The envelope with its command copied.
    pub fn to_owned(&self) -> Envelope {
        Envelope {
            origin: self.origin,
            req: self.req,
            client: self.client,
            seq: self.seq,
            now_ms: self.now_ms,
            command: self.command.to_vec(),
        }
    }
}

/// The origin replica of entry data that is an envelope (0: a client of the leader itself).
pub fn origin_of(data: &[u8]) -> Option<u64> {
    (data.len() >= ENV_OFF_ORIGIN + 8 && data[0] == ENV_TAG).then(|| u64_at(data, ENV_OFF_ORIGIN))
}

/// Writes the leader's clock into entry data that is an envelope (the data planes stamp what
/// they order; the XDP program does the same at `FP_ENV_OFF_NOW_MS`).
pub fn stamp(data: &mut [u8], now_ms: u64) {
    if data.len() >= ENV_OFF_NOW_MS + 8 && data[0] == ENV_TAG {
        data[ENV_OFF_NOW_MS..ENV_OFF_NOW_MS + 8].copy_from_slice(&now_ms.to_le_bytes());
    }
}

/// A client reply's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientReply<'a> {
    /// One of the `STATUS_*` codes.
    pub status: u8,
    /// The leader as the replying replica knows it (0: none known).
    pub leader: u64,
    /// The result (status OK) or a UTF-8 message.
    pub body: &'a [u8],
}

impl ClientReply<'_> {
    /// Encodes the reply payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REPLY_PREFIX + self.body.len());
        out.push(self.status);
        out.extend_from_slice(&self.leader.to_le_bytes());
        out.extend_from_slice(self.body);
        out
    }

    /// Decodes a reply payload.
    pub fn decode(b: &[u8]) -> Result<ClientReply<'_>, PayloadError> {
        if b.len() < REPLY_PREFIX {
            return Err(PayloadError::Short);
        }
        Ok(ClientReply {
            status: b[REPLY_OFF_STATUS],
            leader: u64_at(b, REPLY_OFF_LEADER),
            body: &b[REPLY_PREFIX..],
        })
    }
}

/// The payload of a client reply: `body` under `status` and `leader`, or, if that does not
/// fit one datagram ([`crate::MAX_PAYLOAD`]), an error reply that says so.
pub fn reply_payload(status: u8, leader: u64, body: &[u8]) -> Vec<u8> {
    if REPLY_PREFIX + body.len() > crate::MAX_PAYLOAD as usize {
        let m = "result too large for a datagram; use RESP or memcached for large values";
        return ClientReply {
            status: STATUS_ERROR,
            leader,
            body: m.as_bytes(),
        }
        .encode();
    }
    ClientReply {
        status,
        leader,
        body,
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Byte vectors: the layout, written out by hand from `c/payload.h`.
    #[test]
    fn envelope_bytes() {
        let e = Envelope {
            origin: 0x0102,
            req: 3,
            client: 0xAABB_CCDD_EEFF_0011,
            seq: 7,
            now_ms: 1_700_000_000_000,
            command: b"cmd".to_vec(),
        };
        let b = e.encode();
        let mut want = vec![1u8];
        want.extend_from_slice(&[0x02, 0x01, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0x11, 0x00, 0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA]);
        want.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&1_700_000_000_000u64.to_le_bytes());
        want.extend_from_slice(&[3, 0, 0, 0]);
        want.extend_from_slice(b"cmd");
        assert_eq!(b, want);
        assert_eq!(Envelope::decode(&b, 3), Ok(e.clone()));
        assert_eq!(Envelope::decode(&b, 2), Err(PayloadError::TooLong(3)));
        assert_eq!(origin_of(&b), Some(0x0102));
        let mut s = b.clone();
        stamp(&mut s, 9);
        assert_eq!(Envelope::decode(&s, 3).unwrap().now_ms, 9);
    }

    #[test]
    fn malformed_envelopes_are_refused() {
        let good = Envelope {
            origin: 0,
            req: 0,
            client: 1,
            seq: 1,
            now_ms: 0,
            command: vec![5; 4],
        }
        .encode();
        assert_eq!(Envelope::decode(&[], 9), Err(PayloadError::Short));
        assert_eq!(Envelope::decode(&good[..20], 9), Err(PayloadError::Short));
        let mut other = good.clone();
        other[0] = ENTRY_MEMBER_RECORD;
        assert_eq!(Envelope::decode(&other, 9), Err(PayloadError::Tag(2)));
        assert_eq!(origin_of(&other), None, "a member record has no origin");
        assert_eq!(
            Envelope::decode(&good[..good.len() - 1], 9),
            Err(PayloadError::Length {
                said: 4,
                present: 3
            })
        );
        let mut not_env = vec![0u8; 60];
        stamp(&mut not_env, 5);
        assert_eq!(not_env, vec![0u8; 60], "only envelopes are stamped");
    }

    #[test]
    fn reply_bytes() {
        let r = ClientReply {
            status: STATUS_RETRY,
            leader: 3,
            body: b"no leader",
        };
        let b = r.encode();
        assert_eq!(&b[..9], &[2, 3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[9..], b"no leader");
        assert_eq!(ClientReply::decode(&b), Ok(r));
        assert_eq!(ClientReply::decode(&b[..8]), Err(PayloadError::Short));
        let big = vec![0u8; crate::MAX_PAYLOAD as usize];
        let r = reply_payload(STATUS_OK, 4, &big);
        let d = ClientReply::decode(&r).unwrap();
        assert_eq!(
            (d.status, d.leader),
            (STATUS_ERROR, 4),
            "too large: an error"
        );
        assert_eq!(
            reply_payload(STATUS_OK, 4, b"x"),
            [0, 4, 0, 0, 0, 0, 0, 0, 0, b'x']
        );
    }
}
