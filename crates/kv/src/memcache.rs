//! The memcached front-end: text protocol parsing, command translation into [`Op`]s and reply
//! rendering, following memcached 1.6's wording (the binary protocol: [`crate::mcbin`]).
//!
//! The network server owns the I/O; this module only turns bytes into commands and results into
//! bytes:
//!
//! 1. [`parse_command`] takes the bytes received so far and returns one command and the number
//!    of bytes it used (its line and, for storage commands, its data block), `None` when the
//!    command is not complete yet, or an [`McError`]: write [`McError::reply`], drop
//!    [`McError::skip`] bytes of input (possibly more than have arrived: keep dropping as they
//!    come), and close the connection if [`McError::close`].
//! 2. [`command`] translates the command into an [`McAction`]: a reply made without the store,
//!    an [`Op`] for the replicated store with the [`McRender`] to format its [`Response`] with
//!    ([`render`]), `stats` ([`render_stats`]) or `quit`.
//!
//! ```
//! use waverunner_kv::memcache::{command, parse_command, render, Limits, McAction};
//! use waverunner_kv::{Op, Response};
//!
//! let buf = b"set k 5 0 2\r\nhi\r\n";
//! let (cmd, used) = parse_command(buf, &Limits::default()).unwrap().unwrap();
//! assert_eq!(used, buf.len());
//! let McAction::Store { op, render: how, noreply } = command(cmd) else { panic!() };
//! assert!(matches!(op, Op::Set { flags: 5, .. }));
//! assert!(!noreply);
//! assert_eq!(render(&how, &Response::Ok), b"STORED\r\n");
//! ```
//!
//! Commands are case-sensitive and tokens are separated by spaces, as in memcached. The meta
//! commands `mn`, `mg`, `ms`, `md`, `ma` and `me` are supported with the flags listed at
//! [`Meta`]; another flag gets `CLIENT_ERROR invalid flag`.
//!
//! # Expiry times
//!
//! An exptime of 0 means never ([`Expiry::None`]), a negative one expires the item at once
//! (`AfterMs(-1)`), up to 30 days (2 592 000 s) it is relative (`AfterMs(s × 1000)`), above it
//! is an absolute Unix time in seconds (`AtMs(s × 1000)`); see [`expiry`].

use std::fmt;

use crate::ops::{Bytes, Cond, Expiry, Item, Op, Response};
use crate::store::ERR_TOO_LARGE;

/// The largest exptime taken as relative, in seconds (30 days).
pub const MAX_RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;

/// The reply to `version`.
pub const VERSION_REPLY: &[u8] =
    concat!("VERSION waverunner-", env!("CARGO_PKG_VERSION"), "\r\n").as_bytes();

/// Size limits on requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest value accepted, in bytes (default 1 MiB); larger ones get
    /// `SERVER_ERROR object too large for cache` and their data block is skipped.
    pub max_value: usize,
    /// The longest command line, without its `\r\n` (default 2048). Retrieval lines (`get`,
    /// `gets`, `gat`, `gats` at the very start of the line) may be as long as
    /// `max(max_line, max_value)`: memcached accepts multigets of any length.
    pub max_line: usize,
    /// The longest key (default 250).
    pub max_key: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_value: 1024 * 1024,
            max_line: 2048,
            max_key: 250,
        }
    }
}

/// How a storage command stores its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// `set`: always.
    Set,
    /// `add`: only if the key is absent.
    Add,
    /// `replace`: only if the key exists.
    Replace,
    /// `append`: after the existing value (the key must exist; flags and exptime are ignored).
    Append,
    /// `prepend`: before the existing value (the key must exist; flags and exptime are ignored).
    Prepend,
}

/// One parsed command. Exptimes are as the client sent them (see [`expiry`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McCommand {
    /// `get k…` (`cas: false`) or `gets k…` (`cas: true`).
    Get {
        /// The keys, in order (at least one).
        keys: Vec<Bytes>,
        /// Include the CAS unique in each `VALUE` line (`gets`).
        cas: bool,
    },
    /// `gat exptime k…` or `gats exptime k…`: touch and get.
    Gat {
        /// The new exptime.
        exptime: i64,
        /// The keys, in order (at least one).
        keys: Vec<Bytes>,
        /// Include the CAS unique (`gats`).
        cas: bool,
    },
    /// `set`/`add`/`replace`/`append`/`prepend key flags exptime bytes [noreply]` and the
    /// data block.
    Store {
        /// Which command.
        mode: StoreMode,
        /// The key.
        key: Bytes,
        /// The client flags.
        flags: u32,
        /// The exptime.
        exptime: i64,
        /// The data block, without its `\r\n`.
        value: Bytes,
        /// Send no reply.
        noreply: bool,
    },
    /// `cas key flags exptime bytes unique [noreply]` and the data block.
    Cas {
        /// The key.
        key: Bytes,
        /// The client flags.
        flags: u32,
        /// The exptime.
        exptime: i64,
        /// The CAS unique the item must still have (from `gets`).
        unique: u64,
        /// The data block, without its `\r\n`.
        value: Bytes,
        /// Send no reply.
        noreply: bool,
    },
    /// `delete key [0] [noreply]`.
    Delete {
        /// The key.
        key: Bytes,
        /// Send no reply.
        noreply: bool,
    },
    /// `incr key delta [noreply]` or `decr key delta [noreply]`.
    Incr {
        /// The key.
        key: Bytes,
        /// The amount.
        delta: u64,
        /// `decr` (stops at 0) rather than `incr` (wraps at 2^64).
        decr: bool,
        /// Send no reply.
        noreply: bool,
    },
    /// `touch key exptime [noreply]`.
    Touch {
        /// The key.
        key: Bytes,
        /// The new exptime.
        exptime: i64,
        /// Send no reply.
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`.
    FlushAll {
        /// Seconds to wait before flushing (0: now).
        delay: i64,
        /// Send no reply.
        noreply: bool,
    },
    /// `version`.
    Version,
    /// `verbosity level [noreply]` (the level is ignored).
    Verbosity {
        /// Send no reply.
        noreply: bool,
    },
    /// `stats [group…]`.
    Stats {
        /// The arguments after `stats`.
        args: Vec<Bytes>,
    },
    /// `quit`: close the connection.
    Quit,
    /// A meta command (`mn`, `mg`, `ms`, `md`, `ma`, `me`).
    Meta(Meta),
}

/// Which meta command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    /// `mn`: `MN`.
    Noop,
    /// `mg key flags*`: `v` value, `f` client flags, `t` TTL left (s, -1 none), `s` size,
    /// `k` key, `c` CAS, `O…` opaque, `q` no `EN` on a miss, `T…` set the TTL.
    Get,
    /// `ms key datalen flags*` and the data block: `F…` client flags, `T…` TTL, `C…` compare
    /// CAS, `M…` mode (`S` set, `E` add, `A` append, `P` prepend, `R` replace), `c` return
    /// the new CAS, `k`, `O…`, `q` no `HD`.
    Set,
    /// `md key flags*`: `k`, `O…`, `q` no `HD`.
    Delete,
    /// `ma key flags*`: `D…` delta (1), `M…` mode (`I`/`+` incr, `D`/`-` decr), `v` the
    /// value, `k`, `O…`, `q` no `HD`.
    Arith,
    /// `me key`: one line about the item (`exp`, `cas`, `size`), `EN` if absent.
    Debug,
}

/// A meta command: the key, its flags (the flag letter and its token) in order, and `ms`'s
/// data block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Which command.
    pub cmd: MetaCmd,
    /// The key (empty for `mn`).
    pub key: Bytes,
    /// The flags as sent: letter and token (empty for a flag without one).
    pub flags: Vec<(u8, Bytes)>,
    /// `ms`: the data block, without its `\r\n`.
    pub value: Bytes,
}

/// The flags each meta command takes (others: `CLIENT_ERROR invalid flag`).
fn meta_flags(cmd: MetaCmd) -> &'static [u8] {
    match cmd {
        MetaCmd::Noop => b"",
        MetaCmd::Get => b"vftskcOqT",
        MetaCmd::Set => b"FTCMckOq",
        MetaCmd::Delete => b"kOq",
        MetaCmd::Arith => b"DMvkOq",
        MetaCmd::Debug => b"",
    }
}

/// What was wrong with a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum McErrorKind {
    /// Unknown command, or the wrong number of tokens: `ERROR`.
    UnknownCommand,
    /// `CLIENT_ERROR bad command line format` (bad number, key too long, …).
    BadFormat,
    /// `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`.
    DeleteUsage,
    /// `CLIENT_ERROR invalid exptime argument` (`touch`, `gat`).
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument` (`incr`, `decr`).
    InvalidDelta,
    /// `CLIENT_ERROR line too long`: no end of line within the limit.
    LineTooLong,
    /// `CLIENT_ERROR bad data chunk`: the data block did not end with `\r\n`.
    BadDataChunk,
    /// `SERVER_ERROR object too large for cache`: the value exceeds [`Limits::max_value`].
    TooLarge,
    /// `CLIENT_ERROR invalid flag`: a meta command's flag it does not take.
    InvalidFlag,
}

impl McErrorKind {
    /// The reply line, without `\r\n`.
    pub fn text(&self) -> &'static str {
        match self {
            McErrorKind::UnknownCommand => "ERROR",
            McErrorKind::BadFormat => "CLIENT_ERROR bad command line format",
            McErrorKind::DeleteUsage => {
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
            }
            McErrorKind::InvalidExptime => "CLIENT_ERROR invalid exptime argument",
            McErrorKind::InvalidDelta => "CLIENT_ERROR invalid numeric delta argument",
            McErrorKind::LineTooLong => "CLIENT_ERROR line too long",
            McErrorKind::BadDataChunk => "CLIENT_ERROR bad data chunk",
            McErrorKind::TooLarge => "SERVER_ERROR object too large for cache",
            McErrorKind::InvalidFlag => "CLIENT_ERROR invalid flag",
        }
    }
}

/// A command that cannot be executed, and how to get back in step with the client.
///
/// The server writes [`McError::reply`] (empty when the command asked for `noreply`, as
/// memcached suppresses error replies then), drops the first [`McError::skip`] bytes of its
/// input — which may be more than it holds: an oversize value's data block is skipped without
/// being buffered, so the server keeps discarding incoming bytes until `skip` is used up — and
/// closes the connection if [`McError::close`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McError {
    /// What was wrong.
    pub kind: McErrorKind,
    /// How many bytes from the start of the buffer the command takes: its line and, for a
    /// storage command whose length could be read, its data block and `\r\n`.
    pub skip: usize,
    /// Close the connection after the reply: the end of the command cannot be found (a line
    /// too long, a storage command whose length cannot be read).
    pub close: bool,
    /// The command ended with `noreply`: write nothing (unless closing).
    pub noreply: bool,
}

impl McError {
    /// The bytes to write: the error line and `\r\n`, or nothing under `noreply` unless the
    /// connection is being closed.
    pub fn reply(&self) -> Vec<u8> {
        if self.noreply && !self.close {
            return Vec::new();
        }
        let mut out = self.kind.text().as_bytes().to_vec();
        out.extend_from_slice(b"\r\n");
        out
    }
}

impl fmt::Display for McError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.text())
    }
}

impl std::error::Error for McError {}

// ------------------------------------------------------------------------------------------
// Parsing

/// Parses one command from the start of `buf`: the command and the number of bytes it takes,
/// `Ok(None)` when `buf` holds only part of it (call again with more bytes), or an [`McError`]
/// saying what to reply and how many bytes to drop.
///
/// A command line ends with `\n` (an `\r` before it is dropped); a storage command is complete
/// only with its data block of exactly `bytes` bytes and `\r\n`. Errors in a storage command's
/// line are reported as soon as the line is complete, with `skip` covering the data block when
/// its length could be read. The parser keeps no state and allocates only for a complete
/// command.
pub fn parse_command(buf: &[u8], limits: &Limits) -> Result<Option<(McCommand, usize)>, McError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let limit = if retrieval(buf) {
        limits.max_line.max(limits.max_value)
    } else {
        limits.max_line
    };
    let window = &buf[..buf.len().min(limit.saturating_add(2))];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        // Too long already, or one byte over unless it is the CR of the CRLF.
        if buf.len() > limit.saturating_add(1)
            || (buf.len() == limit.saturating_add(1) && buf.last() != Some(&b'\r'))
        {
            return Err(McError {
                kind: McErrorKind::LineTooLong,
                skip: buf.len(),
                close: true,
                noreply: false,
            });
        }
        return Ok(None);
    };
    let line_len = nl + 1;
    let mut line = &buf[..nl];
    if let Some(l) = line.strip_suffix(b"\r") {
        line = l;
    }
    if line.len() > limit {
        return Err(McError {
            kind: McErrorKind::LineTooLong,
            skip: line_len,
            close: true,
            noreply: false,
        });
    }
    let tokens: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let n = tokens.len();
    let noreply = tokens.last() == Some(&&b"noreply"[..]);
    let fail = |kind, noreply| McError {
        kind,
        skip: line_len,
        close: false,
        noreply,
    };
    let key_ok = |k: &[u8]| k.len() <= limits.max_key;
    let Some(&name) = tokens.first() else {
        return Err(fail(McErrorKind::UnknownCommand, false));
    };
    let cmd = match name {
        b"get" | b"gets" | b"gat" | b"gats" => {
            let touch = name.starts_with(b"gat");
            let first = if touch { 2 } else { 1 };
            if n <= first {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            let keys = &tokens[first..];
            if !keys.iter().all(|k| key_ok(k)) {
                return Err(fail(McErrorKind::BadFormat, false));
            }
            let keys = keys.iter().map(|k| k.to_vec()).collect();
            let cas = name.ends_with(b"s");
            if touch {
                let Some(exptime) = exptime(tokens[1]) else {
                    return Err(fail(McErrorKind::InvalidExptime, false));
                };
                McCommand::Gat { exptime, keys, cas }
            } else {
                McCommand::Get { keys, cas }
            }
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            return storage(buf, &tokens, line_len, limits);
        }
        b"delete" => {
            if !(2..=4).contains(&n) {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            let hold_zero = n > 2 && tokens[2] == b"0";
            let valid =
                n == 2 || (n == 3 && (hold_zero || noreply)) || (n == 4 && hold_zero && noreply);
            if !valid {
                return Err(fail(McErrorKind::DeleteUsage, noreply));
            }
            if !key_ok(tokens[1]) {
                return Err(fail(McErrorKind::BadFormat, noreply));
            }
            McCommand::Delete {
                key: tokens[1].to_vec(),
                noreply,
            }
        }
        b"incr" | b"decr" => {
            if !(3..=4).contains(&n) {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            if !key_ok(tokens[1]) {
                return Err(fail(McErrorKind::BadFormat, noreply));
            }
            let Some(delta) = parse_u64(tokens[2]) else {
                return Err(fail(McErrorKind::InvalidDelta, noreply));
            };
            McCommand::Incr {
                key: tokens[1].to_vec(),
                delta,
                decr: name == b"decr",
                noreply,
            }
        }
        b"touch" => {
            if !(3..=4).contains(&n) {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            if !key_ok(tokens[1]) {
                return Err(fail(McErrorKind::BadFormat, noreply));
            }
            let Some(exptime) = exptime(tokens[2]) else {
                return Err(fail(McErrorKind::InvalidExptime, noreply));
            };
            McCommand::Touch {
                key: tokens[1].to_vec(),
                exptime,
                noreply,
            }
        }
        b"flush_all" => {
            if n > 3 {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            let delay = if n == 1 + usize::from(noreply) {
                0
            } else {
                match parse_i64(tokens[1]) {
                    Some(d) if n == 2 || noreply => d,
                    _ => return Err(fail(McErrorKind::BadFormat, noreply)),
                }
            };
            McCommand::FlushAll { delay, noreply }
        }
        b"version" => McCommand::Version,
        b"verbosity" => {
            if !(2..=3).contains(&n) {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            McCommand::Verbosity { noreply }
        }
        b"stats" => McCommand::Stats {
            args: tokens[1..].iter().map(|t| t.to_vec()).collect(),
        },
        b"quit" => McCommand::Quit,
        b"mn" => McCommand::Meta(Meta {
            cmd: MetaCmd::Noop,
            key: Vec::new(),
            flags: Vec::new(),
            value: Vec::new(),
        }),
        b"mg" | b"md" | b"ma" | b"me" | b"ms" => {
            let cmd = match name {
                b"mg" => MetaCmd::Get,
                b"md" => MetaCmd::Delete,
                b"ma" => MetaCmd::Arith,
                b"me" => MetaCmd::Debug,
                _ => MetaCmd::Set,
            };
            if n < 2 {
                return Err(fail(McErrorKind::UnknownCommand, false));
            }
            if !key_ok(tokens[1]) {
                return Err(fail(McErrorKind::BadFormat, false));
            }
            let first_flag = if cmd == MetaCmd::Set { 3 } else { 2 };
            let mut flags = Vec::new();
            for t in tokens.iter().skip(first_flag) {
                if !meta_flags(cmd).contains(&t[0]) {
                    return Err(fail(McErrorKind::InvalidFlag, false));
                }
                flags.push((t[0], t[1..].to_vec()));
            }
            let mut meta = Meta {
                cmd,
                key: tokens[1].to_vec(),
                flags,
                value: Vec::new(),
            };
            if cmd != MetaCmd::Set {
                McCommand::Meta(meta)
            } else {
                // ms key datalen flags*, then the data block.
                let Some(bytes) = tokens
                    .get(2)
                    .and_then(|t| parse_u64(t))
                    .filter(|&b| b <= i32::MAX as u64 - 2)
                else {
                    return Err(fail(McErrorKind::BadFormat, false));
                };
                let bytes = bytes as usize;
                let total = line_len.saturating_add(bytes).saturating_add(2);
                if bytes > limits.max_value {
                    return Err(McError {
                        kind: McErrorKind::TooLarge,
                        skip: total,
                        close: false,
                        noreply: false,
                    });
                }
                let data_end = line_len + bytes;
                match buf.get(data_end..total) {
                    Some(b"\r\n") => {}
                    Some(_) => {
                        return Err(McError {
                            kind: McErrorKind::BadDataChunk,
                            skip: total,
                            close: false,
                            noreply: false,
                        })
                    }
                    None => return Ok(None),
                }
                meta.value = buf[line_len..data_end].to_vec();
                return Ok(Some((McCommand::Meta(meta), total)));
            }
        }
        _ => return Err(fail(McErrorKind::UnknownCommand, false)),
    };
    Ok(Some((cmd, line_len)))
}

/// Whether the buffer starts with a retrieval command, whose line may be long. (Leading
/// spaces are not skipped here, so that whether a line is too long is known from its first
/// five bytes and does not depend on how the input was split.)
fn retrieval(buf: &[u8]) -> bool {
    [&b"get "[..], b"gets ", b"gat ", b"gats "]
        .iter()
        .any(|p| buf.starts_with(p))
}

/// The storage commands: `set|add|replace|append|prepend key flags exptime bytes [noreply]`,
/// `cas key flags exptime bytes unique [noreply]`, then the data block.
fn storage(
    buf: &[u8],
    tokens: &[&[u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Option<(McCommand, usize)>, McError> {
    let is_cas = tokens[0] == b"cas";
    let n = tokens.len();
    let base = if is_cas { 6 } else { 5 };
    if n != base && n != base + 1 {
        return Err(McError {
            kind: McErrorKind::UnknownCommand,
            skip: line_len,
            close: false,
            noreply: false,
        });
    }
    // memcached ignores an extra token other than "noreply".
    let noreply = n == base + 1 && tokens[n - 1] == b"noreply";
    let err = |kind, skip, close| McError {
        kind,
        skip,
        close,
        noreply,
    };
    // The length first: without it the data block cannot be skipped.
    let bytes = match parse_i64(tokens[4]) {
        Some(b) if (0..=i64::from(i32::MAX) - 2).contains(&b) => b as usize,
        _ => return Err(err(McErrorKind::BadFormat, line_len, true)),
    };
    let total = line_len.saturating_add(bytes).saturating_add(2);
    let key = tokens[1];
    let flags = parse_u64(tokens[2]).and_then(|f| u32::try_from(f).ok());
    let exptime = exptime(tokens[3]);
    let unique = if is_cas {
        parse_u64(tokens[5])
    } else {
        Some(0)
    };
    let (Some(flags), Some(exptime), Some(unique)) = (flags, exptime, unique) else {
        return Err(err(McErrorKind::BadFormat, total, false));
    };
    if key.len() > limits.max_key {
        return Err(err(McErrorKind::BadFormat, total, false));
    }
    if bytes > limits.max_value {
        return Err(err(McErrorKind::TooLarge, total, false));
    }
    let data_end = line_len + bytes;
    match buf.get(data_end..total) {
        Some(b"\r\n") => {}
        Some(_) => return Err(err(McErrorKind::BadDataChunk, total, false)),
        None => return Ok(None),
    }
    let value = buf[line_len..data_end].to_vec();
    let key = key.to_vec();
    let cmd = if is_cas {
        McCommand::Cas {
            key,
            flags,
            exptime,
            unique,
            value,
            noreply,
        }
    } else {
        let mode = match tokens[0] {
            b"set" => StoreMode::Set,
            b"add" => StoreMode::Add,
            b"replace" => StoreMode::Replace,
            b"append" => StoreMode::Append,
            _ => StoreMode::Prepend,
        };
        McCommand::Store {
            mode,
            key,
            flags,
            exptime,
            value,
            noreply,
        }
    };
    Ok(Some((cmd, total)))
}

/// memcached's `strtol`-style signed decimal: an optional sign, then digits.
fn parse_i64(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    crate::decimal_i64(neg, digits)
}

/// memcached's `strtoull`-style unsigned decimal: an optional `+`, then digits (no `-`).
fn parse_u64(s: &[u8]) -> Option<u64> {
    let digits = s.strip_prefix(b"+").unwrap_or(s);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |v, &d| {
        v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// An exptime token: a signed decimal small enough to be turned into ms.
fn exptime(s: &[u8]) -> Option<i64> {
    parse_i64(s).filter(|t| t.checked_mul(1000).is_some())
}

/// The [`Expiry`] of a memcached exptime: 0 → `None` (never), negative → `AfterMs(-1)`
/// (at once), up to [`MAX_RELATIVE_EXPTIME`] → `AfterMs(s × 1000)`, larger → an absolute
/// Unix time, `AtMs(s × 1000)` (saturating).
pub fn expiry(exptime: i64) -> Expiry {
    if exptime == 0 {
        Expiry::None
    } else if exptime < 0 {
        Expiry::AfterMs(-1)
    } else if exptime <= MAX_RELATIVE_EXPTIME {
        Expiry::AfterMs(exptime * 1000)
    } else {
        Expiry::AtMs((exptime as u64).saturating_mul(1000))
    }
}

// ------------------------------------------------------------------------------------------
// Commands and replies

/// What to do with a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McAction {
    /// Write these bytes (possibly none); the store is not involved (`version`, `verbosity`,
    /// some `stats` groups, errors).
    Reply(Vec<u8>),
    /// Have the store execute `op`; then, unless `noreply`, write
    /// [`render`]`(&render, &response)`.
    Store {
        /// The operation.
        op: Op,
        /// How to render its response.
        render: McRender,
        /// The client asked for no reply (the operation still happens).
        noreply: bool,
    },
    /// `stats`: write [`render_stats`] with the server's statistics.
    Stats,
    /// `quit`: close the connection without a reply.
    Quit,
}

/// How to turn the store's [`Response`] into the reply of the command that asked.
///
/// [`Response::Error`]`(msg)` renders as `SERVER_ERROR msg` (`CLIENT_ERROR msg` for
/// `incr`/`decr`; memcached's `SERVER_ERROR object too large for cache` for
/// [`ERR_TOO_LARGE`] from `append`/`prepend`), and a response the command cannot produce as a
/// `SERVER_ERROR`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McRender {
    /// `VALUE key flags bytes [cas]\r\ndata\r\n` per item found, then `END` (`get`, `gets`,
    /// `gat`, `gats`).
    Values {
        /// The keys asked, in the order of the response's items.
        keys: Vec<Bytes>,
        /// Include the CAS unique (`gets`, `gats`).
        cas: bool,
    },
    /// `STORED` or `NOT_STORED` (`set`, `add`, `replace`, `append`, `prepend`).
    Stored,
    /// `STORED`, `EXISTS` (changed since `gets`) or `NOT_FOUND` (`cas`).
    Cas,
    /// `DELETED` or `NOT_FOUND` (`delete`).
    Deleted,
    /// The new value, `NOT_FOUND`, or `CLIENT_ERROR cannot increment or decrement non-numeric
    /// value` (`incr`, `decr`).
    Counter,
    /// `TOUCHED` or `NOT_FOUND` (`touch`).
    Touched,
    /// `OK` (`flush_all`).
    Ok,
    /// A meta command's reply: the code (`VA`, `HD`, `EN`, `NS`, `EX`, `NF`, `ME`) and the
    /// flags asked for, in the order asked; `q` suppresses the codes memcached suppresses.
    Meta {
        /// Which command.
        cmd: MetaCmd,
        /// The key.
        key: Bytes,
        /// The flags as sent.
        flags: Vec<(u8, Bytes)>,
    },
}

/// Translates a parsed command into what to do.
///
/// `touch key 0` is sent as a `Touch` with `get: true` (rendered from whether the item was
/// found): a `Touch` without `get` that clears the expiry counts only keys that had one
/// (Redis `PERSIST`), while memcached answers `TOUCHED` for any existing key.
/// `flush_all` with a positive delay is refused (`CLIENT_ERROR`): the store cannot schedule a
/// flush.
pub fn command(cmd: McCommand) -> McAction {
    let store = |op, render, noreply| McAction::Store {
        op,
        render,
        noreply,
    };
    match cmd {
        McCommand::Get { keys, cas } => store(
            Op::Get { keys: keys.clone() },
            McRender::Values { keys, cas },
            false,
        ),
        McCommand::Gat { exptime, keys, cas } => store(
            Op::Touch {
                keys: keys.clone(),
                expiry: expiry(exptime),
                get: true,
            },
            McRender::Values { keys, cas },
            false,
        ),
        McCommand::Store {
            mode,
            key,
            flags,
            exptime,
            value,
            noreply,
        } => {
            let set = |cond| Op::Set {
                key: key.clone(),
                value: value.clone(),
                flags,
                expiry: expiry(exptime),
                cond,
                get_old: false,
            };
            let op = match mode {
                StoreMode::Set => set(Cond::Always),
                StoreMode::Add => set(Cond::IfAbsent),
                StoreMode::Replace => set(Cond::IfPresent),
                StoreMode::Append => Op::Append {
                    key,
                    value,
                    must_exist: true,
                    max_len: u64::MAX,
                },
                StoreMode::Prepend => Op::Prepend {
                    key,
                    value,
                    max_len: u64::MAX,
                },
            };
            store(op, McRender::Stored, noreply)
        }
        McCommand::Cas {
            key,
            flags,
            exptime,
            unique,
            value,
            noreply,
        } => store(
            Op::Cas {
                key,
                value,
                flags,
                expiry: expiry(exptime),
                unique,
            },
            McRender::Cas,
            noreply,
        ),
        McCommand::Delete { key, noreply } => {
            store(Op::Del { keys: vec![key] }, McRender::Deleted, noreply)
        }
        McCommand::Incr {
            key,
            delta,
            decr,
            noreply,
        } => store(Op::McIncr { key, delta, decr }, McRender::Counter, noreply),
        McCommand::Touch {
            key,
            exptime,
            noreply,
        } => store(
            Op::Touch {
                keys: vec![key],
                expiry: expiry(exptime),
                get: exptime == 0,
            },
            McRender::Touched,
            noreply,
        ),
        McCommand::FlushAll { delay, noreply } => {
            if delay > 0 {
                McAction::Reply(if noreply {
                    Vec::new()
                } else {
                    b"CLIENT_ERROR flush_all with a delay is not supported\r\n".to_vec()
                })
            } else {
                store(Op::FlushAll, McRender::Ok, noreply)
            }
        }
        McCommand::Version => McAction::Reply(VERSION_REPLY.to_vec()),
        McCommand::Verbosity { noreply } => McAction::Reply(if noreply {
            Vec::new()
        } else {
            b"OK\r\n".to_vec()
        }),
        McCommand::Stats { args } => match args.first().map(Vec::as_slice) {
            None => McAction::Stats,
            Some(b"settings" | b"items" | b"slabs" | b"sizes" | b"conns") if args.len() == 1 => {
                McAction::Reply(b"END\r\n".to_vec())
            }
            Some(_) => McAction::Reply(b"ERROR\r\n".to_vec()),
        },
        McCommand::Quit => McAction::Quit,
        McCommand::Meta(m) => meta_command(m),
    }
}

/// A meta command into what to do (see [`MetaCmd`] for the flags each takes).
fn meta_command(m: Meta) -> McAction {
    let has = |f: u8| m.flags.iter().any(|(c, _)| *c == f);
    let token = |f: u8| {
        m.flags
            .iter()
            .find(|(c, _)| *c == f)
            .map(|(_, t)| t.as_slice())
    };
    let bad = || McAction::Reply(b"CLIENT_ERROR bad token in command line format\r\n".to_vec());
    let key = m.key.clone();
    let op = match m.cmd {
        MetaCmd::Noop => return McAction::Reply(b"MN\r\n".to_vec()),
        MetaCmd::Get => {
            let get = match token(b'T') {
                Some(t) => match exptime(t) {
                    Some(e) => Op::Touch {
                        keys: vec![key.clone()],
                        expiry: expiry(e),
                        get: true,
                    },
                    None => return bad(),
                },
                None => Op::Get {
                    keys: vec![key.clone()],
                },
            };
            if has(b't') {
                Op::Multi(vec![get, Op::Ttl { key }])
            } else {
                get
            }
        }
        MetaCmd::Set => {
            let flags = match token(b'F') {
                Some(t) => match parse_u64(t).and_then(|f| u32::try_from(f).ok()) {
                    Some(f) => f,
                    None => return bad(),
                },
                None => 0,
            };
            let exp = match token(b'T') {
                Some(t) => match exptime(t) {
                    Some(e) => expiry(e),
                    None => return bad(),
                },
                None => Expiry::None,
            };
            let compare = match token(b'C') {
                Some(t) => match parse_u64(t) {
                    Some(c) => Some(c),
                    None => return bad(),
                },
                None => None,
            };
            let value = m.value.clone();
            let set = |cond| Op::Set {
                key: key.clone(),
                value: value.clone(),
                flags,
                expiry: exp.clone(),
                cond,
                get_old: false,
            };
            let mode = token(b'M').map_or(b'S', |t| t.first().copied().unwrap_or(0));
            let op = match (mode, compare) {
                (b'S' | b's', Some(unique)) => Op::Cas {
                    key: key.clone(),
                    value: value.clone(),
                    flags,
                    expiry: exp.clone(),
                    unique,
                },
                (b'S' | b's', None) => set(Cond::Always),
                (b'E' | b'e', None) => set(Cond::IfAbsent),
                (b'R' | b'r', None) => set(Cond::IfPresent),
                (b'A' | b'a', None) => Op::Append {
                    key: key.clone(),
                    value,
                    must_exist: true,
                    max_len: u64::MAX,
                },
                (b'P' | b'p', None) => Op::Prepend {
                    key: key.clone(),
                    value,
                    max_len: u64::MAX,
                },
                _ => return bad(),
            };
            if has(b'c') {
                Op::Multi(vec![op, Op::Get { keys: vec![key] }])
            } else {
                op
            }
        }
        MetaCmd::Delete => Op::Del { keys: vec![key] },
        MetaCmd::Arith => {
            let delta = match token(b'D') {
                Some(t) => match parse_u64(t) {
                    Some(d) => d,
                    None => return bad(),
                },
                None => 1,
            };
            let decr = match token(b'M').and_then(|t| t.first()) {
                None | Some(b'I' | b'i' | b'+') => false,
                Some(b'D' | b'd' | b'-') => true,
                Some(_) => return bad(),
            };
            Op::McIncr { key, delta, decr }
        }
        MetaCmd::Debug => Op::Multi(vec![
            Op::Get {
                keys: vec![key.clone()],
            },
            Op::Ttl { key },
        ]),
    };
    McAction::Store {
        op,
        render: McRender::Meta {
            cmd: m.cmd,
            key: m.key,
            flags: m.flags,
        },
        noreply: false,
    }
}

/// A meta command's reply from the store's response.
fn render_meta(cmd: MetaCmd, key: &[u8], flags: &[(u8, Bytes)], resp: &Response) -> Vec<u8> {
    let quiet = flags.iter().any(|(c, _)| *c == b'q');
    let wants = |f: u8| flags.iter().any(|(c, _)| *c == f);
    // The flags a reply carries back, in the order asked: those of `allowed` that have a value.
    let ret = |allowed: &[u8], item: Option<&Item>, ttl_ms: Option<i64>, cas: Option<u64>| {
        let mut out = Vec::new();
        for (f, tok) in flags {
            if !allowed.contains(f) {
                continue;
            }
            let v: Option<Vec<u8>> = match f {
                b'f' => item.map(|i| i.flags.to_string().into_bytes()),
                b's' => item.map(|i| i.value.len().to_string().into_bytes()),
                b't' => ttl_ms.map(|t| {
                    // Whole seconds left, as memcached's second clock counts them.
                    if t < 0 { -1 } else { t / 1000 }.to_string().into_bytes()
                }),
                b'c' => cas
                    .or(item.map(|i| i.cas))
                    .map(|c| c.to_string().into_bytes()),
                b'k' => Some(key.to_vec()),
                b'O' => Some(tok.clone()),
                _ => None,
            };
            if let Some(v) = v {
                out.push(b' ');
                out.push(*f);
                out.extend_from_slice(&v);
            }
        }
        out
    };
    let code = |c: &str, rest: Vec<u8>| {
        let mut out = c.as_bytes().to_vec();
        out.extend_from_slice(&rest);
        out.extend_from_slice(b"\r\n");
        out
    };
    if let Response::Error(msg) = resp {
        let kind = if cmd == MetaCmd::Arith {
            "CLIENT_ERROR"
        } else {
            "SERVER_ERROR"
        };
        return format!("{kind} {}\r\n", one_line(msg)).into_bytes();
    }
    match cmd {
        MetaCmd::Get | MetaCmd::Debug => {
            let (items, ttl) = match resp {
                Response::Items(items) => (items.as_slice(), None),
                Response::Batch(rs) => match rs.as_slice() {
                    [Response::Items(items), Response::Int(t)] => (items.as_slice(), Some(*t)),
                    _ => return b"SERVER_ERROR unexpected response from the store\r\n".to_vec(),
                },
                _ => return b"SERVER_ERROR unexpected response from the store\r\n".to_vec(),
            };
            let Some(item) = items.first().and_then(Option::as_ref) else {
                if cmd == MetaCmd::Get && quiet {
                    return Vec::new();
                }
                return code(
                    "EN",
                    if cmd == MetaCmd::Get {
                        ret(b"Ok", None, None, None)
                    } else {
                        Vec::new()
                    },
                );
            };
            if cmd == MetaCmd::Debug {
                let exp = match ttl {
                    Some(t) if t >= 0 => t / 1000,
                    _ => -1,
                };
                let mut out = b"ME ".to_vec();
                out.extend_from_slice(key);
                out.extend_from_slice(
                    format!(
                        " exp={exp} la=0 cas={} fetch=no cls=1 size={}\r\n",
                        item.cas,
                        item.value.len()
                    )
                    .as_bytes(),
                );
                return out;
            }
            let flags = ret(b"ftskcO", Some(item), ttl, None);
            if wants(b'v') {
                let mut out = format!("VA {}", item.value.len()).into_bytes();
                out.extend_from_slice(&flags);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&item.value);
                out.extend_from_slice(b"\r\n");
                out
            } else {
                code("HD", flags)
            }
        }
        MetaCmd::Set => {
            let (r, cas) = match resp {
                Response::Batch(rs) => match rs.as_slice() {
                    [r, Response::Items(items)] => {
                        (r, items.first().and_then(Option::as_ref).map(|i| i.cas))
                    }
                    _ => return b"SERVER_ERROR unexpected response from the store\r\n".to_vec(),
                },
                r => (r, None),
            };
            match r {
                Response::Ok | Response::Int(_) if quiet => Vec::new(),
                Response::Ok | Response::Int(_) => code("HD", ret(b"Ock", None, None, cas)),
                Response::NotStored => code("NS", ret(b"Ok", None, None, None)),
                Response::CasMismatch => code("EX", ret(b"Ok", None, None, None)),
                Response::NotFound => code("NF", ret(b"Ok", None, None, None)),
                _ => b"SERVER_ERROR unexpected response from the store\r\n".to_vec(),
            }
        }
        MetaCmd::Delete => match resp {
            Response::Int(n) if *n > 0 && quiet => Vec::new(),
            Response::Int(n) if *n > 0 => code("HD", ret(b"Ok", None, None, None)),
            Response::Int(_) => code("NF", ret(b"Ok", None, None, None)),
            _ => b"SERVER_ERROR unexpected response from the store\r\n".to_vec(),
        },
        MetaCmd::Arith => match resp {
            Response::UInt(n) if wants(b'v') => {
                let v = n.to_string();
                let mut out = format!("VA {}", v.len()).into_bytes();
                out.extend_from_slice(&ret(b"Ok", None, None, None));
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(v.as_bytes());
                out.extend_from_slice(b"\r\n");
                out
            }
            Response::UInt(_) if quiet => Vec::new(),
            Response::UInt(_) => code("HD", ret(b"Ok", None, None, None)),
            Response::NotFound => code("NF", ret(b"Ok", None, None, None)),
            _ => b"SERVER_ERROR unexpected response from the store\r\n".to_vec(),
        },
        MetaCmd::Noop => b"MN\r\n".to_vec(),
    }
}

/// The reply to a command from the store's response; see [`McRender`] for each command's
/// replies. (Under `noreply` the server writes nothing instead.)
pub fn render(r: &McRender, resp: &Response) -> Vec<u8> {
    let line = |s: &str| format!("{s}\r\n").into_bytes();
    if let McRender::Meta { cmd, key, flags } = r {
        return render_meta(*cmd, key, flags, resp);
    }
    match (r, resp) {
        (McRender::Counter, Response::Error(msg)) => {
            line(&format!("CLIENT_ERROR {}", one_line(msg)))
        }
        (McRender::Stored, Response::Error(msg)) if msg == ERR_TOO_LARGE => {
            line("SERVER_ERROR object too large for cache")
        }
        (_, Response::Error(msg)) => line(&format!("SERVER_ERROR {}", one_line(msg))),
        (McRender::Values { keys, cas }, Response::Items(items)) => {
            let mut out = Vec::new();
            for (key, item) in keys.iter().zip(items) {
                let Some(item) = item else { continue };
                out.extend_from_slice(b"VALUE ");
                out.extend_from_slice(key);
                let head = if *cas {
                    format!(" {} {} {}\r\n", item.flags, item.value.len(), item.cas)
                } else {
                    format!(" {} {}\r\n", item.flags, item.value.len())
                };
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(&item.value);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"END\r\n");
            out
        }
        (McRender::Values { .. }, Response::NotFound) => line("END"),
        (McRender::Stored, Response::Ok | Response::Int(_)) => line("STORED"),
        (McRender::Stored, Response::NotStored | Response::NotFound) => line("NOT_STORED"),
        (McRender::Cas, Response::Ok) => line("STORED"),
        (McRender::Cas, Response::CasMismatch) => line("EXISTS"),
        (McRender::Cas, Response::NotFound) => line("NOT_FOUND"),
        (McRender::Cas, Response::NotStored) => line("NOT_STORED"),
        (McRender::Deleted | McRender::Touched, Response::Int(n)) if *n > 0 => {
            line(if *r == McRender::Deleted {
                "DELETED"
            } else {
                "TOUCHED"
            })
        }
        (McRender::Deleted, Response::Ok) => line("DELETED"),
        (McRender::Touched, Response::Ok) => line("TOUCHED"),
        (McRender::Touched, Response::Items(items)) if items.iter().any(Option::is_some) => {
            line("TOUCHED")
        }
        (
            McRender::Deleted | McRender::Touched,
            Response::Int(_) | Response::NotFound | Response::Items(_),
        ) => line("NOT_FOUND"),
        (McRender::Counter, Response::UInt(n)) => line(&n.to_string()),
        (McRender::Counter, Response::Int(n)) if *n >= 0 => line(&n.to_string()),
        (McRender::Counter, Response::NotFound) => line("NOT_FOUND"),
        (McRender::Ok, Response::Ok) => line("OK"),
        _ => line("SERVER_ERROR unexpected response from the store"),
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\r', '\n'], " ")
}

/// The reply to `stats`: `STAT name value\r\n` per field, then `END\r\n`. CR, LF and spaces
/// in names, and CR and LF in values, become `_` and spaces.
pub fn render_stats(fields: &[(&str, String)]) -> Vec<u8> {
    let mut out = String::new();
    for (name, value) in fields {
        out.push_str("STAT ");
        out.push_str(&name.replace(['\r', '\n', ' '], "_"));
        out.push(' ');
        out.push_str(&one_line(value));
        out.push_str("\r\n");
    }
    out.push_str("END\r\n");
    out.into_bytes()
}
