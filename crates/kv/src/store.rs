//! The deterministic key-value store: the replicated state machine.
//!
//! # Determinism
//!
//! [`KvStore::apply`] depends only on the store's state and its arguments: the Raft log index of
//! the entry, the timestamp the leader put in the entry, and the operation. Every replica that
//! applies the same entries in the same order reaches the same state ([`KvStore::digest`]
//! compares them cheaply) and answers the same. The store never reads a clock: "now" is the
//! largest entry timestamp applied so far, so time never goes back even if a new leader's clock
//! is behind the old one's.
//!
//! # Items and expiry
//!
//! An item is a value, memcached client flags (`u32`, 0 from Redis), a CAS unique (the log index
//! of the last write that changed the value or flags; a change of the expiry alone — `Touch` —
//! keeps it, as in memcached) and an optional absolute expiry time in ms since the Unix epoch.
//! An item whose expiry time is ≤ now is expired and treated as absent by every operation.
//! Expired items are removed only inside `apply` (so removal is deterministic): lazily when a
//! write touches the key, and actively by a small sweep of at most [`SWEEP_PER_APPLY`] items,
//! earliest expiry first, at each `apply` of a write. Applying a read-only operation changes
//! only the applied index and the clock, so it answers exactly as [`KvStore::read`] would.
//!
//! Relative expiries ([`Expiry::AfterMs`]) become absolute when applied: now + ms (saturating at
//! `u64::MAX`). `AfterMs(ms ≤ 0)` and an `AtMs` time ≤ now mean the item expires at once: a
//! write with such an expiry succeeds and leaves the key absent (Redis `SET … PXAT <past>`,
//! memcached negative exptime), and a `Touch` with one deletes the key (Redis `EXPIRE k -1`).
//!
//! # Limits
//!
//! The store itself bounds nothing: keys and values are arbitrary bytes of any length memory
//! allows, and the number of keys is unbounded; front-ends enforce size limits. Snapshots and the
//! [codec](crate::codec) encode lengths as `u32`, so a key or value must be shorter than 4 GiB.
//! Counters are decimal strings: `IncrBy` values are signed 64-bit (at most 20 bytes, Redis
//! syntax: no sign other than `-`, no leading zeros, no spaces) and `McIncr` values unsigned
//! 64-bit (1 to 20 ASCII digits, leading zeros allowed). Work per operation: `Keys` is O(keys),
//! `DbSize` and `len` are O(expired keys not yet removed), `Scan` is O(`count` keys) plus a
//! logarithmic seek, everything else O(log keys) per key named plus copying values. What a
//! replica reads every tick is O(1): `digest` (a running sum of per-item hashes), `held` and
//! `used_memory` (kept on every change). An idle store reclaims expired items through
//! [`Op::Sweep`], at most [`SWEEP_PER_OP`] per entry.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use imbl::{OrdMap, OrdSet};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use crate::codec::{put_u32, put_u64, DecodeError};
use crate::glob::glob_match;
use crate::ops::{Bytes, Cond, ExpireCond, Expiry, Item, Op, Response};
use crate::types::{self, Coll, Type, WRONGTYPE};

/// The error of `IncrBy` on a value that is not a signed 64-bit decimal (Redis's message, less
/// its `ERR ` prefix).
pub const ERR_NOT_INTEGER: &str = "value is not an integer or out of range";
/// The error of `IncrBy` when the result does not fit in a signed 64-bit integer.
pub const ERR_OVERFLOW: &str = "increment or decrement would overflow";
/// The error of `McIncr` on a value that is not an unsigned 64-bit decimal (memcached's message,
/// less its `CLIENT_ERROR ` prefix).
pub const ERR_NON_NUMERIC: &str = "cannot increment or decrement non-numeric value";
/// The error of `Append` and `Prepend` when the result would be longer than their `max_len`
/// (Redis's message, less its `ERR ` prefix; memcached front-ends render it as
/// `SERVER_ERROR object too large for cache`).
pub const ERR_TOO_LARGE: &str = "string exceeds maximum allowed size";
/// The error of [`KvStore::read`] given an operation that writes.
pub const ERR_NOT_READ_ONLY: &str = "not a read-only operation";
/// `RENAME` of an absent key.
pub const ERR_NO_SUCH_KEY: &str = "no such key";
/// `INCRBYFLOAT` on a value that is not a float.
pub const ERR_NOT_FLOAT: &str = "value is not a valid float";
/// `INCRBYFLOAT` whose result is not finite.
pub const ERR_NAN_OR_INF: &str = "increment would produce NaN or Infinity";

/// A float as Redis's `INCRBYFLOAT` reads a value: the whole string, no spaces, not NaN.
pub fn parse_f64(v: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(v).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    s.parse::<f64>().ok().filter(|x| !x.is_nan())
}

/// A float as `INCRBYFLOAT` writes it: the shortest text that reads back as the same `f64`,
/// without an exponent, `0` for zero of either sign.
pub fn format_f64(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    format!("{x}")
}

/// A key between `min` and `max` (inclusive, in byte order) picked from `seed`: their
/// common prefix, then random bytes within the bounds at the first difference and after.
/// Keys sharing a long prefix (`user:1` … `user:999`) are spread over, not only the first.
pub(crate) fn random_between(min: &[u8], max: &[u8], seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let common = min.iter().zip(max).take_while(|(a, b)| a == b).count();
    let mut out = min[..common].to_vec();
    let lo = u64::from(min.get(common).copied().unwrap_or(0));
    let hi = u64::from(max.get(common).copied().unwrap_or(0));
    if hi > lo {
        out.push((lo + next() % (hi - lo + 1)) as u8);
        for _ in 0..8 {
            out.push(next() as u8);
        }
    }
    out
}

/// The bytes `start..=end` of `v` as Redis's `GETRANGE` takes them: negative positions count
/// from the end, both are clamped to the value, and an empty range is empty.
fn byte_range(v: &[u8], start: i64, end: i64) -> &[u8] {
    let len = len_i64(v.len());
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return &[];
    }
    let start = if start < 0 {
        len.saturating_add(start)
    } else {
        start
    }
    .max(0);
    let end = if end < 0 {
        len.saturating_add(end)
    } else {
        end
    }
    .max(0)
    .min(len - 1);
    if start > end {
        return &[];
    }
    &v[start as usize..=end as usize]
}

/// How many expired items each [`KvStore::apply`] of a write removes at most, earliest expiry
/// first (besides those removed because the operation writes their key).
pub const SWEEP_PER_APPLY: usize = 16;

/// How many expired items one [`Op::Sweep`] removes at most: the bounded increment in which
/// an idle store reclaims expired items (Redis's active expire; the leader proposes a sweep
/// when it sees expired items waiting, [`KvStore::expired_waiting`]).
pub const SWEEP_PER_OP: usize = 1_000;

/// Bytes accounted per item besides its record (key, value, 24-byte header): the record's
/// reference counts (16), the allocator's header and rounding (about 16), and the item's share
/// of the tree (a 16-byte slot in nodes about three quarters full, plus node headers).
pub const ITEM_OVERHEAD: usize = 56;
/// Bytes accounted per item with an expiry: a copy of its key plus this, its entry in the
/// expiry index (time, key vector, allocator header, tree slot share).
pub const EXPIRY_OVERHEAD: usize = 64;

/// The first bytes of a snapshot.
const SNAPSHOT_MAGIC: &[u8; 4] = b"WKVS";
/// How many keys the store remembers the last deletion or expiry change of, for `WATCH`
/// ([`KvStore`]'s `touched`); past it the oldest are forgotten and every transaction watching
/// since before them aborts (a spurious abort is allowed, a missed change is not).
pub const WATCH_MEMORY: usize = 1 << 16;

/// The snapshot format's version: 4 adds what `WATCH` needs (the touched keys); 3 each
/// item's type and a collection's elements; 2
/// (strings only, still restored) ends with an xxh3-64 checksum as 3 does, 1 (still restored)
/// with FNV-1a (one byte per multiply: a 137 MB snapshot took 1.5 s to write).
const SNAPSHOT_VERSION: u8 = 4;

/// The bit of a record's key-length field that marks a key holding a collection (its
/// elements are in [`KvStore`]'s `colls`, its value bytes are empty).
const TYPED: u32 = 1 << 31;

impl Op {
    /// Whether the operation only reads (`Get`, `Exists`, `Strlen`, `Ttl`, `DbSize`, `Keys`,
    /// `Scan`): it may be answered by [`KvStore::read`] after a linearizable read (ReadIndex or
    /// lease) instead of going through the log.
    pub fn is_read_only(&self) -> bool {
        match self {
            Op::Batch(ops) => !ops.is_empty() && ops.iter().all(Op::is_read_only),
            // Through the log always: atomic on every replica by construction.
            Op::Multi(_) => false,
            Op::Cmd { args, .. } => args
                .first()
                .and_then(|n| types::spec(n))
                .is_some_and(types::Spec::read_only),
            op => matches!(
                op,
                Op::Get { .. }
                    | Op::Exists { .. }
                    | Op::Strlen { .. }
                    | Op::Ttl { .. }
                    | Op::DbSize
                    | Op::Keys { .. }
                    | Op::Scan { .. }
                    | Op::GetRange { .. }
                    | Op::ExpireTime { .. }
                    | Op::RandomKey { .. }
                    | Op::GetBit { .. }
                    | Op::Ready { .. }
            ),
        }
    }
}

/// One stored item in one shared allocation: `key length u32 | flags u32 | CAS unique u64 |
/// expiry u64 (0: none) | key | value`, little-endian. One allocation per item keeps the
/// per-key overhead near Redis's, and sharing it makes a snapshot view cost a pointer per
/// item, not a copy of the value. Ordered and compared by key alone.
#[derive(Clone)]
struct Rec(Arc<[u8]>);

/// Bytes of a [`Rec`]'s header.
const REC_HEADER: usize = 24;

impl Rec {
    fn new(key: &[u8], value: &[u8], flags: u32, cas: u64, expire_at: Option<u64>) -> Rec {
        Rec::build(key, value, flags, cas, expire_at, false)
    }

    /// The record of a key holding a collection.
    fn typed(key: &[u8], cas: u64, expire_at: Option<u64>) -> Rec {
        Rec::build(key, &[], 0, cas, expire_at, true)
    }

    fn build(
        key: &[u8],
        value: &[u8],
        flags: u32,
        cas: u64,
        expire_at: Option<u64>,
        typed: bool,
    ) -> Rec {
        // A stored expiry is after the store's clock, so never 0: 0 is free to mean "none".
        assert_ne!(expire_at, Some(0), "expiry 0 stored");
        let key_len = u32::try_from(key.len())
            .ok()
            .filter(|&n| n < TYPED)
            .expect("key of 2 GiB or more");
        let key_len = if typed { key_len | TYPED } else { key_len };
        let mut head = [0u8; REC_HEADER];
        head[0..4].copy_from_slice(&key_len.to_le_bytes());
        head[4..8].copy_from_slice(&flags.to_le_bytes());
        head[8..16].copy_from_slice(&cas.to_le_bytes());
        head[16..24].copy_from_slice(&expire_at.unwrap_or(0).to_le_bytes());
        // Written in place: a large value is copied once, not into a vector and then again.
        let mut b = Arc::<[u8]>::new_zeroed_slice(REC_HEADER + key.len() + value.len());
        let dst = Arc::get_mut(&mut b).expect("a new allocation is unique");
        // SAFETY: zeroed bytes are valid `u8`s.
        let dst = unsafe { &mut *(dst as *mut [std::mem::MaybeUninit<u8>] as *mut [u8]) };
        dst[..REC_HEADER].copy_from_slice(&head);
        dst[REC_HEADER..REC_HEADER + key.len()].copy_from_slice(key);
        dst[REC_HEADER + key.len()..].copy_from_slice(value);
        // SAFETY: every byte was initialized (zeroed, then written).
        Rec(unsafe { b.assume_init() })
    }

    fn field<const N: usize>(&self, at: usize) -> [u8; N] {
        self.0[at..at + N].try_into().expect("record header")
    }

    fn key_len(&self) -> usize {
        (u32::from_le_bytes(self.field(0)) & !TYPED) as usize
    }

    /// Whether the key holds a collection.
    fn is_typed(&self) -> bool {
        u32::from_le_bytes(self.field(0)) & TYPED != 0
    }

    fn key(&self) -> &[u8] {
        &self.0[REC_HEADER..REC_HEADER + self.key_len()]
    }

    fn value(&self) -> &[u8] {
        &self.0[REC_HEADER + self.key_len()..]
    }

    fn flags(&self) -> u32 {
        u32::from_le_bytes(self.field(4))
    }

    fn cas(&self) -> u64 {
        u64::from_le_bytes(self.field(8))
    }

    fn expire_at(&self) -> Option<u64> {
        match u64::from_le_bytes(self.field(16)) {
            0 => None,
            t => Some(t),
        }
    }

    fn live(&self, now: u64) -> bool {
        match self.expire_at() {
            None => true,
            Some(t) => now < t,
        }
    }

    fn item(&self) -> Item {
        Item {
            value: self.value().to_vec(),
            flags: self.flags(),
            cas: self.cas(),
        }
    }

    /// The item's contribution to the digest: a hash of every field.
    fn hash(&self) -> u64 {
        xxh3_64(&self.0)
    }

    /// The bytes the item is accounted for (see [`ITEM_OVERHEAD`]).
    fn cost(&self) -> u64 {
        let expiry = if self.expire_at().is_some() {
            self.key_len() + EXPIRY_OVERHEAD
        } else {
            0
        };
        (self.0.len() + ITEM_OVERHEAD + expiry) as u64
    }
}

impl PartialEq for Rec {
    fn eq(&self, other: &Rec) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Rec {}

impl PartialOrd for Rec {
    fn partial_cmp(&self, other: &Rec) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rec {
    fn cmp(&self, other: &Rec) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }
}

impl Borrow<[u8]> for Rec {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

impl std::fmt::Debug for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rec")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("value_len", &self.value().len())
            .field("flags", &self.flags())
            .field("cas", &self.cas())
            .field("expire_at", &self.expire_at())
            .finish()
    }
}

/// The key-value store: items in key order, the log index of the last applied entry and the
/// store's clock (see the [module](self) documentation).
///
/// The items are a persistent B+tree: [`KvStore::snapshot_view`] shares it in O(1) and the
/// store's next writes copy only the nodes they touch, so a snapshot is written off the
/// replica loop while the loop keeps applying.
#[derive(Clone, Default)]
pub struct KvStore {
    items: OrdSet<Rec>,
    /// The collection of every typed item (and nothing else).
    colls: OrdMap<Bytes, Coll>,
    /// For `WATCH`: the log index of the last change to each key that its record does not
    /// show (a deletion, an expiry set or cleared, an expired item removed), at most
    /// [`WATCH_MEMORY`] keys, the oldest forgotten first; `touched_at` orders them by index.
    touched: OrdMap<Bytes, u64>,
    touched_at: OrdSet<(u64, Bytes)>,
    /// Every key counts as changed at this index (the largest index forgotten from
    /// `touched`, or the last `FLUSHALL`).
    touched_floor: u64,
    /// Bytes `touched` takes in a snapshot (for [`SnapshotView::len_bound`] in O(1)).
    touched_bytes: u64,
    /// (expiry time, key) of every item with an expiry.
    expiries: BTreeSet<(u64, Bytes)>,
    now_ms: u64,
    applied: u64,
    /// Wrapping sum of every item's [`Rec::hash`]: an order-independent digest kept on every
    /// change, so [`KvStore::digest`] costs O(1).
    hash_sum: u64,
    /// Sum of every item's [`Rec::cost`]: [`KvStore::used_memory`] in O(1).
    used: u64,
    /// Items replaced or removed while a snapshot view still shared them ([`Graves`]).
    graves: Graves,
}

/// Items the store let go of while a snapshot view still held them, kept until the view is
/// gone and then freed here, a few at a time ([`KvStore::reclaim`]).
///
/// Why: a view is dropped by the thread that wrote it. Freed there, the items it alone kept
/// (every value overwritten during the snapshot: 400 000 under a write flood) were memory the
/// replica loop had allocated, and mimalloc hands blocks freed by another thread back to
/// their owner, which takes them all in its next allocation: the loop stalled 40–150 ms at the
/// end of each snapshot of 1 M keys, and followers timed out their leader.
#[derive(Default)]
struct Graves(Mutex<VecDeque<Grave>>);

/// The items one view kept alive.
struct Grave {
    /// The view holds the other reference while it lives (a grave opened for a `FLUSHALL`
    /// while no view lived has no view: it is drained at once).
    view: Arc<()>,
    items: Vec<Rec>,
    /// Collections removed or replaced: dropped in one go, one of a million elements holds
    /// the loop as long as a million items do. Freed a piece at a time, the last first.
    colls: Vec<Coll>,
    /// Whole states a `FLUSHALL` let go of: dropped in one go, a million items held the loop
    /// 60 ms (and a view's thread would have freed them in one go as well).
    flushed: Vec<Flushed>,
}

/// What a `FLUSHALL` took out of the store, emptied a piece at a time.
struct Flushed {
    items: OrdSet<Rec>,
    colls: OrdMap<Bytes, Coll>,
    expiries: BTreeSet<(u64, Bytes)>,
    /// The collection being emptied, out of `colls`.
    open: Option<Coll>,
}

impl Flushed {
    /// Drops at most `budget` pieces (an item, an element of a collection, an expiry entry);
    /// how many.
    fn drain(&mut self, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            if let Some(c) = &mut self.open {
                n += c.shed(budget - n);
                if c.is_empty() {
                    self.open = None;
                }
                continue;
            }
            if self.items.remove_min().is_some() || self.expiries.pop_first().is_some() {
                n += 1;
                continue;
            }
            let Some(k) = self.colls.get_min().map(|(k, _)| k.clone()) else {
                break;
            };
            self.open = self.colls.remove(&k);
        }
        n
    }

    /// O(1): the loop asks at every step ([`KvStore::reclaim`]).
    fn is_empty(&self) -> bool {
        self.items.is_empty()
            && self.colls.is_empty()
            && self.open.is_none()
            && self.expiries.is_empty()
    }

    /// Pieces left: O(its collections), for [`KvStore::buried`] only.
    fn len(&self) -> usize {
        self.items.len()
            + self.colls.values().map(Coll::len).sum::<usize>()
            + self.open.as_ref().map_or(0, Coll::len)
            + self.expiries.len()
    }
}

impl Grave {
    /// An empty grave for `view` (a new `Arc`: for what no view holds, emptied at once).
    fn of(view: Arc<()>) -> Grave {
        Grave {
            view,
            items: Vec::new(),
            colls: Vec::new(),
            flushed: Vec::new(),
        }
    }

    fn view_alive(&self) -> bool {
        Arc::strong_count(&self.view) > 1
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty() && self.colls.is_empty() && self.flushed.is_empty()
    }

    /// Pieces it holds: items, elements of collections, and what `FLUSHALL`s let go of
    /// (O(collections): for [`KvStore::buried`] only).
    fn len(&self) -> usize {
        self.items.len()
            + self.colls.iter().map(Coll::len).sum::<usize>()
            + self.flushed.iter().map(Flushed::len).sum::<usize>()
    }
}

impl Clone for Graves {
    /// A copy of the store shares no graves: what they hold belongs to the original's views.
    fn clone(&self) -> Graves {
        Graves::default()
    }
}

/// Items freed from the graves per item buried: the graves empty faster than they fill.
const RECLAIM_PER_BURIAL: usize = 2;

/// Collections of more elements than this that the store lets go of are freed a piece at a
/// time ([`KvStore::reclaim`]) rather than at once; smaller ones cost about what a write does.
pub const SHED_AT: usize = 1024;

impl PartialEq for KvStore {
    fn eq(&self, other: &KvStore) -> bool {
        self.applied == other.applied
            && self.now_ms == other.now_ms
            && self.hash_sum == other.hash_sum
            && self.used == other.used
            && self.expiries == other.expiries
            && self.colls == other.colls
            && self.touched == other.touched
            && self.touched_floor == other.touched_floor
            && self.items.len() == other.items.len()
            && self
                .items
                .iter()
                .zip(other.items.iter())
                .all(|(a, b)| a.0 == b.0)
    }
}

impl Eq for KvStore {}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore")
            .field("items", &self.items.len())
            .field("collections", &self.colls.len())
            .field("expiries", &self.expiries.len())
            .field("now_ms", &self.now_ms)
            .field("applied", &self.applied)
            .field("digest", &self.digest())
            .finish()
    }
}

impl KvStore {
    /// An empty store at log index 0 and time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The log index of the last entry applied (0 if none).
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// The store's clock: the largest entry timestamp applied so far, ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The number of live (not expired) keys at the store's clock. O(expired keys not yet
    /// removed); [`KvStore::held`] is O(1).
    pub fn len(&self) -> usize {
        self.live_count(self.now_ms)
    }

    /// The number of items held, expired ones not yet removed included. O(1).
    pub fn held(&self) -> usize {
        self.items.len()
    }

    /// Whether no key is live at the store's clock.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the items take: keys, values, headers, and an estimate of the allocator's and the
    /// tree's share per item ([`ITEM_OVERHEAD`], [`EXPIRY_OVERHEAD`]). Deterministic (every
    /// replica at the same applied index reports the same) and O(1).
    pub fn used_memory(&self) -> u64 {
        self.used
    }

    /// Whether expired items wait to be removed: a write (or [`Op::Sweep`]) at the store's
    /// clock `now_ms` would reclaim some. O(1).
    pub fn expired_waiting(&self, now_ms: u64) -> bool {
        self.expiries.first().is_some_and(|(t, _)| *t <= now_ms)
    }

    /// Applies the operation of the log entry at `index`, whose leader timestamp is `now_ms`,
    /// and returns its result. Read-only operations are answered exactly as [`KvStore::read`]
    /// would at the updated clock, and change nothing else.
    ///
    /// Results per operation (Redis semantics unless noted):
    ///
    /// - `Set`: `Ok`, or `NotStored` when `cond` does not hold. With `get_old`, the result is
    ///   `Items(vec![old])` (`None` if the key was absent) whether or not the value was stored:
    ///   a failed condition stores nothing but still returns the old value (Redis 7 `SET … NX
    ///   GET`). The new item's flags are `flags`; its expiry per [`Expiry`]: `None` clears,
    ///   `Keep` keeps the old item's (none for a new key).
    /// - `MSet`: `Ok`; each key gets flags 0 and no expiry; a repeated key's last value wins.
    /// - `Cas` (memcached): `NotFound` if the key is absent, `CasMismatch` if its CAS unique is
    ///   not `unique`, else stores like `Set` and gives `Ok`.
    /// - `Del`: `Int(number of keys that existed)`; a key named twice counts once.
    /// - `IncrBy`: `Int(new value)`; a missing key counts as 0 and is created with flags 0 and
    ///   no expiry; an existing key keeps its flags and expiry. `Error(ERR_NOT_INTEGER)` if the
    ///   value is not a signed 64-bit decimal, `Error(ERR_OVERFLOW)` if the result overflows.
    /// - `McIncr` (memcached): `UInt(new value)`; `NotFound` if the key is absent;
    ///   `Error(ERR_NON_NUMERIC)` if the value is not an unsigned 64-bit decimal; incr wraps at
    ///   2^64, decr stops at 0; the value is stored back as a plain decimal (memcached's
    ///   space padding after a decr is not reproduced); flags and expiry are kept.
    /// - `Append`: `Int(new length)`; a missing key is created (flags 0, no expiry) unless
    ///   `must_exist` (memcached), which gives `NotStored`. Flags and expiry are kept.
    /// - `Prepend` (memcached): `Ok`, or `NotStored` if the key is absent.
    /// - `Append` and `Prepend`: `Error(ERR_TOO_LARGE)` if the new value would be longer than
    ///   `max_len` bytes; nothing changes (not the value, nor its CAS unique).
    /// - `Touch`: for each key that exists, sets its expiry; the CAS unique is unchanged.
    ///   With `get`, the result is `Items` (the value as it was, `None` for absent keys; an
    ///   expiry in the past deletes the key after reading it). Without `get`, `Int(count)`:
    ///   with `Expiry::None` (Redis `PERSIST`) the keys whose expiry was removed, otherwise
    ///   the keys that exist (`Expiry::Keep` changes nothing and just counts them).
    /// - `FlushAll`: `Ok`; every key is removed.
    /// - `Sweep`: `Int(number of expired items removed)`, at most [`SWEEP_PER_OP`] besides the
    ///   [`SWEEP_PER_APPLY`] every write removes.
    ///
    /// Every write that stores a value sets the item's CAS unique to `index`.
    ///
    /// # Panics
    ///
    /// If `index` is not greater than the last applied index.
    pub fn apply(&mut self, index: u64, now_ms: u64, op: &Op) -> Response {
        assert!(
            index > self.applied,
            "log index {index} applied after index {}",
            self.applied
        );
        self.applied = index;
        self.now_ms = self.now_ms.max(now_ms);
        if !op.is_read_only() {
            self.sweep(SWEEP_PER_APPLY);
        }
        self.apply_op(index, op)
    }

    fn apply_op(&mut self, index: u64, op: &Op) -> Response {
        if let Some(wrong) = self.string_conflict(op, self.now_ms) {
            return wrong;
        }
        match op {
            Op::Cmd { args, seed } => Response::Reply(types::apply(self, index, args, *seed)),
            Op::Multi(ops) => {
                let ops = match ops.split_first() {
                    Some((Op::WatchCheck { since, keys }, rest)) => {
                        if keys.iter().any(|k| self.changed_since(k, *since)) {
                            return Response::Reply(crate::Reply::NilArray);
                        }
                        rest
                    }
                    _ => ops.as_slice(),
                };
                Response::Batch(ops.iter().map(|op| self.apply_op(index, op)).collect())
            }
            Op::WatchCheck { .. } => Response::Ok,
            Op::Batch(ops) => {
                Response::Batch(ops.iter().map(|op| self.apply_op(index, op)).collect())
            }
            Op::Get { .. }
            | Op::Exists { .. }
            | Op::Strlen { .. }
            | Op::Ttl { .. }
            | Op::DbSize
            | Op::Keys { .. }
            | Op::Scan { .. }
            | Op::GetRange { .. }
            | Op::ExpireTime { .. }
            | Op::RandomKey { .. }
            | Op::GetBit { .. }
            | Op::Ready { .. } => self.answer(self.now_ms, op),
            Op::Set {
                key,
                value,
                flags,
                expiry,
                cond,
                get_old,
            } => {
                // A plain SET (no condition, no GET, no KEEPTTL) needs nothing of the old
                // item: the insert replaces it, expired or live, of any type, in the one
                // lookup it makes (the old one's expiry entry, digest share, memory and
                // collection go with it, as a removal would take them). Looking it up first
                // cost the leader about 3 % of its CPU under `redis-benchmark -t set`.
                if *cond == Cond::Always && !*get_old && *expiry != Expiry::Keep {
                    let expire_at = self.resolve(expiry, None);
                    self.store(key, value, *flags, index, expire_at);
                    return Response::Ok;
                }
                let old = self.with_live(key, |e| (get_old.then(|| e.item()), e.expire_at()));
                let exists = old.is_some();
                let (old_item, current_expiry) = old.unwrap_or((None, None));
                let store = match cond {
                    Cond::Always => true,
                    Cond::IfAbsent => !exists,
                    Cond::IfPresent => exists,
                };
                if store {
                    let expire_at = self.resolve(expiry, current_expiry);
                    self.store(key, value, *flags, index, expire_at);
                }
                if *get_old {
                    Response::Items(vec![old_item])
                } else if store {
                    Response::Ok
                } else {
                    Response::NotStored
                }
            }
            Op::MSet { pairs } => {
                for (key, value) in pairs {
                    self.store(key, value, 0, index, None);
                }
                Response::Ok
            }
            Op::Cas {
                key,
                value,
                flags,
                expiry,
                unique,
            } => {
                self.purge(key);
                let Some(old) = self.items.get(key.as_slice()) else {
                    return Response::NotFound;
                };
                if old.cas() != *unique {
                    return Response::CasMismatch;
                }
                let expire_at = self.resolve(expiry, old.expire_at());
                self.store(key, value, *flags, index, expire_at);
                Response::Ok
            }
            Op::Del { keys } => {
                let now = self.now_ms;
                let mut n = 0;
                for key in keys {
                    if self.remove(key).is_some_and(|e| e.live(now)) {
                        n += 1;
                    }
                }
                Response::Int(n)
            }
            Op::IncrBy { key, delta } => {
                self.purge(key);
                match self.items.get(key.as_slice()).cloned() {
                    None => {
                        self.store(key, delta.to_string().as_bytes(), 0, index, None);
                        Response::Int(*delta)
                    }
                    Some(e) => {
                        let Some(old) = parse_i64(e.value()) else {
                            return Response::Error(ERR_NOT_INTEGER.into());
                        };
                        let Some(new) = old.checked_add(*delta) else {
                            return Response::Error(ERR_OVERFLOW.into());
                        };
                        let v = new.to_string();
                        self.store(key, v.as_bytes(), e.flags(), index, e.expire_at());
                        Response::Int(new)
                    }
                }
            }
            Op::McIncr { key, delta, decr } => self.mc_incr(index, key, *delta, *decr),
            Op::McIncrOr {
                key,
                delta,
                decr,
                initial,
                expiry,
            } => {
                self.purge(key);
                if self.items.get(key.as_slice()).is_some() {
                    return self.mc_incr(index, key, *delta, *decr);
                }
                let Some(initial) = initial else {
                    return Response::NotFound;
                };
                let expire_at = self.resolve(expiry, None);
                self.store(key, initial.to_string().as_bytes(), 0, index, expire_at);
                Response::UInt(*initial)
            }
            Op::Append {
                key,
                value,
                must_exist,
                max_len,
            } => {
                self.purge(key);
                match self.items.get(key.as_slice()).cloned() {
                    Some(e) => {
                        if too_long(e.value().len(), value.len(), *max_len) {
                            return Response::Error(ERR_TOO_LARGE.into());
                        }
                        let mut v = Vec::with_capacity(e.value().len() + value.len());
                        v.extend_from_slice(e.value());
                        v.extend_from_slice(value);
                        self.store(key, &v, e.flags(), index, e.expire_at());
                        Response::Int(len_i64(v.len()))
                    }
                    None if *must_exist => Response::NotStored,
                    None if too_long(0, value.len(), *max_len) => {
                        Response::Error(ERR_TOO_LARGE.into())
                    }
                    None => {
                        self.store(key, value, 0, index, None);
                        Response::Int(len_i64(value.len()))
                    }
                }
            }
            Op::Prepend {
                key,
                value,
                max_len,
            } => {
                self.purge(key);
                let Some(e) = self.items.get(key.as_slice()).cloned() else {
                    return Response::NotStored;
                };
                if too_long(e.value().len(), value.len(), *max_len) {
                    return Response::Error(ERR_TOO_LARGE.into());
                }
                let mut v = Vec::with_capacity(value.len() + e.value().len());
                v.extend_from_slice(value);
                v.extend_from_slice(e.value());
                self.store(key, &v, e.flags(), index, e.expire_at());
                Response::Ok
            }
            Op::Touch { keys, expiry, get } => {
                let mut n = 0;
                let mut items = Vec::new();
                for key in keys {
                    self.purge(key);
                    let Some(e) = self.items.get(key.as_slice()) else {
                        if *get {
                            items.push(None);
                        }
                        continue;
                    };
                    if *get {
                        items.push(Some(e.item()));
                    }
                    let current = e.expire_at();
                    match expiry {
                        Expiry::None => n += i64::from(current.is_some()),
                        _ => n += 1,
                    }
                    let new = self.resolve(expiry, current);
                    self.retime(key, new);
                }
                if *get {
                    Response::Items(items)
                } else {
                    Response::Int(n)
                }
            }
            Op::FlushAll => {
                self.flush_to_grave();
                // Every key that existed changed; which ones is not kept (that would cost
                // time in the number of keys): every watch from before aborts.
                self.touched = OrdMap::new();
                self.touched_at = OrdSet::new();
                self.touched_bytes = 0;
                self.touched_floor = index;
                self.hash_sum = 0;
                self.used = 0;
                Response::Ok
            }
            Op::Sweep => Response::Int(len_i64(self.sweep(SWEEP_PER_OP))),
            Op::GetDel { key } => {
                self.purge(key);
                Response::Items(vec![self.remove(key).map(|e| e.item())])
            }
            Op::GetEx { key, expiry } => {
                self.purge(key);
                let Some(e) = self.items.get(key.as_slice()) else {
                    return Response::Items(vec![None]);
                };
                let item = e.item();
                if let Some(x) = expiry {
                    let new = self.resolve(x, e.expire_at());
                    self.retime(key, new);
                }
                Response::Items(vec![Some(item)])
            }
            Op::Rename { from, to, nx } => {
                self.purge(from);
                self.purge(to);
                let Some(e) = self.items.get(from.as_slice()).cloned() else {
                    return Response::Error(ERR_NO_SUCH_KEY.into());
                };
                if *nx && self.items.get(to.as_slice()).is_some() {
                    return Response::NotStored;
                }
                if from != to {
                    // The collection moves: the source's copy is the same one.
                    let coll = self.take(from).and_then(|(_, c)| c);
                    // The destination may keep the source's CAS unique, older than a watch.
                    self.touch(to);
                    match coll {
                        Some(c) => self.put_typed(to, c, e.cas(), e.expire_at()),
                        None => self.store(to, e.value(), e.flags(), index, e.expire_at()),
                    }
                }
                Response::Ok
            }
            Op::Copy { from, to, replace } => {
                self.purge(from);
                self.purge(to);
                let Some(e) = self.items.get(from.as_slice()).cloned() else {
                    return Response::Int(0);
                };
                if !*replace && self.items.get(to.as_slice()).is_some() {
                    return Response::Int(0);
                }
                match self.colls.get(from.as_slice()).cloned() {
                    Some(c) => self.put_typed(to, c, index, e.expire_at()),
                    None => self.store(to, e.value(), e.flags(), index, e.expire_at()),
                }
                Response::Int(1)
            }
            Op::SetRange {
                key,
                offset,
                value,
                max_len,
            } => {
                self.purge(key);
                let old = self.items.get(key.as_slice()).cloned();
                let old_len = old.as_ref().map_or(0, |e| e.value().len());
                if value.is_empty() {
                    // Nothing written: the length as it is (no key created).
                    return Response::Int(len_i64(old_len));
                }
                let Some(end) = offset
                    .checked_add(value.len() as u64)
                    .filter(|&end| end <= *max_len)
                else {
                    return Response::Error(ERR_TOO_LARGE.into());
                };
                let (end, offset) = (end as usize, *offset as usize);
                let mut v = old.as_ref().map_or_else(Vec::new, |e| e.value().to_vec());
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[offset..end].copy_from_slice(value);
                let (flags, expire_at) = old
                    .as_ref()
                    .map_or((0, None), |e| (e.flags(), e.expire_at()));
                self.store(key, &v, flags, index, expire_at);
                Response::Int(len_i64(v.len()))
            }
            Op::MSetNx { pairs } => {
                for (key, _) in pairs {
                    self.purge(key);
                }
                if pairs
                    .iter()
                    .any(|(key, _)| self.items.get(key.as_slice()).is_some())
                {
                    return Response::Int(0);
                }
                for (key, value) in pairs {
                    self.store(key, value, 0, index, None);
                }
                Response::Int(1)
            }
            Op::IncrByFloat { key, delta } => {
                self.purge(key);
                let old = self.items.get(key.as_slice()).cloned();
                let base = match &old {
                    None => 0.0,
                    Some(e) => match parse_f64(e.value()) {
                        Some(v) => v,
                        None => return Response::Error(ERR_NOT_FLOAT.into()),
                    },
                };
                let new = base + f64::from_bits(*delta);
                if !new.is_finite() {
                    return Response::Error(ERR_NAN_OR_INF.into());
                }
                let text = format_f64(new);
                let (flags, expire_at) = old
                    .as_ref()
                    .map_or((0, None), |e| (e.flags(), e.expire_at()));
                self.store(key, text.as_bytes(), flags, index, expire_at);
                Response::Items(vec![Some(Item {
                    value: text.into_bytes(),
                    flags,
                    cas: index,
                })])
            }
            Op::SetBit {
                key,
                offset,
                bit,
                max_len,
            } => {
                self.purge(key);
                let byte = offset / 8;
                if byte >= *max_len {
                    return Response::Error(ERR_TOO_LARGE.into());
                }
                let old = self.items.get(key.as_slice()).cloned();
                let mut v = old.as_ref().map_or_else(Vec::new, |e| e.value().to_vec());
                let byte = byte as usize;
                if v.len() <= byte {
                    v.resize(byte + 1, 0);
                }
                let mask = 0x80u8 >> (offset % 8);
                let was = v[byte] & mask != 0;
                if *bit {
                    v[byte] |= mask;
                } else {
                    v[byte] &= !mask;
                }
                let (flags, expire_at) = old
                    .as_ref()
                    .map_or((0, None), |e| (e.flags(), e.expire_at()));
                self.store(key, &v, flags, index, expire_at);
                Response::Int(i64::from(was))
            }
            Op::ExpireIf { key, expiry, cond } => {
                self.purge(key);
                let Some(e) = self.items.get(key.as_slice()) else {
                    return Response::Int(0);
                };
                let current = e.expire_at();
                let new = self.resolve(expiry, current);
                // No expiry counts as infinite for GT and LT.
                let inf = |t: Option<u64>| t.unwrap_or(u64::MAX);
                let ok = match cond {
                    ExpireCond::Nx => current.is_none(),
                    ExpireCond::Xx => current.is_some(),
                    ExpireCond::Gt => inf(new) > inf(current),
                    ExpireCond::Lt => inf(new) < inf(current),
                    ExpireCond::XxLt => current.is_some() && inf(new) < inf(current),
                };
                if !ok {
                    return Response::Int(0);
                }
                self.retime(key, new);
                Response::Int(1)
            }
        }
    }

    /// Answers a read-only operation at time `max(now_ms, the store's clock)`, without changing
    /// the store (for reads served by ReadIndex or a lease rather than through the log).
    ///
    /// - `Get`: `Items`, one per key asked (`None` for absent ones).
    /// - `Exists`: `Int(number of keys asked that exist)`; a key named twice counts twice.
    /// - `Strlen`: `Int(length)`, 0 for an absent key.
    /// - `Ttl`: `Int(ms remaining)`, -1 for a key without expiry, -2 for an absent key.
    /// - `DbSize`: `Int(number of live keys)`.
    /// - `Keys`: `Keys(live keys matching the glob, in byte order)` (see [`crate::glob`]).
    /// - `Scan`: examines up to `count` keys (0 counts as 1) strictly after `cursor` in byte
    ///   order (from the first key if `cursor` is empty) and answers `ScanPage` with the live
    ///   ones that match `pattern` (fewer than `count`, possibly none) and `next`, the last key
    ///   examined, to pass as the next `cursor`, or empty when there are no more keys. Every key
    ///   that exists throughout a scan is returned exactly once; keys added or removed during
    ///   it may or may not be. (A page never ends at the empty key, so an empty `next` is
    ///   unambiguous.)
    ///
    /// A write operation gives `Error(ERR_NOT_READ_ONLY)`.
    pub fn read(&self, now_ms: u64, op: &Op) -> Response {
        self.answer(self.now_ms.max(now_ms), op)
    }

    /// memcached `incr`/`decr` of an existing key: `UInt(new)`, `NotFound`, or an error for
    /// a value that is not a decimal number.
    fn mc_incr(&mut self, index: u64, key: &[u8], delta: u64, decr: bool) -> Response {
        self.purge(key);
        let Some(e) = self.items.get(key).cloned() else {
            return Response::NotFound;
        };
        let Some(old) = parse_u64(e.value()) else {
            return Response::Error(ERR_NON_NUMERIC.into());
        };
        let new = if decr {
            old.saturating_sub(delta)
        } else {
            old.wrapping_add(delta)
        };
        let v = new.to_string();
        self.store(key, v.as_bytes(), e.flags(), index, e.expire_at());
        Response::UInt(new)
    }

    fn answer(&self, now: u64, op: &Op) -> Response {
        if let Some(wrong) = self.string_conflict(op, now) {
            return wrong;
        }
        match op {
            Op::Cmd { args, seed } if op.is_read_only() => {
                Response::Reply(types::read(self, now, args, *seed))
            }
            Op::Batch(ops) | Op::Multi(ops) => {
                Response::Batch(ops.iter().map(|op| self.answer(now, op)).collect())
            }
            Op::Get { keys } => Response::Items(
                keys.iter()
                    .map(|k| self.live(k, now).filter(|e| !e.is_typed()).map(Rec::item))
                    .collect(),
            ),
            Op::Exists { keys } => Response::Int(len_i64(
                keys.iter().filter(|k| self.live(k, now).is_some()).count(),
            )),
            Op::Strlen { key } => {
                Response::Int(self.live(key, now).map_or(0, |e| len_i64(e.value().len())))
            }
            Op::Ttl { key } => Response::Int(match self.live(key, now).map(Rec::expire_at) {
                None => -2,
                Some(None) => -1,
                Some(Some(t)) => i64::try_from(t - now).unwrap_or(i64::MAX),
            }),
            Op::DbSize => Response::Int(len_i64(self.live_count(now))),
            Op::Keys { pattern } => {
                let all = pattern.as_slice() == b"*";
                Response::Keys(
                    self.items
                        .iter()
                        .filter(|e| e.live(now) && (all || glob_match(pattern, e.key())))
                        .map(|e| e.key().to_vec())
                        .collect(),
                )
            }
            Op::Scan {
                cursor,
                pattern,
                count,
                kind,
            } => {
                let start = if cursor.is_empty() {
                    Bound::Unbounded
                } else {
                    Bound::Excluded(cursor.as_slice())
                };
                let mut iter = self
                    .items
                    .range::<_, [u8]>((start, Bound::Unbounded))
                    .peekable();
                let count = (*count).max(1) as usize;
                let mut examined = 0usize;
                let mut last: &[u8] = &[];
                let mut keys = Vec::new();
                for e in iter.by_ref() {
                    let k = e.key();
                    examined += 1;
                    last = k;
                    let wanted = match pattern {
                        Some(p) => glob_match(p, k),
                        None => true,
                    } && kind
                        .as_ref()
                        .is_none_or(|t| t.eq_ignore_ascii_case(self.rec_type(e).name().as_bytes()));
                    if wanted && e.live(now) {
                        keys.push(k.to_vec());
                    }
                    if examined >= count && !k.is_empty() {
                        break;
                    }
                }
                let next = if iter.peek().is_some() {
                    last.to_vec()
                } else {
                    Vec::new()
                };
                Response::ScanPage { next, keys }
            }
            Op::GetRange { key, start, end } => {
                let Some(e) = self.live(key, now) else {
                    return Response::Items(vec![Some(Item {
                        value: Vec::new(),
                        flags: 0,
                        cas: 0,
                    })]);
                };
                let mut item = e.item();
                item.value = byte_range(&item.value, *start, *end).to_vec();
                Response::Items(vec![Some(item)])
            }
            Op::GetBit { key, offset } => {
                let Some(e) = self.live(key, now) else {
                    return Response::Int(0);
                };
                let v = e.value();
                let byte = usize::try_from(offset / 8).unwrap_or(usize::MAX);
                let mask = 0x80u8 >> (offset % 8);
                Response::Int(i64::from(v.get(byte).is_some_and(|b| b & mask != 0)))
            }
            Op::RandomKey { seed } => {
                let (Some(min), Some(max)) = (self.items.get_min(), self.items.get_max()) else {
                    return Response::Items(vec![None]);
                };
                let probe = random_between(min.key(), max.key(), *seed);
                // The first live key from the probe on, wrapping around once; expired items
                // not yet swept are stepped over.
                let from = self
                    .items
                    .range::<_, [u8]>((Bound::Included(probe.as_slice()), Bound::Unbounded));
                let to = self
                    .items
                    .range::<_, [u8]>((Bound::Unbounded, Bound::Excluded(probe.as_slice())));
                let key = from
                    .chain(to)
                    .find(|e| e.live(now))
                    .map(|e| e.key().to_vec());
                Response::Items(vec![key.map(|k| Item {
                    value: k,
                    flags: 0,
                    cas: 0,
                })])
            }
            Op::Ready { keys, kind } => Response::Int(len_i64(
                keys.iter()
                    .filter(|k| {
                        self.type_of(k, now)
                            .is_some_and(|t| t.name().as_bytes() == kind.as_slice())
                    })
                    .count(),
            )),
            Op::ExpireTime { key } => {
                Response::Int(match self.live(key, now).map(Rec::expire_at) {
                    None => -2,
                    Some(None) => -1,
                    Some(Some(t)) => i64::try_from(t).unwrap_or(i64::MAX),
                })
            }
            _ => Response::Error(ERR_NOT_READ_ONLY.into()),
        }
    }

    /// A 64-bit digest of everything the store holds: every key, value, flags, CAS unique and
    /// expiry time (expired items not yet removed included: removal happens only in `apply`,
    /// so replicas at the same applied index hold the same items). Replicas that applied the
    /// same entries have the same digest; the clock and applied index are not included.
    ///
    /// O(1): an order-independent sum of per-item hashes kept on every change.
    pub fn digest(&self) -> u64 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.hash_sum.to_le_bytes());
        b[8..].copy_from_slice(&(self.items.len() as u64).to_le_bytes());
        xxh3_64(&b)
    }

    /// An immutable view of the whole state at this moment, in O(1): it shares the items with
    /// the store, which copies only what it changes afterwards. Another thread can write it
    /// ([`SnapshotView::write_to`]) while the store keeps applying.
    pub fn snapshot_view(&self) -> SnapshotView {
        let alive = Arc::new(());
        let mut graves = self.graves.0.lock().unwrap_or_else(|e| e.into_inner());
        // Graves of views gone and emptied go; a view's grave opens empty.
        while graves
            .front()
            .is_some_and(|g| !g.view_alive() && g.is_empty())
        {
            graves.pop_front();
        }
        graves.push_back(Grave::of(Arc::clone(&alive)));
        SnapshotView {
            _alive: alive,
            items: self.items.clone(),
            colls: self.colls.clone(),
            touched: self.touched.clone(),
            touched_floor: self.touched_floor,
            touched_bytes: self.touched_bytes,
            applied: self.applied,
            now_ms: self.now_ms,
            used: self.used,
        }
    }

    /// The whole state as bytes: [`KvStore::snapshot_view`] written to memory.
    pub fn snapshot(&self) -> Vec<u8> {
        let view = self.snapshot_view();
        let mut out = Vec::with_capacity(view.len_bound());
        view.write_to(&mut out).expect("writing to memory");
        assert!(
            out.len() <= view.len_bound(),
            "snapshot longer than its bound"
        );
        out
    }

    /// Rebuilds a store from [`KvStore::snapshot`]'s bytes. Checks everything (magic, version,
    /// checksum, key order, field values, no trailing bytes) and never panics on bad input.
    pub fn restore(data: &[u8]) -> Result<KvStore, DecodeError> {
        // Whole in memory (a mapped file): the checksum is checked first, in one pass over
        // the bytes (several GB/s), instead of a few bytes at a time as the items are read.
        if data.len() >= 5 + 8 && data[..4] == SNAPSHOT_MAGIC[..] && matches!(data[4], 2..=4) {
            let (body, trailer) = data.split_at(data.len() - 8);
            let sum = xxh3_64(body);
            if trailer != sum.to_le_bytes() {
                return Err(DecodeError("snapshot checksum mismatch"));
            }
            return KvStore::restore_with(data, Some(sum));
        }
        KvStore::restore_from(data)
    }

    /// Rebuilds a store from a snapshot streamed from `r` (a file, a socket) without holding
    /// its bytes: items are checked and inserted as they arrive, and the checksum at the end
    /// decides whether the result is used. A torn or corrupted snapshot is an error.
    pub fn restore_from<R: Read>(r: R) -> Result<KvStore, DecodeError> {
        KvStore::restore_with(r, None)
    }

    /// [`KvStore::restore_from`], the checksum already verified to be `checked` if given.
    fn restore_with<R: Read>(r: R, checked: Option<u64>) -> Result<KvStore, DecodeError> {
        let mut r = r;
        let mut head = [0u8; 5];
        r.read_exact(&mut head)
            .map_err(|_| DecodeError("snapshot truncated"))?;
        if head[..4] != SNAPSHOT_MAGIC[..] {
            return Err(DecodeError("not a snapshot"));
        }
        let hash = match (head[4], checked) {
            (2..=4, Some(sum)) => Checksum::Checked(sum),
            (1, None) => Checksum::Fnv(Fnv::new()),
            (2..=4, None) => Checksum::Xxh3(Box::default()),
            _ => return Err(DecodeError("unknown snapshot version")),
        };
        let version = head[4];
        let mut r = HashingReader { inner: r, hash };
        r.hash.write(&head);
        let applied = r.u64()?;
        let now_ms = r.u64()?;
        let count = r.u64()?;
        let mut s = KvStore {
            applied,
            now_ms,
            ..KvStore::default()
        };
        // Keys and values are read into two reused buffers (the previous key kept for the
        // order check): an item costs one allocation, its record.
        let (mut key, mut prev, mut value) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..count {
            r.bytes_into(&mut key)?;
            r.bytes_into(&mut value)?;
            let flags = r.u32()?;
            let cas = r.u64()?;
            let expire_at = match r.u8()? {
                0 => None,
                1 => Some(r.u64()?),
                _ => return Err(DecodeError("bad boolean")),
            };
            if cas > applied {
                return Err(DecodeError("item changed after the applied index"));
            }
            if expire_at == Some(0) {
                return Err(DecodeError("expiry time 0"));
            }
            if i > 0 && prev >= key {
                return Err(DecodeError("keys out of order"));
            }
            if key.len() >= TYPED as usize {
                return Err(DecodeError("key of 2 GiB or more"));
            }
            let ty = if version >= 3 { r.u8()? } else { 0 };
            if ty == 0 {
                // Keys come in order, each once: nothing is replaced.
                let replaced = s.insert(Rec::new(&key, &value, flags, cas, expire_at));
                debug_assert!(replaced.is_none());
            } else {
                if !value.is_empty() || flags != 0 {
                    return Err(DecodeError("a collection with a string value"));
                }
                let c = read_coll(&mut r, ty)?;
                s.put_typed(&key, c, cas, expire_at);
            }
            std::mem::swap(&mut prev, &mut key);
        }
        if version >= 4 {
            s.touched_floor = r.u64()?;
            if s.touched_floor > applied {
                return Err(DecodeError("a change after the applied index"));
            }
            let n = r.u64()?;
            if n > WATCH_MEMORY as u64 {
                return Err(DecodeError("too many touched keys"));
            }
            let mut prev: Option<Bytes> = None;
            for _ in 0..n {
                r.bytes_into(&mut key)?;
                let at = r.u64()?;
                if at > applied {
                    return Err(DecodeError("a change after the applied index"));
                }
                if prev.as_ref().is_some_and(|p| *p >= key) {
                    return Err(DecodeError("touched keys out of order"));
                }
                s.touched.insert(key.clone(), at);
                s.touched_at.insert((at, key.clone()));
                s.touched_bytes += touched_cost(&key);
                prev = Some(key.clone());
            }
        }
        let sum = r.hash.finish();
        let mut trailer = [0u8; 8];
        r.inner
            .read_exact(&mut trailer)
            .map_err(|_| DecodeError("snapshot truncated"))?;
        if trailer != sum.to_le_bytes() {
            return Err(DecodeError("snapshot checksum mismatch"));
        }
        let mut extra = [0u8; 1];
        match r.inner.read(&mut extra) {
            Ok(0) => Ok(s),
            Ok(_) => Err(DecodeError("trailing bytes")),
            Err(_) => Err(DecodeError("snapshot unreadable")),
        }
    }

    // ---- internals

    /// The live item under `key` at `now`.
    fn live(&self, key: &[u8], now: u64) -> Option<&Rec> {
        self.items.get(key).filter(|e| e.live(now))
    }

    fn live_count(&self, now: u64) -> usize {
        let expired = match now.checked_add(1) {
            Some(after) => self.expiries.range(..(after, Vec::new())).count(),
            None => self.expiries.len(),
        };
        self.items.len() - expired
    }

    /// The absolute expiry `e` gives at the store's clock, for an item whose expiry is
    /// `current`. A time ≤ now means "already expired".
    fn resolve(&self, e: &Expiry, current: Option<u64>) -> Option<u64> {
        match *e {
            Expiry::None => None,
            Expiry::Keep => current,
            Expiry::AfterMs(ms) if ms <= 0 => Some(self.now_ms),
            Expiry::AfterMs(ms) => Some(self.now_ms.saturating_add(ms as u64)),
            Expiry::AtMs(t) => Some(t),
        }
    }

    /// Removes up to `max` expired items, earliest expiry first; returns how many.
    fn sweep(&mut self, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.expiries.first() {
                Some((t, _)) if *t <= self.now_ms => {}
                _ => break,
            }
            let (_, key) = self.expiries.first().cloned().expect("just seen");
            self.remove(&key);
            n += 1;
        }
        n
    }

    /// `f` of the live item under `key`; an expired one is removed instead (Redis's lazy
    /// expiry). One lookup of the items where a purge, then a read, took two (a
    /// plain `SET` looked its key up three times, and under `redis-benchmark -t set` those
    /// lookups were 8 % of the whole machine's CPU).
    fn with_live<R>(&mut self, key: &[u8], f: impl FnOnce(&Rec) -> R) -> Option<R> {
        let now = self.now_ms;
        match self.items.get(key).map(|e| e.live(now).then(|| f(e))) {
            None => None,
            Some(Some(r)) => Some(r),
            Some(None) => {
                self.remove(key);
                None
            }
        }
    }

    /// Removes the item under `key` if it has expired.
    fn purge(&mut self, key: &[u8]) {
        self.with_live(key, |_| ());
    }

    /// Inserts `rec`, replacing the item under its key; keeps the expiry index, the digest
    /// sum and the accounted memory in step.
    /// Returns the collection the old item held, if it did: the caller knows whether the new
    /// one shares its nodes ([`KvStore::bury_coll`]).
    #[must_use]
    fn insert(&mut self, rec: Rec) -> Option<Coll> {
        let mut coll = None;
        if let Some(old) = self.items.insert(rec.clone()) {
            coll = self.forget(&old);
            self.bury(&old);
        }
        if let Some(t) = rec.expire_at() {
            self.expiries.insert((t, rec.key().to_vec()));
        }
        self.hash_sum = self.hash_sum.wrapping_add(rec.hash());
        self.used += rec.cost();
        coll
    }

    /// Removes the item under `key` (live or not) and returns it; its collection, if any, goes
    /// to [`KvStore::bury_coll`].
    fn remove(&mut self, key: &[u8]) -> Option<Rec> {
        let (old, coll) = self.take(key)?;
        if let Some(c) = coll {
            self.bury_coll(c);
        }
        Some(old)
    }

    /// Removes the item under `key` (live or not): it, and its collection if it held one.
    fn take(&mut self, key: &[u8]) -> Option<(Rec, Option<Coll>)> {
        let old = self.items.remove(key)?;
        let coll = self.forget(&old);
        self.touch(key);
        self.bury(&old);
        Some((old, coll))
    }

    /// `old` was just replaced or removed: while a live view shares it (the view's thread must
    /// not be the one to free it), a copy goes to the newest grave.
    fn bury(&mut self, old: &Rec) {
        // The caller's is the only copy the store had: more means a view holds it (or another
        // copy of the store, whose items are freed wherever it is dropped).
        if Arc::strong_count(&old.0) == 1 {
            return;
        }
        self.reclaim(RECLAIM_PER_BURIAL);
        let graves = self.graves.0.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = graves.back_mut().filter(|g| g.view_alive()) {
            g.items.push(old.clone());
        }
    }

    /// Frees at most `budget` items that snapshot views kept alive and no longer do (oldest
    /// view first); returns how many it freed. The store calls it as it buries items; an
    /// owner with a loop calls it between batches too, so the graves empty once writes stop.
    pub fn reclaim(&mut self, budget: usize) -> usize {
        let graves = self.graves.0.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut freed = 0;
        while let Some(g) = graves.front_mut() {
            if g.view_alive() {
                break;
            }
            let n = (budget - freed).min(g.items.len());
            g.items.truncate(g.items.len() - n);
            freed += n;
            while let Some(c) = g.colls.last_mut() {
                freed += c.shed(budget - freed);
                if !c.is_empty() {
                    break;
                }
                g.colls.pop();
            }
            while let Some(f) = g.flushed.last_mut() {
                freed += f.drain(budget - freed);
                if !f.is_empty() {
                    break;
                }
                g.flushed.pop();
            }
            if !g.is_empty() {
                break;
            }
            graves.pop_front();
        }
        freed
    }

    /// Pieces the graves hold (kept alive by snapshot views, or waiting for
    /// [`KvStore::reclaim`]): items, elements of collections, and the items, elements and
    /// expiry entries of states a `FLUSHALL` let go of. O(collections held): for tests and
    /// diagnostics, not for the loop.
    pub fn buried(&self) -> usize {
        let graves = self.graves.0.lock().unwrap_or_else(|e| e.into_inner());
        graves.iter().map(Grave::len).sum()
    }

    /// The whole state goes (`FLUSHALL`): to the newest grave while a view shares it, else
    /// to a grave of its own, emptied by [`KvStore::reclaim`] like the rest.
    fn flush_to_grave(&mut self) {
        let flushed = Flushed {
            items: std::mem::take(&mut self.items),
            colls: std::mem::take(&mut self.colls),
            expiries: std::mem::take(&mut self.expiries),
            open: None,
        };
        if flushed.is_empty() {
            return;
        }
        let graves = self.graves.0.get_mut().unwrap_or_else(|e| e.into_inner());
        match graves.back_mut().filter(|g| g.view_alive()) {
            Some(g) => g.flushed.push(flushed),
            None => graves.push_back(Grave {
                flushed: vec![flushed],
                ..Grave::of(Arc::new(()))
            }),
        }
        // Some of it goes now, as a write's burial frees some.
        self.reclaim(RECLAIM_PER_BURIAL);
    }

    /// Remembers that `key` changed at the index being applied, in a way its record does
    /// not show (for `WATCH`).
    fn touch(&mut self, key: &[u8]) {
        let index = self.applied;
        match self.touched.insert(key.to_vec(), index) {
            Some(old) => {
                self.touched_at.remove(&(old, key.to_vec()));
            }
            None => self.touched_bytes += touched_cost(key),
        }
        self.touched_at.insert((index, key.to_vec()));
        while self.touched.len() > WATCH_MEMORY {
            let (at, k) = self.touched_at.remove_min().expect("as many as touched");
            self.touched.remove(&k);
            self.touched_bytes -= touched_cost(&k);
            self.touched_floor = self.touched_floor.max(at);
        }
    }

    /// Whether `key` may have changed after log index `since`: written (its record's CAS
    /// unique), deleted, its expiry changed, removed when expired, or forgotten (every key
    /// counts as changed at `touched_floor`). Never false for a key that changed.
    pub fn changed_since(&self, key: &[u8], since: u64) -> bool {
        self.touched_floor > since
            || self.touched.get(key).is_some_and(|&t| t > since)
            || self.items.get(key).is_some_and(|e| e.cas() > since)
    }

    /// Takes a removed or replaced item out of the expiry index, the sum and the memory; the
    /// collection it held, if any.
    fn forget(&mut self, old: &Rec) -> Option<Coll> {
        if let Some(t) = old.expire_at() {
            let removed = self.expiries.remove(&(t, old.key().to_vec()));
            assert!(
                removed,
                "an item with an expiry missing from the expiry index"
            );
        }
        self.hash_sum = self.hash_sum.wrapping_sub(old.hash());
        self.used = self
            .used
            .checked_sub(old.cost())
            .expect("accounted memory went below zero");
        if old.is_typed() {
            let c = self
                .colls
                .remove(old.key())
                .expect("a typed item's collection");
            self.hash_sum = self.hash_sum.wrapping_sub(c.contribution(old.key()));
            self.used = self
                .used
                .checked_sub(c.cost())
                .expect("accounted memory went below zero");
            return Some(c);
        }
        None
    }

    /// Collection `c` was just removed, and nothing else holds it (but a snapshot view may):
    /// while a view lives (it may share all of `c`'s nodes, and its thread must not be the one
    /// to free them), or when `c` is large, it goes to a grave and is freed a piece at a time;
    /// a small one goes now. Not for a collection whose nodes a stored one shares (a changed
    /// copy of it, or the same one under a new key): freeing it a piece at a time would copy
    /// those nodes, and dropping it costs only the nodes it alone holds.
    fn bury_coll(&mut self, c: Coll) {
        let graves = self.graves.0.get_mut().unwrap_or_else(|e| e.into_inner());
        match graves.back_mut().filter(|g| g.view_alive()) {
            Some(g) => g.colls.push(c),
            None if c.len() > SHED_AT => graves.push_back(Grave {
                colls: vec![c],
                ..Grave::of(Arc::new(()))
            }),
            None => return,
        }
        self.reclaim(RECLAIM_PER_BURIAL);
    }

    /// Stores an item under `key`, replacing any; an already expired one removes the key.
    fn store(&mut self, key: &[u8], value: &[u8], flags: u32, cas: u64, expire_at: Option<u64>) {
        if expire_at.is_some_and(|t| t <= self.now_ms) {
            self.remove(key);
            return;
        }
        if let Some(c) = self.insert(Rec::new(key, value, flags, cas, expire_at)) {
            self.bury_coll(c);
        }
    }

    /// Sets the expiry of the existing item under `key`; an expiry ≤ now removes it.
    fn retime(&mut self, key: &[u8], expire_at: Option<u64>) {
        let Some(e) = self.items.get(key).cloned() else {
            return;
        };
        if e.expire_at() == expire_at {
            return;
        }
        self.touch(key);
        if e.is_typed() {
            if expire_at.is_some_and(|t| t <= self.now_ms) {
                self.remove(key);
                return;
            }
            // The same collection under a new record (sharing it: dropping the old copy is O(1)).
            let c = self
                .colls
                .get(key)
                .cloned()
                .expect("a typed item's collection");
            self.put_typed(key, c, e.cas(), expire_at);
            return;
        }
        self.store(key, e.value(), e.flags(), e.cas(), expire_at);
    }

    /// Stores collection `c` under `key` with its record, replacing whatever the key held.
    fn put_typed(&mut self, key: &[u8], c: Coll, cas: u64, expire_at: Option<u64>) {
        assert!(!c.is_empty(), "an empty collection stored");
        // Inserting the record forgets the key's old item, its collection included: `c` is
        // often a changed copy of it, sharing most of its nodes, so it is dropped here, where
        // that costs only what `c` does not share (one of another key's, by `COPY` or
        // `RENAME` onto this one, goes whole).
        drop(self.insert(Rec::typed(key, cas, expire_at)));
        self.hash_sum = self.hash_sum.wrapping_add(c.contribution(key));
        self.used += c.cost();
        let old = self.colls.insert(key.to_vec(), c);
        assert!(old.is_none(), "a collection left behind by its record");
    }

    // ---- for the collection commands (crate::types)

    /// The type of the live key `key` at `now`.
    pub(crate) fn type_of(&self, key: &[u8], now: u64) -> Option<Type> {
        self.live(key, now).map(|e| self.rec_type(e))
    }

    fn rec_type(&self, e: &Rec) -> Type {
        if e.is_typed() {
            self.colls
                .get(e.key())
                .expect("a typed item's collection")
                .ty()
        } else {
            Type::String
        }
    }

    /// The bytes accounted for the live key `key` (its record, and its collection's elements).
    pub(crate) fn key_cost(&self, key: &[u8], now: u64) -> Option<u64> {
        let e = self.live(key, now)?;
        Some(
            e.cost()
                + self
                    .colls
                    .get(key)
                    .filter(|_| e.is_typed())
                    .map_or(0, Coll::cost),
        )
    }

    /// The collection under `key`, live or not.
    pub(crate) fn coll(&self, key: &[u8]) -> Option<&Coll> {
        self.colls.get(key)
    }

    /// The string value under the live key `key`, if it holds one.
    pub(crate) fn string_value(&self, key: &[u8], now: u64) -> Option<&[u8]> {
        self.live(key, now)
            .filter(|e| !e.is_typed())
            .map(Rec::value)
    }

    /// Removes the key if it has expired (a write about to look at it).
    pub(crate) fn purge_key(&mut self, key: &[u8]) {
        self.purge(key);
    }

    /// Stores `c` under `key` (an empty one deletes the key): keeping the key's expiry
    /// (`keep_expiry`, a changed collection) or with none (a new value).
    pub(crate) fn put_coll(&mut self, key: &[u8], c: Coll, keep_expiry: bool, index: u64) {
        self.purge(key);
        if c.is_empty() {
            self.remove(key);
            return;
        }
        let expire_at = if keep_expiry {
            self.items.get(key).and_then(Rec::expire_at)
        } else {
            None
        };
        self.put_typed(key, c, index, expire_at);
    }

    /// Stores a string under `key`, replacing whatever it held: with the old string's flags
    /// and expiry when `keep` (a changed string), else flags 0 and no expiry (a new value).
    pub(crate) fn put_string(&mut self, key: &[u8], value: &[u8], keep: bool, index: u64) {
        let (flags, expire_at) = self
            .with_live(key, |e| (e.is_typed(), e.flags(), e.expire_at()))
            .filter(|&(typed, ..)| keep && !typed)
            .map_or((0, None), |(_, f, t)| (f, t));
        self.store(key, value, flags, index, expire_at);
    }

    /// Deletes a key of any type; whether it was live.
    pub(crate) fn delete_key(&mut self, key: &[u8]) -> bool {
        let now = self.now_ms;
        self.remove(key).is_some_and(|e| e.live(now))
    }

    /// `WRONGTYPE` for a string operation on a key holding a collection.
    fn string_conflict(&self, op: &Op, now: u64) -> Option<Response> {
        let typed = |k: &[u8]| self.live(k, now).is_some_and(Rec::is_typed);
        let hit = match op {
            Op::Get { keys } => keys.len() == 1 && typed(&keys[0]),
            Op::Strlen { key }
            | Op::GetDel { key }
            | Op::GetEx { key, .. }
            | Op::GetRange { key, .. }
            | Op::GetBit { key, .. }
            | Op::SetBit { key, .. }
            | Op::SetRange { key, .. }
            | Op::IncrBy { key, .. }
            | Op::IncrByFloat { key, .. }
            | Op::McIncr { key, .. }
            | Op::McIncrOr { key, .. }
            | Op::Append { key, .. }
            | Op::Prepend { key, .. }
            | Op::Cas { key, .. } => typed(key),
            Op::Set {
                key, get_old: true, ..
            } => typed(key),
            Op::Touch {
                keys, get: true, ..
            } => keys.iter().any(|k| typed(k)),
            _ => false,
        };
        hit.then(|| Response::Error(WRONGTYPE.into()))
    }

    /// The digest sum and accounted memory computed from scratch (a check of the running
    /// ones; O(items)).
    fn recount(&self) -> (u64, u64) {
        self.items.iter().fold((0u64, 0u64), |(h, m), e| {
            let (mut h, mut m) = (h.wrapping_add(e.hash()), m + e.cost());
            if let Some(c) = self.colls.get(e.key()).filter(|_| e.is_typed()) {
                c.check();
                h = h.wrapping_add(c.contribution(e.key()));
                m += c.cost();
            }
            (h, m)
        })
    }

    /// Checks the running digest sum, accounted memory and expiry index against the items
    /// (O(items); for tests and debugging).
    pub fn check_invariants(&self) {
        let (h, m) = self.recount();
        assert_eq!(h, self.hash_sum, "digest sum");
        assert_eq!(m, self.used, "accounted memory");
        let with_expiry = self
            .items
            .iter()
            .filter(|e| e.expire_at().is_some())
            .count();
        assert_eq!(with_expiry, self.expiries.len(), "expiry index size");
        let typed = self.items.iter().filter(|e| e.is_typed()).count();
        assert_eq!(typed, self.colls.len(), "one collection per typed item");
        assert!(self.touched.len() <= WATCH_MEMORY, "touched keys bounded");
        assert_eq!(
            self.touched.len(),
            self.touched_at.len(),
            "touched index size"
        );
        for (at, k) in &self.touched_at {
            assert_eq!(self.touched.get(k), Some(at), "touched index");
            assert!(*at <= self.applied, "touched after the applied index");
        }
        let bytes: u64 = self.touched.keys().map(|k| touched_cost(k)).sum();
        assert_eq!(bytes, self.touched_bytes, "touched bytes");
        for (k, c) in &self.colls {
            assert!(!c.is_empty(), "an empty collection kept");
            assert!(
                self.items.get(k.as_slice()).is_some_and(Rec::is_typed),
                "a collection without its typed item"
            );
        }
        for (t, k) in &self.expiries {
            let e = self
                .items
                .get(k.as_slice())
                .expect("expiry of a missing item");
            assert_eq!(e.expire_at(), Some(*t), "expiry index time");
        }
    }
}

/// An immutable view of a store's state ([`KvStore::snapshot_view`]), to be written by
/// another thread.
#[derive(Clone)]
pub struct SnapshotView {
    /// Its store's grave for it stays shut while this lives ([`Graves`]).
    _alive: Arc<()>,
    items: OrdSet<Rec>,
    colls: OrdMap<Bytes, Coll>,
    touched: OrdMap<Bytes, u64>,
    touched_floor: u64,
    touched_bytes: u64,
    applied: u64,
    now_ms: u64,
    used: u64,
}

impl SnapshotView {
    /// At least the length [`SnapshotView::write_to`] writes, in O(1): a buffer this large
    /// takes the snapshot without growing (each growth copied all written so far). An item
    /// takes fewer bytes in a snapshot than its [`ITEM_OVERHEAD`] accounts for.
    pub fn len_bound(&self) -> usize {
        (self.used + 64 + 16 + self.touched_bytes) as usize
    }

    /// The log index the view was taken at.
    pub fn applied_index(&self) -> u64 {
        self.applied
    }

    /// Number of items in the view.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the view holds no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Streams the snapshot to `w` and returns the bytes written; memory use is one item.
    ///
    /// Format (little-endian): `WKVS`, version byte 4, `u64` applied index, `u64` clock, `u64`
    /// item count, then per item in key order: `u32` key length and key, `u32` value length and
    /// value, `u32` flags, `u64` CAS unique, expiry byte (0 none, 1 followed by a `u64` time),
    /// type byte ([`Type`]: 0 string; a collection's value is empty and its elements follow:
    /// `u64` count, then per element a hash's field and value, a list's or set's element, a
    /// sorted set's member and `u64` score bits, each byte string as `u32` length and bytes, in
    /// the collection's order); then for `WATCH` the `u64` floor, a `u64` count and per touched
    /// key in key order its `u32` length and bytes and `u64` index; last, a `u64` xxh3-64 hash
    /// of everything before it. Version 3 has no `WATCH` part, version 2 no type byte either;
    /// version 1 ends with FNV-1a.
    pub fn write_to<W: Write>(&self, w: W) -> std::io::Result<u64> {
        let mut w = HashingWriter {
            inner: w,
            hash: Checksum::Xxh3(Box::default()),
            written: 0,
        };
        let mut head = Vec::with_capacity(29);
        head.extend_from_slice(SNAPSHOT_MAGIC);
        head.push(SNAPSHOT_VERSION);
        put_u64(&mut head, self.applied);
        put_u64(&mut head, self.now_ms);
        put_u64(&mut head, self.items.len() as u64);
        w.write(&head)?;
        // Items are gathered in a buffer of about 64 KiB per write (a large value goes alone).
        let mut buf = Vec::with_capacity(64 << 10);
        for e in &self.items {
            let vlen = u32::try_from(e.value().len()).expect("value of 4 GiB or more");
            put_u32(&mut buf, e.key_len() as u32);
            buf.extend_from_slice(e.key());
            put_u32(&mut buf, vlen);
            if e.value().len() > 16 << 10 {
                w.write(&buf)?;
                buf.clear();
                w.write(e.value())?;
            } else {
                buf.extend_from_slice(e.value());
            }
            put_u32(&mut buf, e.flags());
            put_u64(&mut buf, e.cas());
            match e.expire_at() {
                None => buf.push(0),
                Some(t) => {
                    buf.push(1);
                    put_u64(&mut buf, t);
                }
            }
            if e.is_typed() {
                let c = self.colls.get(e.key()).expect("a typed item's collection");
                write_coll(&mut w, &mut buf, c)?;
            } else {
                buf.push(Type::String.tag());
            }
            if buf.len() >= 64 << 10 {
                w.write(&buf)?;
                buf.clear();
            }
        }
        put_u64(&mut buf, self.touched_floor);
        put_u64(&mut buf, self.touched.len() as u64);
        for (k, at) in &self.touched {
            put_u32(&mut buf, k.len() as u32);
            buf.extend_from_slice(k);
            put_u64(&mut buf, *at);
            if buf.len() >= 64 << 10 {
                w.write(&buf)?;
                buf.clear();
            }
        }
        w.write(&buf)?;
        let sum = w.hash.finish();
        w.inner.write_all(&sum.to_le_bytes())?;
        Ok(w.written + 8)
    }
}

/// Writes a collection's type byte and elements into `buf`, flushing it to `w` every 64 KiB.
fn write_coll<W: Write>(
    w: &mut HashingWriter<W>,
    buf: &mut Vec<u8>,
    c: &Coll,
) -> std::io::Result<()> {
    buf.push(c.ty().tag());
    put_u64(buf, c.len() as u64);
    let mut flush = |buf: &mut Vec<u8>| -> std::io::Result<()> {
        if buf.len() >= 64 << 10 {
            w.write(buf)?;
            buf.clear();
        }
        Ok(())
    };
    let put = |buf: &mut Vec<u8>, b: &[u8]| {
        put_u32(
            buf,
            u32::try_from(b.len()).expect("an element of 4 GiB or more"),
        );
        buf.extend_from_slice(b);
    };
    match c.ty() {
        Type::Hash => {
            for (f, v) in c.as_hash() {
                put(buf, f);
                put(buf, v);
                flush(buf)?;
            }
        }
        Type::List => {
            for e in c.as_list() {
                put(buf, e);
                flush(buf)?;
            }
        }
        Type::Set => {
            for m in c.as_set() {
                put(buf, m);
                flush(buf)?;
            }
        }
        Type::ZSet => {
            for (m, score) in c.as_zset().iter() {
                put(buf, m);
                put_u64(buf, score.to_bits());
                flush(buf)?;
            }
        }
        Type::String => unreachable!("a string is not a collection"),
    }
    Ok(())
}

/// Reads a collection of type tag `ty` (not 0) written by [`write_coll`], checking it.
fn read_coll<R: Read>(r: &mut HashingReader<R>, ty: u8) -> Result<Coll, DecodeError> {
    let ty = match ty {
        1 => Type::Hash,
        2 => Type::List,
        3 => Type::Set,
        4 => Type::ZSet,
        _ => return Err(DecodeError("unknown item type")),
    };
    let n = r.u64()?;
    if n == 0 {
        return Err(DecodeError("an empty collection"));
    }
    let mut c = Coll::empty(ty);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..n {
        r.bytes_into(&mut a)?;
        let fresh = match ty {
            Type::Hash => {
                r.bytes_into(&mut b)?;
                c.hset(a.clone(), b.clone()).is_none()
            }
            Type::List => {
                c.rpush(a.clone());
                true
            }
            Type::Set => c.sadd(a.clone()),
            Type::ZSet => {
                let score = f64::from_bits(r.u64()?);
                if score.is_nan() {
                    return Err(DecodeError("a NaN score"));
                }
                c.zadd(a.clone(), score).is_none()
            }
            Type::String => unreachable!(),
        };
        if !fresh {
            return Err(DecodeError("an element twice in a collection"));
        }
    }
    Ok(c)
}

/// Writes through to `inner`, hashing what passes.
struct HashingWriter<W> {
    inner: W,
    hash: Checksum,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hash.write(b);
        self.written += b.len() as u64;
        self.inner.write_all(b)
    }
}

/// Reads from `inner`, hashing what passes; every shortfall is a [`DecodeError`].
struct HashingReader<R> {
    inner: R,
    hash: Checksum,
}

impl<R: Read> HashingReader<R> {
    fn fill(&mut self, b: &mut [u8]) -> Result<(), DecodeError> {
        self.inner
            .read_exact(b)
            .map_err(|_| DecodeError("snapshot truncated"))?;
        self.hash.write(b);
        Ok(())
    }

    /// Reads `n` bytes into `out` (cleared first).
    fn take_into(&mut self, n: usize, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        // Grow in bounded steps: a corrupted length must not allocate gigabytes up front.
        out.clear();
        while out.len() < n {
            let from = out.len();
            let to = n.min(from.max(1 << 20) * 2);
            out.resize(to, 0);
            self.fill(&mut out[from..to])?;
        }
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn bytes_into(&mut self, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        let n = self.u32()? as usize;
        self.take_into(n, out)
    }
}

/// Bytes a touched key takes in a snapshot.
fn touched_cost(key: &[u8]) -> u64 {
    key.len() as u64 + 12
}

/// A length as a result number.
/// Whether `old + add` bytes exceed `max_len`.
fn too_long(old: usize, add: usize, max_len: u64) -> bool {
    (old as u64).saturating_add(add as u64) > max_len
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A signed 64-bit decimal in Redis's strict syntax (`string2ll`): an optional `-`, no leading
/// zeros (except `0` itself), no `+`, no spaces, at most 20 bytes.
pub(crate) fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, b),
    };
    if !matches!(digits.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > 1 << 63 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// An unsigned 64-bit decimal as memcached's `incr`/`decr` take it: 1 to 20 ASCII digits
/// (leading zeros allowed) that fit in a `u64`.
fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// A snapshot's checksum, by format version.
enum Checksum {
    Fnv(Fnv),
    Xxh3(Box<Xxh3>),
    /// Verified before reading (the snapshot was whole in memory): this sum.
    Checked(u64),
}

impl Checksum {
    fn write(&mut self, b: &[u8]) {
        match self {
            Checksum::Fnv(h) => h.write(b),
            Checksum::Xxh3(h) => h.update(b),
            Checksum::Checked(_) => {}
        }
    }

    fn finish(&self) -> u64 {
        match self {
            Checksum::Fnv(h) => h.0,
            Checksum::Xxh3(h) => h.digest(),
            Checksum::Checked(sum) => *sum,
        }
    }
}

/// 64-bit FNV-1a.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_integer_syntax() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-42"), Some(-42));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"000000000000000000001",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn memcached_integer_syntax() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"007"), Some(7));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"18446744073709551616",
            b"000000000000000000001",
        ] {
            assert_eq!(parse_u64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn expiry_index_follows_items() {
        let mut s = KvStore::new();
        let set = |key: &str, expiry| Op::Set {
            key: key.into(),
            value: b"v".to_vec(),
            flags: 0,
            expiry,
            cond: Cond::Always,
            get_old: false,
        };
        s.apply(1, 1000, &set("a", Expiry::AfterMs(10)));
        s.apply(2, 1000, &set("b", Expiry::AfterMs(20)));
        s.apply(3, 1000, &set("a", Expiry::AfterMs(30)));
        assert_eq!(s.expiries.len(), 2);
        s.apply(4, 1000, &set("b", Expiry::None));
        assert_eq!(s.expiries.len(), 1);
        // A read through the log removes nothing.
        s.apply(5, 1030, &Op::DbSize);
        assert_eq!(s.expiries.len(), 1);
        // The sweep at the next write removes "a", expired, without anyone touching it.
        s.apply(6, 1030, &set("b", Expiry::None));
        assert!(s.expiries.is_empty());
        assert_eq!(s.items.len(), 1);
        s.check_invariants();
    }
}
