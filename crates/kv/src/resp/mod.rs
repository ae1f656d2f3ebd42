//! The Redis front-end: RESP2 request parsing (`parse.rs`), command translation into [`Op`]s
//! (`commands.rs`) and reply rendering (`render.rs`), with Redis 7's wording for every error.
//!
//! The network server owns the I/O; this module only turns bytes into commands and results into
//! bytes:
//!
//! 1. [`parse_command`] takes the bytes received so far and returns one command's arguments and
//!    the number of bytes it used, `None` when the command is not complete yet, or a
//!    [`ProtocolError`] (reply [`ProtocolError::reply`], then close the connection).
//! 2. [`command`] translates the arguments into an [`Action`]: a reply made without the store,
//!    an [`Op`] for the replicated store with the [`Render`] to format its [`Response`] with
//!    ([`render`]), `INFO` ([`render_info_sections`]), a `CLIENT`/`HELLO` command answered from the
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

mod commands;
mod parse;
mod render;

use std::fmt;

use crate::glob::glob_match;
use crate::ops::{Bytes, Cond, ExpireCond, Expiry, Item, Op, Reply, Response};

pub use commands::*;
pub use parse::*;
pub use render::*;

/// The protocol a connection speaks: RESP2 until it says `HELLO 3`. RESP3 differs in the
/// replies this server gives by a null (`_`) for RESP2's nil bulk and nil array, maps (`%`) for
/// `HELLO`, `CONFIG GET` and `COMMAND DOCS`, and verbatim strings (`=`) for `INFO` and
/// `CLIENT INFO`, as Redis 7 answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Proto {
    /// RESP2 (the default).
    #[default]
    Resp2,
    /// RESP3 (`HELLO 3`).
    Resp3,
}

impl Proto {
    /// The protocol version number (`HELLO`'s `proto` field, `CLIENT INFO`'s `resp=`).
    pub fn version(self) -> i64 {
        match self {
            Proto::Resp2 => 2,
            Proto::Resp3 => 3,
        }
    }
}

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
