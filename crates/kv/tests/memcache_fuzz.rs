//! Robustness of the memcached front-end on pseudo-random and mutated input: the parser never
//! panics, always either uses at least one byte, asks for more, or fails with a skip of at
//! least one byte; feeding a command in pieces gives the same result as feeding it whole; and
//! translating and rendering whatever it parses never panics either.

use waverunner_kv::memcache::{
    command, parse_command, render, Limits, McAction, McCommand, McError,
};
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

type Parsed = Result<Option<(McCommand, usize)>, McError>;

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "5",
    "-1",
    "2592000",
    "2592001",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "x",
    "+3",
    "",
];

fn key(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => "k".repeat(1 + rng.below(12)),
        1 => String::new(),
        _ => format!("key{}", rng.below(5)),
    }
}

fn num(rng: &mut Rng) -> String {
    rng.pick(NUMBERS).to_string()
}

/// A plausible command, valid most of the time.
fn random_command(rng: &mut Rng) -> Vec<u8> {
    let noreply = if rng.below(3) == 0 { " noreply" } else { "" };
    let line = match rng.below(12) {
        0..=2 => {
            let verb = *rng.pick(&["set", "add", "replace", "append", "prepend", "cas"]);
            let len = rng.below(24);
            let bytes = if rng.below(8) == 0 {
                num(rng)
            } else {
                len.to_string()
            };
            let unique = if verb == "cas" {
                format!(" {}", num(rng))
            } else {
                String::new()
            };
            let data: String = (0..len)
                .map(|_| *rng.pick(&['a', '\r', '\n', ' ', '0']))
                .collect();
            format!(
                "{verb} {} {} {} {bytes}{unique}{noreply}\r\n{data}\r\n",
                key(rng),
                if rng.below(4) == 0 {
                    num(rng)
                } else {
                    "0".into()
                },
                if rng.below(4) == 0 {
                    num(rng)
                } else {
                    "0".into()
                },
            )
        }
        3 | 4 => {
            let verb = *rng.pick(&["get", "gets", "gat", "gats"]);
            let exptime = if verb.starts_with("gat") {
                format!(" {}", num(rng))
            } else {
                String::new()
            };
            let keys: Vec<String> = (0..rng.below(4)).map(|_| key(rng)).collect();
            format!("{verb}{exptime} {}\r\n", keys.join(" "))
        }
        5 => format!(
            "delete {}{}{noreply}\r\n",
            key(rng),
            if rng.below(2) == 0 { " 0" } else { "" }
        ),
        6 => format!(
            "{} {} {}{noreply}\r\n",
            rng.pick(&["incr", "decr"]),
            key(rng),
            num(rng)
        ),
        7 => format!("touch {} {}{noreply}\r\n", key(rng), num(rng)),
        8 => format!("flush_all {}{noreply}\r\n", num(rng)),
        9 => format!("verbosity {}{noreply}\r\n", num(rng)),
        10 => rng
            .pick(&[
                "version\r\n",
                "stats\r\n",
                "stats items\r\n",
                "quit\r\n",
                "\r\n",
            ])
            .to_string(),
        _ => format!(
            "{} {}\r\n",
            rng.pick(&["bogus", "mg", "GET", "set"]),
            key(rng)
        ),
    };
    line.into_bytes()
}

fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    const SPECIAL: &[u8] = b" \r\n0123456789-+x";
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
    const WORDS: &[&str] = &[
        "get ",
        "set ",
        "cas ",
        "gat ",
        "delete ",
        "incr ",
        "touch ",
        "flush_all ",
        "noreply",
        " ",
        "\r\n",
        "\n",
        "0 ",
        "1 ",
        "-1 ",
        "99 ",
        "k ",
        "\r",
    ];
    let mut out = Vec::new();
    for _ in 0..rng.below(24) {
        if rng.below(5) == 0 {
            out.push(rng.next() as u8);
        } else {
            out.extend_from_slice(rng.pick(WORDS).as_bytes());
        }
    }
    out
}

fn small_limits() -> Limits {
    Limits {
        max_value: 16,
        max_line: 32,
        max_key: 8,
    }
}

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
        Response::Items(vec![None, Some(item.clone()), Some(item)]),
        Response::Int(-2),
        Response::Int(1),
        Response::UInt(u64::MAX),
        Response::Keys(vec![b"a".to_vec()]),
        Response::ScanPage {
            next: vec![],
            keys: vec![],
        },
        Response::Error("e\r\n".into()),
    ]
}

fn same(early: &Parsed, whole: &Parsed) -> bool {
    match (early, whole) {
        (Err(a), Err(b)) if a.close && b.close => a.kind == b.kind && a.noreply == b.noreply,
        _ => early == whole,
    }
}

/// Parses the input as a stream of commands, and checks that every prefix either asks for
/// more bytes or gives the same first result as the whole input.
fn check(input: &[u8], limits: &Limits) {
    let whole = parse_command(input, limits);
    for i in 0..input.len() {
        let early = parse_command(&input[..i], limits);
        if early != Ok(None) {
            assert!(
                same(&early, &whole),
                "prefix {i} of {input:?}: {early:?} vs {whole:?}"
            );
        }
    }
    let mut pos = 0;
    while pos < input.len() {
        match parse_command(&input[pos..], limits) {
            Ok(Some((cmd, n))) => {
                assert!(n >= 1 && n <= input.len() - pos, "{input:?}: used {n}");
                translate(cmd, limits);
                pos += n;
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.skip >= 1, "{input:?}: {e:?}");
                let reply = e.reply();
                assert!(reply.is_empty() || reply.ends_with(b"\r\n"));
                if e.close {
                    break;
                }
                pos = pos.saturating_add(e.skip);
            }
        }
    }
}

fn translate(cmd: McCommand, limits: &Limits) {
    if let McCommand::Store { key, value, .. } | McCommand::Cas { key, value, .. } = &cmd {
        assert!(key.len() <= limits.max_key && value.len() <= limits.max_value);
    }
    match command(cmd) {
        McAction::Reply(r) => assert!(r.is_empty() || r.ends_with(b"\r\n")),
        McAction::Store { render: how, .. } => {
            for resp in responses() {
                assert!(render(&how, &resp).ends_with(b"\r\n"));
            }
        }
        McAction::Stats | McAction::Quit => {}
    }
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
fn mutated_commands_never_panic() {
    let mut rng = Rng(0xdead_beef_cafe_f00d);
    for _ in 0..4000 {
        let mut input = random_command(&mut rng);
        if rng.below(2) == 0 {
            input.extend_from_slice(&random_command(&mut rng));
        }
        if rng.below(4) != 0 {
            mutate(&mut rng, &mut input);
        }
        check(&input, &Limits::default());
        check(&input, &small_limits());
    }
}

#[test]
fn pipelines_parse_the_same_in_any_split() {
    // A stream of commands cut at random points parses to the same commands as the whole.
    let mut rng = Rng(99);
    for _ in 0..500 {
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(6) {
            input.extend_from_slice(&random_command(&mut rng));
        }
        let limits = Limits::default();
        let whole = stream(&input, &limits, input.len());
        let chunk = 1 + rng.below(7);
        let pieces = stream(&input, &limits, chunk);
        assert_eq!(whole, pieces, "{input:?} in chunks of {chunk}");
    }
}

/// What the server would do with the input arriving `chunk` bytes at a time: the commands and
/// errors in order.
fn stream(input: &[u8], limits: &Limits, chunk: usize) -> Vec<Result<McCommand, McError>> {
    let mut events = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut skip = 0usize;
    let mut arrived = 0;
    while arrived < input.len() {
        let end = (arrived + chunk).min(input.len());
        let mut fresh = &input[arrived..end];
        arrived = end;
        let drop = skip.min(fresh.len());
        skip -= drop;
        fresh = &fresh[drop..];
        buf.extend_from_slice(fresh);
        loop {
            match parse_command(&buf, limits) {
                Ok(Some((cmd, n))) => {
                    events.push(Ok(cmd));
                    buf.drain(..n);
                }
                Ok(None) => break,
                Err(e) => {
                    let close = e.close;
                    let n = e.skip.min(buf.len());
                    skip = e.skip - n;
                    buf.drain(..n);
                    // Skips count from the start of the command: normalize for comparison.
                    events.push(Err(McError { skip: 0, ..e }));
                    if close {
                        return events;
                    }
                }
            }
        }
    }
    events
}
