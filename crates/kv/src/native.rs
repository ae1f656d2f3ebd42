//! The key-value service's native client protocol: UDP datagrams in the fast-path wire format
//! (DESIGN §2; `docs/interfaces.md` §1), spoken by the native client (`waverunner-client`) and
//! the replica's native front-end. A request is a `CLIENT_REQUEST` header (`from` = client
//! session id, `seq` = sequence number) whose payload is the log entry it becomes: an entry
//! envelope ([`waverunner_fastpath::payload::Envelope`], the one owner of its layout) around an
//! encoded [`Op`], with origin, req and now_ms 0 (the leader stamps now_ms); a reply is a
//! `CLIENT_REPLY` header (same `seq`, `from` = replying replica) whose payload is a
//! [`ClientReply`]: status, leader, and an encoded [`Response`] (status OK) or a UTF-8 message.

use waverunner_fastpath as fp;
use waverunner_fastpath::payload::{reply_payload, ClientReply, Envelope, EnvelopeRef};
pub use waverunner_fastpath::payload::{STATUS_ERROR, STATUS_OK, STATUS_RETRY, STATUS_UNKNOWN};

use crate::codec::{decode_op, decode_response, encode_op, encode_response};
use crate::{Op, Response};

/// Bytes of payload one datagram carries at most.
pub const MAX_PAYLOAD: usize = fp::MAX_PAYLOAD as usize;

/// Bytes of one valid datagram at most: the header and the largest payload.
pub const MAX_DATAGRAM: usize = fp::HDR_LEN + MAX_PAYLOAD;

/// Why a datagram is not a valid request or reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtoError {}

/// A decoded request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Session id (0: no session).
    pub client: u64,
    /// Sequence number within the session.
    pub seq: u64,
    /// The operation.
    pub op: Op,
    /// The operation as the envelope carries it (`codec::encode_op`'s bytes): what an entry
    /// holds, so a replica proposing it need not encode it again.
    pub command: Vec<u8>,
    /// Non-zero: a replica's forward (replicas forward over TCP, so the native front-end
    /// refuses such a datagram as bad input); 0: sent by a client.
    pub origin: u64,
    /// That replica's request id (0 from a client).
    pub req: u64,
}

/// Whether the reply to `op` does not depend on the state (an unconditional store whose
/// answer is always OK): the data plane may answer it itself once it commits.
pub fn is_blind_write(op: &Op) -> bool {
    matches!(
        op,
        Op::Set {
            cond: crate::Cond::Always,
            get_old: false,
            ..
        } | Op::MSet { .. }
    )
}

/// The header flags of a request for `op`: a blind write the data plane may answer itself;
/// a read the leader's data plane passes to its host, which serves reads batched behind one
/// entry instead of ordering each (`fp::F_READ`).
pub fn request_flags(op: &Op) -> u16 {
    if is_blind_write(op) {
        fp::F_BLIND_WRITE
    } else if op.is_read_only() {
        fp::F_READ
    } else {
        0
    }
}

/// Encodes a request datagram; fails if the operation does not fit one datagram.
pub fn encode_request(client: u64, seq: u64, op: &Op) -> Result<Vec<u8>, ProtoError> {
    let mut command = Vec::new();
    encode_op(op, &mut command);
    let payload = Envelope {
        origin: 0,
        req: 0,
        client,
        seq,
        now_ms: 0,
        command,
    }
    .encode();
    if payload.len() > MAX_PAYLOAD {
        return Err(ProtoError(format!(
            "request of {} bytes does not fit a datagram ({MAX_PAYLOAD} bytes at most); use RESP or memcached for large values",
            payload.len()
        )));
    }
    let hdr = fp::Header {
        kind: fp::CLIENT_REQUEST,
        flags: request_flags(op),
        from: client,
        seq,
        len: payload.len() as u16,
        ..fp::Header::new(u64::from(fp::GROUP))
    };
    let mut out = Vec::with_capacity(fp::HDR_LEN + payload.len());
    hdr.encode(&payload, &mut out);
    Ok(out)
}

/// Decodes a request datagram.
pub fn decode_request(pkt: &[u8]) -> Result<Request, ProtoError> {
    let (h, payload) =
        fp::Header::decode(pkt).map_err(|e| ProtoError(format!("bad header: {}", e.name())))?;
    if h.kind != fp::CLIENT_REQUEST {
        return Err(ProtoError(format!(
            "not a client request (type {})",
            h.kind
        )));
    }
    let bad = |m: &str| ProtoError(format!("bad request envelope: {m}"));
    let env = EnvelopeRef::parse(payload, MAX_PAYLOAD).map_err(|e| bad(&e.to_string()))?;
    if env.client != h.from || env.seq != h.seq {
        return Err(bad("session in the envelope differs from the header"));
    }
    let op = decode_op(env.command).map_err(|e| ProtoError(format!("bad operation: {e}")))?;
    Ok(Request {
        client: env.client,
        seq: env.seq,
        op,
        command: env.command.to_vec(),
        origin: env.origin,
        req: env.req,
    })
}

/// A decoded reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's sequence number.
    pub seq: u64,
    /// The replica that answered.
    pub from: u64,
    /// `STATUS_*`.
    pub status: u8,
    /// The leader as the replica knows it (0: unknown).
    pub leader: u64,
    /// The result (status OK) or a message.
    pub body: Result<Response, String>,
}

/// Encodes a reply datagram. A result too large for one datagram becomes an error reply.
pub fn encode_reply(
    from: u64,
    seq: u64,
    status: u8,
    leader: u64,
    body: Result<&Response, &str>,
) -> Vec<u8> {
    let mut encoded = Vec::new();
    let body: &[u8] = match body {
        Ok(r) => {
            encode_response(r, &mut encoded);
            &encoded
        }
        Err(m) => m.as_bytes(),
    };
    let payload = reply_payload(status, leader, body);
    let hdr = fp::Header {
        kind: fp::CLIENT_REPLY,
        from,
        seq,
        len: payload.len() as u16,
        ..fp::Header::new(u64::from(fp::GROUP))
    };
    let mut out = Vec::with_capacity(fp::HDR_LEN + payload.len());
    hdr.encode(&payload, &mut out);
    out
}

/// Decodes a reply datagram.
pub fn decode_reply(pkt: &[u8]) -> Result<Reply, ProtoError> {
    let (h, p) =
        fp::Header::decode(pkt).map_err(|e| ProtoError(format!("bad header: {}", e.name())))?;
    let r = match ClientReply::decode(p) {
        Ok(r) if h.kind == fp::CLIENT_REPLY => r,
        _ => return Err(ProtoError("not a client reply".into())),
    };
    let (status, leader) = (r.status, r.leader);
    let body = if status == STATUS_OK {
        Ok(decode_response(r.body).map_err(|e| ProtoError(format!("bad result: {e}")))?)
    } else {
        Err(String::from_utf8_lossy(r.body).into_owned())
    };
    Ok(Reply {
        seq: h.seq,
        from: h.from,
        status,
        leader,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let op = Op::Get {
            keys: vec![b"k".to_vec()],
        };
        let pkt = encode_request(7, 9, &op).unwrap();
        assert_eq!(
            decode_request(&pkt).unwrap(),
            Request {
                client: 7,
                seq: 9,
                command: {
                    let mut c = Vec::new();
                    crate::codec::encode_op(&op, &mut c);
                    c
                },
                op,
                origin: 0,
                req: 0,
            }
        );
        let r = decode_reply(&encode_reply(2, 9, STATUS_OK, 3, Ok(&Response::Int(5)))).unwrap();
        assert_eq!(
            (r.seq, r.from, r.leader, r.body),
            (9, 2, 3, Ok(Response::Int(5)))
        );
        let r = decode_reply(&encode_reply(2, 9, STATUS_RETRY, 0, Err("no leader"))).unwrap();
        assert_eq!(r.body, Err("no leader".to_string()));
    }

    #[test]
    fn oversize_is_refused_not_truncated() {
        let op = Op::Set {
            key: b"k".to_vec(),
            value: vec![0; 2_000],
            flags: 0,
            expiry: crate::Expiry::None,
            cond: crate::Cond::Always,
            get_old: false,
        };
        assert!(encode_request(1, 1, &op).is_err());
        let big = Response::Keys(vec![vec![b'x'; 100]; 100]);
        let r = decode_reply(&encode_reply(1, 1, STATUS_OK, 0, Ok(&big))).unwrap();
        assert_eq!(r.status, STATUS_ERROR);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode_request(b"hello").is_err());
        assert!(decode_reply(&[0; 80]).is_err());
        let mut pkt = encode_request(1, 1, &Op::DbSize).unwrap();
        let n = pkt.len();
        pkt[n - 1] ^= 0xff;
        let _ = decode_request(&pkt);
    }
}

#[cfg(test)]
mod envelope_tests {
    use super::*;

    #[test]
    fn only_unconditional_stores_are_blind_and_reads_are_flagged() {
        let set = |cond, get_old| Op::Set {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            flags: 0,
            expiry: crate::Expiry::None,
            cond,
            get_old,
        };
        let flags = |op: &Op| {
            fp::Header::decode(&encode_request(1, 1, op).unwrap())
                .unwrap()
                .0
                .flags
        };
        assert_eq!(flags(&set(crate::Cond::Always, false)), fp::F_BLIND_WRITE);
        assert_eq!(flags(&set(crate::Cond::IfAbsent, false)), 0);
        assert_eq!(flags(&set(crate::Cond::Always, true)), 0);
        assert_eq!(
            flags(&Op::IncrBy {
                key: b"k".to_vec(),
                delta: 1
            }),
            0
        );
        // A read is flagged: the leader's data plane passes it up instead of ordering it.
        assert_eq!(
            flags(&Op::Get {
                keys: vec![b"k".to_vec()]
            }),
            fp::F_READ
        );
    }

    #[test]
    fn a_request_whose_envelope_disagrees_with_its_header_is_refused() {
        let op = Op::Get {
            keys: vec![b"k".to_vec()],
        };
        let mut pkt = encode_request(7, 9, &op).unwrap();
        pkt[fp::HDR_LEN + 17] ^= 1; // the envelope's client id
        assert!(decode_request(&pkt).is_err());
        let mut pkt = encode_request(7, 9, &op).unwrap();
        pkt[fp::HDR_LEN] = 9; // not an envelope
        assert!(decode_request(&pkt).is_err());
    }
}
