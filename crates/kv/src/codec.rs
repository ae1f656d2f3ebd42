//! The binary encoding of [`Op`] and [`Response`]: what goes into log entries and onto the
//! native wire protocol.
//!
//! # Format
//!
//! Compact and little-endian. Every message starts with one tag byte naming the variant; tags
//! are never reused, so a variant whose layout changes gets a new tag (the tag is the version).
//! Then the variant's fields in declaration order:
//!
//! - integers: fixed width, little-endian (`u32` flags and counts, `u64`/`i64` numbers),
//! - `bool`: one byte, 0 or 1,
//! - bytes (keys, values, patterns, messages): a `u32` length, then the bytes,
//! - lists: a `u32` count, then the elements,
//! - `Option<T>`: one byte, 0 (none) or 1 (some) followed by `T`,
//! - [`Expiry`]: a byte, 0 `None`, 1 `Keep`, 2 `AfterMs` + `i64`, 3 `AtMs` + `u64`,
//! - [`Cond`]: a byte, 0 `Always`, 1 `IfAbsent`, 2 `IfPresent`,
//! - [`Item`]: value bytes, `u32` flags, `u64` CAS unique,
//! - [`Response::Error`]'s message: bytes that must be UTF-8.
//!
//! | tag | `Op`       | fields |
//! |----:|------------|--------|
//! | 1   | `Get`      | keys |
//! | 2   | `Exists`   | keys |
//! | 3   | `Strlen`   | key |
//! | 4   | `Ttl`      | key |
//! | 5   | `DbSize`   | |
//! | 6   | `Keys`     | pattern |
//! | 7   | `Scan`     | cursor, option pattern, `u32` count |
//! | 8   | `Set`      | key, value, `u32` flags, expiry, cond, bool get_old |
//! | 9   | `MSet`     | `u32` count, (key, value) pairs |
//! | 10  | `Cas`      | key, value, `u32` flags, expiry, `u64` unique |
//! | 11  | `Del`      | keys |
//! | 12  | `IncrBy`   | key, `i64` delta |
//! | 13  | `McIncr`   | key, `u64` delta, bool decr |
//! | 14  | `Append`   | key, value, bool must_exist, `u64` max_len |
//! | 15  | `Prepend`  | key, value, `u64` max_len |
//! | 16  | `Touch`    | keys, expiry, bool get |
//! | 17  | `FlushAll` | |
//! | 18  | `Sweep`    | |
//! | 19  | `Batch`    | `u32` count, then each operation as bytes (its own encoding); never nested |
//! | 20  | `Multi`    | as `Batch`; inside a batch or alone, holds neither a batch nor a multi |
//! | 21  | `GetDel`   | key |
//! | 22  | `GetEx`    | key, option expiry |
//! | 23  | `Rename`   | from, to, bool nx |
//! | 24  | `Copy`     | from, to, bool replace |
//! | 25  | `SetRange` | key, `u64` offset, value, `u64` max_len |
//! | 26  | `GetRange` | key, `i64` start, `i64` end |
//! | 27  | `MSetNx`   | `u32` count, (key, value) pairs |
//! | 28  | `ExpireIf` | key, expiry, `u8` cond (1 NX, 2 XX, 3 GT, 4 LT, 5 XX LT) |
//! | 29  | `ExpireTime` | key |
//! | 30  | `IncrByFloat` | key, `u64` f64 bits |
//! | 31  | `RandomKey` | `u64` seed |
//! | 32  | `SetBit`   | key, `u64` offset, bool bit, `u64` max_len |
//! | 33  | `GetBit`   | key, `u64` offset |
//! | 34  | `McIncrOr` | key, `u64` delta, bool decr, option `u64` initial, expiry |
//! | 35  | `Cmd` that reads | `u64` seed, args (the name first: a read-only command) |
//! | 36  | `Cmd` that writes | `u64` seed, args |
//! | 37  | `Scan` with a type | cursor, option pattern, `u32` count, type name |
//! | 38  | `WatchCheck` | `u64` since, keys (first in a `Multi`, nowhere else inside one) |
//! | 39  | `Ready`    | keys, kind |
//!
//! | tag | `Response`    | fields |
//! |----:|---------------|--------|
//! | 1   | `Ok`          | |
//! | 2   | `NotStored`   | |
//! | 3   | `CasMismatch` | |
//! | 4   | `NotFound`    | |
//! | 5   | `Items`       | `u32` count, option items |
//! | 6   | `Int`         | `i64` |
//! | 7   | `UInt`        | `u64` |
//! | 8   | `Keys`        | keys |
//! | 9   | `ScanPage`    | next, keys |
//! | 10  | `Error`       | message |
//! | 11  | `Batch`       | `u32` count, then each response as bytes (its own encoding); a batch's may hold a transaction's (one level) |
//! | 12  | `Reply`       | a [`Reply`]: a tag byte (1 nil, 2 nil array, 3 status, 4 int, 5 bulk, 6 double, 7 array, 8 map, 9 set, 10 error, 11 pairs), then its text, `i64`, bytes, or `u32` count and elements; nested at most [`MAX_REPLY_DEPTH`] deep |
//!
//! # Limits
//!
//! A byte string or list longer than `u32::MAX` cannot be encoded: the encoders panic on one
//! (front-ends bound keys and values far below that).
//!
//! # Decoding
//!
//! Decoding checks everything and never panics: unknown tags, bad booleans and enum bytes,
//! truncated input, non-UTF-8 error messages and trailing bytes are all a [`DecodeError`].
//! Every length and count read is checked against the input that remains before anything is
//! allocated for it, so garbage cannot make the decoder allocate more than a small multiple of
//! the input's size.

use std::fmt;

use crate::ops::{Bytes, Cond, ExpireCond, Expiry, Item, Op, Reply, Response};

/// How deep a [`Reply`] may nest (an array of arrays of … ): deeper is a decoding error.
pub const MAX_REPLY_DEPTH: u8 = 8;

/// Why some bytes are not a valid encoding. The message names the problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "decode error: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

// ---- op tags
const OP_GET: u8 = 1;
const OP_EXISTS: u8 = 2;
const OP_STRLEN: u8 = 3;
const OP_TTL: u8 = 4;
const OP_DBSIZE: u8 = 5;
const OP_KEYS: u8 = 6;
const OP_SCAN: u8 = 7;
const OP_SET: u8 = 8;
const OP_MSET: u8 = 9;
const OP_CAS: u8 = 10;
const OP_DEL: u8 = 11;
const OP_INCRBY: u8 = 12;
const OP_MCINCR: u8 = 13;
const OP_APPEND: u8 = 14;
const OP_PREPEND: u8 = 15;
const OP_TOUCH: u8 = 16;
const OP_FLUSHALL: u8 = 17;
const OP_SWEEP: u8 = 18;
const OP_BATCH: u8 = 19;
const OP_MULTI: u8 = 20;
const OP_GETDEL: u8 = 21;
const OP_GETEX: u8 = 22;
const OP_RENAME: u8 = 23;
const OP_COPY: u8 = 24;
const OP_SETRANGE: u8 = 25;
const OP_GETRANGE: u8 = 26;
const OP_MSETNX: u8 = 27;
const OP_EXPIREIF: u8 = 28;
const OP_EXPIRETIME: u8 = 29;
const OP_INCRBYFLOAT: u8 = 30;
const OP_RANDOMKEY: u8 = 31;
const OP_SETBIT: u8 = 32;
const OP_GETBIT: u8 = 33;
const OP_MCINCROR: u8 = 34;
const OP_CMD_READ: u8 = 35;
const OP_CMD_WRITE: u8 = 36;
const OP_SCAN_TYPE: u8 = 37;
const OP_WATCH_CHECK: u8 = 38;
const OP_READY: u8 = 39;

// ---- response tags
const R_OK: u8 = 1;
const R_NOT_STORED: u8 = 2;
const R_CAS_MISMATCH: u8 = 3;
const R_NOT_FOUND: u8 = 4;
const R_ITEMS: u8 = 5;
const R_INT: u8 = 6;
const R_UINT: u8 = 7;
const R_KEYS: u8 = 8;
const R_SCAN_PAGE: u8 = 9;
const R_ERROR: u8 = 10;
const R_BATCH: u8 = 11;
const R_REPLY: u8 = 12;

/// Appends the encoding of `op` to `out`.
///
/// # Panics
///
/// If a byte string or list in `op` is longer than `u32::MAX`.
pub fn encode_op(op: &Op, out: &mut Vec<u8>) {
    match op {
        Op::Get { keys } => {
            out.push(OP_GET);
            put_list(out, keys);
        }
        Op::Exists { keys } => {
            out.push(OP_EXISTS);
            put_list(out, keys);
        }
        Op::Strlen { key } => {
            out.push(OP_STRLEN);
            put_bytes(out, key);
        }
        Op::Ttl { key } => {
            out.push(OP_TTL);
            put_bytes(out, key);
        }
        Op::DbSize => out.push(OP_DBSIZE),
        Op::Keys { pattern } => {
            out.push(OP_KEYS);
            put_bytes(out, pattern);
        }
        Op::Scan {
            cursor,
            pattern,
            count,
            kind,
        } => {
            out.push(if kind.is_some() {
                OP_SCAN_TYPE
            } else {
                OP_SCAN
            });
            put_bytes(out, cursor);
            match pattern {
                None => out.push(0),
                Some(p) => {
                    out.push(1);
                    put_bytes(out, p);
                }
            }
            put_u32(out, *count);
            if let Some(k) = kind {
                put_bytes(out, k);
            }
        }
        Op::Ready { keys, kind } => {
            out.push(OP_READY);
            put_list(out, keys);
            put_bytes(out, kind);
        }
        Op::WatchCheck { since, keys } => {
            out.push(OP_WATCH_CHECK);
            put_u64(out, *since);
            put_list(out, keys);
        }
        Op::Cmd { args, seed } => {
            // What is encoded decodes (a replica applying a command its front-end decoded
            // must change the state as the others do from the bytes).
            let spec = args.first().and_then(|n| crate::types::spec(n));
            let read_only = spec.expect("a command of a known type").read_only();
            out.push(if read_only { OP_CMD_READ } else { OP_CMD_WRITE });
            put_u64(out, *seed);
            put_list(out, args);
        }
        Op::Set {
            key,
            value,
            flags,
            expiry,
            cond,
            get_old,
        } => {
            out.push(OP_SET);
            put_bytes(out, key);
            put_bytes(out, value);
            put_u32(out, *flags);
            put_expiry(out, expiry);
            put_cond(out, *cond);
            out.push(u8::from(*get_old));
        }
        Op::MSet { pairs } => {
            out.push(OP_MSET);
            put_len(out, pairs.len());
            for (k, v) in pairs {
                put_bytes(out, k);
                put_bytes(out, v);
            }
        }
        Op::Cas {
            key,
            value,
            flags,
            expiry,
            unique,
        } => {
            out.push(OP_CAS);
            put_bytes(out, key);
            put_bytes(out, value);
            put_u32(out, *flags);
            put_expiry(out, expiry);
            put_u64(out, *unique);
        }
        Op::Del { keys } => {
            out.push(OP_DEL);
            put_list(out, keys);
        }
        Op::IncrBy { key, delta } => {
            out.push(OP_INCRBY);
            put_bytes(out, key);
            put_u64(out, *delta as u64);
        }
        Op::McIncr { key, delta, decr } => {
            out.push(OP_MCINCR);
            put_bytes(out, key);
            put_u64(out, *delta);
            out.push(u8::from(*decr));
        }
        Op::Append {
            key,
            value,
            must_exist,
            max_len,
        } => {
            out.push(OP_APPEND);
            put_bytes(out, key);
            put_bytes(out, value);
            out.push(u8::from(*must_exist));
            put_u64(out, *max_len);
        }
        Op::Prepend {
            key,
            value,
            max_len,
        } => {
            out.push(OP_PREPEND);
            put_bytes(out, key);
            put_bytes(out, value);
            put_u64(out, *max_len);
        }
        Op::Touch { keys, expiry, get } => {
            out.push(OP_TOUCH);
            put_list(out, keys);
            put_expiry(out, expiry);
            out.push(u8::from(*get));
        }
        Op::FlushAll => out.push(OP_FLUSHALL),
        Op::Sweep => out.push(OP_SWEEP),
        Op::Batch(ops) => {
            assert!(
                ops.iter().all(|o| !matches!(o, Op::Batch(_))),
                "a nested batch"
            );
            put_batch_header(out, ops.len());
            for op in ops {
                put_nested(out, |out| encode_op(op, out));
            }
        }
        Op::GetDel { key } => {
            out.push(OP_GETDEL);
            put_bytes(out, key);
        }
        Op::GetEx { key, expiry } => {
            out.push(OP_GETEX);
            put_bytes(out, key);
            out.push(u8::from(expiry.is_some()));
            if let Some(e) = expiry {
                put_expiry(out, e);
            }
        }
        Op::Rename { from, to, nx } => {
            out.push(OP_RENAME);
            put_bytes(out, from);
            put_bytes(out, to);
            out.push(u8::from(*nx));
        }
        Op::Copy { from, to, replace } => {
            out.push(OP_COPY);
            put_bytes(out, from);
            put_bytes(out, to);
            out.push(u8::from(*replace));
        }
        Op::SetRange {
            key,
            offset,
            value,
            max_len,
        } => {
            out.push(OP_SETRANGE);
            put_bytes(out, key);
            put_u64(out, *offset);
            put_bytes(out, value);
            put_u64(out, *max_len);
        }
        Op::GetRange { key, start, end } => {
            out.push(OP_GETRANGE);
            put_bytes(out, key);
            put_u64(out, *start as u64);
            put_u64(out, *end as u64);
        }
        Op::MSetNx { pairs } => {
            out.push(OP_MSETNX);
            put_len(out, pairs.len());
            for (k, v) in pairs {
                put_bytes(out, k);
                put_bytes(out, v);
            }
        }
        Op::ExpireIf { key, expiry, cond } => {
            out.push(OP_EXPIREIF);
            put_bytes(out, key);
            put_expiry(out, expiry);
            out.push(match cond {
                ExpireCond::Nx => 1,
                ExpireCond::Xx => 2,
                ExpireCond::Gt => 3,
                ExpireCond::Lt => 4,
                ExpireCond::XxLt => 5,
            });
        }
        Op::ExpireTime { key } => {
            out.push(OP_EXPIRETIME);
            put_bytes(out, key);
        }
        Op::IncrByFloat { key, delta } => {
            out.push(OP_INCRBYFLOAT);
            put_bytes(out, key);
            put_u64(out, *delta);
        }
        Op::RandomKey { seed } => {
            out.push(OP_RANDOMKEY);
            put_u64(out, *seed);
        }
        Op::SetBit {
            key,
            offset,
            bit,
            max_len,
        } => {
            out.push(OP_SETBIT);
            put_bytes(out, key);
            put_u64(out, *offset);
            out.push(u8::from(*bit));
            put_u64(out, *max_len);
        }
        Op::GetBit { key, offset } => {
            out.push(OP_GETBIT);
            put_bytes(out, key);
            put_u64(out, *offset);
        }
        Op::McIncrOr {
            key,
            delta,
            decr,
            initial,
            expiry,
        } => {
            out.push(OP_MCINCROR);
            put_bytes(out, key);
            put_u64(out, *delta);
            out.push(u8::from(*decr));
            out.push(u8::from(initial.is_some()));
            put_u64(out, initial.unwrap_or(0));
            put_expiry(out, expiry);
        }
        Op::Multi(ops) => {
            assert!(
                !ops.is_empty()
                    && ops
                        .iter()
                        .all(|o| !matches!(o, Op::Batch(_) | Op::Multi(_))),
                "an empty or nested transaction"
            );
            assert!(
                ops.iter()
                    .skip(1)
                    .all(|o| !matches!(o, Op::WatchCheck { .. })),
                "a watch check inside a transaction"
            );
            out.push(OP_MULTI);
            put_len(out, ops.len());
            for op in ops {
                put_nested(out, |out| encode_op(op, out));
            }
        }
    }
}

/// The [`Op::Batch`] of operations already encoded ([`encode_op`]), without decoding them.
///
/// # Panics
///
/// If `ops` is empty or one of them is a batch.
pub fn batch_command(ops: &[&[u8]]) -> Vec<u8> {
    assert!(
        ops.iter().all(|o| o.first() != Some(&OP_BATCH)),
        "a nested batch"
    );
    let body: usize = ops.iter().map(|o| o.len() + 4).sum();
    let mut out = Vec::with_capacity(body + 5);
    put_batch_header(&mut out, ops.len());
    for o in ops {
        put_bytes(&mut out, o);
    }
    out
}

/// A batch's tag and count; the operations follow, each as bytes.
fn put_batch_header(out: &mut Vec<u8>, n: usize) {
    assert!(n > 0, "an empty batch");
    out.push(OP_BATCH);
    put_len(out, n);
}

/// Appends what `f` encodes as bytes (a `u32` length, then them), without a copy.
fn put_nested(out: &mut Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    put_u32(out, 0);
    f(out);
    let n = u32::try_from(out.len() - at - 4).expect("a nested encoding of 4 GiB or more");
    out[at..at + 4].copy_from_slice(&n.to_le_bytes());
}

fn is_read_only_tag(tag: u8) -> bool {
    matches!(
        tag,
        OP_GET
            | OP_EXISTS
            | OP_STRLEN
            | OP_TTL
            | OP_DBSIZE
            | OP_KEYS
            | OP_SCAN
            | OP_GETRANGE
            | OP_EXPIRETIME
            | OP_RANDOMKEY
            | OP_GETBIT
            | OP_CMD_READ
            | OP_SCAN_TYPE
            | OP_READY
    )
}

/// Whether the encoded operation `b` only reads ([`Op::is_read_only`]), from its tag alone:
/// the replica asks for every request, and decoding would copy the value (64 MiB) to find
/// out. Malformed input is not refused here; its decoding is, wherever it is answered.
///
/// A batch only reads if every operation in it does: its tags are found by their lengths,
/// without decoding.
pub fn is_read_only_command(b: &[u8]) -> bool {
    match b.first() {
        Some(&OP_BATCH) => {
            let mut r = Reader::new(&b[1..]);
            let Ok(n) = r.u32() else { return false };
            n > 0
                && (0..n).all(|_| {
                    r.u32()
                        .and_then(|len| r.take(len as usize))
                        .is_ok_and(|op| op.first().is_some_and(|&t| is_read_only_tag(t)))
                })
                && r.remaining() == 0
        }
        Some(&t) => is_read_only_tag(t),
        None => false,
    }
}

/// Decodes one operation that fills all of `b` (trailing bytes are an error).
pub fn decode_op(b: &[u8]) -> Result<Op, DecodeError> {
    let mut r = Reader::new(b);
    let op = match r.u8()? {
        OP_GET => Op::Get { keys: r.list()? },
        OP_EXISTS => Op::Exists { keys: r.list()? },
        OP_STRLEN => Op::Strlen { key: r.bytes()? },
        OP_TTL => Op::Ttl { key: r.bytes()? },
        OP_DBSIZE => Op::DbSize,
        OP_KEYS => Op::Keys {
            pattern: r.bytes()?,
        },
        tag @ (OP_SCAN | OP_SCAN_TYPE) => Op::Scan {
            cursor: r.bytes()?,
            pattern: if r.bool()? { Some(r.bytes()?) } else { None },
            count: r.u32()?,
            kind: if tag == OP_SCAN_TYPE {
                Some(r.bytes()?)
            } else {
                None
            },
        },
        OP_READY => Op::Ready {
            keys: r.list()?,
            kind: r.bytes()?,
        },
        OP_WATCH_CHECK => Op::WatchCheck {
            since: r.u64()?,
            keys: r.list()?,
        },
        tag @ (OP_CMD_READ | OP_CMD_WRITE) => {
            let seed = r.u64()?;
            let args = r.list()?;
            let spec = args
                .first()
                .and_then(|n| crate::types::spec(n))
                .ok_or(DecodeError("unknown command"))?;
            if spec.read_only() != (tag == OP_CMD_READ) {
                return Err(DecodeError("a command's tag disagrees with what it does"));
            }
            Op::Cmd { args, seed }
        }
        OP_SET => Op::Set {
            key: r.bytes()?,
            value: r.bytes()?,
            flags: r.u32()?,
            expiry: r.expiry()?,
            cond: r.cond()?,
            get_old: r.bool()?,
        },
        OP_MSET => {
            // Each pair takes at least two lengths.
            let n = r.count(8)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((r.bytes()?, r.bytes()?));
            }
            Op::MSet { pairs }
        }
        OP_CAS => Op::Cas {
            key: r.bytes()?,
            value: r.bytes()?,
            flags: r.u32()?,
            expiry: r.expiry()?,
            unique: r.u64()?,
        },
        OP_DEL => Op::Del { keys: r.list()? },
        OP_INCRBY => Op::IncrBy {
            key: r.bytes()?,
            delta: r.u64()? as i64,
        },
        OP_MCINCR => Op::McIncr {
            key: r.bytes()?,
            delta: r.u64()?,
            decr: r.bool()?,
        },
        OP_APPEND => Op::Append {
            key: r.bytes()?,
            value: r.bytes()?,
            must_exist: r.bool()?,
            max_len: r.u64()?,
        },
        OP_PREPEND => Op::Prepend {
            key: r.bytes()?,
            value: r.bytes()?,
            max_len: r.u64()?,
        },
        OP_TOUCH => Op::Touch {
            keys: r.list()?,
            expiry: r.expiry()?,
            get: r.bool()?,
        },
        OP_FLUSHALL => Op::FlushAll,
        OP_SWEEP => Op::Sweep,
        OP_BATCH => {
            // Each operation takes at least its length and tag.
            let n = r.count(5)?;
            if n == 0 {
                return Err(DecodeError("empty batch"));
            }
            let mut ops = Vec::with_capacity(n);
            for _ in 0..n {
                let len = r.u32()? as usize;
                let b = r.take(len)?;
                if b.first() == Some(&OP_BATCH) {
                    return Err(DecodeError("nested batch"));
                }
                ops.push(decode_op(b)?);
            }
            Op::Batch(ops)
        }
        OP_GETDEL => Op::GetDel { key: r.bytes()? },
        OP_GETEX => Op::GetEx {
            key: r.bytes()?,
            expiry: if r.bool()? { Some(r.expiry()?) } else { None },
        },
        OP_RENAME => Op::Rename {
            from: r.bytes()?,
            to: r.bytes()?,
            nx: r.bool()?,
        },
        OP_COPY => Op::Copy {
            from: r.bytes()?,
            to: r.bytes()?,
            replace: r.bool()?,
        },
        OP_SETRANGE => Op::SetRange {
            key: r.bytes()?,
            offset: r.u64()?,
            value: r.bytes()?,
            max_len: r.u64()?,
        },
        OP_GETRANGE => Op::GetRange {
            key: r.bytes()?,
            start: r.u64()? as i64,
            end: r.u64()? as i64,
        },
        OP_MSETNX => {
            let n = r.count(8)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((r.bytes()?, r.bytes()?));
            }
            Op::MSetNx { pairs }
        }
        OP_EXPIREIF => Op::ExpireIf {
            key: r.bytes()?,
            expiry: r.expiry()?,
            cond: match r.u8()? {
                1 => ExpireCond::Nx,
                2 => ExpireCond::Xx,
                3 => ExpireCond::Gt,
                4 => ExpireCond::Lt,
                5 => ExpireCond::XxLt,
                _ => return Err(DecodeError("bad expire condition")),
            },
        },
        OP_EXPIRETIME => Op::ExpireTime { key: r.bytes()? },
        OP_INCRBYFLOAT => Op::IncrByFloat {
            key: r.bytes()?,
            delta: r.u64()?,
        },
        OP_RANDOMKEY => Op::RandomKey { seed: r.u64()? },
        OP_SETBIT => Op::SetBit {
            key: r.bytes()?,
            offset: r.u64()?,
            bit: r.bool()?,
            max_len: r.u64()?,
        },
        OP_GETBIT => Op::GetBit {
            key: r.bytes()?,
            offset: r.u64()?,
        },
        OP_MCINCROR => {
            let key = r.bytes()?;
            let delta = r.u64()?;
            let decr = r.bool()?;
            let has = r.bool()?;
            let initial = r.u64()?;
            Op::McIncrOr {
                key,
                delta,
                decr,
                initial: has.then_some(initial),
                expiry: r.expiry()?,
            }
        }
        OP_MULTI => {
            let n = r.count(5)?;
            if n == 0 {
                return Err(DecodeError("empty transaction"));
            }
            let mut ops = Vec::with_capacity(n);
            for i in 0..n {
                let len = r.u32()? as usize;
                let b = r.take(len)?;
                if matches!(b.first(), Some(&OP_BATCH | &OP_MULTI)) {
                    return Err(DecodeError("nested transaction"));
                }
                if i > 0 && b.first() == Some(&OP_WATCH_CHECK) {
                    return Err(DecodeError("a watch check inside a transaction"));
                }
                ops.push(decode_op(b)?);
            }
            Op::Multi(ops)
        }
        _ => return Err(DecodeError("unknown operation tag")),
    };
    r.finish()?;
    Ok(op)
}

/// Appends the encoding of `resp` to `out`.
///
/// # Panics
///
/// If a byte string or list in `resp` is longer than `u32::MAX`.
pub fn encode_response(resp: &Response, out: &mut Vec<u8>) {
    match resp {
        Response::Ok => out.push(R_OK),
        Response::NotStored => out.push(R_NOT_STORED),
        Response::CasMismatch => out.push(R_CAS_MISMATCH),
        Response::NotFound => out.push(R_NOT_FOUND),
        Response::Items(items) => {
            out.push(R_ITEMS);
            put_len(out, items.len());
            for item in items {
                match item {
                    None => out.push(0),
                    Some(it) => {
                        out.push(1);
                        put_bytes(out, &it.value);
                        put_u32(out, it.flags);
                        put_u64(out, it.cas);
                    }
                }
            }
        }
        Response::Int(n) => {
            out.push(R_INT);
            put_u64(out, *n as u64);
        }
        Response::UInt(n) => {
            out.push(R_UINT);
            put_u64(out, *n);
        }
        Response::Keys(keys) => {
            out.push(R_KEYS);
            put_list(out, keys);
        }
        Response::ScanPage { next, keys } => {
            out.push(R_SCAN_PAGE);
            put_bytes(out, next);
            put_list(out, keys);
        }
        Response::Error(msg) => {
            out.push(R_ERROR);
            put_bytes(out, msg.as_bytes());
        }
        Response::Batch(rs) => {
            out.push(R_BATCH);
            put_len(out, rs.len());
            for r in rs {
                put_nested(out, |out| encode_response(r, out));
            }
        }
        Response::Reply(reply) => {
            out.push(R_REPLY);
            encode_reply(reply, out);
        }
    }
}

fn encode_reply(reply: &Reply, out: &mut Vec<u8>) {
    match reply {
        Reply::Nil => out.push(1),
        Reply::NilArray => out.push(2),
        Reply::Status(s) => {
            out.push(3);
            put_bytes(out, s.as_bytes());
        }
        Reply::Int(n) => {
            out.push(4);
            put_u64(out, *n as u64);
        }
        Reply::Bulk(b) => {
            out.push(5);
            put_bytes(out, b);
        }
        Reply::Double(s) => {
            out.push(6);
            put_bytes(out, s.as_bytes());
        }
        Reply::Array(rs) | Reply::Set(rs) => {
            out.push(if matches!(reply, Reply::Array(_)) {
                7
            } else {
                9
            });
            put_len(out, rs.len());
            for r in rs {
                encode_reply(r, out);
            }
        }
        Reply::Map(pairs) => {
            out.push(8);
            put_len(out, pairs.len());
            for (k, v) in pairs {
                encode_reply(k, out);
                encode_reply(v, out);
            }
        }
        Reply::Error(s) => {
            out.push(10);
            put_bytes(out, s.as_bytes());
        }
        Reply::Pairs(pairs) => {
            out.push(11);
            put_len(out, pairs.len());
            for (k, v) in pairs {
                encode_reply(k, out);
                encode_reply(v, out);
            }
        }
    }
}

fn decode_reply(r: &mut Reader<'_>, depth: u8) -> Result<Reply, DecodeError> {
    if depth > MAX_REPLY_DEPTH {
        return Err(DecodeError("reply nested too deep"));
    }
    let text = |r: &mut Reader<'_>| {
        String::from_utf8(r.bytes()?).map_err(|_| DecodeError("reply text is not UTF-8"))
    };
    Ok(match r.u8()? {
        1 => Reply::Nil,
        2 => Reply::NilArray,
        3 => Reply::Status(text(r)?),
        4 => Reply::Int(r.u64()? as i64),
        5 => Reply::Bulk(r.bytes()?),
        6 => Reply::Double(text(r)?),
        tag @ (7 | 9) => {
            let n = r.count(1)?;
            let mut rs = Vec::with_capacity(n);
            for _ in 0..n {
                rs.push(decode_reply(r, depth + 1)?);
            }
            if tag == 7 {
                Reply::Array(rs)
            } else {
                Reply::Set(rs)
            }
        }
        tag @ (8 | 11) => {
            let n = r.count(2)?;
            let mut pairs = Vec::with_capacity(n);
            for _ in 0..n {
                pairs.push((decode_reply(r, depth + 1)?, decode_reply(r, depth + 1)?));
            }
            if tag == 8 {
                Reply::Map(pairs)
            } else {
                Reply::Pairs(pairs)
            }
        }
        10 => Reply::Error(text(r)?),
        _ => return Err(DecodeError("unknown reply tag")),
    })
}

/// Decodes one response that fills all of `b` (trailing bytes are an error). A batch's
/// response may hold a transaction's (a batch of responses) one level deep, no deeper.
pub fn decode_response(b: &[u8]) -> Result<Response, DecodeError> {
    decode_response_at(b, 0)
}

fn decode_response_at(b: &[u8], depth: u8) -> Result<Response, DecodeError> {
    let mut r = Reader::new(b);
    let resp = match r.u8()? {
        R_OK => Response::Ok,
        R_NOT_STORED => Response::NotStored,
        R_CAS_MISMATCH => Response::CasMismatch,
        R_NOT_FOUND => Response::NotFound,
        R_ITEMS => {
            // Each element takes at least its option byte.
            let n = r.count(1)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(if r.bool()? {
                    Some(Item {
                        value: r.bytes()?,
                        flags: r.u32()?,
                        cas: r.u64()?,
                    })
                } else {
                    None
                });
            }
            Response::Items(items)
        }
        R_INT => Response::Int(r.u64()? as i64),
        R_UINT => Response::UInt(r.u64()?),
        R_KEYS => Response::Keys(r.list()?),
        R_SCAN_PAGE => Response::ScanPage {
            next: r.bytes()?,
            keys: r.list()?,
        },
        R_ERROR => Response::Error(
            String::from_utf8(r.bytes()?).map_err(|_| DecodeError("error message is not UTF-8"))?,
        ),
        R_BATCH => {
            let n = r.count(5)?;
            let mut rs = Vec::with_capacity(n);
            for _ in 0..n {
                let len = r.u32()? as usize;
                let b = r.take(len)?;
                if b.first() == Some(&R_BATCH) && depth > 0 {
                    return Err(DecodeError("nested batch"));
                }
                rs.push(decode_response_at(b, depth + 1)?);
            }
            Response::Batch(rs)
        }
        R_REPLY => Response::Reply(decode_reply(&mut r, 0)?),
        _ => return Err(DecodeError("unknown response tag")),
    };
    r.finish()?;
    Ok(resp)
}

// ---- writing

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length or count as a `u32`.
pub(crate) fn put_len(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("length or count over u32::MAX cannot be encoded");
    put_u32(out, n);
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len());
    out.extend_from_slice(b);
}

fn put_list(out: &mut Vec<u8>, list: &[Bytes]) {
    put_len(out, list.len());
    for b in list {
        put_bytes(out, b);
    }
}

fn put_expiry(out: &mut Vec<u8>, e: &Expiry) {
    match e {
        Expiry::None => out.push(0),
        Expiry::Keep => out.push(1),
        Expiry::AfterMs(ms) => {
            out.push(2);
            put_u64(out, *ms as u64);
        }
        Expiry::AtMs(t) => {
            out.push(3);
            put_u64(out, *t);
        }
    }
}

fn put_cond(out: &mut Vec<u8>, c: Cond) {
    out.push(match c {
        Cond::Always => 0,
        Cond::IfAbsent => 1,
        Cond::IfPresent => 2,
    });
}

// ---- reading

/// A cursor over input that checks every read.
pub(crate) struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Self {
        Reader { b }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.b.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.b.len() {
            return Err(DecodeError("truncated input"));
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("bad boolean")),
        }
    }

    /// A `u32` count of elements each taking at least `min_size` bytes, checked against the
    /// input that remains (so a caller may allocate for it).
    pub(crate) fn count(&mut self, min_size: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n > self.remaining() / min_size.max(1) {
            return Err(DecodeError("count exceeds the input"));
        }
        Ok(n)
    }

    /// A length-prefixed byte string, the length checked against the input first.
    pub(crate) fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        let n = self.u32()? as usize;
        if n > self.remaining() {
            return Err(DecodeError("length exceeds the input"));
        }
        Ok(self.take(n)?.to_vec())
    }

    fn list(&mut self) -> Result<Vec<Bytes>, DecodeError> {
        // Each element takes at least its length.
        let n = self.count(4)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.bytes()?);
        }
        Ok(v)
    }

    fn expiry(&mut self) -> Result<Expiry, DecodeError> {
        match self.u8()? {
            0 => Ok(Expiry::None),
            1 => Ok(Expiry::Keep),
            2 => Ok(Expiry::AfterMs(self.u64()? as i64)),
            3 => Ok(Expiry::AtMs(self.u64()?)),
            _ => Err(DecodeError("bad expiry tag")),
        }
    }

    fn cond(&mut self) -> Result<Cond, DecodeError> {
        match self.u8()? {
            0 => Ok(Cond::Always),
            1 => Ok(Cond::IfAbsent),
            2 => Ok(Cond::IfPresent),
            _ => Err(DecodeError("bad condition tag")),
        }
    }

    /// Succeeds only if the whole input was read.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_layouts() {
        let mut out = Vec::new();
        encode_op(&Op::DbSize, &mut out);
        assert_eq!(out, [OP_DBSIZE]);
        out.clear();
        encode_op(
            &Op::Strlen {
                key: b"ab".to_vec(),
            },
            &mut out,
        );
        assert_eq!(out, [OP_STRLEN, 2, 0, 0, 0, b'a', b'b']);
        out.clear();
        encode_response(&Response::Int(-2), &mut out);
        assert_eq!(out, [R_INT, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn the_tag_tells_reads_from_writes_as_the_op_does() {
        let k = || b"k".to_vec();
        let ops = [
            Op::Get { keys: vec![k()] },
            Op::Exists { keys: vec![k()] },
            Op::Strlen { key: k() },
            Op::Ttl { key: k() },
            Op::DbSize,
            Op::Keys { pattern: k() },
            Op::Scan {
                cursor: k(),
                pattern: None,
                count: 1,
                kind: None,
            },
            Op::Set {
                key: k(),
                value: k(),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: false,
            },
            Op::MSet {
                pairs: vec![(k(), k())],
            },
            Op::Cas {
                key: k(),
                value: k(),
                flags: 0,
                expiry: Expiry::None,
                unique: 1,
            },
            Op::Del { keys: vec![k()] },
            Op::IncrBy { key: k(), delta: 1 },
            Op::McIncr {
                key: k(),
                delta: 1,
                decr: false,
            },
            Op::Append {
                key: k(),
                value: k(),
                must_exist: false,
                max_len: 9,
            },
            Op::Prepend {
                key: k(),
                value: k(),
                max_len: 9,
            },
            Op::Touch {
                keys: vec![k()],
                expiry: Expiry::None,
                get: false,
            },
            Op::FlushAll,
            Op::Sweep,
            Op::Batch(vec![
                Op::Get { keys: vec![k()] },
                Op::Del { keys: vec![k()] },
            ]),
            Op::Multi(vec![Op::Get { keys: vec![k()] }]),
            Op::GetDel { key: k() },
            Op::GetEx {
                key: k(),
                expiry: Some(Expiry::AfterMs(5)),
            },
            Op::Rename {
                from: k(),
                to: k(),
                nx: true,
            },
            Op::Copy {
                from: k(),
                to: k(),
                replace: false,
            },
            Op::SetRange {
                key: k(),
                offset: 3,
                value: k(),
                max_len: 9,
            },
            Op::GetRange {
                key: k(),
                start: -3,
                end: -1,
            },
            Op::MSetNx {
                pairs: vec![(k(), k())],
            },
            Op::ExpireIf {
                key: k(),
                expiry: Expiry::AtMs(9),
                cond: ExpireCond::Gt,
            },
            Op::ExpireTime { key: k() },
            Op::IncrByFloat {
                key: k(),
                delta: 1.5f64.to_bits(),
            },
            Op::RandomKey { seed: 7 },
            Op::SetBit {
                key: k(),
                offset: 9,
                bit: true,
                max_len: 9,
            },
            Op::GetBit {
                key: k(),
                offset: 9,
            },
            Op::McIncrOr {
                key: k(),
                delta: 2,
                decr: true,
                initial: Some(7),
                expiry: Expiry::AfterMs(9),
            },
            Op::Cmd {
                args: vec![b"hget".to_vec(), k(), k()],
                seed: 0,
            },
            Op::Cmd {
                args: vec![b"hset".to_vec(), k(), k(), k()],
                seed: 0,
            },
            Op::Scan {
                cursor: k(),
                pattern: None,
                count: 1,
                kind: Some(b"set".to_vec()),
            },
            Op::WatchCheck {
                since: 3,
                keys: vec![k()],
            },
            Op::Ready {
                keys: vec![k()],
                kind: b"list".to_vec(),
            },
        ];
        // Every tag in use once: a new op must be added here.
        let mut tags: Vec<u8> = Vec::new();
        for op in &ops {
            let mut b = Vec::new();
            encode_op(op, &mut b);
            assert_eq!(is_read_only_command(&b), op.is_read_only(), "{op:?}");
            tags.push(b[0]);
        }
        tags.sort_unstable();
        assert_eq!(tags, (OP_GET..=OP_READY).collect::<Vec<u8>>());
        assert!(!is_read_only_command(&[]));
        assert!(!is_read_only_command(&[OP_READY + 1]));
        // A watch check opens a transaction, nowhere else in it.
        let check = Op::WatchCheck {
            since: 1,
            keys: vec![k()],
        };
        let mut b = Vec::new();
        encode_op(&Op::Multi(vec![check.clone(), Op::DbSize]), &mut b);
        assert!(decode_op(&b).is_ok());
        // Written by hand: the encoder refuses it (what is encoded decodes).
        b.clear();
        b.push(OP_MULTI);
        put_len(&mut b, 2);
        put_nested(&mut b, |o| encode_op(&Op::DbSize, o));
        put_nested(&mut b, |o| encode_op(&check, o));
        assert_eq!(
            decode_op(&b),
            Err(DecodeError("a watch check inside a transaction"))
        );
        let refused = std::panic::catch_unwind(|| {
            encode_op(&Op::Multi(vec![Op::DbSize, check.clone()]), &mut Vec::new())
        });
        assert!(refused.is_err(), "the encoder wrote what cannot decode");
        // A batch reads only if all of it does; a malformed one is not a read.
        let reads = Op::Batch(vec![Op::Get { keys: vec![k()] }, Op::DbSize]);
        let mut b = Vec::new();
        encode_op(&reads, &mut b);
        assert!(reads.is_read_only() && is_read_only_command(&b));
        assert!(!is_read_only_command(&b[..b.len() - 1]));
        b.push(0);
        assert!(!is_read_only_command(&b));
    }

    #[test]
    fn a_transaction_travels_whole_inside_a_batch_and_never_nests() {
        let enc = |op: &Op| {
            let mut out = Vec::new();
            encode_op(op, &mut out);
            out
        };
        let multi = Op::Multi(vec![
            Op::IncrBy {
                key: b"n".to_vec(),
                delta: 1,
            },
            Op::Get {
                keys: vec![b"n".to_vec()],
            },
        ]);
        assert!(!multi.is_read_only());
        let m = enc(&multi);
        assert!(
            !is_read_only_command(&m),
            "a transaction goes through the log"
        );
        assert_eq!(decode_op(&m), Ok(multi.clone()));
        // In a batch with another connection's operation: decoded as sent.
        let get = Op::Get {
            keys: vec![b"k".to_vec()],
        };
        let batch = batch_command(&[&m, &enc(&get)]);
        assert_eq!(decode_op(&batch), Ok(Op::Batch(vec![multi, get.clone()])));
        // A transaction holding a transaction or a batch, or nothing, does not decode.
        let mut nested = vec![OP_MULTI, 1, 0, 0, 0];
        put_bytes(&mut nested, &m);
        assert!(decode_op(&nested).is_err());
        let mut holds_batch = vec![OP_MULTI, 1, 0, 0, 0];
        put_bytes(&mut holds_batch, &batch_command(&[&enc(&get)]));
        assert!(decode_op(&holds_batch).is_err());
        assert!(decode_op(&[OP_MULTI, 0, 0, 0, 0]).is_err());
        // Its answer, in the batch's: one level of nesting decodes, two do not.
        let inner = Response::Batch(vec![Response::Int(8), Response::Ok]);
        let outer = Response::Batch(vec![inner.clone(), Response::Ok]);
        let mut b = Vec::new();
        encode_response(&outer, &mut b);
        assert_eq!(decode_response(&b), Ok(outer.clone()));
        let mut b = Vec::new();
        encode_response(&Response::Batch(vec![outer]), &mut b);
        assert_eq!(decode_response(&b), Err(DecodeError("nested batch")));
    }

    #[test]
    fn a_batch_command_holds_the_encodings_as_they_are() {
        let (a, b) = (
            Op::DbSize,
            Op::Del {
                keys: vec![b"k".to_vec()],
            },
        );
        let enc = |op: &Op| {
            let mut out = Vec::new();
            encode_op(op, &mut out);
            out
        };
        assert_eq!(
            batch_command(&[&enc(&a)]),
            [
                &[OP_BATCH, 1, 0, 0, 0][..],
                &(enc(&a).len() as u32).to_le_bytes(),
                &enc(&a)
            ]
            .concat()
        );
        let cmd = batch_command(&[&enc(&a), &enc(&b)]);
        assert_eq!(decode_op(&cmd), Ok(Op::Batch(vec![a, b])));
    }

    #[test]
    fn batches_round_trip_and_refuse_nesting_and_emptiness() {
        let batch = Op::Batch(vec![
            Op::Set {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                flags: 0,
                expiry: Expiry::AfterMs(5),
                cond: Cond::Always,
                get_old: false,
            },
            Op::IncrBy {
                key: b"n".to_vec(),
                delta: -3,
            },
            Op::Get {
                keys: vec![b"k".to_vec()],
            },
        ]);
        let mut b = Vec::new();
        encode_op(&batch, &mut b);
        assert_eq!(decode_op(&b), Ok(batch));
        let rs = Response::Batch(vec![
            Response::Ok,
            Response::Int(-3),
            Response::Items(vec![None]),
        ]);
        let mut b = Vec::new();
        encode_response(&rs, &mut b);
        assert_eq!(decode_response(&b), Ok(rs));
        // Nested and empty batches are refused.
        let mut inner = Vec::new();
        encode_op(&Op::Batch(vec![Op::DbSize]), &mut inner);
        let mut b = vec![OP_BATCH];
        put_len(&mut b, 1);
        put_bytes(&mut b, &inner);
        assert_eq!(decode_op(&b), Err(DecodeError("nested batch")));
        assert_eq!(
            decode_op(&[OP_BATCH, 0, 0, 0, 0]),
            Err(DecodeError("empty batch"))
        );
        // An operation's length that runs past the input is refused.
        let b = [OP_BATCH, 1, 0, 0, 0, 9, 0, 0, 0, OP_DBSIZE];
        assert!(decode_op(&b).is_err());
    }

    #[test]
    fn counts_are_bounded_by_the_input() {
        // A Get claiming 2^32-1 keys in 5 bytes is refused before any allocation.
        let b = [OP_GET, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(decode_op(&b), Err(DecodeError("count exceeds the input")));
        let b = [OP_KEYS, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(decode_op(&b), Err(DecodeError("length exceeds the input")));
        let b = [R_ITEMS, 2, 0, 0, 0, 0];
        assert_eq!(
            decode_response(&b),
            Err(DecodeError("count exceeds the input"))
        );
    }
}
