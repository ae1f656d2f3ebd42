//! The memcached front-end: parser, command translation and rendering, checked byte for byte.

use waverunner_kv::memcache::{
    command, expiry, parse_command, render, render_stats, Limits, McAction, McCommand, McError,
    McErrorKind, McRender, StoreMode, VERSION_REPLY,
};
use waverunner_kv::store::ERR_TOO_LARGE;
use waverunner_kv::{Cond, Expiry, Item, Op, Response};

type Parsed = Result<Option<(McCommand, usize)>, McError>;

fn parse(buf: &[u8]) -> Parsed {
    parse_command(buf, &Limits::default())
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn k(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Parses a complete command that uses the whole input.
fn one(input: &str) -> McCommand {
    let (cmd, n) = parse(input.as_bytes())
        .unwrap_or_else(|e| panic!("{input:?}: {e:?}"))
        .unwrap_or_else(|| panic!("{input:?}: incomplete"));
    assert_eq!(n, input.len(), "{input:?}");
    cmd
}

/// The action for a complete command.
fn act(input: &str) -> McAction {
    command(one(input))
}

fn store(input: &str) -> (Op, McRender, bool) {
    match act(input) {
        McAction::Store {
            op,
            render,
            noreply,
        } => (op, render, noreply),
        other => panic!("{input:?}: {other:?}"),
    }
}

fn reply(input: &str) -> String {
    match act(input) {
        McAction::Reply(r) => show(&r),
        other => panic!("{input:?}: {other:?}"),
    }
}

fn err(input: &str) -> McError {
    match parse(input.as_bytes()) {
        Err(e) => e,
        other => panic!("{input:?}: expected an error, got {other:?}"),
    }
}

fn out(r: &McRender, resp: Response) -> String {
    show(&render(r, &resp))
}

fn item(v: &str, flags: u32, cas: u64) -> Option<Item> {
    Some(Item {
        value: k(v),
        flags,
        cas,
    })
}

// ---------------------------------------------------------------------------- retrieval

#[test]
fn get_and_gets() {
    assert_eq!(
        one("get a\r\n"),
        McCommand::Get {
            keys: vec![k("a")],
            cas: false
        }
    );
    assert_eq!(
        one("gets a  b\r\n"),
        McCommand::Get {
            keys: vec![k("a"), k("b")],
            cas: true
        }
    );
    assert_eq!(
        one("get a\n"),
        McCommand::Get {
            keys: vec![k("a")],
            cas: false
        }
    );
    let (op, how, noreply) = store("get a b c\r\n");
    assert_eq!(
        op,
        Op::Get {
            keys: vec![k("a"), k("b"), k("c")]
        }
    );
    assert!(!noreply);
    assert_eq!(
        out(
            &how,
            Response::Items(vec![item("hello", 5, 1), None, item("", 0, 2)])
        ),
        "VALUE a 5 5\r\nhello\r\nVALUE c 0 0\r\n\r\nEND\r\n"
    );
    assert_eq!(
        out(&how, Response::Items(vec![None, None, None])),
        "END\r\n"
    );
    let (_, how, _) = store("gets a\r\n");
    assert_eq!(
        out(
            &how,
            Response::Items(vec![item("x\r\ny", 4294967295, 18446744073709551615)])
        ),
        "VALUE a 4294967295 4 18446744073709551615\r\nx\r\ny\r\nEND\r\n"
    );
}

#[test]
fn gat_and_gats() {
    assert_eq!(
        one("gat 10 a b\r\n"),
        McCommand::Gat {
            exptime: 10,
            keys: vec![k("a"), k("b")],
            cas: false
        }
    );
    let (op, how, _) = store("gats 0 a\r\n");
    assert_eq!(
        op,
        Op::Touch {
            keys: vec![k("a")],
            expiry: Expiry::None,
            get: true
        }
    );
    assert_eq!(
        out(&how, Response::Items(vec![item("v", 1, 7)])),
        "VALUE a 1 1 7\r\nv\r\nEND\r\n"
    );
    assert_eq!(
        store("gat -1 a\r\n").0,
        Op::Touch {
            keys: vec![k("a")],
            expiry: Expiry::AfterMs(-1),
            get: true
        }
    );
    let e = err("gat x a\r\n");
    assert_eq!(e.kind, McErrorKind::InvalidExptime);
    assert_eq!(e.reply(), b"CLIENT_ERROR invalid exptime argument\r\n");
    assert_eq!(err("gat 10\r\n").kind, McErrorKind::UnknownCommand);
}

#[test]
fn retrieval_errors() {
    let e = err("get\r\n");
    assert_eq!(
        e,
        McError {
            kind: McErrorKind::UnknownCommand,
            skip: 5,
            close: false,
            noreply: false
        }
    );
    assert_eq!(e.reply(), b"ERROR\r\n");
    let long = "k".repeat(251);
    let e = err(&format!("get a {long}\r\n"));
    assert_eq!(e.kind, McErrorKind::BadFormat);
    assert_eq!(e.reply(), b"CLIENT_ERROR bad command line format\r\n");
    assert_eq!(e.skip, 259);
    assert!(!e.close);
    // 250 bytes is fine.
    let ok = "k".repeat(250);
    assert_eq!(
        one(&format!("get {ok}\r\n")),
        McCommand::Get {
            keys: vec![k(&ok)],
            cas: false
        }
    );
}

#[test]
fn long_multiget_lines_are_accepted() {
    let keys: Vec<String> = (0..500).map(|i| format!("key:{i:05}")).collect();
    let line = format!("get {}\r\n", keys.join(" "));
    assert!(line.len() > 2048);
    match one(&line) {
        McCommand::Get { keys: got, cas } => {
            assert_eq!(got.len(), 500);
            assert!(!cas);
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------- storage

#[test]
fn set_parses_with_its_data_block() {
    assert_eq!(
        one("set k 5 100 3\r\nabc\r\n"),
        McCommand::Store {
            mode: StoreMode::Set,
            key: k("k"),
            flags: 5,
            exptime: 100,
            value: k("abc"),
            noreply: false
        }
    );
    // The data block may hold anything, CR and LF included; it must end with CRLF.
    assert_eq!(
        one("set k 0 0 4\r\n\r\n\r\n\r\n"),
        McCommand::Store {
            mode: StoreMode::Set,
            key: k("k"),
            flags: 0,
            exptime: 0,
            value: k("\r\n\r\n"),
            noreply: false
        }
    );
    assert_eq!(
        one("set k 0 0 0\r\n\r\n"),
        McCommand::Store {
            mode: StoreMode::Set,
            key: k("k"),
            flags: 0,
            exptime: 0,
            value: vec![],
            noreply: false
        }
    );
}

#[test]
fn value_split_across_reads() {
    let input = b"set greeting 1 0 11\r\nhello world\r\nget greeting\r\n";
    let end = input.len() - b"get greeting\r\n".len();
    for i in 0..end {
        assert_eq!(parse(&input[..i]), Ok(None), "prefix of {i} bytes");
    }
    for i in end..=input.len() {
        let (cmd, n) = parse(&input[..i]).unwrap().unwrap();
        assert_eq!(n, end);
        assert_eq!(
            cmd,
            McCommand::Store {
                mode: StoreMode::Set,
                key: k("greeting"),
                flags: 1,
                exptime: 0,
                value: k("hello world"),
                noreply: false
            }
        );
    }
    let (cmd, n) = parse(&input[end..]).unwrap().unwrap();
    assert_eq!(n, input.len() - end);
    assert_eq!(
        cmd,
        McCommand::Get {
            keys: vec![k("greeting")],
            cas: false
        }
    );
}

#[test]
fn storage_commands_translate() {
    let set = |cond, expiry| Op::Set {
        key: k("k"),
        value: k("v"),
        flags: 3,
        expiry,
        cond,
        get_old: false,
    };
    assert_eq!(
        store("set k 3 0 1\r\nv\r\n"),
        (set(Cond::Always, Expiry::None), McRender::Stored, false)
    );
    assert_eq!(
        store("add k 3 10 1\r\nv\r\n").0,
        set(Cond::IfAbsent, Expiry::AfterMs(10_000))
    );
    assert_eq!(
        store("replace k 3 -1 1\r\nv\r\n").0,
        set(Cond::IfPresent, Expiry::AfterMs(-1))
    );
    assert_eq!(
        store("append k 3 10 1\r\nv\r\n"),
        (
            Op::Append {
                key: k("k"),
                value: k("v"),
                must_exist: true,
                max_len: u64::MAX,
            },
            McRender::Stored,
            false
        )
    );
    assert_eq!(
        store("prepend k 0 0 1 noreply\r\nv\r\n"),
        (
            Op::Prepend {
                key: k("k"),
                value: k("v"),
                max_len: u64::MAX,
            },
            McRender::Stored,
            true
        )
    );
    assert_eq!(
        store("cas k 3 0 1 99\r\nv\r\n"),
        (
            Op::Cas {
                key: k("k"),
                value: k("v"),
                flags: 3,
                expiry: Expiry::None,
                unique: 99
            },
            McRender::Cas,
            false
        )
    );
    assert!(store("cas k 3 0 1 99 noreply\r\nv\r\n").2);
    // An extra token other than noreply is ignored, as in memcached.
    assert!(!store("set k 3 0 1 foo\r\nv\r\n").2);
}

#[test]
fn storage_replies() {
    let s = McRender::Stored;
    assert_eq!(out(&s, Response::Ok), "STORED\r\n");
    assert_eq!(out(&s, Response::Int(5)), "STORED\r\n");
    assert_eq!(out(&s, Response::NotStored), "NOT_STORED\r\n");
    assert_eq!(
        out(&s, Response::Error("out of memory".into())),
        "SERVER_ERROR out of memory\r\n"
    );
    // append/prepend past max_len: memcached's wording.
    assert_eq!(
        out(&s, Response::Error(ERR_TOO_LARGE.into())),
        "SERVER_ERROR object too large for cache\r\n"
    );
    let c = McRender::Cas;
    assert_eq!(out(&c, Response::Ok), "STORED\r\n");
    assert_eq!(out(&c, Response::CasMismatch), "EXISTS\r\n");
    assert_eq!(out(&c, Response::NotFound), "NOT_FOUND\r\n");
}

#[test]
fn exptime_conversion() {
    assert_eq!(expiry(0), Expiry::None);
    assert_eq!(expiry(-1), Expiry::AfterMs(-1));
    assert_eq!(expiry(-1000), Expiry::AfterMs(-1));
    assert_eq!(expiry(1), Expiry::AfterMs(1000));
    assert_eq!(expiry(2_592_000), Expiry::AfterMs(2_592_000_000));
    assert_eq!(expiry(2_592_001), Expiry::AtMs(2_592_001_000));
    assert_eq!(expiry(1_700_000_000), Expiry::AtMs(1_700_000_000_000));
    assert_eq!(expiry(i64::MAX), Expiry::AtMs(u64::MAX));
    assert_eq!(
        store("set k 0 1700000000 1\r\nv\r\n").0,
        Op::Set {
            key: k("k"),
            value: k("v"),
            flags: 0,
            expiry: Expiry::AtMs(1_700_000_000_000),
            cond: Cond::Always,
            get_old: false
        }
    );
}

#[test]
fn storage_line_errors_skip_the_data_block() {
    // Bad flags, exptime, unique or key: the length is known, the block is skipped.
    for (input, skip) in [
        ("set k x 0 1\r\nv\r\n", 16),
        ("set k -1 0 1\r\nv\r\n", 17),
        ("set k 4294967296 0 1\r\nv\r\n", 25),
        ("set k 0 x 1\r\nv\r\n", 16),
        ("set k 0 99999999999999999 1\r\nv\r\n", 32),
        ("cas k 0 0 1 x\r\nv\r\n", 18),
        ("cas k 0 0 1 -1\r\nv\r\n", 19),
    ] {
        let e = err(input);
        assert_eq!(
            e,
            McError {
                kind: McErrorKind::BadFormat,
                skip,
                close: false,
                noreply: false
            },
            "{input:?}"
        );
        assert_eq!(skip, input.len());
    }
    let key = "k".repeat(251);
    let input = format!("set {key} 0 0 1\r\nv\r\n");
    assert_eq!(err(&input).skip, input.len());
    // The data block need not have arrived to report the error.
    let e = err("set k x 0 5\r\n");
    assert_eq!(e.skip, 20);
    // Under noreply, no reply.
    let e = err("set k x 0 1 noreply\r\nv\r\n");
    assert!(e.noreply);
    assert_eq!(e.reply(), b"");
}

#[test]
fn unreadable_length_closes_the_connection() {
    for input in [
        "set k 0 0 x\r\n",
        "set k 0 0 -1\r\n",
        "set k 0 0 2147483646\r\n",
        "set k 0 0 1x noreply\r\n",
    ] {
        let e = err(input);
        assert_eq!(e.kind, McErrorKind::BadFormat, "{input:?}");
        assert!(e.close);
        assert_eq!(e.skip, input.len());
        // Closing: the reply is sent even under noreply.
        assert_eq!(e.reply(), b"CLIENT_ERROR bad command line format\r\n");
    }
}

#[test]
fn wrong_token_counts_are_unknown_commands() {
    for input in [
        "set k 0 0\r\n",
        "set k 0 0 1 noreply extra\r\n",
        "cas k 0 0 1\r\n",
        "delete\r\n",
        "delete k 0 noreply x\r\n",
        "incr k\r\n",
        "incr k 1 noreply x\r\n",
        "touch k\r\n",
        "flush_all 0 noreply x\r\n",
        "verbosity\r\n",
        "verbosity 1 noreply x\r\n",
    ] {
        let e = err(input);
        assert_eq!(e.kind, McErrorKind::UnknownCommand, "{input:?}");
        assert_eq!(e.skip, input.len());
        assert_eq!(e.reply(), b"ERROR\r\n");
    }
}

#[test]
fn oversize_value_is_skipped_and_the_next_command_parsed() {
    let limits = Limits {
        max_value: 10,
        ..Limits::default()
    };
    let mut input = b"set big 0 0 11\r\n".to_vec();
    input.extend_from_slice(b"hello world\r\nget big\r\n");
    let e = parse_command(&input, &limits).unwrap_err();
    assert_eq!(
        e,
        McError {
            kind: McErrorKind::TooLarge,
            skip: 16 + 13,
            close: false,
            noreply: false
        }
    );
    assert_eq!(e.reply(), b"SERVER_ERROR object too large for cache\r\n");
    let (cmd, n) = parse_command(&input[e.skip..], &limits).unwrap().unwrap();
    assert_eq!(n, input.len() - e.skip);
    assert_eq!(
        cmd,
        McCommand::Get {
            keys: vec![k("big")],
            cas: false
        }
    );
    // Reported as soon as the line is in, with a skip beyond what has arrived.
    let e = parse(b"set big 0 0 2000000\r\n").unwrap_err();
    assert_eq!(e.kind, McErrorKind::TooLarge);
    assert_eq!(e.skip, 21 + 2_000_002);
    // Exactly the limit is fine.
    let mut ok = b"set k 0 0 10\r\n".to_vec();
    ok.extend_from_slice(b"0123456789\r\n");
    assert!(parse_command(&ok, &limits).unwrap().is_some());
    // noreply suppresses the reply, the block is still skipped.
    let e = parse_command(b"set big 0 0 11 noreply\r\n", &limits).unwrap_err();
    assert_eq!(
        (e.kind, e.skip, e.noreply),
        (McErrorKind::TooLarge, 24 + 13, true)
    );
    assert_eq!(e.reply(), b"");
}

#[test]
fn bad_data_chunk() {
    let input = b"set k 0 0 3\r\nabcde\r\nget k\r\n";
    let e = parse(input).unwrap_err();
    assert_eq!(
        e,
        McError {
            kind: McErrorKind::BadDataChunk,
            skip: 18,
            close: false,
            noreply: false
        }
    );
    assert_eq!(e.reply(), b"CLIENT_ERROR bad data chunk\r\n");
    // memcached consumes exactly bytes + 2; the rest is parsed as commands.
    assert_eq!(
        err(&show(&input[e.skip..])).kind,
        McErrorKind::UnknownCommand
    );
    assert_eq!(parse(b"set k 0 0 3\r\nabc\r"), Ok(None));
    assert_eq!(
        parse(b"set k 0 0 3\r\nabc\nX").unwrap_err().kind,
        McErrorKind::BadDataChunk
    );
}

// ----------------------------------------------------------------------- other commands

#[test]
fn delete() {
    let del = Op::Del { keys: vec![k("k")] };
    assert_eq!(
        store("delete k\r\n"),
        (del.clone(), McRender::Deleted, false)
    );
    assert_eq!(
        store("delete k noreply\r\n"),
        (del.clone(), McRender::Deleted, true)
    );
    assert_eq!(
        store("delete k 0\r\n"),
        (del.clone(), McRender::Deleted, false)
    );
    assert_eq!(
        store("delete k 0 noreply\r\n"),
        (del, McRender::Deleted, true)
    );
    let e = err("delete k 5\r\n");
    assert_eq!(e.kind, McErrorKind::DeleteUsage);
    assert_eq!(
        e.reply(),
        b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
    );
    assert_eq!(err("delete k 5 noreply\r\n").reply(), b"");
    assert_eq!(
        err(&format!("delete {}\r\n", "k".repeat(251))).kind,
        McErrorKind::BadFormat
    );
    let d = McRender::Deleted;
    assert_eq!(out(&d, Response::Int(1)), "DELETED\r\n");
    assert_eq!(out(&d, Response::Int(0)), "NOT_FOUND\r\n");
}

#[test]
fn incr_decr() {
    assert_eq!(
        store("incr k 5\r\n"),
        (
            Op::McIncr {
                key: k("k"),
                delta: 5,
                decr: false
            },
            McRender::Counter,
            false
        )
    );
    assert_eq!(
        store("decr k 18446744073709551615 noreply\r\n"),
        (
            Op::McIncr {
                key: k("k"),
                delta: u64::MAX,
                decr: true
            },
            McRender::Counter,
            true
        )
    );
    for input in [
        "incr k x\r\n",
        "incr k -1\r\n",
        "incr k 18446744073709551616\r\n",
    ] {
        let e = err(input);
        assert_eq!(e.kind, McErrorKind::InvalidDelta, "{input:?}");
        assert_eq!(
            e.reply(),
            b"CLIENT_ERROR invalid numeric delta argument\r\n"
        );
    }
    let c = McRender::Counter;
    assert_eq!(out(&c, Response::UInt(0)), "0\r\n");
    assert_eq!(
        out(&c, Response::UInt(u64::MAX)),
        "18446744073709551615\r\n"
    );
    assert_eq!(out(&c, Response::NotFound), "NOT_FOUND\r\n");
    assert_eq!(
        out(
            &c,
            Response::Error("cannot increment or decrement non-numeric value".into())
        ),
        "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
}

#[test]
fn touch() {
    assert_eq!(
        store("touch k 10\r\n"),
        (
            Op::Touch {
                keys: vec![k("k")],
                expiry: Expiry::AfterMs(10_000),
                get: false
            },
            McRender::Touched,
            false
        )
    );
    // Exptime 0 asks for the item, so that a key without expiry still counts as touched.
    assert_eq!(
        store("touch k 0 noreply\r\n"),
        (
            Op::Touch {
                keys: vec![k("k")],
                expiry: Expiry::None,
                get: true
            },
            McRender::Touched,
            true
        )
    );
    assert_eq!(err("touch k x\r\n").kind, McErrorKind::InvalidExptime);
    let t = McRender::Touched;
    assert_eq!(out(&t, Response::Int(1)), "TOUCHED\r\n");
    assert_eq!(out(&t, Response::Int(0)), "NOT_FOUND\r\n");
    assert_eq!(
        out(&t, Response::Items(vec![item("v", 0, 1)])),
        "TOUCHED\r\n"
    );
    assert_eq!(out(&t, Response::Items(vec![None])), "NOT_FOUND\r\n");
}

#[test]
fn flush_all() {
    assert_eq!(store("flush_all\r\n"), (Op::FlushAll, McRender::Ok, false));
    assert_eq!(
        store("flush_all 0\r\n"),
        (Op::FlushAll, McRender::Ok, false)
    );
    assert_eq!(
        store("flush_all -5\r\n"),
        (Op::FlushAll, McRender::Ok, false)
    );
    assert_eq!(
        store("flush_all noreply\r\n"),
        (Op::FlushAll, McRender::Ok, true)
    );
    assert_eq!(
        store("flush_all 0 noreply\r\n"),
        (Op::FlushAll, McRender::Ok, true)
    );
    assert_eq!(out(&McRender::Ok, Response::Ok), "OK\r\n");
    assert_eq!(
        reply("flush_all 10\r\n"),
        "CLIENT_ERROR flush_all with a delay is not supported\r\n"
    );
    assert_eq!(reply("flush_all 10 noreply\r\n"), "");
    assert_eq!(err("flush_all x\r\n").kind, McErrorKind::BadFormat);
}

#[test]
fn version_verbosity_stats_quit() {
    assert_eq!(reply("version\r\n"), "VERSION waverunner-0.1.0\r\n");
    assert_eq!(VERSION_REPLY, b"VERSION waverunner-0.1.0\r\n");
    assert_eq!(reply("verbosity 1\r\n"), "OK\r\n");
    assert_eq!(reply("verbosity 1 noreply\r\n"), "");
    assert_eq!(act("stats\r\n"), McAction::Stats);
    assert_eq!(reply("stats slabs\r\n"), "END\r\n");
    assert_eq!(reply("stats bogus\r\n"), "ERROR\r\n");
    assert_eq!(act("quit\r\n"), McAction::Quit);
    assert_eq!(
        show(&render_stats(&[
            ("pid", "42".into()),
            ("curr_items", "3".into()),
            ("odd name", "a\r\nb".into()),
        ])),
        "STAT pid 42\r\nSTAT curr_items 3\r\nSTAT odd_name a  b\r\nEND\r\n"
    );
    assert_eq!(render_stats(&[]), b"END\r\n");
}

#[test]
fn unknown_and_malformed_lines() {
    for input in [
        "bogus\r\n",
        "\r\n",
        "\n",
        "   \r\n",
        "GET k\r\n",
        "get\tk\r\n",
        "mg\r\n",
        "MG k v\r\n",
    ] {
        let e = err(input);
        assert_eq!(e.kind, McErrorKind::UnknownCommand, "{input:?}");
        assert_eq!(e.skip, input.len());
        assert!(!e.close);
        assert_eq!(e.to_string(), "ERROR");
    }
}

#[test]
fn line_too_long_closes() {
    let line = "x".repeat(2049);
    let e = err(&line);
    assert_eq!(e.kind, McErrorKind::LineTooLong);
    assert!(e.close);
    assert_eq!(e.reply(), b"CLIENT_ERROR line too long\r\n");
    // 2048 bytes and CRLF is a line (here an unknown command).
    let mut partial = vec![b'x'; 2048];
    assert_eq!(parse(&partial), Ok(None));
    partial.push(b'\r');
    assert_eq!(parse(&partial), Ok(None));
    assert_eq!(
        err(&format!("{}\r\n", "x".repeat(2048))).kind,
        McErrorKind::UnknownCommand
    );
    assert_eq!(
        err(&format!("{}\r\n", "x".repeat(2049))).kind,
        McErrorKind::LineTooLong
    );
    let e = err(&format!("{}\n", "x".repeat(2049)));
    assert_eq!(e.kind, McErrorKind::LineTooLong);
}

#[test]
fn noreply_commands_produce_no_output() {
    for input in [
        "set k 0 0 1 noreply\r\nv\r\n",
        "add k 0 0 1 noreply\r\nv\r\n",
        "replace k 0 0 1 noreply\r\nv\r\n",
        "append k 0 0 1 noreply\r\nv\r\n",
        "prepend k 0 0 1 noreply\r\nv\r\n",
        "cas k 0 0 1 5 noreply\r\nv\r\n",
        "delete k noreply\r\n",
        "incr k 1 noreply\r\n",
        "decr k 1 noreply\r\n",
        "touch k 1 noreply\r\n",
        "flush_all noreply\r\n",
        "verbosity 1 noreply\r\n",
    ] {
        match act(input) {
            McAction::Store { noreply, .. } => assert!(noreply, "{input:?}"),
            McAction::Reply(r) => assert!(r.is_empty(), "{input:?}"),
            other => panic!("{input:?}: {other:?}"),
        }
    }
    // Errors of noreply commands are silent too (memcached behaviour).
    assert_eq!(err("incr k x noreply\r\n").reply(), b"");
    assert_eq!(err("touch k x noreply\r\n").reply(), b"");
}

#[test]
fn pipelined_commands() {
    let input = b"set a 0 0 1\r\n1\r\nget a\r\ndelete a\r\nincr n 2\r\n";
    let mut pos = 0;
    let mut names = Vec::new();
    while pos < input.len() {
        let (cmd, n) = parse(&input[pos..]).unwrap().unwrap();
        names.push(match cmd {
            McCommand::Store { .. } => "store",
            McCommand::Get { .. } => "get",
            McCommand::Delete { .. } => "delete",
            McCommand::Incr { .. } => "incr",
            _ => "other",
        });
        pos += n;
    }
    assert_eq!(names, ["store", "get", "delete", "incr"]);
}

#[test]
fn unexpected_responses_render_as_server_errors() {
    for r in [
        McRender::Values {
            keys: vec![],
            cas: false,
        },
        McRender::Stored,
        McRender::Cas,
        McRender::Deleted,
        McRender::Counter,
        McRender::Touched,
        McRender::Ok,
    ] {
        assert_eq!(
            out(
                &r,
                Response::ScanPage {
                    next: vec![],
                    keys: vec![]
                }
            ),
            "SERVER_ERROR unexpected response from the store\r\n"
        );
    }
}
