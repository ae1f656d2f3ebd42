//! The memcached binary protocol (as memcached 1.6 speaks it and `memccapable -b` checks it):
//! 24-byte big-endian headers, the request's opaque and the item's CAS in every response,
//! quiet variants that answer only failures (gets: only hits).
//!
//! Like the text codec ([`crate::memcache`]) this only turns bytes into operations and results
//! into bytes: [`parse`] takes the bytes received so far, [`command`] translates a request into
//! a [`BinAction`], [`render`] formats the store's [`Response`]. A connection speaks binary
//! when its request starts with [`REQ_MAGIC`].

use crate::ops::{Bytes, Cond, Expiry, Op, Response};
use crate::store::ERR_TOO_LARGE;

/// First byte of a request.
pub const REQ_MAGIC: u8 = 0x80;
/// First byte of a response.
pub const RES_MAGIC: u8 = 0x81;
/// Header bytes.
pub const HEADER_LEN: usize = 24;

// Opcodes.
const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const DECREMENT: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCREMENTQ: u8 = 0x15;
const DECREMENTQ: u8 = 0x16;
const QUITQ: u8 = 0x17;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const PREPENDQ: u8 = 0x1a;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

/// Response status codes.
pub mod status {
    /// No error.
    pub const OK: u16 = 0x0000;
    /// Key not found.
    pub const NOT_FOUND: u16 = 0x0001;
    /// Key exists (or the CAS differs).
    pub const EXISTS: u16 = 0x0002;
    /// Value too large.
    pub const TOO_LARGE: u16 = 0x0003;
    /// Invalid arguments.
    pub const INVALID: u16 = 0x0004;
    /// Item not stored.
    pub const NOT_STORED: u16 = 0x0005;
    /// Incr/decr on a non-numeric value.
    pub const NON_NUMERIC: u16 = 0x0006;
    /// Unknown command.
    pub const UNKNOWN: u16 = 0x0081;
    /// Out of memory.
    pub const NO_MEMORY: u16 = 0x0082;
    /// Internal error.
    pub const INTERNAL: u16 = 0x0084;
    /// Busy.
    pub const BUSY: u16 = 0x0085;
}

/// One request: header fields and body parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The opcode.
    pub opcode: u8,
    /// The key.
    pub key: Bytes,
    /// The extras.
    pub extras: Bytes,
    /// The value.
    pub value: Bytes,
    /// Echoed in the response.
    pub opaque: u32,
    /// The CAS the request names (0: none).
    pub cas: u64,
}

/// A request that cannot be read: the reply, the bytes it takes, and whether the connection
/// must be closed (its length cannot be trusted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinError {
    /// The response to write.
    pub reply: Vec<u8>,
    /// Bytes from the start of the buffer the request takes (may be more than received).
    pub skip: usize,
    /// Close after the reply.
    pub close: bool,
}

/// Parses one request from the start of `buf`: the request and the bytes it took,
/// `Ok(None)` when incomplete, or a [`BinError`]. A body longer than `max_value` plus its key
/// and extras is refused (`TOO_LARGE`) and skipped without being buffered.
pub fn parse(buf: &[u8], max_value: usize) -> Result<Option<(Request, usize)>, BinError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let opcode = buf[1];
    let key_len = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
    let extras_len = usize::from(buf[4]);
    let body_len = u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    let opaque = u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]);
    let cas = u64::from_be_bytes(buf[16..24].try_into().expect("8 bytes"));
    let fail = |st: u16, skip: usize, close: bool| BinError {
        reply: response(opcode, st, opaque, 0, &[], &[], message(st)),
        skip,
        close,
    };
    if buf[0] != REQ_MAGIC || extras_len + key_len > body_len {
        return Err(fail(status::INVALID, buf.len(), true));
    }
    let total = HEADER_LEN.saturating_add(body_len);
    if body_len - extras_len - key_len > max_value {
        return Err(fail(status::TOO_LARGE, total, false));
    }
    if buf.len() < total {
        return Ok(None);
    }
    let body = &buf[HEADER_LEN..total];
    Ok(Some((
        Request {
            opcode,
            extras: body[..extras_len].to_vec(),
            key: body[extras_len..extras_len + key_len].to_vec(),
            value: body[extras_len + key_len..].to_vec(),
            opaque,
            cas,
        },
        total,
    )))
}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinAction {
    /// Write these bytes (possibly none).
    Reply(Vec<u8>),
    /// Have the store execute `op`, then write [`render`] of its response.
    Store {
        /// The operation.
        op: Op,
        /// How to answer.
        render: BinRender,
    },
    /// `STAT`: write [`render_stats`] with the server's statistics.
    Stats {
        /// The request's opaque.
        opaque: u32,
    },
    /// Write these bytes, then close (`QUIT`, `QUITQ`).
    Close(Vec<u8>),
}

/// How to answer a request from the store's response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinRender {
    /// The request's opcode.
    pub opcode: u8,
    /// The request's opaque.
    pub opaque: u32,
    /// The key (echoed by the `K` gets).
    pub key: Bytes,
}

impl BinRender {
    fn quiet(&self) -> bool {
        matches!(
            self.opcode,
            GETQ | GETKQ
                | SETQ
                | ADDQ
                | REPLACEQ
                | DELETEQ
                | INCREMENTQ
                | DECREMENTQ
                | FLUSHQ
                | APPENDQ
                | PREPENDQ
                | GATQ
                | GATKQ
        )
    }
}

/// The message memcached puts in the body of a failure.
fn message(st: u16) -> &'static [u8] {
    match st {
        status::NOT_FOUND => b"Not found",
        status::EXISTS => b"Data exists for key.",
        status::TOO_LARGE => b"Too large.",
        status::INVALID => b"Invalid arguments",
        status::NOT_STORED => b"Not stored.",
        status::NON_NUMERIC => b"Non-numeric server-side value for incr or decr",
        status::UNKNOWN => b"Unknown command",
        status::NO_MEMORY => b"Out of memory",
        status::BUSY => b"Busy",
        _ => b"",
    }
}

/// A response packet.
pub fn response(
    opcode: u8,
    st: u16,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) -> Vec<u8> {
    let body = extras.len() + key.len() + value.len();
    let mut out = Vec::with_capacity(HEADER_LEN + body);
    out.push(RES_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&st.to_be_bytes());
    out.extend_from_slice(&(body as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// A failure answer to the request `r` describes.
pub fn failure(r: &BinRender, st: u16) -> Vec<u8> {
    response(r.opcode, st, r.opaque, 0, &[], &[], message(st))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Translates a request.
pub fn command(req: Request) -> BinAction {
    let Request {
        opcode,
        key,
        extras,
        value,
        opaque,
        cas,
    } = req;
    let render = BinRender {
        opcode,
        opaque,
        key: key.clone(),
    };
    let invalid = |r: &BinRender| BinAction::Reply(failure(r, status::INVALID));
    // Each opcode's extras, key and value, as memcached checks them.
    let shape_ok = match opcode {
        GET | GETQ | GETK | GETKQ => extras.is_empty() && !key.is_empty() && value.is_empty(),
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => extras.len() == 8 && !key.is_empty(),
        DELETE | DELETEQ => extras.is_empty() && !key.is_empty() && value.is_empty(),
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            extras.len() == 20 && !key.is_empty() && value.is_empty()
        }
        APPEND | APPENDQ | PREPEND | PREPENDQ => extras.is_empty() && !key.is_empty(),
        TOUCH | GAT | GATQ | GATK | GATKQ => extras.len() == 4 && !key.is_empty(),
        FLUSH | FLUSHQ => (extras.is_empty() || extras.len() == 4) && key.is_empty(),
        QUIT | QUITQ | NOOP | VERSION => extras.is_empty() && key.is_empty() && value.is_empty(),
        STAT => extras.is_empty() && value.is_empty(),
        _ => true,
    };
    if !shape_ok {
        return invalid(&render);
    }
    // The store's answer carries no CAS: a write that must return the new one reads the item
    // back in the same entry (`Op::Multi`).
    let with_cas = |op: Op, key: &Bytes| {
        Op::Multi(vec![
            op,
            Op::Get {
                keys: vec![key.clone()],
            },
        ])
    };
    let exp = |t: u32| crate::memcache::expiry(i64::from(t));
    let op = match opcode {
        GET | GETQ | GETK | GETKQ => Op::Get { keys: vec![key] },
        TOUCH | GAT | GATQ | GATK | GATKQ => Op::Touch {
            keys: vec![key],
            expiry: exp(be32(&extras)),
            get: true,
        },
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => {
            let flags = be32(&extras);
            let expiry = exp(be32(&extras[4..]));
            let op = if cas != 0 && !matches!(opcode, ADD | ADDQ) {
                Op::Cas {
                    key: key.clone(),
                    value,
                    flags,
                    expiry,
                    unique: cas,
                }
            } else {
                Op::Set {
                    key: key.clone(),
                    value,
                    flags,
                    expiry,
                    cond: match opcode {
                        SET | SETQ => Cond::Always,
                        ADD | ADDQ => Cond::IfAbsent,
                        _ => Cond::IfPresent,
                    },
                    get_old: false,
                }
            };
            with_cas(op, &key)
        }
        APPEND | APPENDQ => with_cas(
            Op::Append {
                key: key.clone(),
                value,
                must_exist: true,
                max_len: u64::MAX,
            },
            &key,
        ),
        PREPEND | PREPENDQ => with_cas(
            Op::Prepend {
                key: key.clone(),
                value,
                max_len: u64::MAX,
            },
            &key,
        ),
        DELETE | DELETEQ => Op::Del { keys: vec![key] },
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            let delta = be64(&extras);
            let initial = be64(&extras[8..]);
            let expiration = be32(&extras[16..]);
            let decr = matches!(opcode, DECREMENT | DECREMENTQ);
            let op = Op::McIncrOr {
                key: key.clone(),
                delta,
                decr,
                // 0xffffffff: fail on a missing key rather than create it.
                initial: (expiration != u32::MAX).then_some(initial),
                expiry: if expiration == u32::MAX {
                    Expiry::None
                } else {
                    exp(expiration)
                },
            };
            with_cas(op, &key)
        }
        FLUSH | FLUSHQ => {
            if extras.len() == 4 && be32(&extras) != 0 {
                // A delayed flush cannot be scheduled by the store.
                return BinAction::Reply(failure(&render, status::INVALID));
            }
            Op::FlushAll
        }
        NOOP => return BinAction::Reply(response(opcode, status::OK, opaque, 0, &[], &[], &[])),
        VERSION => {
            let v = concat!("waverunner-", env!("CARGO_PKG_VERSION"));
            return BinAction::Reply(response(
                opcode,
                status::OK,
                opaque,
                0,
                &[],
                &[],
                v.as_bytes(),
            ));
        }
        QUIT => return BinAction::Close(response(opcode, status::OK, opaque, 0, &[], &[], &[])),
        QUITQ => return BinAction::Close(Vec::new()),
        STAT => return BinAction::Stats { opaque },
        _ => return BinAction::Reply(failure(&render, status::UNKNOWN)),
    };
    BinAction::Store { op, render }
}

/// The answer to a request from the store's response.
pub fn render(r: &BinRender, resp: &Response) -> Vec<u8> {
    let ok = |cas: u64, extras: &[u8], key: &[u8], value: &[u8]| {
        response(r.opcode, status::OK, r.opaque, cas, extras, key, value)
    };
    let fail = |st: u16| failure(r, st);
    // Writes answered with the item read back in the same entry.
    let (resp, cas) = match resp {
        Response::Batch(rs) => match rs.as_slice() {
            [first, Response::Items(items)] => (
                first,
                items.first().and_then(Option::as_ref).map_or(0, |i| i.cas),
            ),
            _ => return fail(status::INTERNAL),
        },
        r => (r, 0),
    };
    let quiet_ok = |out: Vec<u8>| if r.quiet() { Vec::new() } else { out };
    match r.opcode {
        GET | GETQ | GETK | GETKQ | GAT | GATQ | GATK | GATKQ | TOUCH => match resp {
            Response::Items(items) => match items.first().and_then(Option::as_ref) {
                Some(item) if r.opcode == TOUCH => ok(item.cas, &[], &[], &[]),
                Some(item) => {
                    let key: &[u8] = if matches!(r.opcode, GETK | GETKQ | GATK | GATKQ) {
                        &r.key
                    } else {
                        &[]
                    };
                    ok(item.cas, &item.flags.to_be_bytes(), key, &item.value)
                }
                None if r.quiet() => Vec::new(),
                None => fail(status::NOT_FOUND),
            },
            _ => fail(status::INTERNAL),
        },
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ | APPEND | APPENDQ | PREPEND | PREPENDQ => {
            match resp {
                Response::Ok | Response::Int(_) => quiet_ok(ok(cas, &[], &[], &[])),
                Response::NotStored => fail(match r.opcode {
                    ADD | ADDQ => status::EXISTS,
                    REPLACE | REPLACEQ => status::NOT_FOUND,
                    _ => status::NOT_STORED,
                }),
                Response::CasMismatch => fail(status::EXISTS),
                Response::NotFound => fail(status::NOT_FOUND),
                Response::Error(m) if m == ERR_TOO_LARGE => fail(status::TOO_LARGE),
                _ => fail(status::INTERNAL),
            }
        }
        DELETE | DELETEQ => match resp {
            Response::Int(n) if *n > 0 => quiet_ok(ok(0, &[], &[], &[])),
            Response::Int(_) => fail(status::NOT_FOUND),
            _ => fail(status::INTERNAL),
        },
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => match resp {
            Response::UInt(n) => quiet_ok(ok(cas, &[], &[], &n.to_be_bytes())),
            Response::NotFound => fail(status::NOT_FOUND),
            Response::Error(_) => fail(status::NON_NUMERIC),
            _ => fail(status::INTERNAL),
        },
        FLUSH | FLUSHQ => match resp {
            Response::Ok => quiet_ok(ok(0, &[], &[], &[])),
            _ => fail(status::INTERNAL),
        },
        _ => fail(status::INTERNAL),
    }
}

/// The answer to `STAT`: one response per statistic (key = name, value = value), then one
/// with neither.
pub fn render_stats(opaque: u32, fields: &[(&str, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend(response(
            STAT,
            status::OK,
            opaque,
            0,
            &[],
            name.as_bytes(),
            value.as_bytes(),
        ));
    }
    out.extend(response(STAT, status::OK, opaque, 0, &[], &[], &[]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
        let mut b = vec![REQ_MAGIC, opcode];
        b.extend_from_slice(&(key.len() as u16).to_be_bytes());
        b.push(extras.len() as u8);
        b.extend_from_slice(&[0, 0, 0]);
        b.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        b.extend_from_slice(&7u32.to_be_bytes());
        b.extend_from_slice(&cas.to_be_bytes());
        b.extend_from_slice(extras);
        b.extend_from_slice(key);
        b.extend_from_slice(value);
        b
    }

    #[test]
    fn requests_parse_whole_and_refuse_what_cannot_be_trusted() {
        let set = request(SET, &[0, 0, 0, 5, 0, 0, 0, 0], b"k", b"hi", 0);
        assert_eq!(parse(&set[..30], 1024), Ok(None), "incomplete");
        let (r, used) = parse(&set, 1024).unwrap().unwrap();
        assert_eq!(used, set.len());
        assert_eq!(
            (r.opcode, r.key, r.value, r.opaque),
            (SET, b"k".to_vec(), b"hi".to_vec(), 7)
        );
        // Key and extras longer than the body: the length cannot be trusted.
        let mut bad = set.clone();
        bad[3] = 200;
        let e = parse(&bad, 1024).unwrap_err();
        assert!(e.close);
        assert_eq!(
            u16::from_be_bytes([e.reply[6], e.reply[7]]),
            status::INVALID
        );
        // Too large: refused, the body skipped even before it arrives.
        let e = parse(&set[..HEADER_LEN], 1).unwrap_err();
        assert!(!e.close);
        assert_eq!(e.skip, set.len());
        assert_eq!(
            u16::from_be_bytes([e.reply[6], e.reply[7]]),
            status::TOO_LARGE
        );
    }

    #[test]
    fn commands_map_to_operations_and_answers_to_memcached_statuses() {
        let act = |b: Vec<u8>| command(parse(&b, 1024).unwrap().unwrap().0);
        // A get with extras is invalid; an unknown opcode is unknown.
        let BinAction::Reply(r) = act(request(GET, &[1, 2, 3, 4], b"k", b"", 0)) else {
            panic!()
        };
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), status::INVALID);
        let BinAction::Reply(r) = act(request(0x60, &[], b"", b"", 0)) else {
            panic!()
        };
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), status::UNKNOWN);
        // A set with a CAS is a compare-and-swap, answered with the new CAS.
        let BinAction::Store { op, render: how } =
            act(request(SET, &[0, 0, 0, 5, 0, 0, 0, 0], b"k", b"hi", 9))
        else {
            panic!()
        };
        assert!(matches!(&op, Op::Multi(ops) if matches!(ops[0], Op::Cas { unique: 9, .. })));
        let item = crate::ops::Item {
            value: b"hi".to_vec(),
            flags: 5,
            cas: 12,
        };
        let ok = render(
            &how,
            &Response::Batch(vec![Response::Ok, Response::Items(vec![Some(item)])]),
        );
        assert_eq!(u16::from_be_bytes([ok[6], ok[7]]), status::OK);
        assert_eq!(u64::from_be_bytes(ok[16..24].try_into().unwrap()), 12);
        let mismatch = render(
            &how,
            &Response::Batch(vec![Response::CasMismatch, Response::Items(vec![None])]),
        );
        assert_eq!(
            u16::from_be_bytes([mismatch[6], mismatch[7]]),
            status::EXISTS
        );
        // Quiet: a success says nothing, a miss of GETQ neither, a failure does.
        let BinAction::Store { render: q, .. } = act(request(SETQ, &[0; 8], b"k", b"v", 0)) else {
            panic!()
        };
        assert!(render(
            &q,
            &Response::Batch(vec![Response::Ok, Response::Items(vec![None])])
        )
        .is_empty());
        let BinAction::Store { render: gq, .. } = act(request(GETQ, &[], b"k", b"", 0)) else {
            panic!()
        };
        assert!(render(&gq, &Response::Items(vec![None])).is_empty());
        // incr with expiration 0xffffffff must not create the key.
        let mut extras = 1u64.to_be_bytes().to_vec();
        extras.extend_from_slice(&5u64.to_be_bytes());
        extras.extend_from_slice(&u32::MAX.to_be_bytes());
        let BinAction::Store { op, .. } = act(request(INCREMENT, &extras, b"n", b"", 0)) else {
            panic!()
        };
        assert!(
            matches!(&op, Op::Multi(ops) if matches!(ops[0], Op::McIncrOr { initial: None, .. }))
        );
    }
}
