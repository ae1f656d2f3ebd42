//! # waverunner-kv
//!
//! The key-value state machine of Waverunner and the codecs of its front-ends.
//!
//! - [`ops`]: the operations and results every front-end is translated into.
//! - [`store`]: the deterministic store, the replicated state machine (apply, read, snapshot,
//!   restore).
//! - [`codec`]: the binary encoding of operations and results in log entries and on the wire.
//! - [`glob`]: glob patterns with the semantics of Redis `KEYS` and `SCAN … MATCH`.
//! - [`resp`]: the Redis front-end: RESP2 request parsing (multibulk and inline), translation
//!   of commands into operations, and reply rendering.
//! - [`memcache`]: the memcached front-end: text protocol parsing (with data blocks and
//!   `noreply`), translation into operations, and reply rendering.
//!
//! Nothing in this crate does I/O: the network server feeds received bytes to a front-end's
//! parser, sends the operations to the replicated store, and writes the rendered replies.

#![warn(missing_docs)]

pub mod codec;
pub mod glob;
pub mod mcbin;
pub mod memcache;
pub mod native;
pub mod ops;
pub mod resp;
pub mod store;
pub mod types;

pub use ops::{Bytes, Cond, ExpireCond, Expiry, Item, Op, Reply, Response};
pub use store::KvStore;

/// The i64 written as ASCII `digits` (negated if `neg`), if they are all digits and it fits:
/// the accumulation under the RESP and memcached number syntaxes, which differ only in what
/// they accept around it.
pub(crate) fn decimal_i64(neg: bool, digits: &[u8]) -> Option<i64> {
    digits.iter().try_fold(0i64, |v, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        let v = v.checked_mul(10)?;
        if neg {
            v.checked_sub(d)
        } else {
            v.checked_add(d)
        }
    })
}
