//! The Redis front-end: parser, command translation and rendering, checked byte for byte.

use waverunner_kv::resp::{
    command, command_proto, decode_cursor, encode_cursor, parse_command, render,
    render_info_sections, render_proto, Action, ClientCmd, InfoSection, Limits, Proto,
    ProtocolError, Render, Session,
};
use waverunner_kv::store::ERR_TOO_LARGE;
use waverunner_kv::{Cond, ExpireCond, Expiry, Item, Op, Response};

type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError>;

fn parse(buf: &[u8]) -> Parsed {
    parse_command(buf, &Limits::default())
}

fn args(line: &str) -> Vec<Vec<u8>> {
    line.split(' ').map(|a| a.as_bytes().to_vec()).collect()
}

fn bv(strs: &[&str]) -> Vec<Vec<u8>> {
    strs.iter().map(|a| a.as_bytes().to_vec()).collect()
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The direct reply to a command line (arguments split on single spaces).
fn reply(line: &str) -> String {
    reply_args(&args(line))
}

fn reply_args(a: &[Vec<u8>]) -> String {
    match command(a) {
        Action::Reply(r) => show(&r),
        other => panic!("{a:?}: expected a reply, got {other:?}"),
    }
}

fn store(line: &str) -> (Op, Render) {
    match command(&args(line)) {
        Action::Store(op, r) => (op, r),
        other => panic!("{line}: expected a store action, got {other:?}"),
    }
}

fn out(r: Render, resp: Response) -> String {
    show(&render(&r, &resp))
}

fn item(v: &str) -> Option<Item> {
    Some(Item {
        value: v.as_bytes().to_vec(),
        flags: 0,
        cas: 1,
    })
}

fn k(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn set_op(key: &str, value: &str, expiry: Expiry, cond: Cond, get_old: bool) -> Op {
    Op::Set {
        key: k(key),
        value: k(value),
        flags: 0,
        expiry,
        cond,
        get_old,
    }
}

// ---------------------------------------------------------------------------------- parser

#[test]
fn multibulk_parses_and_reports_bytes_used() {
    let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n";
    let (a, n) = parse(buf).unwrap().unwrap();
    assert_eq!(a, bv(&["SET", "k", "hello"]));
    assert_eq!(n, 31);
    let (a, m) = parse(&buf[n..]).unwrap().unwrap();
    assert_eq!(a, bv(&["PING"]));
    assert_eq!(n + m, buf.len());
}

#[test]
fn multibulk_byte_at_a_time_waits_then_succeeds() {
    let buf = b"*2\r\n$3\r\nGET\r\n$10\r\nab\r\ncd\r\nef\r\n";
    for i in 0..buf.len() {
        assert_eq!(parse(&buf[..i]), Ok(None), "prefix of {i} bytes");
    }
    let (a, n) = parse(buf).unwrap().unwrap();
    assert_eq!(a, vec![b"GET".to_vec(), b"ab\r\ncd\r\nef".to_vec()]);
    assert_eq!(n, buf.len());
}

#[test]
fn multibulk_binary_and_empty_arguments() {
    let buf = b"*3\r\n$0\r\n\r\n$2\r\n\x00\xff\r\n$1\r\n*\r\n";
    let (a, n) = parse(buf).unwrap().unwrap();
    assert_eq!(a, vec![vec![], vec![0, 255], b"*".to_vec()]);
    assert_eq!(n, buf.len());
}

#[test]
fn empty_multibulk_is_an_empty_request() {
    assert_eq!(parse(b"*0\r\n"), Ok(Some((vec![], 4))));
    assert_eq!(parse(b"*-1\r\nxx"), Ok(Some((vec![], 5))));
    assert_eq!(parse(b"*-100\r\n"), Ok(Some((vec![], 7))));
    assert_eq!(command(&[]), Action::Reply(vec![]));
}

#[test]
fn multibulk_errors_have_redis_wording() {
    let cases: &[(&[u8], ProtocolError, &str)] = &[
        (
            b"*abc\r\n",
            ProtocolError::InvalidMultibulkLength,
            "Protocol error: invalid multibulk length",
        ),
        (b"*1x", ProtocolError::InvalidMultibulkLength, ""),
        (b"*01\r\n", ProtocolError::InvalidMultibulkLength, ""),
        (b"*-0\r\n", ProtocolError::InvalidMultibulkLength, ""),
        (b"*1\rX", ProtocolError::InvalidMultibulkLength, ""),
        (b"*1\n", ProtocolError::InvalidMultibulkLength, ""),
        (b"*+1\r\n", ProtocolError::InvalidMultibulkLength, ""),
        (
            b"*123456789012345678901",
            ProtocolError::InvalidMultibulkLength,
            "",
        ),
        (
            b"*99999999999999999999\r\n",
            ProtocolError::InvalidMultibulkLength,
            "",
        ),
        (b"*1048577\r\n", ProtocolError::InvalidMultibulkLength, ""),
        (
            b"*1\r\n:1\r\n",
            ProtocolError::ExpectedDollar(b':'),
            "Protocol error: expected '$', got ':'",
        ),
        (
            b"*1\r\n\r\n",
            ProtocolError::ExpectedDollar(b'\r'),
            "Protocol error: expected '$', got '\\x0d'",
        ),
        (
            b"*1\r\n$x\r\n",
            ProtocolError::InvalidBulkLength,
            "Protocol error: invalid bulk length",
        ),
        (b"*1\r\n$-1\r\n", ProtocolError::InvalidBulkLength, ""),
        (b"*1\r\n$1048577\r\n", ProtocolError::InvalidBulkLength, ""),
        (b"*1\r\n$3 \r\n", ProtocolError::InvalidBulkLength, ""),
        (
            b"*1\r\n$3\r\nabcXY",
            ProtocolError::MissingBulkCrlf,
            "Protocol error: expected CRLF after bulk data",
        ),
        (b"*1\r\n$3\r\nabc\rX", ProtocolError::MissingBulkCrlf, ""),
        (b"*1\r\n$3\r\nabcd", ProtocolError::MissingBulkCrlf, ""),
        (
            b"*2\r\n$1\r\na\r\nb",
            ProtocolError::ExpectedDollar(b'b'),
            "",
        ),
    ];
    for (input, want, text) in cases {
        assert_eq!(parse(input), Err(want.clone()), "{}", show(input));
        if !text.is_empty() {
            assert_eq!(want.to_string(), *text);
        }
    }
    assert_eq!(
        ProtocolError::InvalidBulkLength.reply(),
        b"-ERR Protocol error: invalid bulk length\r\n"
    );
}

#[test]
fn limits_are_configurable() {
    let small = Limits {
        max_bulk: 3,
        max_args: 2,
        max_inline: 8,
    };
    assert!(parse_command(b"*2\r\n$3\r\nabc\r\n$0\r\n\r\n", &small)
        .unwrap()
        .is_some());
    assert_eq!(
        parse_command(b"*3\r\n", &small),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    assert_eq!(
        parse_command(b"*1\r\n$4\r\n", &small),
        Err(ProtocolError::InvalidBulkLength)
    );
    let tiny = Limits {
        max_inline: 2,
        ..Limits::default()
    };
    assert_eq!(
        parse_command(b"*123", &tiny),
        Err(ProtocolError::TooBigMultibulkCount)
    );
    assert_eq!(
        ProtocolError::TooBigMultibulkCount.to_string(),
        "Protocol error: too big mbulk count string"
    );
    assert_eq!(
        parse_command(b"*1\r\n$123", &tiny),
        Err(ProtocolError::TooBigBulkCount)
    );
    assert_eq!(
        ProtocolError::TooBigBulkCount.to_string(),
        "Protocol error: too big bulk count string"
    );
    assert_eq!(parse_command(b"ab\r", &tiny), Ok(None));
    assert_eq!(
        parse_command(b"abc", &tiny),
        Err(ProtocolError::TooBigInline)
    );
    assert_eq!(parse_command(b"ab\n", &tiny), Ok(Some((bv(&["ab"]), 3))));
    assert_eq!(parse_command(b"ab\r\n", &tiny), Ok(Some((bv(&["ab"]), 4))));
    assert_eq!(
        parse_command(b"abc\n", &tiny),
        Err(ProtocolError::TooBigInline)
    );
}

#[test]
fn large_announced_sizes_wait_without_allocating() {
    // A million arguments and a 1 MiB bulk announced, nothing sent: just wait.
    assert_eq!(parse(b"*1048576\r\n"), Ok(None));
    assert_eq!(parse(b"*1048576\r\n$1048576\r\n"), Ok(None));
    assert_eq!(parse(b"*1\r\n$1048576\r\nabc"), Ok(None));
}

#[test]
fn inline_commands() {
    assert_eq!(parse(b"PING\r\n"), Ok(Some((bv(&["PING"]), 6))));
    assert_eq!(parse(b"PING\n"), Ok(Some((bv(&["PING"]), 5))));
    assert_eq!(parse(b"PIN"), Ok(None));
    assert_eq!(parse(b"PING\r"), Ok(None));
    assert_eq!(
        parse(b"  set\t a  b \r\nGET a\r\n"),
        Ok(Some((bv(&["set", "a", "b"]), 14)))
    );
    assert_eq!(parse(b"\r\n"), Ok(Some((vec![], 2))));
    assert_eq!(parse(b"   \n"), Ok(Some((vec![], 4))));
    // A NUL byte ends the line, as in Redis's C string handling.
    assert_eq!(parse(b"GET a\0b c\r\n"), Ok(Some((bv(&["GET", "a"]), 11))));
}

#[test]
fn inline_quoting_follows_sdssplitargs() {
    let one = |s: &[u8]| -> Vec<Vec<u8>> {
        let mut line = s.to_vec();
        line.extend_from_slice(b"\r\n");
        parse(&line).unwrap().unwrap().0
    };
    assert_eq!(one(br#"set "a b" 'c d'"#), bv(&["set", "a b", "c d"]));
    assert_eq!(
        one(br#"x "\x41\x7a\n\r\t\b\a\"\\\q""#),
        vec![b"x".to_vec(), b"Az\n\r\t\x08\x07\"\\q".to_vec()]
    );
    assert_eq!(one(br#"x "\xZZ""#), bv(&["x", "xZZ"]));
    assert_eq!(one(br#"x 'it\'s' 'a\nb'"#), bv(&["x", "it's", "a\\nb"]));
    assert_eq!(one(br#"x "" ''"#), bv(&["x", "", ""]));
    // A quote in the middle of a word opens a quoted part.
    assert_eq!(one(br#"x a"b c""#), bv(&["x", "ab c"]));
    for bad in [
        &br#"x "abc"#[..],
        br#"x 'abc"#,
        br#"x "a"b"#,
        br#"x 'a'b"#,
        br#"x "abc\"#,
    ] {
        let mut line = bad.to_vec();
        line.extend_from_slice(b"\r\n");
        assert_eq!(
            parse(&line),
            Err(ProtocolError::UnbalancedQuotes),
            "{}",
            show(bad)
        );
    }
    assert_eq!(
        ProtocolError::UnbalancedQuotes.reply(),
        b"-ERR Protocol error: unbalanced quotes in request\r\n"
    );
    assert_eq!(
        ProtocolError::TooBigInline.to_string(),
        "Protocol error: too big inline request"
    );
}

#[test]
fn inline_too_big() {
    // 64 KiB of line, then CRLF.
    let mut buf = vec![b'a'; 64 * 1024];
    assert_eq!(parse(&buf), Ok(None));
    buf.push(b'\r');
    assert_eq!(parse(&buf), Ok(None));
    buf.pop();
    buf.push(b'a');
    assert_eq!(parse(&buf), Err(ProtocolError::TooBigInline));
    buf.push(b'\n');
    assert_eq!(parse(&buf), Err(ProtocolError::TooBigInline));
    let mut ok = vec![b'a'; 64 * 1024];
    ok.push(b'\n');
    assert_eq!(parse(&ok).unwrap().unwrap().1, ok.len());
}

// ------------------------------------------------------------------------ generic commands

#[test]
fn ping_echo_quit_select() {
    assert_eq!(reply("PING"), "+PONG\r\n");
    assert_eq!(reply("ping hello"), "$5\r\nhello\r\n");
    assert_eq!(reply_args(&[b"PING".to_vec(), vec![]]), "$0\r\n\r\n");
    assert_eq!(
        reply("PING a b"),
        "-ERR wrong number of arguments for 'ping' command\r\n"
    );
    assert_eq!(reply("ECHO hi"), "$2\r\nhi\r\n");
    assert_eq!(
        reply("ECHO"),
        "-ERR wrong number of arguments for 'echo' command\r\n"
    );
    assert_eq!(command(&args("QUIT")), Action::Quit);
    assert_eq!(command(&args("quit now")), Action::Quit);
    assert_eq!(reply("SELECT 0"), "+OK\r\n");
    assert_eq!(reply("SELECT 1"), "-ERR DB index is out of range\r\n");
    assert_eq!(
        reply("SELECT x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(command(&args("INFO")), Action::Info(vec![]));
    assert_eq!(
        command(&args("info KeySpace cpu")),
        Action::Info(vec![k("keyspace"), k("cpu")])
    );
}

#[test]
fn unknown_commands_use_redis_wording() {
    assert_eq!(
        reply("FOO a b"),
        "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"
    );
    assert_eq!(
        reply("foo"),
        "-ERR unknown command 'foo', with args beginning with: \r\n"
    );
    // Argument list cut at 128 bytes; the name at 128; CR/LF become spaces.
    let long = "x".repeat(200);
    let line = format!("{long} {long} b");
    let want = format!(
        "-ERR unknown command '{}', with args beginning with: '{}' \r\n",
        "x".repeat(128),
        "x".repeat(128)
    );
    assert_eq!(reply(&line), want);
    assert_eq!(
        reply_args(&[b"a\r\nb".to_vec(), b"c\nd".to_vec()]),
        "-ERR unknown command 'a  b', with args beginning with: 'c d' \r\n"
    );
    let many: Vec<String> = (0..100).map(|i| format!("{i:02}")).collect();
    let r = reply(&format!("nope {}", many.join(" ")));
    // "'00' " is 5 bytes: arguments are added while the list is under 128 bytes (26 of them).
    let list: String = many[..26].iter().map(|a| format!("'{a}' ")).collect();
    assert_eq!(
        r,
        format!("-ERR unknown command 'nope', with args beginning with: {list}\r\n")
    );
}

#[test]
fn command_names_are_case_insensitive() {
    for name in ["get", "GET", "GeT"] {
        assert_eq!(
            store(&format!("{name} k")),
            (Op::Get { keys: vec![k("k")] }, Render::Bulk)
        );
    }
}

#[test]
fn wrong_arity() {
    for (line, name) in [
        ("GET", "get"),
        ("GET a b", "get"),
        ("SET k", "set"),
        ("SETNX k", "setnx"),
        ("GETSET k", "getset"),
        ("MGET", "mget"),
        ("MSET k", "mset"),
        ("MSET k v k2", "mset"),
        ("DEL", "del"),
        ("EXISTS", "exists"),
        ("INCR", "incr"),
        ("INCRBY k", "incrby"),
        ("DECR a b", "decr"),
        ("DECRBY k", "decrby"),
        ("APPEND k", "append"),
        ("STRLEN", "strlen"),
        ("EXPIRE k", "expire"),
        ("PEXPIRE k", "pexpire"),
        ("TTL", "ttl"),
        ("PTTL", "pttl"),
        ("PERSIST", "persist"),
        ("DBSIZE x", "dbsize"),
        ("KEYS", "keys"),
        ("SCAN", "scan"),
        ("SELECT", "select"),
        ("CLIENT", "client"),
        ("CONFIG", "config"),
        ("TYPE", "type"),
        ("SETEX k 1", "setex"),
    ] {
        assert_eq!(
            reply(line),
            format!("-ERR wrong number of arguments for '{name}' command\r\n"),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------- string commands

#[test]
fn get_and_mget() {
    assert_eq!(
        store("GET k"),
        (Op::Get { keys: vec![k("k")] }, Render::Bulk)
    );
    assert_eq!(
        out(Render::Bulk, Response::Items(vec![item("hello")])),
        "$5\r\nhello\r\n"
    );
    assert_eq!(
        out(Render::Bulk, Response::Items(vec![item("")])),
        "$0\r\n\r\n"
    );
    assert_eq!(out(Render::Bulk, Response::Items(vec![None])), "$-1\r\n");
    assert_eq!(
        store("MGET a b c"),
        (
            Op::Get {
                keys: vec![k("a"), k("b"), k("c")]
            },
            Render::Bulks
        )
    );
    assert_eq!(
        out(
            Render::Bulks,
            Response::Items(vec![item("x"), None, item("")])
        ),
        "*3\r\n$1\r\nx\r\n$-1\r\n$0\r\n\r\n"
    );
    assert_eq!(out(Render::Bulks, Response::Items(vec![])), "*0\r\n");
}

#[test]
fn set_plain_and_conditional() {
    assert_eq!(
        store("SET k v"),
        (
            set_op("k", "v", Expiry::None, Cond::Always, false),
            Render::Set
        )
    );
    assert_eq!(
        store("set k v nx").0,
        set_op("k", "v", Expiry::None, Cond::IfAbsent, false)
    );
    assert_eq!(
        store("SET k v XX").0,
        set_op("k", "v", Expiry::None, Cond::IfPresent, false)
    );
    assert_eq!(
        store("SET k v NX NX").0,
        set_op("k", "v", Expiry::None, Cond::IfAbsent, false)
    );
    assert_eq!(out(Render::Set, Response::Ok), "+OK\r\n");
    assert_eq!(out(Render::Set, Response::NotStored), "$-1\r\n");
}

#[test]
fn set_expiry_options() {
    let exp = |line: &str| match store(line).0 {
        Op::Set { expiry, .. } => expiry,
        other => panic!("{other:?}"),
    };
    assert_eq!(exp("SET k v EX 10"), Expiry::AfterMs(10_000));
    assert_eq!(exp("SET k v px 5"), Expiry::AfterMs(5));
    assert_eq!(exp("SET k v EXAT 100"), Expiry::AtMs(100_000));
    assert_eq!(exp("SET k v PXAT 7"), Expiry::AtMs(7));
    assert_eq!(exp("SET k v KEEPTTL"), Expiry::Keep);
    assert_eq!(exp("SET k v EX 10 EX 20"), Expiry::AfterMs(20_000));
    assert_eq!(exp("SET k v NX EX 1 GET"), Expiry::AfterMs(1000));
    assert_eq!(
        exp("SET k v PXAT 9223372036854775807"),
        Expiry::AtMs(i64::MAX as u64)
    );
}

#[test]
fn set_get_option() {
    assert_eq!(
        store("SET k v GET"),
        (
            set_op("k", "v", Expiry::None, Cond::Always, true),
            Render::Bulk
        )
    );
    assert_eq!(
        store("SET k v NX GET").0,
        set_op("k", "v", Expiry::None, Cond::IfAbsent, true)
    );
    assert_eq!(
        out(Render::Bulk, Response::Items(vec![item("old")])),
        "$3\r\nold\r\n"
    );
    assert_eq!(out(Render::Bulk, Response::Items(vec![None])), "$-1\r\n");
    assert_eq!(out(Render::Bulk, Response::NotStored), "$-1\r\n");
}

#[test]
fn set_errors() {
    let syntax = "-ERR syntax error\r\n";
    for line in [
        "SET k v NX XX",
        "SET k v XX NX",
        "SET k v EX 1 PX 1",
        "SET k v PX 1 EXAT 1",
        "SET k v EX 1 KEEPTTL",
        "SET k v KEEPTTL EX 1",
        "SET k v EX",
        "SET k v FOO",
        "SET k v NX FOO",
    ] {
        assert_eq!(reply(line), syntax, "{line}");
    }
    let not_int = "-ERR value is not an integer or out of range\r\n";
    assert_eq!(reply("SET k v EX abc"), not_int);
    assert_eq!(reply("SET k v EX 1.5"), not_int);
    assert_eq!(reply("SET k v EX 01"), not_int);
    assert_eq!(reply("SET k v PX 99999999999999999999"), not_int);
    let invalid = "-ERR invalid expire time in 'set' command\r\n";
    for line in [
        "SET k v EX 0",
        "SET k v EX -1",
        "SET k v PX 0",
        "SET k v PXAT 0",
        "SET k v EXAT -5",
        "SET k v EX 9223372036854775",
        "SET k v EX 9223372036854776",
        "SET k v EXAT 9223372036854776",
        "SET k v PX 9223372036854775807",
    ] {
        assert_eq!(reply(line), invalid, "{line}");
    }
    // Syntax is checked before the expire value.
    assert_eq!(reply("SET k v EX abc NX XX"), syntax);
}

#[test]
fn setnx_setex_getset() {
    assert_eq!(
        store("SETNX k v"),
        (
            set_op("k", "v", Expiry::None, Cond::IfAbsent, false),
            Render::Bool
        )
    );
    assert_eq!(out(Render::Bool, Response::Ok), ":1\r\n");
    assert_eq!(out(Render::Bool, Response::NotStored), ":0\r\n");
    assert_eq!(
        store("SETEX k 10 v"),
        (
            set_op("k", "v", Expiry::AfterMs(10_000), Cond::Always, false),
            Render::Set
        )
    );
    assert_eq!(
        store("PSETEX k 10 v").0,
        set_op("k", "v", Expiry::AfterMs(10), Cond::Always, false)
    );
    assert_eq!(
        reply("SETEX k 0 v"),
        "-ERR invalid expire time in 'setex' command\r\n"
    );
    assert_eq!(
        reply("PSETEX k -1 v"),
        "-ERR invalid expire time in 'psetex' command\r\n"
    );
    assert_eq!(
        reply("SETEX k x v"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        store("GETSET k v"),
        (
            set_op("k", "v", Expiry::None, Cond::Always, true),
            Render::Bulk
        )
    );
}

#[test]
fn mset() {
    assert_eq!(
        store("MSET a 1 b 2"),
        (
            Op::MSet {
                pairs: vec![(k("a"), k("1")), (k("b"), k("2"))]
            },
            Render::Ok
        )
    );
    assert_eq!(out(Render::Ok, Response::Ok), "+OK\r\n");
}

#[test]
fn del_exists_type() {
    assert_eq!(
        store("DEL a b"),
        (
            Op::Del {
                keys: vec![k("a"), k("b")]
            },
            Render::Int
        )
    );
    assert_eq!(store("UNLINK a").0, Op::Del { keys: vec![k("a")] });
    assert_eq!(
        store("EXISTS a a"),
        (
            Op::Exists {
                keys: vec![k("a"), k("a")]
            },
            Render::Int
        )
    );
    assert_eq!(out(Render::Int, Response::Int(2)), ":2\r\n");
    assert_eq!(
        store("TOUCH a b a"),
        (
            Op::Exists {
                keys: vec![k("a"), k("b"), k("a")]
            },
            Render::Int
        )
    );
    assert_eq!(out(Render::Int, Response::Int(0)), ":0\r\n");
    assert_eq!(
        store("TYPE a"),
        (
            Op::Cmd {
                args: vec![k("type"), k("a")],
                seed: 0
            },
            Render::Reply
        )
    );
    let status = Response::Reply(waverunner_kv::Reply::Status("string".into()));
    assert_eq!(out(Render::Reply, status), "+string\r\n");
}

#[test]
fn counters() {
    let incr = |key: &str, delta| Op::IncrBy { key: k(key), delta };
    assert_eq!(store("INCR k"), (incr("k", 1), Render::Int));
    assert_eq!(store("DECR k"), (incr("k", -1), Render::Int));
    assert_eq!(store("INCRBY k -7"), (incr("k", -7), Render::Int));
    assert_eq!(store("DECRBY k 7"), (incr("k", -7), Render::Int));
    assert_eq!(
        store("DECRBY k -9223372036854775807").0,
        incr("k", i64::MAX)
    );
    assert_eq!(
        store("INCRBY k -9223372036854775808").0,
        incr("k", i64::MIN)
    );
    assert_eq!(
        reply("DECRBY k -9223372036854775808"),
        "-ERR decrement would overflow\r\n"
    );
    let not_int = "-ERR value is not an integer or out of range\r\n";
    for line in [
        "INCRBY k x",
        "INCRBY k 1.0",
        "INCRBY k +1",
        "INCRBY k 9223372036854775808",
        "DECRBY k ",
    ] {
        assert_eq!(reply(line), not_int, "{line}");
    }
    assert_eq!(out(Render::Int, Response::Int(-5)), ":-5\r\n");
    assert_eq!(
        out(Render::Int, Response::Int(i64::MIN)),
        ":-9223372036854775808\r\n"
    );
    assert_eq!(
        out(
            Render::Int,
            Response::Error("increment or decrement would overflow".into())
        ),
        "-ERR increment or decrement would overflow\r\n"
    );
    assert_eq!(
        out(
            Render::Int,
            Response::Error("value is not an integer or out of range".into())
        ),
        not_int
    );
}

#[test]
fn append_strlen() {
    assert_eq!(
        store("APPEND k v"),
        (
            Op::Append {
                key: k("k"),
                value: k("v"),
                must_exist: false,
                max_len: u64::MAX,
            },
            Render::Int
        )
    );
    assert_eq!(store("STRLEN k"), (Op::Strlen { key: k("k") }, Render::Int));
    assert_eq!(out(Render::Int, Response::Int(11)), ":11\r\n");
    // APPEND past max_len: Redis's wording.
    assert_eq!(
        out(Render::Int, Response::Error(ERR_TOO_LARGE.into())),
        "-ERR string exceeds maximum allowed size\r\n"
    );
}

// ---------------------------------------------------------------------------------- expiry

#[test]
fn expire_family() {
    let touch = |expiry| Op::Touch {
        keys: vec![k("k")],
        expiry,
        get: false,
    };
    assert_eq!(
        store("EXPIRE k 10"),
        (touch(Expiry::AfterMs(10_000)), Render::Bool)
    );
    assert_eq!(store("PEXPIRE k 10").0, touch(Expiry::AfterMs(10)));
    assert_eq!(store("EXPIRE k 0").0, touch(Expiry::AfterMs(0)));
    assert_eq!(store("EXPIRE k -5").0, touch(Expiry::AfterMs(-5000)));
    assert_eq!(store("EXPIREAT k 100").0, touch(Expiry::AtMs(100_000)));
    assert_eq!(store("PEXPIREAT k 100").0, touch(Expiry::AtMs(100)));
    assert_eq!(store("PEXPIREAT k -1").0, touch(Expiry::AtMs(0)));
    assert_eq!(store("PERSIST k"), (touch(Expiry::None), Render::Bool));
    assert_eq!(out(Render::Bool, Response::Int(1)), ":1\r\n");
    assert_eq!(out(Render::Bool, Response::Int(0)), ":0\r\n");
    assert_eq!(
        reply("EXPIRE k x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        reply("EXPIRE k 9223372036854776"),
        "-ERR invalid expire time in 'expire' command\r\n"
    );
    assert_eq!(
        reply("PEXPIRE k 9223372036854775807"),
        "-ERR invalid expire time in 'pexpire' command\r\n"
    );
    assert_eq!(
        reply("EXPIREAT k 9223372036854776"),
        "-ERR invalid expire time in 'expireat' command\r\n"
    );
    assert_eq!(reply("EXPIRE k 10 FOO"), "-ERR Unsupported option FOO\r\n");
    // Redis 7's options: one condition, or XX with GT or LT.
    let cond = |line: &str| match store(line) {
        (Op::ExpireIf { cond, .. }, Render::Bool) => cond,
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(cond("EXPIRE k 10 NX"), ExpireCond::Nx);
    assert_eq!(cond("EXPIRE k 10 xx"), ExpireCond::Xx);
    assert_eq!(cond("PEXPIRE k 10 GT"), ExpireCond::Gt);
    assert_eq!(cond("EXPIREAT k 10 LT"), ExpireCond::Lt);
    assert_eq!(cond("EXPIRE k 10 XX GT"), ExpireCond::Gt);
    assert_eq!(cond("EXPIRE k 10 LT XX"), ExpireCond::XxLt);
    assert_eq!(
        reply("EXPIRE k 10 NX XX"),
        "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n"
    );
    assert_eq!(
        reply("EXPIRE k 10 GT LT"),
        "-ERR GT and LT options at the same time are not compatible\r\n"
    );
}

#[test]
fn ttl_and_pttl() {
    assert_eq!(
        store("TTL k"),
        (Op::Ttl { key: k("k") }, Render::TtlSeconds)
    );
    assert_eq!(
        store("PTTL k"),
        (Op::Ttl { key: k("k") }, Render::TtlMillis)
    );
    for (ms, secs) in [
        (-2, -2),
        (-1, -1),
        (0, 0),
        (499, 0),
        (500, 1),
        (1499, 1),
        (1500, 2),
        (10_000, 10),
        (i64::MAX, i64::MAX / 1000),
    ] {
        assert_eq!(
            out(Render::TtlSeconds, Response::Int(ms)),
            format!(":{secs}\r\n"),
            "{ms}"
        );
    }
    assert_eq!(out(Render::TtlMillis, Response::Int(1499)), ":1499\r\n");
    assert_eq!(out(Render::TtlMillis, Response::Int(-2)), ":-2\r\n");
    assert_eq!(out(Render::TtlMillis, Response::Int(-1)), ":-1\r\n");
}

// ---------------------------------------------------------------------------- keyspace

#[test]
fn dbsize_flushall_keys() {
    assert_eq!(store("DBSIZE"), (Op::DbSize, Render::Int));
    assert_eq!(out(Render::Int, Response::Int(3)), ":3\r\n");
    for line in ["FLUSHALL", "flushall async", "FLUSHALL SYNC", "FLUSHDB"] {
        assert_eq!(store(line), (Op::FlushAll, Render::Ok), "{line}");
    }
    assert_eq!(reply("FLUSHALL FOO"), "-ERR syntax error\r\n");
    assert_eq!(reply("FLUSHALL ASYNC SYNC"), "-ERR syntax error\r\n");
    assert_eq!(
        store("KEYS a*"),
        (Op::Keys { pattern: k("a*") }, Render::Keys)
    );
    assert_eq!(
        out(Render::Keys, Response::Keys(vec![k("a"), k("bc")])),
        "*2\r\n$1\r\na\r\n$2\r\nbc\r\n"
    );
    assert_eq!(out(Render::Keys, Response::Keys(vec![])), "*0\r\n");
}

#[test]
fn scan() {
    let op = |cursor: &[u8], pattern: Option<&str>, count| Op::Scan {
        cursor: cursor.to_vec(),
        pattern: pattern.map(k),
        count,
        kind: None,
    };
    assert_eq!(store("SCAN 0"), (op(b"", None, 10), Render::Scan));
    assert_eq!(store("scan 0 match a* count 5").0, op(b"", Some("a*"), 5));
    assert_eq!(store("SCAN 0 COUNT 5 MATCH *").0, op(b"", None, 5));
    assert_eq!(store("SCAN 0 MATCH a MATCH b").0, op(b"", Some("b"), 10));
    let Op::Scan { kind, .. } = store("SCAN 0 TYPE String").0 else {
        panic!()
    };
    assert_eq!(kind.as_deref(), Some(&b"string"[..]));
    assert_eq!(store("SCAN 0 COUNT 99999999999").0, op(b"", None, u32::MAX));
    assert_eq!(store("SCAN 1097098").0, op(b"ab", None, 10));
    assert_eq!(reply("SCAN 0 COUNT 0"), "-ERR syntax error\r\n");
    assert_eq!(reply("SCAN 0 COUNT -1"), "-ERR syntax error\r\n");
    assert_eq!(reply("SCAN 0 COUNT"), "-ERR syntax error\r\n");
    assert_eq!(reply("SCAN 0 FOO bar"), "-ERR syntax error\r\n");
    assert_eq!(
        reply("SCAN 0 COUNT x"),
        "-ERR value is not an integer or out of range\r\n"
    );
    for bad in ["abc", "5", "10", "1256", "1a00", "-1", "", "00"] {
        assert_eq!(
            reply(&format!("SCAN {bad}")),
            "-ERR invalid cursor\r\n",
            "{bad}"
        );
    }
    assert_eq!(
        out(
            Render::Scan,
            Response::ScanPage {
                next: vec![],
                keys: vec![k("a")]
            }
        ),
        "*2\r\n$1\r\n0\r\n*1\r\n$1\r\na\r\n"
    );
    assert_eq!(
        out(
            Render::Scan,
            Response::ScanPage {
                next: k("ab"),
                keys: vec![]
            }
        ),
        "*2\r\n$7\r\n1097098\r\n*0\r\n"
    );
}

#[test]
fn scan_cursor_tokens_round_trip() {
    assert_eq!(encode_cursor(b""), b"0");
    assert_eq!(encode_cursor(b"\x00\xff\x0a"), b"1000255010");
    assert_eq!(decode_cursor(b"0"), Some(vec![]));
    assert_eq!(decode_cursor(b"1"), Some(vec![]));
    let all: Vec<u8> = (0..=255).collect();
    for key in [&b"a"[..], b"key:123", &all] {
        let token = encode_cursor(key);
        assert!(token.iter().all(u8::is_ascii_digit));
        assert_eq!(decode_cursor(&token), Some(key.to_vec()));
    }
}

// -------------------------------------------------------------------- server / connection

#[test]
fn command_command() {
    assert_eq!(reply("COMMAND"), "*0\r\n");
    let doc = |name: &str, group: &str| {
        format!(
            "${}\r\n{name}\r\n*6\r\n$7\r\nsummary\r\n$0\r\n\r\n$5\r\nsince\r\n$0\r\n\r\n\
             $5\r\ngroup\r\n${}\r\n{group}\r\n",
            name.len(),
            group.len()
        )
    };
    assert_eq!(
        reply("command docs get hset zadd ping setbit"),
        format!(
            "*10\r\n{}{}{}{}{}",
            doc("get", "string"),
            doc("ping", "connection"),
            doc("setbit", "bitmap"),
            doc("hset", "hash"),
            doc("zadd", "sorted-set")
        )
    );
    assert!(reply("COMMAND DOCS").starts_with(&format!(
        "*{}\r\n",
        2 * {
            let c = reply("COMMAND COUNT");
            c[1..c.len() - 2].parse::<usize>().unwrap()
        }
    )));
    let count = reply("COMMAND COUNT");
    assert!(count.starts_with(':') && count.ends_with("\r\n"), "{count}");
    let n: usize = count[1..count.len() - 2].parse().unwrap();
    let list = reply("COMMAND LIST");
    assert!(list.starts_with(&format!("*{n}\r\n")), "{list}");
    assert!(list.contains("$3\r\nget\r\n"));
    assert!(list.contains("$4\r\nhset\r\n") && list.contains("$4\r\nzadd\r\n"));
    assert!(n > 150, "{n}");
    // Name, arity, flags as the store classes the command, key positions, empty lists.
    let tail =
        |f: i64, l: i64, st: i64| format!(":{f}\r\n:{l}\r\n:{st}\r\n*0\r\n*0\r\n*0\r\n*0\r\n");
    assert_eq!(
        reply("COMMAND INFO get SET nosuch hget ping mset blpop"),
        format!(
            "*7\r\n*10\r\n$3\r\nget\r\n:2\r\n*1\r\n+readonly\r\n{}\
             *10\r\n$3\r\nset\r\n:-3\r\n*1\r\n+write\r\n{}*-1\r\n\
             *10\r\n$4\r\nhget\r\n:3\r\n*1\r\n+readonly\r\n{}\
             *10\r\n$4\r\nping\r\n:-1\r\n*0\r\n{}\
             *10\r\n$4\r\nmset\r\n:-3\r\n*1\r\n+write\r\n{}\
             *10\r\n$5\r\nblpop\r\n:-3\r\n*1\r\n+write\r\n{}",
            tail(1, 1, 1),
            tail(1, 1, 1),
            tail(1, 1, 1),
            tail(0, 0, 0),
            tail(1, -1, 2),
            tail(1, -2, 1)
        )
    );
    assert!(reply("COMMAND INFO").starts_with(&format!("*{n}\r\n")));
    assert_eq!(
        reply("COMMAND FOO"),
        "-ERR unknown subcommand 'FOO'. Try COMMAND HELP.\r\n"
    );
    assert_eq!(
        reply("COMMAND COUNT x"),
        "-ERR wrong number of arguments for 'command|count' command\r\n"
    );
}

#[test]
fn config_get() {
    assert_eq!(reply("CONFIG GET save"), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    assert_eq!(
        reply("CONFIG GET appendonly"),
        "*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"
    );
    assert_eq!(
        reply("config get SAVE appendonly"),
        "*4\r\n$10\r\nappendonly\r\n$2\r\nno\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert!(reply("CONFIG GET *").starts_with("*40\r\n$10\r\nappendonly\r\n"));
    assert_eq!(
        reply("CONFIG GET maxmemory"),
        "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
    );
    assert_eq!(
        reply("CONFIG GET"),
        "-ERR wrong number of arguments for 'config|get' command\r\n"
    );
    // The encoding parameters are accepted and reported back (they change nothing here).
    assert_eq!(reply("CONFIG SET zset-max-ziplist-entries 7"), "+OK\r\n");
    assert_eq!(
        reply("CONFIG GET zset-max-ziplist-entries"),
        "*2\r\n$24\r\nzset-max-ziplist-entries\r\n$1\r\n7\r\n"
    );
    assert_eq!(
        reply("CONFIG SET nosuch 1"),
        "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n"
    );
    assert!(reply("CONFIG SET zset-max-ziplist-entries x").starts_with("-ERR CONFIG SET failed"));
    assert!(reply("CONFIG SET maxmemory 5").starts_with("-ERR CONFIG SET failed"));
    assert_eq!(
        reply("CONFIG SET zset-max-ziplist-entries"),
        "-ERR wrong number of arguments for 'config|set' command\r\n"
    );
}

#[test]
fn client_commands() {
    assert_eq!(
        command(&args("CLIENT SETNAME app")),
        Action::Client(ClientCmd::SetName(k("app")))
    );
    assert_eq!(
        command(&args("client getname")),
        Action::Client(ClientCmd::GetName)
    );
    assert_eq!(command(&args("CLIENT ID")), Action::Client(ClientCmd::Id));
    assert_eq!(
        command(&args("CLIENT INFO")),
        Action::Client(ClientCmd::Info)
    );
    assert_eq!(
        reply_args(&bv(&["CLIENT", "SETNAME", "a b"])),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(reply("CLIENT SETINFO LIB-NAME redis-py"), "+OK\r\n");
    assert_eq!(reply("CLIENT SETINFO lib-ver 5.0.1"), "+OK\r\n");
    assert_eq!(
        reply("CLIENT SETINFO foo x"),
        "-ERR Unrecognized option 'foo'\r\n"
    );
    assert_eq!(
        reply("CLIENT SETNAME"),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(
        reply("CLIENT KILL x"),
        "-ERR unknown subcommand 'KILL'. Try CLIENT HELP.\r\n"
    );
}

#[test]
fn session_answers_client_commands() {
    let mut s = Session::new(7, "10.0.0.1:5000".into(), "10.0.0.2:6379".into());
    assert_eq!(s.client(&ClientCmd::GetName), b"$-1\r\n");
    assert_eq!(s.client(&ClientCmd::Id), b":7\r\n");
    assert_eq!(s.client(&ClientCmd::SetName(k("app"))), b"+OK\r\n");
    assert_eq!(s.client(&ClientCmd::GetName), b"$3\r\napp\r\n");
    let info = "id=7 addr=10.0.0.1:5000 laddr=10.0.0.2:6379 name=app db=0 flags=N cmd=client|info user=default resp=2\n";
    assert_eq!(
        show(&s.client(&ClientCmd::Info)),
        format!("${}\r\n{info}\r\n", info.len())
    );
    assert_eq!(s.client(&ClientCmd::SetName(vec![])), b"+OK\r\n");
    assert_eq!(s.client(&ClientCmd::GetName), b"$-1\r\n");
}

#[test]
fn hello() {
    assert_eq!(
        command(&args("HELLO")),
        Action::Client(ClientCmd::Hello {
            proto: None,
            setname: None
        })
    );
    assert_eq!(
        command(&args("HELLO 2 SETNAME app")),
        Action::Client(ClientCmd::Hello {
            proto: Some(Proto::Resp2),
            setname: Some(k("app"))
        })
    );
    assert_eq!(
        command(&args("HELLO 3")),
        Action::Client(ClientCmd::Hello {
            proto: Some(Proto::Resp3),
            setname: None
        })
    );
    assert_eq!(
        reply("HELLO 1"),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        reply("HELLO 4"),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        reply("HELLO 3 FOO"),
        "-ERR Syntax error in HELLO option 'FOO'\r\n"
    );
    assert_eq!(
        reply("HELLO x"),
        "-ERR Protocol version is not an integer or out of range\r\n"
    );
    assert_eq!(
        reply("HELLO 2 AUTH u p"),
        "-ERR AUTH is not supported by this server\r\n"
    );
    assert_eq!(
        reply("HELLO 2 FOO"),
        "-ERR Syntax error in HELLO option 'FOO'\r\n"
    );
    assert_eq!(
        reply("HELLO 2 SETNAME"),
        "-ERR Syntax error in HELLO option 'SETNAME'\r\n"
    );
    let mut s = Session::new(3, String::new(), String::new());
    assert_eq!(
        show(&s.client(&ClientCmd::Hello {
            proto: None,
            setname: Some(k("n"))
        })),
        "*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n\
         $5\r\nproto\r\n:2\r\n$2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
         $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
    );
    assert_eq!(s.name, k("n"));
}

#[test]
fn resp3_after_hello_3_as_redis_7_answers() {
    let mut s = Session::new(5, "10.0.0.1:5000".into(), "10.0.0.2:6379".into());
    // HELLO 3 switches, then answers in RESP3: a map of 7.
    assert_eq!(
        show(&s.client(&ClientCmd::Hello {
            proto: Some(Proto::Resp3),
            setname: None
        })),
        "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n\
         $5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n\
         $4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
    );
    assert_eq!(s.proto, Proto::Resp3);
    // A bare HELLO keeps the protocol.
    assert!(show(&s.client(&ClientCmd::Hello {
        proto: None,
        setname: None
    }))
    .starts_with("%7\r\n"));
    assert_eq!(s.client(&ClientCmd::GetName), b"_\r\n", "no name: null");
    let info = "txt:id=5 addr=10.0.0.1:5000 laddr=10.0.0.2:6379 name= db=0 flags=N cmd=client|info user=default resp=3\n";
    assert_eq!(
        show(&s.client(&ClientCmd::Info)),
        format!("={}\r\n{info}\r\n", info.len()),
        "CLIENT INFO: a verbatim string"
    );
    // Store replies: nulls instead of nil bulks, also inside arrays.
    let none = Response::Items(vec![None]);
    assert_eq!(render_proto(&Render::Bulk, &none, Proto::Resp3), b"_\r\n");
    assert_eq!(render_proto(&Render::Bulk, &none, Proto::Resp2), b"$-1\r\n");
    let item = Item {
        value: k("v"),
        flags: 0,
        cas: 1,
    };
    let two = Response::Items(vec![Some(item), None]);
    assert_eq!(
        show(&render_proto(&Render::Bulks, &two, Proto::Resp3)),
        "*2\r\n$1\r\nv\r\n_\r\n"
    );
    assert_eq!(
        render_proto(&Render::Set, &Response::NotStored, Proto::Resp3),
        b"_\r\n"
    );
    assert_eq!(
        render_proto(&Render::Int, &Response::Int(3), Proto::Resp3),
        b":3\r\n"
    );
    // Replies made without the store: maps and nulls.
    let r3 = |line: &str| match command_proto(&args(line), Proto::Resp3) {
        Action::Reply(r) => show(&r),
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(
        r3("CONFIG GET databases"),
        "%1\r\n$9\r\ndatabases\r\n$1\r\n1\r\n"
    );
    assert_eq!(
        reply("CONFIG GET databases"),
        "*2\r\n$9\r\ndatabases\r\n$1\r\n1\r\n"
    );
    assert_eq!(
        r3("COMMAND DOCS ping"),
        "%1\r\n$4\r\nping\r\n%3\r\n$7\r\nsummary\r\n$0\r\n\r\n$5\r\nsince\r\n$0\r\n\r\n\
         $5\r\ngroup\r\n$10\r\nconnection\r\n"
    );
    assert_eq!(r3("COMMAND INFO nope"), "*1\r\n_\r\n");
    assert_eq!(reply("COMMAND INFO nope"), "*1\r\n*-1\r\n");
    // INFO: a verbatim string of format txt.
    let body = "# Server\r\na:b\r\n";
    let server = [InfoSection {
        title: "Server",
        default: true,
        fields: vec![("a", "b".into())],
    }];
    assert_eq!(
        show(&render_info_sections(&server, &[], Proto::Resp3)),
        format!("={}\r\ntxt:{body}\r\n", body.len() + 4)
    );
}

#[test]
fn info_sections_are_chosen_as_redis_7_chooses() {
    let sections = [
        InfoSection {
            title: "Server",
            default: true,
            fields: vec![("redis_version", "7.0.0".into())],
        },
        InfoSection {
            title: "CPU",
            default: true,
            fields: vec![("used_cpu_user", "1.5".into())],
        },
        InfoSection {
            title: "Extra",
            default: false,
            fields: vec![("x", "a\nb".into())],
        },
    ];
    let info = |a: &[&str]| {
        let a: Vec<Vec<u8>> = a.iter().map(|s| k(s)).collect();
        show(&render_info_sections(&sections, &a, Proto::Resp2))
    };
    let body = "# Server\r\nredis_version:7.0.0\r\n\r\n# CPU\r\nused_cpu_user:1.5\r\n";
    assert_eq!(info(&[]), format!("${}\r\n{body}\r\n", body.len()));
    assert_eq!(info(&["default"]), info(&[]));
    let cpu = "# CPU\r\nused_cpu_user:1.5\r\n";
    assert_eq!(info(&["cpu"]), format!("${}\r\n{cpu}\r\n", cpu.len()));
    assert_eq!(info(&["cpu", "cpu", "nosuch"]), info(&["cpu"]), "each once");
    assert!(info(&["all"]).contains("# Extra\r\nx:a b\r\n"));
    assert!(!info(&["default"]).contains("Extra"));
    assert!(info(&["extra", "cpu"]).starts_with("$"));
    assert!(info(&["everything"]).contains("redis_version"));
    assert_eq!(info(&["nosuch"]), "$0\r\n\r\n");
}

#[test]
fn errors_and_unexpected_responses_render_as_errors() {
    for r in [
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
        assert_eq!(
            out(r, Response::Error("bad\r\nthing".into())),
            "-ERR bad  thing\r\n"
        );
        assert_eq!(
            out(r, Response::CasMismatch),
            "-ERR internal error: unexpected response from the store\r\n"
        );
    }
}

#[test]
fn the_readme_lists_the_commands_as_the_server_knows_them() {
    let readme = include_str!("../../../README.md");
    let begin = readme
        .find("<!-- commands:begin -->")
        .expect("README: commands:begin");
    let end = readme
        .find("<!-- commands:end -->")
        .expect("README: commands:end");
    let listed: String = readme[begin..end]
        .lines()
        .skip(2) // the marker and the fence
        .take_while(|l| l.trim() != "```")
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    assert_eq!(
        listed,
        waverunner_kv::resp::commands_list(),
        "README.md's command list is stale: replace it with `waverunner commands`"
    );
}
