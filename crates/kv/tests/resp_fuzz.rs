//! Robustness of the Redis front-end on pseudo-random and mutated input: the parser never
//! panics, always either uses at least one byte, asks for more, or fails; feeding a request in
//! pieces gives the same result as feeding it whole; and translating and rendering whatever it
//! parses never panics either.

use waverunner_kv::codec::{decode_op, encode_op};
use waverunner_kv::resp::{command, parse_command, render, Action, Limits, ProtocolError, Render};
use waverunner_kv::{Item, Response};

/// xorshift64*: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError>;

const WORDS: &[&str] = &[
    "GET",
    "SET",
    "set",
    "MGET",
    "MSET",
    "DEL",
    "EXISTS",
    "INCR",
    "INCRBY",
    "DECR",
    "DECRBY",
    "APPEND",
    "STRLEN",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "TTL",
    "PTTL",
    "PERSIST",
    "DBSIZE",
    "FLUSHALL",
    "KEYS",
    "SCAN",
    "INFO",
    "COMMAND",
    "CLIENT",
    "SELECT",
    "QUIT",
    "HELLO",
    "CONFIG",
    "PING",
    "ECHO",
    "SETNX",
    "SETEX",
    "PSETEX",
    "GETSET",
    "TYPE",
    "UNLINK",
    "FLUSHDB",
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "NX",
    "XX",
    "GET",
    "KEEPTTL",
    "MATCH",
    "COUNT",
    "TYPE",
    "DOCS",
    "SETNAME",
    "GETNAME",
    "ID",
    "SETINFO",
    "LIB-NAME",
    "AUTH",
    "ASYNC",
    "0",
    "1",
    "2",
    "3",
    "-1",
    "10",
    "1097098",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "a*",
    "*",
    "k",
    "",
    "x y",
    "\"",
    "'",
];

fn random_args(rng: &mut Rng) -> Vec<Vec<u8>> {
    let n = 1 + rng.below(6);
    (0..n)
        .map(|_| {
            if rng.below(8) == 0 {
                (0..rng.below(5)).map(|_| rng.next() as u8).collect()
            } else {
                rng.pick(WORDS).as_bytes().to_vec()
            }
        })
        .collect()
}

fn multibulk(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// An inline line for arguments, quoting them with `"…"` and `\xHH` escapes.
fn inline(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.push(b'"');
        for &b in a {
            out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
        out.push(b'"');
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    const SPECIAL: &[u8] = b"*$\r\n-0123456789 \"'\\x:+";
    for _ in 0..1 + rng.below(3) {
        let at = if input.is_empty() {
            0
        } else {
            rng.below(input.len())
        };
        match rng.below(6) {
            0 if !input.is_empty() => input[at] = rng.next() as u8,
            1 if !input.is_empty() => input[at] = *rng.pick(SPECIAL),
            2 => input.insert(at, *rng.pick(SPECIAL)),
            3 if !input.is_empty() => {
                input.remove(at);
            }
            4 => input.truncate(at),
            _ => {
                let end = (at + rng.below(8)).min(input.len());
                let dup = input[at..end].to_vec();
                input.splice(at..at, dup);
            }
        }
    }
}

fn noise(rng: &mut Rng) -> Vec<u8> {
    const ALPHABET: &[u8] = b"*$\r\n\r\n-0123456789 \"'\\xabAB\0";
    let n = rng.below(64);
    (0..n)
        .map(|_| {
            if rng.below(4) == 0 {
                rng.next() as u8
            } else {
                *rng.pick(ALPHABET)
            }
        })
        .collect()
}

fn small_limits() -> Limits {
    Limits {
        max_bulk: 16,
        max_args: 8,
        max_inline: 32,
    }
}

/// Every response variant, for rendering.
fn responses() -> Vec<Response> {
    let item = Item {
        value: b"v\r\n".to_vec(),
        flags: 3,
        cas: 9,
    };
    vec![
        Response::Ok,
        Response::NotStored,
        Response::CasMismatch,
        Response::NotFound,
        Response::Items(vec![]),
        Response::Items(vec![None, Some(item)]),
        Response::Int(-2),
        Response::Int(i64::MAX),
        Response::Int(i64::MIN),
        Response::UInt(u64::MAX),
        Response::Keys(vec![b"a".to_vec()]),
        Response::ScanPage {
            next: vec![0, 255],
            keys: vec![],
        },
        Response::Error("e\r\n".into()),
    ]
}

/// Checks one input: parses it as a stream of requests, and checks that every prefix of the
/// input either asks for more bytes or gives the same first result as the whole input.
fn check(input: &[u8], limits: &Limits) {
    let whole: Parsed = parse_command(input, limits);
    for i in 0..input.len() {
        match parse_command(&input[..i], limits) {
            Ok(None) => {}
            early => assert_eq!(early, whole, "prefix {i} of {input:?}"),
        }
    }
    let mut pos = 0;
    while pos < input.len() {
        match parse_command(&input[pos..], limits) {
            Ok(Some((args, n))) => {
                assert!(n >= 1 && n <= input.len() - pos, "{input:?}: used {n}");
                assert!(args.len() <= limits.max_args);
                assert!(args
                    .iter()
                    .all(|a| a.len() <= limits.max_bulk.max(limits.max_inline)));
                translate(&args);
                pos += n;
            }
            Ok(None) => break,
            Err(e) => {
                let reply = e.reply();
                assert!(reply.starts_with(b"-ERR Protocol error: ") && reply.ends_with(b"\r\n"));
                assert!(!reply[..reply.len() - 2].contains(&b'\n'));
                break;
            }
        }
    }
}

/// Checks what `args` translate to; whether it is an operation on the store.
fn translate(args: &[Vec<u8>]) -> bool {
    match command(args) {
        Action::Reply(r) => {
            if args.is_empty() {
                assert!(r.is_empty());
            } else {
                assert!(r.ends_with(b"\r\n"), "{args:?} -> {r:?}");
                if r[0] == b'-' {
                    assert!(!r[..r.len() - 2].contains(&b'\n'), "{r:?}");
                    assert!(!r[..r.len() - 2].contains(&b'\r'), "{r:?}");
                }
            }
        }
        Action::Store(op, how) => {
            // The replica that proposes an operation applies it as parsed, the others its
            // encoding: both must be the same operation.
            let mut b = Vec::new();
            encode_op(&op, &mut b);
            assert_eq!(decode_op(&b), Ok(op), "{args:?}");
            for resp in responses() {
                let r = render(&how, &resp);
                assert!(r.ends_with(b"\r\n"));
            }
            return true;
        }
        Action::Info(_) | Action::Quit | Action::Client(_) | Action::Tx(_) => {}
    }
    false
}

#[test]
fn random_noise_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..3000 {
        let input = noise(&mut rng);
        check(&input, &Limits::default());
        check(&input, &small_limits());
    }
}

#[test]
fn mutated_requests_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for round in 0..4000 {
        let args = random_args(&mut rng);
        let mut input = if round % 3 == 0 {
            inline(&args)
        } else {
            multibulk(&args)
        };
        // Sometimes a pipeline of two.
        if rng.below(3) == 0 {
            input.extend_from_slice(&multibulk(&random_args(&mut rng)));
        }
        mutate(&mut rng, &mut input);
        check(&input, &Limits::default());
        check(&input, &small_limits());
    }
}

#[test]
fn valid_requests_round_trip_in_any_split() {
    let mut rng = Rng(42);
    for round in 0..2000 {
        let args = random_args(&mut rng);
        let input = if round % 2 == 0 {
            multibulk(&args)
        } else {
            inline(&args)
        };
        for i in 0..input.len() {
            assert_eq!(parse_command(&input[..i], &Limits::default()), Ok(None));
        }
        let mut padded = input.clone();
        padded.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(
            parse_command(&padded, &Limits::default()),
            Ok(Some((args.clone(), input.len())))
        );
        translate(&args);
    }
}

#[test]
fn every_known_command_with_random_arguments_translates_to_what_decodes_back() {
    // Every command name of the container types and strings, with arguments drawn from the
    // words and numbers above (what it stores is checked by `translate`).
    let names: Vec<&str> = waverunner_kv::types::specs().map(|s| s.name).collect();
    assert!(names.len() > 50, "{names:?}");
    let mut rng = Rng(11);
    for name in &names {
        let mut stored = 0;
        for _ in 0..200 {
            let mut args = random_args(&mut rng);
            args.insert(0, name.as_bytes().to_vec());
            stored += usize::from(translate(&args));
        }
        assert!(stored > 0, "{name}: no arguments made an operation");
    }
}

#[test]
fn every_command_with_random_arguments_translates() {
    let mut rng = Rng(7);
    for _ in 0..5000 {
        let mut args = random_args(&mut rng);
        // Put a real command name first most of the time.
        if rng.below(4) != 0 {
            args[0] = rng.pick(&WORDS[..40]).as_bytes().to_vec();
        }
        translate(&args);
    }
    // Renders never panic on any pairing either.
    for how in [
        Render::Ok,
        Render::Set,
        Render::Bulk,
        Render::Bulks,
        Render::Int,
        Render::Bool,
        Render::TtlSeconds,
        Render::TtlMillis,
        Render::Keys,
        Render::Scan,
        Render::Reply,
    ] {
        for resp in responses() {
            assert!(render(&how, &resp).ends_with(b"\r\n"));
        }
    }
}
