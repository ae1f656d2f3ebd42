//! # waverunner-kv
//!
//! The key-value state machine of Waverunner and the codecs of its front-ends.
//!
//! - [`ops`]: the operations and results every front-end is translated into.
//! - `store` (to come): the deterministic store (apply, read, snapshot, restore).
//! - `codec` (to come): the binary encoding of operations and results in log entries and on the wire.
//! - `resp`, `memcache` (to come): Redis RESP2 and memcached text protocol parsing and rendering.

#![warn(missing_docs)]

pub mod codec;
pub mod glob;
pub mod ops;
pub mod store;

pub use ops::{Bytes, Cond, Expiry, Item, Op, Response};
pub use store::KvStore;
