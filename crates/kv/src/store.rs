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
//! 64-bit (1 to 20 ASCII digits, leading zeros allowed). Work per operation: `Keys` and `digest`
//! are O(keys), `DbSize` and `len` are O(expired keys not yet removed), `Scan` is O(`count`
//! keys) plus a logarithmic seek, everything else O(log keys) per key named plus copying values.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::codec::{put_bytes, put_u32, put_u64, DecodeError, Reader};
use crate::glob::glob_match;
use crate::ops::{Bytes, Cond, Expiry, Item, Op, Response};

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

/// How many expired items each [`KvStore::apply`] of a write removes at most, earliest expiry
/// first (besides those removed because the operation writes their key).
pub const SWEEP_PER_APPLY: usize = 16;

/// The first bytes of a snapshot.
const SNAPSHOT_MAGIC: &[u8; 4] = b"WKVS";
/// The snapshot format's version.
const SNAPSHOT_VERSION: u8 = 1;
/// Smallest encoding of one item in a snapshot: key and value lengths, flags, CAS, expiry tag.
const SNAPSHOT_MIN_ITEM: usize = 4 + 4 + 4 + 8 + 1;

impl Op {
    /// Whether the operation only reads (`Get`, `Exists`, `Strlen`, `Ttl`, `DbSize`, `Keys`,
    /// `Scan`): it may be answered by [`KvStore::read`] after a linearizable read (ReadIndex or
    /// lease) instead of going through the log.
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Op::Get { .. }
                | Op::Exists { .. }
                | Op::Strlen { .. }
                | Op::Ttl { .. }
                | Op::DbSize
                | Op::Keys { .. }
                | Op::Scan { .. }
        )
    }
}

/// One stored item.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    value: Bytes,
    flags: u32,
    cas: u64,
    /// Absolute expiry, ms since the Unix epoch; expired when ≤ now.
    expire_at: Option<u64>,
}

impl Entry {
    fn live(&self, now: u64) -> bool {
        match self.expire_at {
            None => true,
            Some(t) => now < t,
        }
    }

    fn item(&self) -> Item {
        Item {
            value: self.value.clone(),
            flags: self.flags,
            cas: self.cas,
        }
    }
}

/// The key-value store: items in key order, the log index of the last applied entry and the
/// store's clock (see the [module](self) documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvStore {
    items: BTreeMap<Bytes, Entry>,
    /// (expiry time, key) of every item with an expiry.
    expiries: BTreeSet<(u64, Bytes)>,
    now_ms: u64,
    applied: u64,
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

    /// The number of live (not expired) keys at the store's clock.
    pub fn len(&self) -> usize {
        self.live_count(self.now_ms)
    }

    /// Whether no key is live at the store's clock.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
        match op {
            Op::Get { .. }
            | Op::Exists { .. }
            | Op::Strlen { .. }
            | Op::Ttl { .. }
            | Op::DbSize
            | Op::Keys { .. }
            | Op::Scan { .. } => self.answer(self.now_ms, op),
            Op::Set {
                key,
                value,
                flags,
                expiry,
                cond,
                get_old,
            } => {
                self.purge(key);
                let old = self.items.get(key.as_slice());
                let exists = old.is_some();
                let old_item = if *get_old { old.map(Entry::item) } else { None };
                let current_expiry = old.and_then(|e| e.expire_at);
                let store = match cond {
                    Cond::Always => true,
                    Cond::IfAbsent => !exists,
                    Cond::IfPresent => exists,
                };
                if store {
                    let expire_at = self.resolve(expiry, current_expiry);
                    self.store(
                        key,
                        Entry {
                            value: value.clone(),
                            flags: *flags,
                            cas: index,
                            expire_at,
                        },
                    );
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
                    self.store(
                        key,
                        Entry {
                            value: value.clone(),
                            flags: 0,
                            cas: index,
                            expire_at: None,
                        },
                    );
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
                if old.cas != *unique {
                    return Response::CasMismatch;
                }
                let expire_at = self.resolve(expiry, old.expire_at);
                self.store(
                    key,
                    Entry {
                        value: value.clone(),
                        flags: *flags,
                        cas: index,
                        expire_at,
                    },
                );
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
                match self.items.get_mut(key.as_slice()) {
                    None => {
                        self.store(
                            key,
                            Entry {
                                value: delta.to_string().into_bytes(),
                                flags: 0,
                                cas: index,
                                expire_at: None,
                            },
                        );
                        Response::Int(*delta)
                    }
                    Some(e) => {
                        let Some(old) = parse_i64(&e.value) else {
                            return Response::Error(ERR_NOT_INTEGER.into());
                        };
                        let Some(new) = old.checked_add(*delta) else {
                            return Response::Error(ERR_OVERFLOW.into());
                        };
                        e.value = new.to_string().into_bytes();
                        e.cas = index;
                        Response::Int(new)
                    }
                }
            }
            Op::McIncr { key, delta, decr } => {
                self.purge(key);
                let Some(e) = self.items.get_mut(key.as_slice()) else {
                    return Response::NotFound;
                };
                let Some(old) = parse_u64(&e.value) else {
                    return Response::Error(ERR_NON_NUMERIC.into());
                };
                let new = if *decr {
                    old.saturating_sub(*delta)
                } else {
                    old.wrapping_add(*delta)
                };
                e.value = new.to_string().into_bytes();
                e.cas = index;
                Response::UInt(new)
            }
            Op::Append {
                key,
                value,
                must_exist,
                max_len,
            } => {
                self.purge(key);
                match self.items.get_mut(key.as_slice()) {
                    Some(e) => {
                        if too_long(e.value.len(), value.len(), *max_len) {
                            return Response::Error(ERR_TOO_LARGE.into());
                        }
                        e.value.extend_from_slice(value);
                        e.cas = index;
                        Response::Int(len_i64(e.value.len()))
                    }
                    None if *must_exist => Response::NotStored,
                    None if too_long(0, value.len(), *max_len) => {
                        Response::Error(ERR_TOO_LARGE.into())
                    }
                    None => {
                        self.store(
                            key,
                            Entry {
                                value: value.clone(),
                                flags: 0,
                                cas: index,
                                expire_at: None,
                            },
                        );
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
                let Some(e) = self.items.get_mut(key.as_slice()) else {
                    return Response::NotStored;
                };
                if too_long(e.value.len(), value.len(), *max_len) {
                    return Response::Error(ERR_TOO_LARGE.into());
                }
                let mut v = Vec::with_capacity(value.len() + e.value.len());
                v.extend_from_slice(value);
                v.extend_from_slice(&e.value);
                e.value = v;
                e.cas = index;
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
                    let current = e.expire_at;
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
                self.items.clear();
                self.expiries.clear();
                Response::Ok
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

    fn answer(&self, now: u64, op: &Op) -> Response {
        match op {
            Op::Get { keys } => Response::Items(
                keys.iter()
                    .map(|k| self.live(k, now).map(Entry::item))
                    .collect(),
            ),
            Op::Exists { keys } => Response::Int(len_i64(
                keys.iter().filter(|k| self.live(k, now).is_some()).count(),
            )),
            Op::Strlen { key } => {
                Response::Int(self.live(key, now).map_or(0, |e| len_i64(e.value.len())))
            }
            Op::Ttl { key } => Response::Int(match self.live(key, now) {
                None => -2,
                Some(Entry {
                    expire_at: None, ..
                }) => -1,
                Some(Entry {
                    expire_at: Some(t), ..
                }) => i64::try_from(t - now).unwrap_or(i64::MAX),
            }),
            Op::DbSize => Response::Int(len_i64(self.live_count(now))),
            Op::Keys { pattern } => {
                let all = pattern.as_slice() == b"*";
                Response::Keys(
                    self.items
                        .iter()
                        .filter(|(k, e)| e.live(now) && (all || glob_match(pattern, k)))
                        .map(|(k, _)| k.clone())
                        .collect(),
                )
            }
            Op::Scan {
                cursor,
                pattern,
                count,
            } => {
                let start = if cursor.is_empty() {
                    Bound::Unbounded
                } else {
                    Bound::Excluded(cursor.as_slice())
                };
                let mut iter = self
                    .items
                    .range::<[u8], _>((start, Bound::Unbounded))
                    .peekable();
                let count = (*count).max(1) as usize;
                let mut examined = 0usize;
                let mut last: &[u8] = &[];
                let mut keys = Vec::new();
                for (k, e) in iter.by_ref() {
                    examined += 1;
                    last = k;
                    let wanted = match pattern {
                        Some(p) => glob_match(p, k),
                        None => true,
                    };
                    if wanted && e.live(now) {
                        keys.push(k.clone());
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
            _ => Response::Error(ERR_NOT_READ_ONLY.into()),
        }
    }

    /// A 64-bit FNV-1a hash of the live contents at the store's clock, in key order: every key,
    /// value, flags, CAS unique and expiry time. Replicas that applied the same entries have the
    /// same digest; the clock and applied index themselves are not included.
    pub fn digest(&self) -> u64 {
        let mut h = Fnv::new();
        let mut n = 0u64;
        for (k, e) in self.items.iter().filter(|(_, e)| e.live(self.now_ms)) {
            n += 1;
            h.write(&(k.len() as u64).to_le_bytes());
            h.write(k);
            h.write(&(e.value.len() as u64).to_le_bytes());
            h.write(&e.value);
            h.write(&e.flags.to_le_bytes());
            h.write(&e.cas.to_le_bytes());
            match e.expire_at {
                None => h.write(&[0]),
                Some(t) => {
                    h.write(&[1]);
                    h.write(&t.to_le_bytes());
                }
            }
        }
        h.write(&n.to_le_bytes());
        h.0
    }

    /// The whole state as bytes: the applied index, the clock and every item (expired ones not
    /// yet removed included), for [`KvStore::restore`].
    ///
    /// Format (little-endian): `WKVS`, version byte 1, `u64` applied index, `u64` clock, `u64`
    /// item count, then per item in key order: `u32` key length and key, `u32` value length and
    /// value, `u32` flags, `u64` CAS unique, expiry byte (0 none, 1 followed by a `u64` time);
    /// last, a `u64` FNV-1a hash of everything before it.
    ///
    /// # Panics
    ///
    /// If a key or value is 4 GiB or longer.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.push(SNAPSHOT_VERSION);
        put_u64(&mut out, self.applied);
        put_u64(&mut out, self.now_ms);
        put_u64(&mut out, self.items.len() as u64);
        for (k, e) in &self.items {
            put_bytes(&mut out, k);
            put_bytes(&mut out, &e.value);
            put_u32(&mut out, e.flags);
            put_u64(&mut out, e.cas);
            match e.expire_at {
                None => out.push(0),
                Some(t) => {
                    out.push(1);
                    put_u64(&mut out, t);
                }
            }
        }
        let mut h = Fnv::new();
        h.write(&out);
        put_u64(&mut out, h.0);
        out
    }

    /// Rebuilds a store from [`KvStore::snapshot`]'s bytes. Checks everything (magic, version,
    /// checksum, key order, field values, no trailing bytes) and never panics on bad input.
    pub fn restore(data: &[u8]) -> Result<KvStore, DecodeError> {
        if data.len() < SNAPSHOT_MAGIC.len() + 1 + 8 {
            return Err(DecodeError("snapshot too short"));
        }
        let (body, sum) = data.split_at(data.len() - 8);
        let mut h = Fnv::new();
        h.write(body);
        if sum != h.0.to_le_bytes() {
            return Err(DecodeError("snapshot checksum mismatch"));
        }
        let mut r = Reader::new(body);
        if r.take(SNAPSHOT_MAGIC.len())? != SNAPSHOT_MAGIC {
            return Err(DecodeError("not a snapshot"));
        }
        if r.u8()? != SNAPSHOT_VERSION {
            return Err(DecodeError("unknown snapshot version"));
        }
        let applied = r.u64()?;
        let now_ms = r.u64()?;
        let count = r.u64()?;
        if count > (r.remaining() / SNAPSHOT_MIN_ITEM) as u64 {
            return Err(DecodeError("count exceeds the input"));
        }
        let mut items = Vec::with_capacity(count as usize);
        let mut expiries = Vec::new();
        for _ in 0..count {
            let key = r.bytes()?;
            let value = r.bytes()?;
            let flags = r.u32()?;
            let cas = r.u64()?;
            let expire_at = if r.bool()? { Some(r.u64()?) } else { None };
            if cas > applied {
                return Err(DecodeError("item changed after the applied index"));
            }
            if items
                .last()
                .is_some_and(|(prev, _): &(Bytes, Entry)| *prev >= key)
            {
                return Err(DecodeError("keys out of order"));
            }
            if let Some(t) = expire_at {
                expiries.push((t, key.clone()));
            }
            items.push((
                key,
                Entry {
                    value,
                    flags,
                    cas,
                    expire_at,
                },
            ));
        }
        r.finish()?;
        Ok(KvStore {
            items: items.into_iter().collect(),
            expiries: expiries.into_iter().collect(),
            now_ms,
            applied,
        })
    }

    // ---- internals

    /// The live item under `key` at `now`.
    fn live(&self, key: &[u8], now: u64) -> Option<&Entry> {
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

    /// Removes up to `max` expired items, earliest expiry first.
    fn sweep(&mut self, max: usize) {
        for _ in 0..max {
            match self.expiries.first() {
                Some((t, _)) if *t <= self.now_ms => {}
                _ => break,
            }
            if let Some((_, key)) = self.expiries.pop_first() {
                self.items.remove(&key);
            }
        }
    }

    /// Removes the item under `key` if it has expired.
    fn purge(&mut self, key: &[u8]) {
        if self.items.get(key).is_some_and(|e| !e.live(self.now_ms)) {
            self.remove(key);
        }
    }

    /// Removes the item under `key` (live or not) and returns it.
    fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let (key, e) = self.items.remove_entry(key)?;
        if let Some(t) = e.expire_at {
            self.expiries.remove(&(t, key));
        }
        Some(e)
    }

    /// Stores `e` under `key`, replacing any item; an already expired `e` removes the key.
    fn store(&mut self, key: &[u8], e: Entry) {
        if e.expire_at.is_some_and(|t| t <= self.now_ms) {
            self.remove(key);
            return;
        }
        match self.items.get_mut(key) {
            Some(old) => {
                if old.expire_at != e.expire_at {
                    if let Some(t) = old.expire_at {
                        self.expiries.remove(&(t, key.to_vec()));
                    }
                    if let Some(t) = e.expire_at {
                        self.expiries.insert((t, key.to_vec()));
                    }
                }
                *old = e;
            }
            None => {
                if let Some(t) = e.expire_at {
                    self.expiries.insert((t, key.to_vec()));
                }
                self.items.insert(key.to_vec(), e);
            }
        }
    }

    /// Sets the expiry of the existing item under `key`; an expiry ≤ now removes it.
    fn retime(&mut self, key: &[u8], expire_at: Option<u64>) {
        if expire_at.is_some_and(|t| t <= self.now_ms) {
            self.remove(key);
            return;
        }
        let Some(e) = self.items.get_mut(key) else {
            return;
        };
        if e.expire_at == expire_at {
            return;
        }
        if let Some(t) = e.expire_at {
            self.expiries.remove(&(t, key.to_vec()));
        }
        if let Some(t) = expire_at {
            self.expiries.insert((t, key.to_vec()));
        }
        e.expire_at = expire_at;
    }
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
fn parse_i64(b: &[u8]) -> Option<i64> {
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
        for (t, k) in &s.expiries {
            assert_eq!(s.items[k].expire_at, Some(*t));
        }
    }
}
