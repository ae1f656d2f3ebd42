//! The Redis front-end: RESP2 request parsing, command translation into [`Op`]s and reply
//! rendering, with Redis 7's wording for every error.
//!
//! The network server owns the I/O; this module only turns bytes into commands and results into
//! bytes:
//!
//! 1. [`parse_command`] takes the bytes received so far and returns one command's arguments and
//!    the number of bytes it used, `None` when the command is not complete yet, or a
//!    [`ProtocolError`] (reply [`ProtocolError::reply`], then close the connection).
//! 2. [`command`] translates the arguments into an [`Action`]: a reply made without the store,
//!    an [`Op`] for the replicated store with the [`Render`] to format its [`Response`] with
//!    ([`render`]), `INFO` ([`render_info`]), a `CLIENT`/`HELLO` command answered from the
//!    connection's [`Session`], or `QUIT`.
//!
//! ```
//! use waverunner_kv::resp::{command, parse_command, render, Action, Limits};
//! use waverunner_kv::{Item, Op, Response};
//!
//! let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
//! let (args, used) = parse_command(buf, &Limits::default()).unwrap().unwrap();
//! assert_eq!(used, buf.len());
//! let Action::Store(op, how) = command(&args) else { panic!() };
//! assert_eq!(op, Op::Get { keys: vec![b"k".to_vec()] });
//! let item = Item { value: b"v".to_vec(), flags: 0, cas: 7 };
//! assert_eq!(render(&how, &Response::Items(vec![Some(item)])), b"$1\r\nv\r\n");
//! ```
//!
//! # SCAN cursors
//!
//! The store's scan cursor is a key. Clients get it as a token of decimal digits: `"1"`
//! followed by every byte of the key as three decimal digits (`"1097098"` is the key `ab`), or
//! `"0"` when the scan is done; `"0"` also starts a scan. Decimal digits without leading zeros
//! keep clients that parse the cursor as an arbitrary-precision integer (redis-py) working;
//! clients that parse it as a 64-bit integer only cope with keys of up to 6 bytes.

use std::fmt;

use crate::glob::glob_match;
use crate::ops::{Bytes, Cond, Expiry, Item, Op, Response};

/// The `redis_version` reported by `INFO` and `HELLO`.
pub const REDIS_VERSION: &str = "7.0.0";

/// The largest relative expiry accepted, in ms: a relative expiry is added to the entry's
/// timestamp, and `i64::MAX - 2^44` leaves room for timestamps until the year 2527 (Redis
/// rejects `now + ms > i64::MAX` the same way, with "invalid expire time").
pub const MAX_RELATIVE_MS: i64 = i64::MAX - (1 << 44);

/// Size limits on requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest bulk string (argument) accepted, in bytes (default 1 MiB).
    pub max_bulk: usize,
    /// The most arguments in one multibulk request (default 1024 × 1024).
    pub max_args: usize,
    /// The longest inline request line, and the longest `*`/`$` count line, in bytes (default
    /// 64 KiB).
    pub max_inline: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline: 64 * 1024,
        }
    }
}

/// A malformed request. The server replies [`ProtocolError::reply`] (`-ERR <Display text>`)
/// and closes the connection: the rest of the input cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// A `*` count line longer than [`Limits::max_inline`].
    TooBigMultibulkCount,
    /// A `*` count that is not an integer or exceeds [`Limits::max_args`].
    InvalidMultibulkLength,
    /// An argument of a multibulk request did not start with `$`; the byte found instead.
    ExpectedDollar(u8),
    /// A `$` length line longer than [`Limits::max_inline`].
    TooBigBulkCount,
    /// A `$` length that is not an integer, is negative or exceeds [`Limits::max_bulk`].
    InvalidBulkLength,
    /// A bulk string's data was not followed by `\r\n` (Redis does not check; we do).
    MissingBulkCrlf,
    /// An inline request line longer than [`Limits::max_inline`].
    TooBigInline,
    /// An inline request with an unterminated quote, or a closing quote followed by something
    /// other than a space.
    UnbalancedQuotes,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::TooBigMultibulkCount => {
                f.write_str("Protocol error: too big mbulk count string")
            }
            ProtocolError::InvalidMultibulkLength => {
                f.write_str("Protocol error: invalid multibulk length")
            }
            ProtocolError::ExpectedDollar(b) => {
                if b.is_ascii_graphic() || *b == b' ' {
                    write!(f, "Protocol error: expected '$', got '{}'", *b as char)
                } else {
                    write!(f, "Protocol error: expected '$', got '\\x{b:02x}'")
                }
            }
            ProtocolError::TooBigBulkCount => {
                f.write_str("Protocol error: too big bulk count string")
            }
            ProtocolError::InvalidBulkLength => f.write_str("Protocol error: invalid bulk length"),
            ProtocolError::MissingBulkCrlf => {
                f.write_str("Protocol error: expected CRLF after bulk data")
            }
            ProtocolError::TooBigInline => f.write_str("Protocol error: too big inline request"),
            ProtocolError::UnbalancedQuotes => {
                f.write_str("Protocol error: unbalanced quotes in request")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

impl ProtocolError {
    /// The reply to send before closing the connection: `-ERR <Display text>\r\n`.
    pub fn reply(&self) -> Vec<u8> {
        error(&self.to_string())
    }
}

// ------------------------------------------------------------------------------------------
// Parsing

/// Parses one request from the start of `buf`: its arguments and the number of bytes it takes,
/// `Ok(None)` when `buf` holds only part of it (call again with more bytes), or an error (reply
/// [`ProtocolError::reply`] and close the connection).
///
/// A buffer starting with `*` is a multibulk request (`*<n>\r\n` then `n` times
/// `$<len>\r\n<len bytes>\r\n`); anything else is an inline request: a line ended by `\n`
/// (an `\r` before it is dropped) split into arguments with Redis's quoting rules (`"…"` with
/// `\n`, `\r`, `\t`, `\b`, `\a`, `\xHH` and `\<c>` escapes, `'…'` with `\'`; a closing quote
/// must be followed by white space or the end of the line; a NUL byte ends the line).
///
/// An empty argument vector (`*0\r\n`, `*-1\r\n`, a blank inline line) is a request to ignore:
/// Redis answers nothing; [`command`] returns an empty [`Action::Reply`] for it.
///
/// The parser keeps no state: after `Ok(None)` it parses from the start again, which costs
/// O(arguments) without copying any data; arguments are copied once the request is complete.
/// Nothing is allocated from a length before the bytes it announces have arrived. The caller
/// bounds its buffer (Redis's `client-query-buffer-limit`): a complete request may hold up to
/// `max_args` × `max_bulk` bytes.
#[allow(clippy::type_complexity)]
pub fn parse_command(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => {
            let Some(end) = multibulk(buf, limits, None)? else {
                return Ok(None);
            };
            let mut args = Vec::new();
            multibulk(buf, limits, Some(&mut args))?;
            Ok(Some((args, end)))
        }
        Some(_) => inline(buf, limits),
    }
}

/// Walks a multibulk request; returns where it ends, and pushes its arguments to `out` if
/// given (only once the request is known to be complete, so pushes copy arrived bytes only).
fn multibulk(
    buf: &[u8],
    limits: &Limits,
    mut out: Option<&mut Vec<Vec<u8>>>,
) -> Result<Option<usize>, ProtocolError> {
    let Some((n, mut pos)) = count_line(
        buf,
        1,
        limits.max_inline,
        ProtocolError::TooBigMultibulkCount,
        ProtocolError::InvalidMultibulkLength,
    )?
    else {
        return Ok(None);
    };
    if n <= 0 {
        return Ok(Some(pos));
    }
    if u64::try_from(n).map_or(true, |n| n > limits.max_args as u64) {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    if let Some(out) = out.as_deref_mut() {
        // Complete and valid: every argument takes at least 4 bytes of `buf`.
        out.reserve(n as usize);
    }
    for _ in 0..n {
        let Some(&b) = buf.get(pos) else {
            return Ok(None);
        };
        if b != b'$' {
            return Err(ProtocolError::ExpectedDollar(b));
        }
        let Some((len, start)) = count_line(
            buf,
            pos + 1,
            limits.max_inline,
            ProtocolError::TooBigBulkCount,
            ProtocolError::InvalidBulkLength,
        )?
        else {
            return Ok(None);
        };
        let len = match usize::try_from(len) {
            Ok(len) if len <= limits.max_bulk => len,
            _ => return Err(ProtocolError::InvalidBulkLength),
        };
        // `start <= buf.len()` and `len <= max_bulk`: no overflow short of a buffer near
        // usize::MAX, which cannot exist.
        let end = start.saturating_add(len);
        match buf.get(end..end.saturating_add(2)) {
            Some(b"\r\n") => {}
            Some(_) => return Err(ProtocolError::MissingBulkCrlf),
            None => {
                if buf.len() == end + 1 && buf[end] != b'\r' {
                    return Err(ProtocolError::MissingBulkCrlf);
                }
                return Ok(None);
            }
        }
        if let Some(out) = out.as_deref_mut() {
            out.push(buf[start..end].to_vec());
        }
        pos = end + 2;
    }
    Ok(Some(pos))
}

/// Reads the integer of a `*` or `$` line whose digits start at `start`: the value and the
/// position after its `\r\n`. Fails early on a byte that cannot be part of an integer.
fn count_line(
    buf: &[u8],
    start: usize,
    max_line: usize,
    too_big: ProtocolError,
    invalid: ProtocolError,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    let mut i = start;
    loop {
        if i - start > max_line {
            return Err(too_big);
        }
        let Some(&b) = buf.get(i) else {
            return Ok(None);
        };
        if b == b'\r' {
            break;
        }
        // An i64 has at most 20 characters ("-9223372036854775808").
        if !(b.is_ascii_digit() || (b == b'-' && i == start)) || i - start >= 20 {
            return Err(invalid);
        }
        i += 1;
    }
    match buf.get(i + 1) {
        None => Ok(None),
        Some(b'\n') => match parse_int(&buf[start..i]) {
            Some(n) => Ok(Some((n, i + 2))),
            None => Err(invalid),
        },
        Some(_) => Err(invalid),
    }
}

#[allow(clippy::type_complexity)]
fn inline(buf: &[u8], limits: &Limits) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    // The line may hold `max_inline` bytes, then `\r\n`.
    let window = &buf[..buf.len().min(limits.max_inline.saturating_add(2))];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        // Too long already, or one byte over unless it is the CR of the CRLF.
        if buf.len() > limits.max_inline.saturating_add(1)
            || (buf.len() == limits.max_inline.saturating_add(1) && buf.last() != Some(&b'\r'))
        {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(None);
    };
    let mut line = &buf[..nl];
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    if line.len() > limits.max_inline {
        return Err(ProtocolError::TooBigInline);
    }
    match split_args(line) {
        Some(args) => Ok(Some((args, nl + 1))),
        None => Err(ProtocolError::UnbalancedQuotes),
    }
}

/// Redis's `sdssplitargs`: `None` on unbalanced quotes.
fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // The C original works on a NUL-terminated string.
    let line = match line.iter().position(|&b| b == 0) {
        Some(i) => &line[..i],
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = at(p);
            if inq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && hex(at(p + 2)).is_some()
                    && hex(at(p + 3)).is_some()
                {
                    cur.push(hex(at(p + 2))? * 16 + hex(at(p + 3))?);
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    cur.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else if insq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if c != 0 {
                            p += 1;
                        }
                        break;
                    }
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    _ => cur.push(c),
                }
            }
            p += 1;
        }
        args.push(cur);
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Redis's `string2ll`: an optional `-`, then `0` alone or digits without a leading zero,
/// fitting in an i64. No `+`, no spaces, no `-0`.
fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] => return if neg { None } else { Some(0) },
        [b'0', ..] => return None,
        _ => {}
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if neg {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

// ------------------------------------------------------------------------------------------
// Commands

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write these bytes; the store is not involved (`PING`, `ECHO`, `COMMAND`, `CONFIG GET`,
    /// `SELECT`, `CLIENT SETINFO`, every error). Empty for an empty request: write nothing.
    Reply(Vec<u8>),
    /// Have the store execute the operation, then write [`render`]`(&render, &response)`.
    Store(Op, Render),
    /// `INFO`: write [`render_info`] with the server's fields.
    Info,
    /// `QUIT`: write `+OK\r\n`, then close the connection.
    Quit,
    /// `CLIENT SETNAME/GETNAME/ID/INFO`, `HELLO`: answered from per-connection state; write
    /// [`Session::client`]`(&cmd)` of the connection's session.
    Client(ClientCmd),
}

/// How to turn the store's [`Response`] into the reply of the command that asked.
///
/// Whatever the variant, [`Response::Error`]`(msg)` renders as `-ERR msg`, and a response
/// the command cannot produce renders as an error reply rather than a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    /// `+OK` (`MSET`, `FLUSHALL`, `FLUSHDB`).
    Ok,
    /// `SET`: `+OK` when stored, a nil bulk (`$-1`) when `NX`/`XX` did not hold.
    Set,
    /// The one item asked for as a bulk string, nil when absent (`GET`, `GETSET`, `SET … GET`).
    Bulk,
    /// An array with a bulk string or nil per key (`MGET`).
    Bulks,
    /// An integer (`DEL`, `UNLINK`, `EXISTS`, `INCR`, `INCRBY`, `DECR`, `DECRBY`, `APPEND`,
    /// `STRLEN`, `DBSIZE`).
    Int,
    /// `:1` if it happened, else `:0` (`SETNX`, `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`,
    /// `PERSIST`).
    Bool,
    /// `TTL`: seconds rounded to nearest (`(ms + 500) / 1000`), `-1` without expiry, `-2`
    /// for a missing key.
    TtlSeconds,
    /// `PTTL`: milliseconds, `-1` without expiry, `-2` for a missing key.
    TtlMillis,
    /// An array of bulk strings (`KEYS`).
    Keys,
    /// `SCAN`: `[cursor, [keys…]]`, the cursor as described in the [module docs](self).
    Scan,
    /// `TYPE`: `+string` if the key exists, else `+none`.
    Type,
}

/// A `CLIENT` or `HELLO` command, answered from the connection's [`Session`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCmd {
    /// `CLIENT SETNAME name` (validated; empty clears the name).
    SetName(Bytes),
    /// `CLIENT GETNAME`.
    GetName,
    /// `CLIENT ID`.
    Id,
    /// `CLIENT INFO`.
    Info,
    /// `HELLO [2 [SETNAME name]]`: the server description (RESP2 only).
    Hello {
        /// The validated `SETNAME` option.
        setname: Option<Bytes>,
    },
}

/// Per-connection state for `CLIENT` and `HELLO`; the server keeps one per connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Session {
    /// The connection's unique id (`CLIENT ID`).
    pub id: u64,
    /// The client's name (`CLIENT SETNAME`); empty: none.
    pub name: Bytes,
    /// The client's address, `ip:port` (for `CLIENT INFO`).
    pub addr: String,
    /// The local address of the connection, `ip:port` (for `CLIENT INFO`).
    pub laddr: String,
}

impl Session {
    /// A session for connection `id` without a name.
    pub fn new(id: u64, addr: String, laddr: String) -> Self {
        Session {
            id,
            name: Vec::new(),
            addr,
            laddr,
        }
    }

    /// Executes `cmd` on the session and returns the reply.
    pub fn client(&mut self, cmd: &ClientCmd) -> Vec<u8> {
        let mut out = Vec::new();
        match cmd {
            ClientCmd::SetName(name) => {
                self.name = name.clone();
                out.extend_from_slice(b"+OK\r\n");
            }
            ClientCmd::GetName => {
                if self.name.is_empty() {
                    out.extend_from_slice(NIL);
                } else {
                    bulk(&mut out, &self.name);
                }
            }
            ClientCmd::Id => int(&mut out, i64::try_from(self.id).unwrap_or(i64::MAX)),
            ClientCmd::Info => {
                let mut line = format!(
                    "id={} addr={} laddr={} name=",
                    self.id,
                    one_word(&self.addr),
                    one_word(&self.laddr)
                )
                .into_bytes();
                line.extend_from_slice(&self.name);
                line.extend_from_slice(b" db=0 flags=N cmd=client|info user=default resp=2\n");
                bulk(&mut out, &line);
            }
            ClientCmd::Hello { setname } => {
                if let Some(name) = setname {
                    self.name = name.clone();
                }
                array(&mut out, 14);
                for (k, v) in [("server", "redis"), ("version", REDIS_VERSION)] {
                    bulk(&mut out, k.as_bytes());
                    bulk(&mut out, v.as_bytes());
                }
                bulk(&mut out, b"proto");
                int(&mut out, 2);
                bulk(&mut out, b"id");
                int(&mut out, i64::try_from(self.id).unwrap_or(i64::MAX));
                for (k, v) in [("mode", "standalone"), ("role", "master")] {
                    bulk(&mut out, k.as_bytes());
                    bulk(&mut out, v.as_bytes());
                }
                bulk(&mut out, b"modules");
                array(&mut out, 0);
            }
        }
        out
    }
}

fn one_word(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

/// The commands known, with Redis's arity (n: exactly n arguments including the name; -n: at
/// least n).
const COMMANDS: &[(&str, i32)] = &[
    ("append", 3),
    ("client", -2),
    ("command", -1),
    ("config", -2),
    ("dbsize", 1),
    ("decr", 2),
    ("decrby", 3),
    ("del", -2),
    ("echo", 2),
    ("exists", -2),
    ("expire", -3),
    ("expireat", -3),
    ("flushall", -1),
    ("flushdb", -1),
    ("get", 2),
    ("getset", 3),
    ("hello", -1),
    ("incr", 2),
    ("incrby", 3),
    ("info", -1),
    ("keys", 2),
    ("mget", -2),
    ("mset", -3),
    ("persist", 2),
    ("pexpire", -3),
    ("pexpireat", -3),
    ("ping", -1),
    ("psetex", 4),
    ("pttl", 2),
    ("quit", -1),
    ("scan", -2),
    ("select", 2),
    ("set", -3),
    ("setex", 4),
    ("setnx", 3),
    ("strlen", 2),
    ("ttl", 2),
    ("type", 2),
    ("unlink", -2),
];

/// Subcommands of the container commands, with their arity (counting the command and the
/// subcommand).
const SUBCOMMANDS: &[(&str, &str, i32)] = &[
    ("client", "getname", 2),
    ("client", "id", 2),
    ("client", "info", 2),
    ("client", "setinfo", 4),
    ("client", "setname", 3),
    ("command", "count", 2),
    ("command", "docs", -2),
    ("command", "info", -2),
    ("command", "list", -2),
    ("config", "get", -3),
];

/// What `CONFIG GET` reports.
const CONFIG: &[(&str, &str)] = &[("appendonly", "no"), ("databases", "1"), ("save", "")];

fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = i64::try_from(argc).unwrap_or(i64::MAX);
    if arity >= 0 {
        argc == i64::from(arity)
    } else {
        argc >= -i64::from(arity)
    }
}

/// Translates a request's arguments (from [`parse_command`]) into what to do. Command names
/// are case-insensitive. Errors come as [`Action::Reply`] with Redis 7's wording:
///
/// - `-ERR unknown command 'x', with args beginning with: 'a' 'b' `
/// - `-ERR wrong number of arguments for 'x' command` (`'client|setname'` for subcommands)
/// - `-ERR unknown subcommand 'x'. Try CLIENT HELP.`
/// - `-ERR syntax error`, `-ERR value is not an integer or out of range`,
///   `-ERR invalid expire time in 'set' command`, `-ERR invalid cursor`, …
///
/// Supported: `PING [msg]`, `ECHO`, `GET`, `SET key value [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
/// [NX|XX] [GET]`, `SETNX`, `SETEX`, `PSETEX`, `GETSET`, `MGET`, `MSET`, `DEL`, `UNLINK`,
/// `EXISTS`, `TYPE`, `INCR`, `INCRBY`, `DECR`, `DECRBY`, `APPEND`, `STRLEN`, `EXPIRE`,
/// `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (without the `NX|XX|GT|LT` options), `TTL`, `PTTL`,
/// `PERSIST`, `DBSIZE`, `FLUSHALL`/`FLUSHDB [ASYNC|SYNC]`, `KEYS`, `SCAN cursor [MATCH p]
/// [COUNT n] [TYPE t]`, `INFO [section…]`, `COMMAND [COUNT|DOCS|INFO|LIST]`, `CLIENT
/// SETNAME|GETNAME|ID|INFO|SETINFO`, `SELECT 0`, `HELLO [2 [SETNAME name]]`,
/// `CONFIG GET pattern…`, `QUIT`.
pub fn command(args: &[Vec<u8>]) -> Action {
    let Some(name) = args.first() else {
        return Action::Reply(Vec::new());
    };
    let lname = name.to_ascii_lowercase();
    let Some(&(cmd, arity)) = COMMANDS.iter().find(|(n, _)| n.as_bytes() == lname) else {
        return Action::Reply(unknown_command(args));
    };
    if !arity_ok(arity, args.len()) {
        return reply(wrong_arity(cmd));
    }
    let key = || args[1].clone();
    match cmd {
        "ping" => match args.len() {
            1 => Action::Reply(b"+PONG\r\n".to_vec()),
            2 => Action::Reply(bulk_reply(&args[1])),
            _ => reply(wrong_arity(cmd)),
        },
        "echo" => Action::Reply(bulk_reply(&args[1])),
        "quit" => Action::Quit,
        "info" => Action::Info,
        "select" => match parse_int(&args[1]) {
            None => reply(NOT_INTEGER),
            Some(0) => Action::Reply(b"+OK\r\n".to_vec()),
            Some(_) => reply("DB index is out of range"),
        },
        "hello" => hello(args),
        "command" if args.len() == 1 => Action::Reply(b"*0\r\n".to_vec()),
        "client" | "command" | "config" => container(cmd, args),
        "get" => Action::Store(Op::Get { keys: vec![key()] }, Render::Bulk),
        "set" => set(args),
        "setnx" => Action::Store(
            Op::Set {
                key: key(),
                value: args[2].clone(),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::IfAbsent,
                get_old: false,
            },
            Render::Bool,
        ),
        "setex" | "psetex" => {
            let unit = if cmd == "setex" { 1000 } else { 1 };
            match relative_expiry(cmd, &args[2], unit) {
                Ok(ms) => Action::Store(
                    Op::Set {
                        key: key(),
                        value: args[3].clone(),
                        flags: 0,
                        expiry: Expiry::AfterMs(ms),
                        cond: Cond::Always,
                        get_old: false,
                    },
                    Render::Set,
                ),
                Err(e) => Action::Reply(e),
            }
        }
        "getset" => Action::Store(
            Op::Set {
                key: key(),
                value: args[2].clone(),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: true,
            },
            Render::Bulk,
        ),
        "mget" => Action::Store(
            Op::Get {
                keys: args[1..].to_vec(),
            },
            Render::Bulks,
        ),
        "mset" => {
            if args.len() % 2 != 1 {
                return reply(wrong_arity(cmd));
            }
            let pairs = args[1..]
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            Action::Store(Op::MSet { pairs }, Render::Ok)
        }
        "del" | "unlink" => Action::Store(
            Op::Del {
                keys: args[1..].to_vec(),
            },
            Render::Int,
        ),
        "exists" => Action::Store(
            Op::Exists {
                keys: args[1..].to_vec(),
            },
            Render::Int,
        ),
        "type" => Action::Store(Op::Exists { keys: vec![key()] }, Render::Type),
        "incr" | "decr" => Action::Store(
            Op::IncrBy {
                key: key(),
                delta: if cmd == "incr" { 1 } else { -1 },
            },
            Render::Int,
        ),
        "incrby" | "decrby" => {
            let Some(n) = parse_int(&args[2]) else {
                return reply(NOT_INTEGER);
            };
            let delta = if cmd == "incrby" {
                n
            } else if n == i64::MIN {
                return reply("decrement would overflow");
            } else {
                -n
            };
            Action::Store(Op::IncrBy { key: key(), delta }, Render::Int)
        }
        "append" => Action::Store(
            Op::Append {
                key: key(),
                value: args[2].clone(),
                must_exist: false,
                max_len: u64::MAX,
            },
            Render::Int,
        ),
        "strlen" => Action::Store(Op::Strlen { key: key() }, Render::Int),
        "expire" | "pexpire" | "expireat" | "pexpireat" => expire(cmd, args),
        "persist" => Action::Store(
            Op::Touch {
                keys: vec![key()],
                expiry: Expiry::None,
                get: false,
            },
            Render::Bool,
        ),
        "ttl" => Action::Store(Op::Ttl { key: key() }, Render::TtlSeconds),
        "pttl" => Action::Store(Op::Ttl { key: key() }, Render::TtlMillis),
        "dbsize" => Action::Store(Op::DbSize, Render::Int),
        "flushall" | "flushdb" => match args.len() {
            1 => Action::Store(Op::FlushAll, Render::Ok),
            2 if args[1].eq_ignore_ascii_case(b"async")
                || args[1].eq_ignore_ascii_case(b"sync") =>
            {
                Action::Store(Op::FlushAll, Render::Ok)
            }
            _ => reply(SYNTAX),
        },
        "keys" => Action::Store(Op::Keys { pattern: key() }, Render::Keys),
        "scan" => scan(args),
        _ => Action::Reply(unknown_command(args)),
    }
}

const SYNTAX: &str = "syntax error";
const NOT_INTEGER: &str = "value is not an integer or out of range";

fn reply(msg: impl AsRef<str>) -> Action {
    Action::Reply(error(msg.as_ref()))
}

fn wrong_arity(fullname: &str) -> String {
    format!("wrong number of arguments for '{fullname}' command")
}

fn invalid_expire(fullname: &str) -> Vec<u8> {
    error(&format!("invalid expire time in '{fullname}' command"))
}

/// Redis 7's `unknown command '%.128s', with args beginning with: ` then `'%.*s' ` per
/// argument while the list is shorter than 128 bytes.
fn unknown_command(args: &[Vec<u8>]) -> Vec<u8> {
    let mut msg = b"unknown command '".to_vec();
    msg.extend_from_slice(c_str(&args[0], 128));
    msg.extend_from_slice(b"', with args beginning with: ");
    let mut list = Vec::new();
    for arg in &args[1..] {
        if list.len() >= 128 {
            break;
        }
        list.push(b'\'');
        list.extend_from_slice(c_str(arg, 128 - (list.len() - 1)));
        list.extend_from_slice(b"' ");
    }
    msg.extend_from_slice(&list);
    error_bytes(b"ERR", &msg)
}

/// `%.Ns` of a C string: at most `max` bytes, up to the first NUL.
fn c_str(s: &[u8], max: usize) -> &[u8] {
    let s = &s[..s.len().min(max)];
    match s.iter().position(|&b| b == 0) {
        Some(i) => &s[..i],
        None => s,
    }
}

fn container(cmd: &str, args: &[Vec<u8>]) -> Action {
    let sub = args[1].to_ascii_lowercase();
    let Some(&(_, sub, arity)) = SUBCOMMANDS
        .iter()
        .find(|(c, s, _)| *c == cmd && s.as_bytes() == sub)
    else {
        let mut msg = b"unknown subcommand '".to_vec();
        msg.extend_from_slice(c_str(&args[1], 128));
        msg.extend_from_slice(format!("'. Try {} HELP.", cmd.to_ascii_uppercase()).as_bytes());
        return Action::Reply(error_bytes(b"ERR", &msg));
    };
    if !arity_ok(arity, args.len()) {
        return reply(wrong_arity(&format!("{cmd}|{sub}")));
    }
    match (cmd, sub) {
        ("client", "getname") => Action::Client(ClientCmd::GetName),
        ("client", "id") => Action::Client(ClientCmd::Id),
        ("client", "info") => Action::Client(ClientCmd::Info),
        ("client", "setname") => match valid_client_name(&args[2]) {
            Ok(()) => Action::Client(ClientCmd::SetName(args[2].clone())),
            Err(e) => Action::Reply(e),
        },
        ("client", "setinfo") => {
            let attr = args[2].to_ascii_lowercase();
            if attr != b"lib-name" && attr != b"lib-ver" {
                let mut msg = b"Unrecognized option '".to_vec();
                msg.extend_from_slice(c_str(&args[2], 128));
                msg.push(b'\'');
                return Action::Reply(error_bytes(b"ERR", &msg));
            }
            if args[3].iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
                let what = if attr == b"lib-name" {
                    "lib-name"
                } else {
                    "lib-ver"
                };
                return reply(format!(
                    "{what} cannot contain spaces, newlines or special characters."
                ));
            }
            Action::Reply(b"+OK\r\n".to_vec())
        }
        ("command", "count") => {
            let mut out = Vec::new();
            int(&mut out, COMMANDS.len() as i64);
            Action::Reply(out)
        }
        ("command", "docs") => Action::Reply(b"*0\r\n".to_vec()),
        ("command", "info") => {
            // One nil per name asked: "no such command" as far as clients care.
            let mut out = Vec::new();
            array(&mut out, args.len() - 2);
            for _ in 2..args.len() {
                out.extend_from_slice(b"*-1\r\n");
            }
            Action::Reply(out)
        }
        ("command", "list") => {
            let mut out = Vec::new();
            array(&mut out, COMMANDS.len());
            for (name, _) in COMMANDS {
                bulk(&mut out, name.as_bytes());
            }
            Action::Reply(out)
        }
        ("config", "get") => {
            let patterns: Vec<Vec<u8>> = args[2..].iter().map(|p| p.to_ascii_lowercase()).collect();
            let found: Vec<_> = CONFIG
                .iter()
                .filter(|(name, _)| patterns.iter().any(|p| glob_match(p, name.as_bytes())))
                .collect();
            let mut out = Vec::new();
            array(&mut out, found.len() * 2);
            for (name, value) in found {
                bulk(&mut out, name.as_bytes());
                bulk(&mut out, value.as_bytes());
            }
            Action::Reply(out)
        }
        _ => Action::Reply(unknown_command(args)),
    }
}

fn valid_client_name(name: &[u8]) -> Result<(), Vec<u8>> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(error(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// `HELLO [protover [AUTH username password] [SETNAME clientname]]`, RESP2 only.
fn hello(args: &[Vec<u8>]) -> Action {
    let mut setname = None;
    if args.len() >= 2 {
        let Some(ver) = parse_int(&args[1]) else {
            return reply("Protocol version is not an integer or out of range");
        };
        if ver != 2 {
            return Action::Reply(error_bytes(b"NOPROTO", b"unsupported protocol version"));
        }
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - j - 1;
            let opt = args[j].to_ascii_lowercase();
            if opt == b"auth" && more >= 2 {
                return reply("AUTH is not supported by this server");
            } else if opt == b"setname" && more >= 1 {
                if let Err(e) = valid_client_name(&args[j + 1]) {
                    return Action::Reply(e);
                }
                setname = Some(args[j + 1].clone());
                j += 2;
            } else {
                let mut msg = b"Syntax error in HELLO option '".to_vec();
                msg.extend_from_slice(c_str(&args[j], 128));
                msg.push(b'\'');
                return Action::Reply(error_bytes(b"ERR", &msg));
            }
        }
    }
    Action::Client(ClientCmd::Hello { setname })
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]`, with Redis 7's option
/// rules: options in any order, repeats allowed, conflicting ones a syntax error, and the
/// expire time checked after every option is known.
fn set(args: &[Vec<u8>]) -> Action {
    #[derive(Clone, Copy, PartialEq)]
    enum Unit {
        Ex,
        Px,
        ExAt,
        PxAt,
    }
    let mut cond = Cond::Always;
    let mut get_old = false;
    let mut keepttl = false;
    let mut expire: Option<(Unit, &[u8])> = None;
    let mut j = 3;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        let next = args.get(j + 1);
        let unit = match opt.as_slice() {
            b"ex" => Some(Unit::Ex),
            b"px" => Some(Unit::Px),
            b"exat" => Some(Unit::ExAt),
            b"pxat" => Some(Unit::PxAt),
            _ => None,
        };
        if opt == b"nx" && cond != Cond::IfPresent {
            cond = Cond::IfAbsent;
        } else if opt == b"xx" && cond != Cond::IfAbsent {
            cond = Cond::IfPresent;
        } else if opt == b"get" {
            get_old = true;
        } else if opt == b"keepttl" && expire.is_none() {
            keepttl = true;
        } else if let (Some(unit), Some(next)) = (unit, next) {
            if keepttl || expire.is_some_and(|(u, _)| u != unit) {
                return reply(SYNTAX);
            }
            expire = Some((unit, next.as_slice()));
            j += 1;
        } else {
            return reply(SYNTAX);
        }
        j += 1;
    }
    let expiry = match expire {
        None if keepttl => Expiry::Keep,
        None => Expiry::None,
        Some((unit, value)) => {
            let Some(n) = parse_int(value) else {
                return reply(NOT_INTEGER);
            };
            if n <= 0 {
                return Action::Reply(invalid_expire("set"));
            }
            match unit {
                Unit::Ex | Unit::Px => {
                    match relative_expiry("set", value, if unit == Unit::Ex { 1000 } else { 1 }) {
                        Ok(ms) => Expiry::AfterMs(ms),
                        Err(e) => return Action::Reply(e),
                    }
                }
                Unit::ExAt => match n.checked_mul(1000) {
                    Some(ms) => Expiry::AtMs(ms as u64),
                    None => return Action::Reply(invalid_expire("set")),
                },
                Unit::PxAt => Expiry::AtMs(n as u64),
            }
        }
    };
    Action::Store(
        Op::Set {
            key: args[1].clone(),
            value: args[2].clone(),
            flags: 0,
            expiry,
            cond,
            get_old,
        },
        if get_old { Render::Bulk } else { Render::Set },
    )
}

/// A positive relative expiry of `SET EX/PX`, `SETEX`, `PSETEX` in ms.
fn relative_expiry(cmd: &str, value: &[u8], unit_ms: i64) -> Result<i64, Vec<u8>> {
    let Some(n) = parse_int(value) else {
        return Err(error(NOT_INTEGER));
    };
    match n.checked_mul(unit_ms) {
        Some(ms) if n > 0 && ms <= MAX_RELATIVE_MS => Ok(ms),
        _ => Err(invalid_expire(cmd)),
    }
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT key time`. A time in the past deletes the key.
fn expire(cmd: &str, args: &[Vec<u8>]) -> Action {
    if let Some(opt) = args.get(3) {
        let lopt = opt.to_ascii_lowercase();
        if [&b"nx"[..], b"xx", b"gt", b"lt"].contains(&lopt.as_slice()) {
            return reply("the NX, XX, GT and LT options are not supported");
        }
        let mut msg = b"Unsupported option ".to_vec();
        msg.extend_from_slice(c_str(opt, 128));
        return Action::Reply(error_bytes(b"ERR", &msg));
    }
    let Some(n) = parse_int(&args[2]) else {
        return reply(NOT_INTEGER);
    };
    let unit = if cmd == "expire" || cmd == "expireat" {
        1000
    } else {
        1
    };
    let Some(ms) = n.checked_mul(unit) else {
        return Action::Reply(invalid_expire(cmd));
    };
    let expiry = if cmd.ends_with("at") {
        Expiry::AtMs(ms.max(0) as u64)
    } else if ms > MAX_RELATIVE_MS {
        return Action::Reply(invalid_expire(cmd));
    } else {
        Expiry::AfterMs(ms)
    };
    Action::Store(
        Op::Touch {
            keys: vec![args[1].clone()],
            expiry,
            get: false,
        },
        Render::Bool,
    )
}

/// `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]` (default count 10).
fn scan(args: &[Vec<u8>]) -> Action {
    let Some(cursor) = decode_cursor(&args[1]) else {
        return reply("invalid cursor");
    };
    let mut pattern = None;
    let mut count: u32 = 10;
    let mut only_strings = true;
    let mut j = 2;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        let Some(value) = args.get(j + 1) else {
            return reply(SYNTAX);
        };
        match opt.as_slice() {
            b"count" => {
                let Some(n) = parse_int(value) else {
                    return reply(NOT_INTEGER);
                };
                if n < 1 {
                    return reply(SYNTAX);
                }
                count = u32::try_from(n).unwrap_or(u32::MAX);
            }
            b"match" => {
                pattern = if value.as_slice() == b"*" {
                    None
                } else {
                    Some(value.clone())
                }
            }
            b"type" => only_strings = value.eq_ignore_ascii_case(b"string"),
            _ => return reply(SYNTAX),
        }
        j += 2;
    }
    if !only_strings {
        // Every value is a string: no key of any other type.
        return Action::Reply(b"*2\r\n$1\r\n0\r\n*0\r\n".to_vec());
    }
    Action::Store(
        Op::Scan {
            cursor,
            pattern,
            count,
        },
        Render::Scan,
    )
}

/// The client's token for a scan cursor (see the [module docs](self)): `"0"` for the empty
/// cursor (start, or done), else `"1"` and three decimal digits per byte.
pub fn encode_cursor(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        return b"0".to_vec();
    }
    let mut out = Vec::with_capacity(1 + 3 * key.len());
    out.push(b'1');
    for &b in key {
        out.extend_from_slice(&[b'0' + b / 100, b'0' + b / 10 % 10, b'0' + b % 10]);
    }
    out
}

/// The store's cursor for a client's token, `None` for a malformed one; the inverse of
/// [`encode_cursor`] (`"0"` and `"1"` both give the empty cursor).
pub fn decode_cursor(token: &[u8]) -> Option<Bytes> {
    if token == b"0" {
        return Some(Vec::new());
    }
    let digits = token.strip_prefix(b"1")?;
    if digits.len() % 3 != 0 {
        return None;
    }
    digits
        .chunks_exact(3)
        .map(|d| {
            if !d.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n =
                u32::from(d[0] - b'0') * 100 + u32::from(d[1] - b'0') * 10 + u32::from(d[2] - b'0');
            u8::try_from(n).ok()
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// Rendering

const NIL: &[u8] = b"$-1\r\n";

fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(data.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn bulk_reply(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 16);
    bulk(&mut out, data);
    out
}

fn int(out: &mut Vec<u8>, n: i64) {
    out.push(b':');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(n.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn item_or_nil(out: &mut Vec<u8>, item: Option<&Item>) {
    match item {
        Some(item) => bulk(out, &item.value),
        None => out.extend_from_slice(NIL),
    }
}

/// `-ERR msg\r\n`, with CR and LF in `msg` turned into spaces as Redis does.
fn error(msg: &str) -> Vec<u8> {
    error_bytes(b"ERR", msg.as_bytes())
}

fn error_bytes(code: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(code.len() + msg.len() + 4);
    out.push(b'-');
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend(
        msg.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
    out
}

/// The reply to a command from the store's response; see [`Render`] for each command's shape.
/// `Response::Error(msg)` gives `-ERR msg`.
pub fn render(render: &Render, resp: &Response) -> Vec<u8> {
    let mut out = Vec::new();
    if let Response::Error(msg) = resp {
        return error(msg);
    }
    match (render, resp) {
        (Render::Ok | Render::Set, Response::Ok) => out.extend_from_slice(b"+OK\r\n"),
        (Render::Set, Response::NotStored) => out.extend_from_slice(NIL),
        (Render::Bulk, Response::Items(items)) => {
            item_or_nil(&mut out, items.first().and_then(Option::as_ref))
        }
        (Render::Bulk, Response::NotStored | Response::NotFound) => out.extend_from_slice(NIL),
        (Render::Bulks, Response::Items(items)) => {
            array(&mut out, items.len());
            for item in items {
                item_or_nil(&mut out, item.as_ref());
            }
        }
        (Render::Int, Response::Int(n)) => int(&mut out, *n),
        (Render::Int, Response::UInt(n)) => int(&mut out, i64::try_from(*n).unwrap_or(i64::MAX)),
        (Render::Bool, Response::Ok) => int(&mut out, 1),
        (Render::Bool, Response::NotStored | Response::NotFound) => int(&mut out, 0),
        (Render::Bool, Response::Int(n)) => int(&mut out, i64::from(*n > 0)),
        (Render::TtlSeconds, Response::Int(ms)) => int(
            &mut out,
            if *ms < 0 {
                *ms
            } else {
                ms.saturating_add(500) / 1000
            },
        ),
        (Render::TtlMillis, Response::Int(ms)) => int(&mut out, *ms),
        (Render::TtlSeconds | Render::TtlMillis, Response::NotFound) => int(&mut out, -2),
        (Render::Keys, Response::Keys(keys)) => {
            array(&mut out, keys.len());
            for k in keys {
                bulk(&mut out, k);
            }
        }
        (Render::Scan, Response::ScanPage { next, keys }) => {
            array(&mut out, 2);
            bulk(&mut out, &encode_cursor(next));
            array(&mut out, keys.len());
            for k in keys {
                bulk(&mut out, k);
            }
        }
        (Render::Type, Response::Int(n)) => {
            out.extend_from_slice(if *n > 0 { b"+string\r\n" } else { b"+none\r\n" })
        }
        _ => return error("internal error: unexpected response from the store"),
    }
    out
}

/// The reply to `INFO`: a bulk string of `# Server`, `redis_version:7.0.0`, then a
/// `name:value` line per field. A field whose name starts with `#` starts a new section: an
/// empty line, then the name alone (`("# Keyspace", _)` → `\r\n# Keyspace`). CR and LF in
/// names and values become spaces.
pub fn render_info(fields: &[(&str, String)]) -> Vec<u8> {
    let mut text = format!("# Server\r\nredis_version:{REDIS_VERSION}\r\n");
    let clean = |s: &str| s.replace(['\r', '\n'], " ");
    for (name, value) in fields {
        if name.starts_with('#') {
            text.push_str("\r\n");
            text.push_str(&clean(name));
        } else {
            text.push_str(&clean(name));
            text.push(':');
            text.push_str(&clean(value));
        }
        text.push_str("\r\n");
    }
    bulk_reply(text.as_bytes())
}
