//! The binary codec: round trips of every variant, strictness, and garbage that must not panic.

use waverunner_kv::codec::{decode_op, decode_response, encode_op, encode_response, DecodeError};
use waverunner_kv::{Cond, Expiry, Item, Op, Reply, Response};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Every operation variant, several times with different field values.
fn sample_ops() -> Vec<Op> {
    let big = vec![0xa5u8; 70_000];
    let mut ops = vec![
        Op::Get { keys: vec![] },
        Op::Get {
            keys: vec![b("a"), vec![], b("\0\u{1}\u{ff}"), big.clone()],
        },
        Op::Exists {
            keys: vec![b("a"), b("a")],
        },
        Op::Strlen { key: vec![] },
        Op::Strlen { key: b("k") },
        Op::Ttl { key: b("k") },
        Op::DbSize,
        Op::Keys { pattern: b("*") },
        Op::Keys { pattern: vec![] },
        Op::Scan {
            cursor: vec![],
            pattern: None,
            count: 0,
            kind: None,
        },
        Op::Scan {
            cursor: b("user:42"),
            pattern: Some(b("user:*")),
            count: u32::MAX,
            kind: None,
        },
        Op::Scan {
            cursor: b("x"),
            pattern: Some(vec![]),
            count: 10,
            kind: Some(b("hash")),
        },
        Op::Cmd {
            args: vec![b("hset"), b("h"), b("f"), vec![]],
            seed: 0,
        },
        Op::Cmd {
            args: vec![b("type"), b("k")],
            seed: u64::MAX,
        },
        Op::Ready {
            keys: vec![b("l"), vec![]],
            kind: b("list"),
        },
        Op::Multi(vec![
            Op::WatchCheck {
                since: 7,
                keys: vec![b("k"), vec![]],
            },
            Op::Del { keys: vec![b("k")] },
        ]),
        Op::MSet { pairs: vec![] },
        Op::MSet {
            pairs: vec![(b("a"), b("1")), (vec![], vec![]), (b("c"), big.clone())],
        },
        Op::Cas {
            key: b("k"),
            value: b("v"),
            flags: u32::MAX,
            expiry: Expiry::AtMs(u64::MAX),
            unique: u64::MAX,
        },
        Op::Cas {
            key: vec![],
            value: vec![],
            flags: 0,
            expiry: Expiry::None,
            unique: 0,
        },
        Op::Del { keys: vec![] },
        Op::Del {
            keys: vec![b("a"), b("b")],
        },
        Op::IncrBy {
            key: b("n"),
            delta: i64::MIN,
        },
        Op::IncrBy {
            key: b("n"),
            delta: -1,
        },
        Op::IncrBy {
            key: b("n"),
            delta: i64::MAX,
        },
        Op::McIncr {
            key: b("n"),
            delta: u64::MAX,
            decr: false,
        },
        Op::McIncr {
            key: b("n"),
            delta: 0,
            decr: true,
        },
        Op::Append {
            key: b("k"),
            value: b("tail"),
            must_exist: false,
            max_len: u64::MAX,
        },
        Op::Append {
            key: b("k"),
            value: vec![],
            must_exist: true,
            max_len: 0,
        },
        Op::Prepend {
            key: b("k"),
            value: b("head"),
            max_len: 1024,
        },
        Op::Touch {
            keys: vec![],
            expiry: Expiry::None,
            get: false,
        },
        Op::Touch {
            keys: vec![b("a"), b("b")],
            expiry: Expiry::AfterMs(-1),
            get: true,
        },
        Op::Touch {
            keys: vec![b("a")],
            expiry: Expiry::Keep,
            get: false,
        },
        Op::FlushAll,
        Op::Sweep,
    ];
    let expiries = [
        Expiry::None,
        Expiry::Keep,
        Expiry::AfterMs(0),
        Expiry::AfterMs(1000),
        Expiry::AfterMs(i64::MIN),
        Expiry::AfterMs(i64::MAX),
        Expiry::AtMs(0),
        Expiry::AtMs(1_700_000_000_000),
    ];
    for (i, expiry) in expiries.into_iter().enumerate() {
        for cond in [Cond::Always, Cond::IfAbsent, Cond::IfPresent] {
            for get_old in [false, true] {
                ops.push(Op::Set {
                    key: format!("key{i}").into_bytes(),
                    value: if get_old { big.clone() } else { vec![] },
                    flags: i as u32 * 0x0101_0101,
                    expiry: expiry.clone(),
                    cond,
                    get_old,
                });
            }
        }
    }
    // Batches of everything above (never nested): every small operation inside one.
    let small = ops.iter().filter(|o| enc_op(o).len() < 1000).cloned();
    let batch = Op::Batch(small.collect());
    ops.push(Op::Batch(vec![Op::DbSize]));
    ops.push(batch);
    ops
}

/// Every response variant, several times with different field values.
fn sample_responses() -> Vec<Response> {
    vec![
        Response::Ok,
        Response::NotStored,
        Response::CasMismatch,
        Response::NotFound,
        Response::Items(vec![]),
        Response::Items(vec![None]),
        Response::Items(vec![
            Some(Item {
                value: b("v"),
                flags: 7,
                cas: 42,
            }),
            None,
            Some(Item {
                value: vec![],
                flags: u32::MAX,
                cas: u64::MAX,
            }),
        ]),
        Response::Int(0),
        Response::Int(-2),
        Response::Int(i64::MIN),
        Response::Int(i64::MAX),
        Response::UInt(0),
        Response::UInt(u64::MAX),
        Response::Keys(vec![]),
        Response::Keys(vec![b("a"), vec![], b("c")]),
        Response::ScanPage {
            next: vec![],
            keys: vec![],
        },
        Response::ScanPage {
            next: b("k9"),
            keys: vec![b("k1"), b("k9")],
        },
        Response::Error(String::new()),
        Response::Error("value is not an integer or out of range".into()),
        Response::Error("ünïcödé ✓".into()),
        Response::Reply(Reply::Array(vec![
            Reply::Nil,
            Reply::NilArray,
            Reply::Status("OK".into()),
            Reply::Int(-1),
            Reply::Bulk(vec![0, 255]),
            Reply::Double("1.5".into()),
            Reply::Map(vec![(Reply::Bulk(b("f")), Reply::Set(vec![Reply::Int(1)]))]),
            Reply::Error("WRONGTYPE x".into()),
            Reply::Pairs(vec![(Reply::Bulk(b("m")), Reply::Double("-1.5".into()))]),
        ])),
        Response::Batch(vec![]),
        Response::Batch(vec![
            Response::Ok,
            Response::Items(vec![None]),
            Response::Error("x".into()),
        ]),
    ]
}

fn enc_op(op: &Op) -> Vec<u8> {
    let mut v = Vec::new();
    encode_op(op, &mut v);
    v
}

fn enc_resp(r: &Response) -> Vec<u8> {
    let mut v = Vec::new();
    encode_response(r, &mut v);
    v
}

#[test]
fn every_op_round_trips() {
    let ops = sample_ops();
    let mut tags = std::collections::BTreeSet::new();
    for op in &ops {
        let bytes = enc_op(op);
        tags.insert(bytes[0]);
        assert_eq!(decode_op(&bytes).as_ref(), Ok(op), "{op:?}");
    }
    assert_eq!(tags.len(), 24, "every variant has its own tag");
}

#[test]
fn every_response_round_trips() {
    let resps = sample_responses();
    let mut tags = std::collections::BTreeSet::new();
    for r in &resps {
        let bytes = enc_resp(r);
        tags.insert(bytes[0]);
        assert_eq!(decode_response(&bytes).as_ref(), Ok(r), "{r:?}");
    }
    assert_eq!(tags.len(), 12, "every variant has its own tag");
}

#[test]
fn encoders_append() {
    let mut out = b("prefix");
    encode_op(&Op::DbSize, &mut out);
    encode_response(&Response::Ok, &mut out);
    assert_eq!(&out[..6], b"prefix");
    assert_eq!(out.len(), 8);
    assert_eq!(decode_op(&out[6..7]), Ok(Op::DbSize));
    assert_eq!(decode_response(&out[7..]), Ok(Response::Ok));
}

#[test]
fn layouts_are_compact_and_little_endian() {
    let op = Op::Set {
        key: b("foo"),
        value: b("bar"),
        flags: 0x0102_0304,
        expiry: Expiry::AfterMs(1000),
        cond: Cond::IfAbsent,
        get_old: true,
    };
    let mut want = vec![8u8];
    want.extend_from_slice(&[3, 0, 0, 0]);
    want.extend_from_slice(b"foo");
    want.extend_from_slice(&[3, 0, 0, 0]);
    want.extend_from_slice(b"bar");
    want.extend_from_slice(&[4, 3, 2, 1]);
    want.push(2);
    want.extend_from_slice(&1000u64.to_le_bytes());
    want.push(1);
    want.push(1);
    assert_eq!(enc_op(&op), want);

    let r = Response::Items(vec![
        None,
        Some(Item {
            value: b("v"),
            flags: 1,
            cas: 2,
        }),
    ]);
    let mut want = vec![5u8, 2, 0, 0, 0, 0, 1, 1, 0, 0, 0, b'v', 1, 0, 0, 0];
    want.extend_from_slice(&2u64.to_le_bytes());
    assert_eq!(enc_resp(&r), want);
    assert_eq!(enc_resp(&Response::UInt(1)), [7, 1, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn every_truncation_and_extension_is_rejected() {
    for op in sample_ops() {
        let bytes = enc_op(&op);
        for n in 0..bytes.len() {
            assert!(decode_op(&bytes[..n]).is_err(), "{op:?} prefix {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_op(&longer), Err(DecodeError("trailing bytes")));
    }
    for r in sample_responses() {
        let bytes = enc_resp(&r);
        for n in 0..bytes.len() {
            assert!(decode_response(&bytes[..n]).is_err(), "{r:?} prefix {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_response(&longer), Err(DecodeError("trailing bytes")));
    }
}

#[test]
fn strict_tags_and_enums() {
    assert!(decode_op(&[]).is_err());
    assert!(decode_response(&[]).is_err());
    for tag in [0u8, 40, 0x80, 0xff] {
        assert_eq!(decode_op(&[tag]), Err(DecodeError("unknown operation tag")));
    }
    for tag in [0u8, 13, 0xff] {
        assert_eq!(
            decode_response(&[tag]),
            Err(DecodeError("unknown response tag"))
        );
    }
    // Booleans are 0 or 1.
    let mut bytes = enc_op(&Op::Append {
        key: b("k"),
        value: b("v"),
        must_exist: true,
        max_len: u64::MAX,
    });
    // must_exist is followed by the u64 max_len.
    let at = bytes.len() - 9;
    assert_eq!(bytes[at], 1);
    bytes[at] = 2;
    assert_eq!(decode_op(&bytes), Err(DecodeError("bad boolean")));
    // Expiry and condition tags.
    let set = Op::Set {
        key: vec![],
        value: vec![],
        flags: 0,
        expiry: Expiry::None,
        cond: Cond::Always,
        get_old: false,
    };
    let bytes = enc_op(&set);
    // tag, 4+4 lengths, 4 flags, then expiry at 13, cond at 14, get_old at 15.
    assert_eq!(bytes.len(), 16);
    let mut bad = bytes.clone();
    bad[13] = 4;
    assert_eq!(decode_op(&bad), Err(DecodeError("bad expiry tag")));
    let mut bad = bytes.clone();
    bad[14] = 3;
    assert_eq!(decode_op(&bad), Err(DecodeError("bad condition tag")));
    // Error messages must be UTF-8.
    let mut bytes = enc_resp(&Response::Error("ab".into()));
    *bytes.last_mut().unwrap() = 0xff;
    assert_eq!(
        decode_response(&bytes),
        Err(DecodeError("error message is not UTF-8"))
    );
}

#[test]
fn lengths_are_checked_before_allocating() {
    // Counts and lengths near u32::MAX in tiny inputs are refused, not allocated.
    let huge = u32::MAX.to_le_bytes();
    for tag in [1u8, 2, 11] {
        let mut v = vec![tag];
        v.extend_from_slice(&huge);
        assert!(decode_op(&v).is_err());
    }
    let mut v = vec![9u8]; // MSet
    v.extend_from_slice(&huge);
    v.extend_from_slice(&[0; 64]);
    assert_eq!(decode_op(&v), Err(DecodeError("count exceeds the input")));
    let mut v = vec![3u8]; // Strlen
    v.extend_from_slice(&huge);
    v.extend_from_slice(&[0; 64]);
    assert_eq!(decode_op(&v), Err(DecodeError("length exceeds the input")));
    for tag in [5u8, 8] {
        let mut v = vec![tag];
        v.extend_from_slice(&huge);
        v.extend_from_slice(&[0; 64]);
        assert_eq!(
            decode_response(&v),
            Err(DecodeError("count exceeds the input"))
        );
    }
}

#[test]
fn decode_error_displays() {
    let e = DecodeError("truncated input");
    assert_eq!(e.to_string(), "decode error: truncated input");
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().contains("truncated"));
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len)
            .map(|_| {
                // Mostly small bytes, so lengths, tags and booleans are often plausible.
                if self.below(2) == 0 {
                    self.below(4) as u8
                } else {
                    self.next() as u8
                }
            })
            .collect()
    }
}

/// Decoding is canonical: whatever decodes re-encodes to exactly the input.
fn check_op(bytes: &[u8]) -> bool {
    match decode_op(bytes) {
        Ok(op) => {
            assert_eq!(enc_op(&op), bytes, "{op:?}");
            true
        }
        Err(_) => false,
    }
}

fn check_resp(bytes: &[u8]) -> bool {
    match decode_response(bytes) {
        Ok(r) => {
            assert_eq!(enc_resp(&r), bytes, "{r:?}");
            true
        }
        Err(_) => false,
    }
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut decoded = 0;
    for _ in 0..5000 {
        let g = rng.bytes(64);
        decoded += usize::from(check_op(&g));
        decoded += usize::from(check_resp(&g));
        // With a valid tag in front, to get past the first byte.
        let mut t = vec![1 + rng.below(17) as u8];
        t.extend_from_slice(&g);
        decoded += usize::from(check_op(&t));
        t[0] = 1 + rng.below(10) as u8;
        decoded += usize::from(check_resp(&t));
    }
    assert!(decoded > 0, "some garbage happens to be valid");
}

#[test]
fn mutated_encodings_never_panic() {
    let mut rng = Rng(12345);
    let ops: Vec<Vec<u8>> = sample_ops()
        .iter()
        .map(enc_op)
        .filter(|b| b.len() < 1000)
        .collect();
    let resps: Vec<Vec<u8>> = sample_responses().iter().map(enc_resp).collect();
    for i in 0..5000 {
        for (set, is_op) in [(&ops, true), (&resps, false)] {
            let mut m = set[i % set.len()].clone();
            for _ in 0..1 + rng.below(3) {
                match rng.below(4) {
                    0 if !m.is_empty() => {
                        let j = rng.below(m.len() as u64) as usize;
                        m[j] = rng.next() as u8;
                    }
                    1 if !m.is_empty() => {
                        let j = rng.below(m.len() as u64) as usize;
                        m[j] ^= 1 << rng.below(8);
                    }
                    2 => {
                        let j = rng.below(m.len() as u64 + 1) as usize;
                        m.insert(j, rng.next() as u8);
                    }
                    _ if !m.is_empty() => {
                        let j = rng.below(m.len() as u64) as usize;
                        m.remove(j);
                    }
                    _ => {}
                }
            }
            if is_op {
                check_op(&m);
            } else {
                check_resp(&m);
            }
        }
    }
}
