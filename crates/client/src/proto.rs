//! The native client protocol: UDP datagrams in the fast-path wire format (DESIGN §2;
//! `docs/interfaces.md` §1). A request is a `CLIENT_REQUEST` header (`from` = client session
//! id, `seq` = sequence number) whose payload is the log entry it becomes (`docs/dataplane.md`):
//! an entry envelope `tag 1 | origin u64 | req u64 | client u64 | seq u64 | now_ms u64 |
//! len u32 | encoded [`Op`]`, all little-endian, with origin, req and now_ms 0 (the leader
//! stamps now_ms); a reply is a `CLIENT_REPLY`
//! header (same `seq`, `from` = replying replica) whose payload is
//! `status u8 | leader u64 | body`, the body an encoded [`Response`] (status OK) or a UTF-8
//! message.

use waverunner_fastpath as fp;
use waverunner_kv::codec::{decode_op, decode_response, encode_op, encode_response};
use waverunner_kv::{Op, Response};

/// Group id of the key-value service on the wire.
pub const GROUP: u64 = 1;
/// Bytes of payload one datagram carries at most.
pub const MAX_PAYLOAD: usize = fp::MAX_PAYLOAD as usize;
/// Bytes in front of the body of a reply payload.
const REPLY_PREFIX: usize = 9;

/// Reply status: applied; the body is the result.
pub const STATUS_OK: u8 = 0;
/// Reply status: refused as invalid and never applied; the body says why.
pub const STATUS_ERROR: u8 = 1;
/// Reply status: not applied now (no leader, busy, stale); retrying is safe.
pub const STATUS_RETRY: u8 = 2;
/// Reply status: timed out inside the cluster; it may or may not have been applied.
pub const STATUS_UNKNOWN: u8 = 3;

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
    /// The replica that forwarded it over the fast path (0: sent by a client).
    pub origin: u64,
    /// That replica's request id (0 from a client).
    pub req: u64,
}

/// First byte of an entry envelope.
pub const ENVELOPE_TAG: u8 = 1;
/// Bytes of an envelope before the command.
pub const ENVELOPE_PREFIX: usize = 45;

/// The payload of a `CLIENT_REQUEST`: an entry envelope around an encoded command.
pub fn envelope_payload(origin: u64, req: u64, client: u64, seq: u64, command: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(ENVELOPE_PREFIX + command.len());
    p.push(ENVELOPE_TAG);
    for v in [origin, req, client, seq, 0] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    p.extend_from_slice(&(command.len() as u32).to_le_bytes());
    p.extend_from_slice(command);
    p
}

/// Whether the reply to `op` does not depend on the state (an unconditional store whose
/// answer is always OK): the data plane may answer it itself once it commits.
pub fn is_blind_write(op: &Op) -> bool {
    matches!(
        op,
        Op::Set {
            cond: waverunner_kv::Cond::Always,
            get_old: false,
            ..
        } | Op::MSet { .. }
    )
}

/// Encodes a request datagram; fails if the operation does not fit one datagram.
pub fn encode_request(client: u64, seq: u64, op: &Op) -> Result<Vec<u8>, ProtoError> {
    let mut command = Vec::new();
    encode_op(op, &mut command);
    let payload = envelope_payload(0, 0, client, seq, &command);
    if payload.len() > MAX_PAYLOAD {
        return Err(ProtoError(format!(
            "request of {} bytes does not fit a datagram ({MAX_PAYLOAD} bytes at most); use RESP or memcached for large values",
            payload.len()
        )));
    }
    let hdr = fp::Header {
        kind: fp::CLIENT_REQUEST,
        flags: if is_blind_write(op) {
            fp::F_BLIND_WRITE
        } else {
            0
        },
        from: client,
        seq,
        len: payload.len() as u16,
        ..fp::Header::new(GROUP)
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
    if payload.len() < ENVELOPE_PREFIX || payload[0] != ENVELOPE_TAG {
        return Err(bad("too short or wrong tag"));
    }
    let u64_at = |o: usize| u64::from_le_bytes(payload[o..o + 8].try_into().expect("8 bytes"));
    let (origin, req, client, seq) = (u64_at(1), u64_at(9), u64_at(17), u64_at(25));
    let len = u32::from_le_bytes(payload[41..45].try_into().expect("4 bytes")) as usize;
    if len != payload.len() - ENVELOPE_PREFIX {
        return Err(bad("command length does not match the datagram"));
    }
    if client != h.from || seq != h.seq {
        return Err(bad("session in the envelope differs from the header"));
    }
    let op = decode_op(&payload[ENVELOPE_PREFIX..])
        .map_err(|e| ProtoError(format!("bad operation: {e}")))?;
    Ok(Request {
        client,
        seq,
        op,
        origin,
        req,
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
    let mut payload = vec![status];
    payload.extend_from_slice(&leader.to_le_bytes());
    match body {
        Ok(r) => encode_response(r, &mut payload),
        Err(m) => payload.extend_from_slice(m.as_bytes()),
    }
    if payload.len() > MAX_PAYLOAD {
        let m = "result too large for a datagram; use RESP or memcached for large values";
        payload.truncate(REPLY_PREFIX);
        payload[0] = STATUS_ERROR;
        payload.extend_from_slice(m.as_bytes());
    }
    let hdr = fp::Header {
        kind: fp::CLIENT_REPLY,
        from,
        seq,
        len: payload.len() as u16,
        ..fp::Header::new(GROUP)
    };
    let mut out = Vec::with_capacity(fp::HDR_LEN + payload.len());
    hdr.encode(&payload, &mut out);
    out
}

/// Decodes a reply datagram.
pub fn decode_reply(pkt: &[u8]) -> Result<Reply, ProtoError> {
    let (h, p) =
        fp::Header::decode(pkt).map_err(|e| ProtoError(format!("bad header: {}", e.name())))?;
    if h.kind != fp::CLIENT_REPLY || p.len() < REPLY_PREFIX {
        return Err(ProtoError("not a client reply".into()));
    }
    let status = p[0];
    let leader = u64::from_le_bytes(p[1..9].try_into().expect("8 bytes"));
    let body = if status == STATUS_OK {
        Ok(decode_response(&p[REPLY_PREFIX..])
            .map_err(|e| ProtoError(format!("bad result: {e}")))?)
    } else {
        Err(String::from_utf8_lossy(&p[REPLY_PREFIX..]).into_owned())
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
            expiry: waverunner_kv::Expiry::None,
            cond: waverunner_kv::Cond::Always,
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
    fn only_unconditional_stores_are_blind() {
        let set = |cond, get_old| Op::Set {
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            flags: 0,
            expiry: waverunner_kv::Expiry::None,
            cond,
            get_old,
        };
        let flags = |op: &Op| {
            fp::Header::decode(&encode_request(1, 1, op).unwrap())
                .unwrap()
                .0
                .flags
        };
        assert_eq!(
            flags(&set(waverunner_kv::Cond::Always, false)),
            fp::F_BLIND_WRITE
        );
        assert_eq!(flags(&set(waverunner_kv::Cond::IfAbsent, false)), 0);
        assert_eq!(flags(&set(waverunner_kv::Cond::Always, true)), 0);
        assert_eq!(
            flags(&Op::IncrBy {
                key: b"k".to_vec(),
                delta: 1
            }),
            0
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
