//! Hashes, lists, sets and sorted sets: their values ([`Coll`]), the commands on them and on
//! keys of every type (`TYPE`, `OBJECT`), executed by the store as [`Op::Cmd`](crate::Op::Cmd).
//!
//! A command travels in the log as the client sent it (its name and arguments, arity checked
//! by the front-end, so a wrong count never reaches the log, as Redis refuses it before
//! queueing it in `MULTI`); every replica parses it again when applying it, and answers
//! a syntax error the same way. Randomness (`SPOP`, `SRANDMEMBER`, `HRANDFIELD`,
//! `ZRANDMEMBER`) comes from the operation's seed and time from the entry's timestamp, so
//! every replica computes the same state and reply.
//!
//! # Values and the digest
//!
//! A collection is an immutable structure of the `imbl` crate (a snapshot view shares it in
//! O(1), a write copies the nodes it touches). Each keeps a running hash of its content — a
//! sum of element hashes for hashes, sets and sorted sets, a polynomial `Σ h(eᵢ)·Bⁱ` for lists
//! so that order counts — and its accounted bytes, both updated per element changed: the
//! store's digest and `used_memory` stay O(1) to read. [`Coll::recount`] computes both from
//! scratch for the invariant checks.
//!
//! # Bounds
//!
//! Every command costs O(log n) per element it names or returns, as in Redis, except those
//! Redis also documents as O(n) in the collection (`LREM`, `LINSERT`, `LPOS`, set algebra,
//! `*STORE`), which work on the collections they name, never on the whole store.

mod hash;
mod keys;
mod list;
mod set;
mod sort;
mod strings;
#[cfg(test)]
mod testing;
mod zset;

use imbl::{OrdMap, OrdSet, Vector};
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

use crate::ops::{Bytes, Reply};
use crate::store::KvStore;

pub use zset::Score;

/// Redis's reply to a command on a key holding another type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// `ERR syntax error`.
pub const SYNTAX: &str = "ERR syntax error";
/// A bad integer argument.
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// A bad float argument.
pub const NOT_FLOAT: &str = "ERR value is not a valid float";

/// Bytes accounted per element of a collection besides its own bytes (tree slot, node share,
/// allocator header).
pub const ELEM_OVERHEAD: u64 = 48;

/// A key's type as `TYPE` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A string (the store's plain items).
    String,
    /// A hash.
    Hash,
    /// A list.
    List,
    /// A set.
    Set,
    /// A sorted set.
    ZSet,
}

impl Type {
    /// `TYPE`'s answer.
    pub fn name(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Hash => "hash",
            Type::List => "list",
            Type::Set => "set",
            Type::ZSet => "zset",
        }
    }

    /// The tag in snapshots.
    pub(crate) fn tag(self) -> u8 {
        match self {
            Type::String => 0,
            Type::Hash => 1,
            Type::List => 2,
            Type::Set => 3,
            Type::ZSet => 4,
        }
    }
}

/// Removes the least key of `m`; whether there was one.
pub(crate) fn remove_min<K: Ord + Clone, V: Clone>(m: &mut OrdMap<K, V>) -> bool {
    let Some(k) = m.get_min().map(|(k, _)| k.clone()) else {
        return false;
    };
    m.remove(&k).is_some()
}

/// The elements of a collection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Hash(OrdMap<Bytes, Bytes>),
    List(Vector<Bytes>),
    Set(OrdSet<Bytes>),
    ZSet(zset::ZSet),
}

/// A collection value with its content hash and accounted bytes, kept in step by every
/// method that changes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coll {
    kind: Kind,
    sum: u64,
    cost: u64,
}

/// The list hash's base (odd, so invertible modulo 2⁶⁴: a pop from the front divides by it).
const B: u64 = 0x9E37_79B9_7F4A_7C15;

/// B⁻¹ modulo 2⁶⁴ (Newton's iteration doubles the correct low bits each step).
const fn b_inv() -> u64 {
    let mut x = B;
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(B.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// Bⁿ modulo 2⁶⁴.
fn b_pow(mut n: usize) -> u64 {
    let (mut base, mut acc) = (B, 1u64);
    while n > 0 {
        if n & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        n >>= 1;
    }
    acc
}

fn h_field(f: &[u8], v: &[u8]) -> u64 {
    xxh3_64_with_seed(v, xxh3_64(f))
}

fn h_member(m: &[u8]) -> u64 {
    xxh3_64(m)
}

fn h_scored(m: &[u8], score: f64) -> u64 {
    xxh3_64_with_seed(m, score.to_bits())
}

fn elem_cost(n: usize) -> u64 {
    n as u64 + ELEM_OVERHEAD
}

impl Coll {
    /// An empty hash.
    pub(crate) fn hash() -> Coll {
        Coll::of(Kind::Hash(OrdMap::new()))
    }

    /// An empty list.
    pub(crate) fn list() -> Coll {
        Coll::of(Kind::List(Vector::new()))
    }

    /// An empty set.
    pub(crate) fn set() -> Coll {
        Coll::of(Kind::Set(OrdSet::new()))
    }

    /// An empty sorted set.
    pub(crate) fn zset() -> Coll {
        Coll::of(Kind::ZSet(zset::ZSet::default()))
    }

    fn of(kind: Kind) -> Coll {
        let mut c = Coll {
            kind,
            sum: 0,
            cost: 0,
        };
        (c.sum, c.cost) = c.recount();
        c
    }

    /// The empty collection of `ty` (not a string).
    pub(crate) fn empty(ty: Type) -> Coll {
        match ty {
            Type::Hash => Coll::hash(),
            Type::List => Coll::list(),
            Type::Set => Coll::set(),
            Type::ZSet => Coll::zset(),
            Type::String => unreachable!("a string is not a collection"),
        }
    }

    /// Its type.
    pub fn ty(&self) -> Type {
        match self.kind {
            Kind::Hash(_) => Type::Hash,
            Kind::List(_) => Type::List,
            Kind::Set(_) => Type::Set,
            Kind::ZSet(_) => Type::ZSet,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.kind {
            Kind::Hash(m) => m.len(),
            Kind::List(l) => l.len(),
            Kind::Set(s) => s.len(),
            Kind::ZSet(z) => z.len(),
        }
    }

    /// Drops at most `budget` elements, whichever (a collection the store let go of, freed a
    /// piece at a time: its content hash and cost no longer count anywhere); how many.
    pub(crate) fn shed(&mut self, budget: usize) -> usize {
        let mut n = 0;
        match &mut self.kind {
            Kind::Hash(m) => {
                while n < budget && remove_min(m) {
                    n += 1;
                }
            }
            Kind::List(l) => {
                while n < budget && l.pop_back().is_some() {
                    n += 1;
                }
            }
            Kind::Set(s) => {
                while n < budget && s.remove_min().is_some() {
                    n += 1;
                }
            }
            Kind::ZSet(z) => n = z.shed(budget),
        }
        n
    }

    /// Whether it holds no element (the store never keeps an empty collection).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Accounted bytes (elements plus [`ELEM_OVERHEAD`] each).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// What the collection adds to the store's digest sum under `key`: its type, key and
    /// content hash mixed (so two keys swapping contents change the digest).
    pub(crate) fn contribution(&self, key: &[u8]) -> u64 {
        let seed = self
            .sum
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
            .wrapping_add(u64::from(self.ty().tag()));
        xxh3_64_with_seed(key, seed)
    }

    /// The content hash and cost from scratch.
    pub(crate) fn recount(&self) -> (u64, u64) {
        let mut sum = 0u64;
        let mut cost = 0u64;
        match &self.kind {
            Kind::Hash(m) => {
                for (f, v) in m {
                    sum = sum.wrapping_add(h_field(f, v));
                    cost += elem_cost(f.len() + v.len());
                }
            }
            Kind::List(l) => {
                let mut p = 1u64;
                for e in l {
                    sum = sum.wrapping_add(h_member(e).wrapping_mul(p));
                    p = p.wrapping_mul(B);
                    cost += elem_cost(e.len());
                }
            }
            Kind::Set(s) => {
                for m in s {
                    sum = sum.wrapping_add(h_member(m));
                    cost += elem_cost(m.len());
                }
            }
            Kind::ZSet(z) => {
                for (m, s) in z.iter() {
                    sum = sum.wrapping_add(h_scored(m, s));
                    cost += elem_cost(m.len() + 8);
                }
            }
        }
        (sum, cost)
    }

    /// Checks the running hash and cost (tests and invariant checks).
    pub(crate) fn check(&self) {
        assert_eq!(
            self.recount(),
            (self.sum, self.cost),
            "collection hash/cost"
        );
        if let Kind::ZSet(z) = &self.kind {
            z.check();
        }
    }

    // ---- hashes

    pub(crate) fn as_hash(&self) -> &OrdMap<Bytes, Bytes> {
        match &self.kind {
            Kind::Hash(m) => m,
            _ => unreachable!("type checked by the caller"),
        }
    }

    /// Sets a field; returns the old value.
    pub(crate) fn hset(&mut self, f: Bytes, v: Bytes) -> Option<Bytes> {
        let (h, c) = (h_field(&f, &v), elem_cost(f.len() + v.len()));
        let Kind::Hash(m) = &mut self.kind else {
            unreachable!()
        };
        let old = m.get(&f).cloned();
        if let Some(o) = &old {
            self.sum = self.sum.wrapping_sub(h_field(&f, o));
            self.cost -= elem_cost(f.len() + o.len());
        }
        m.insert(f, v);
        self.sum = self.sum.wrapping_add(h);
        self.cost += c;
        old
    }

    /// Removes a field; returns its value.
    pub(crate) fn hdel(&mut self, f: &[u8]) -> Option<Bytes> {
        let Kind::Hash(m) = &mut self.kind else {
            unreachable!()
        };
        let old = m.remove(f)?;
        self.sum = self.sum.wrapping_sub(h_field(f, &old));
        self.cost -= elem_cost(f.len() + old.len());
        Some(old)
    }

    // ---- sets

    pub(crate) fn as_set(&self) -> &OrdSet<Bytes> {
        match &self.kind {
            Kind::Set(s) => s,
            _ => unreachable!("type checked by the caller"),
        }
    }

    /// Adds a member; whether it was new.
    pub(crate) fn sadd(&mut self, m: Bytes) -> bool {
        let (h, c) = (h_member(&m), elem_cost(m.len()));
        let Kind::Set(s) = &mut self.kind else {
            unreachable!()
        };
        if s.insert(m).is_some() {
            return false;
        }
        self.sum = self.sum.wrapping_add(h);
        self.cost += c;
        true
    }

    /// Removes a member; whether it was there.
    pub(crate) fn srem(&mut self, m: &[u8]) -> bool {
        let Kind::Set(s) = &mut self.kind else {
            unreachable!()
        };
        if s.remove(m).is_none() {
            return false;
        }
        self.sum = self.sum.wrapping_sub(h_member(m));
        self.cost -= elem_cost(m.len());
        true
    }

    // ---- lists

    pub(crate) fn as_list(&self) -> &Vector<Bytes> {
        match &self.kind {
            Kind::List(l) => l,
            _ => unreachable!("type checked by the caller"),
        }
    }

    fn list_mut(&mut self) -> &mut Vector<Bytes> {
        match &mut self.kind {
            Kind::List(l) => l,
            _ => unreachable!("type checked by the caller"),
        }
    }

    /// Pushes at the head.
    pub(crate) fn lpush(&mut self, e: Bytes) {
        let (h, c) = (h_member(&e), elem_cost(e.len()));
        self.list_mut().push_front(e);
        self.sum = self.sum.wrapping_mul(B).wrapping_add(h);
        self.cost += c;
    }

    /// Pushes at the tail.
    pub(crate) fn rpush(&mut self, e: Bytes) {
        let (h, c) = (h_member(&e), elem_cost(e.len()));
        let n = self.len();
        self.list_mut().push_back(e);
        self.sum = self.sum.wrapping_add(h.wrapping_mul(b_pow(n)));
        self.cost += c;
    }

    /// Pops the head.
    pub(crate) fn lpop(&mut self) -> Option<Bytes> {
        let e = self.list_mut().pop_front()?;
        self.sum = self
            .sum
            .wrapping_sub(h_member(&e))
            .wrapping_mul(const { b_inv() });
        self.cost -= elem_cost(e.len());
        Some(e)
    }

    /// Pops the tail.
    pub(crate) fn rpop(&mut self) -> Option<Bytes> {
        let e = self.list_mut().pop_back()?;
        let n = self.len();
        self.sum = self.sum.wrapping_sub(h_member(&e).wrapping_mul(b_pow(n)));
        self.cost -= elem_cost(e.len());
        Some(e)
    }

    /// Replaces the element at `i` (< len); returns the old one.
    pub(crate) fn lset(&mut self, i: usize, e: Bytes) -> Bytes {
        let (h, c) = (h_member(&e), elem_cost(e.len()));
        let old = self.list_mut().set(i, e);
        let p = b_pow(i);
        self.sum = self
            .sum
            .wrapping_sub(h_member(&old).wrapping_mul(p))
            .wrapping_add(h.wrapping_mul(p));
        self.cost = self.cost - elem_cost(old.len()) + c;
        old
    }

    /// Replaces the whole list (for the O(n) commands: `LREM`, `LINSERT`, `LTRIM`).
    pub(crate) fn set_list(&mut self, l: Vector<Bytes>) {
        *self = Coll::of(Kind::List(l));
    }

    // ---- sorted sets

    pub(crate) fn as_zset(&self) -> &zset::ZSet {
        match &self.kind {
            Kind::ZSet(z) => z,
            _ => unreachable!("type checked by the caller"),
        }
    }

    /// Sets a member's score (not NaN); returns the old score.
    pub(crate) fn zadd(&mut self, m: Bytes, score: f64) -> Option<f64> {
        let score = if score == 0.0 { 0.0 } else { score };
        assert!(!score.is_nan(), "a NaN score");
        let (h, c) = (h_scored(&m, score), elem_cost(m.len() + 8));
        let Kind::ZSet(z) = &mut self.kind else {
            unreachable!()
        };
        let old = z.insert(m.clone(), score);
        if let Some(o) = old {
            self.sum = self.sum.wrapping_sub(h_scored(&m, o));
            self.cost -= c;
        }
        self.sum = self.sum.wrapping_add(h);
        self.cost += c;
        old
    }

    /// Removes a member; returns its score.
    pub(crate) fn zrem(&mut self, m: &[u8]) -> Option<f64> {
        let Kind::ZSet(z) = &mut self.kind else {
            unreachable!()
        };
        let old = z.remove(m)?;
        self.sum = self.sum.wrapping_sub(h_scored(m, old));
        self.cost -= elem_cost(m.len() + 8);
        Some(old)
    }
}

// ---- the command table

/// A read command: the store at a time, the arguments, the operation's seed.
pub(crate) type ReadFn = fn(&View<'_>, &[Bytes], u64) -> Reply;
/// A write command: the store being applied, the arguments, the operation's seed.
pub(crate) type WriteFn = fn(&mut Txn<'_>, &[Bytes], u64) -> Reply;

/// How a command runs.
#[derive(Clone, Copy)]
pub(crate) enum Exec {
    Read(ReadFn),
    Write(WriteFn),
}

/// One command: its name (lower case), Redis's arity (negative: at least), how it runs, and
/// whether it picks at random (the front-end draws a seed only then).
#[derive(Clone, Copy)]
pub struct Spec {
    /// The name, lower case.
    pub name: &'static str,
    /// Redis's arity: the exact argument count with the name, or at least `-arity`.
    pub arity: i32,
    pub(crate) exec: Exec,
    /// Picks at random: needs a seed.
    pub random: bool,
}

impl Spec {
    /// Whether it only reads (may be answered by a linearizable read without the log).
    pub fn read_only(&self) -> bool {
        matches!(self.exec, Exec::Read(_))
    }
}

const fn r(name: &'static str, arity: i32, f: ReadFn) -> Spec {
    Spec {
        name,
        arity,
        exec: Exec::Read(f),
        random: false,
    }
}

const fn w(name: &'static str, arity: i32, f: WriteFn) -> Spec {
    Spec {
        name,
        arity,
        exec: Exec::Write(f),
        random: false,
    }
}

const fn random(s: Spec) -> Spec {
    Spec { random: true, ..s }
}

/// Every command of this module.
pub fn specs() -> impl Iterator<Item = &'static Spec> {
    grouped().map(|(_, s)| s)
}

/// Every command of this module with its group as Redis's `COMMAND DOCS` names it.
pub fn grouped() -> impl Iterator<Item = (&'static str, &'static Spec)> {
    [
        ("generic", keys::SPECS),
        ("string", strings::SPECS),
        ("generic", sort::SPECS),
        ("hash", hash::SPECS),
        ("set", set::SPECS),
        ("list", list::SPECS),
        ("sorted-set", zset::SPECS),
    ]
    .into_iter()
    .flat_map(|(g, specs)| specs.iter().map(move |s| (g, s)))
    .map(|(g, s)| match s.name {
        "memory" | "object" => ("server", s),
        n if n.starts_with("bit") => ("bitmap", s),
        _ => (g, s),
    })
}

/// The command named `name` (any case).
///
/// Asked per operation (routing, encoding, decoding, applying): a hash lookup, built once,
/// on the name as the front-end writes it (lower case), then on its lower case.
pub fn spec(name: &[u8]) -> Option<&'static Spec> {
    static BY_NAME: std::sync::OnceLock<std::collections::HashMap<&'static [u8], &'static Spec>> =
        std::sync::OnceLock::new();
    let by_name = BY_NAME.get_or_init(|| specs().map(|s| (s.name.as_bytes(), s)).collect());
    by_name
        .get(name)
        .or_else(|| by_name.get(name.to_ascii_lowercase().as_slice()))
        .copied()
}

/// The command `args` names, with its arity checked (the front-end checked it already; a
/// log entry is checked again as it is applied).
fn checked(args: &[Bytes]) -> Result<&'static Spec, Reply> {
    let s = args
        .first()
        .and_then(|n| spec(n))
        .ok_or_else(|| err("ERR unknown command"))?;
    if !arity_ok(s.arity, args.len()) {
        return Err(Reply::Error(format!(
            "ERR wrong number of arguments for '{}' command",
            s.name
        )));
    }
    Ok(s)
}

/// Applies a command (through the log) at `index`.
pub(crate) fn apply(store: &mut KvStore, index: u64, args: &[Bytes], seed: u64) -> Reply {
    let s = match checked(args) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match s.exec {
        Exec::Read(f) => {
            let now = store.now_ms();
            f(&View { store, now }, args, seed)
        }
        Exec::Write(f) => f(&mut Txn { store, index }, args, seed),
    }
}

/// Answers a read-only command at `now`; a write is refused.
pub(crate) fn read(store: &KvStore, now: u64, args: &[Bytes], seed: u64) -> Reply {
    let s = match checked(args) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match s.exec {
        Exec::Read(f) => f(&View { store, now }, args, seed),
        Exec::Write(_) => Reply::Error(format!("ERR {}", crate::store::ERR_NOT_READ_ONLY)),
    }
}

/// Whether `argc` arguments (the name included) fit Redis's `arity`.
pub fn arity_ok(arity: i32, argc: usize) -> bool {
    let argc = i64::try_from(argc).unwrap_or(i64::MAX);
    if arity >= 0 {
        argc == i64::from(arity)
    } else {
        argc >= -i64::from(arity)
    }
}

/// The store as a read sees it.
pub(crate) struct View<'a> {
    pub(crate) store: &'a KvStore,
    pub(crate) now: u64,
}

impl View<'_> {
    /// The live collection of type `ty` under `key`; `Err(WRONGTYPE)` if the key holds
    /// another type.
    pub(crate) fn get(&self, key: &[u8], ty: Type) -> Result<Option<&Coll>, Reply> {
        match self.store.type_of(key, self.now) {
            None => Ok(None),
            Some(t) if t != ty => Err(wrongtype()),
            Some(_) => Ok(self.store.coll(key)),
        }
    }
}

impl View<'_> {
    /// The live string under `key`; `Err(WRONGTYPE)` if the key holds a collection.
    pub(crate) fn string(&self, key: &[u8]) -> Result<Option<&[u8]>, Reply> {
        match self.store.type_of(key, self.now) {
            None => Ok(None),
            Some(Type::String) => Ok(self.store.string_value(key, self.now)),
            Some(_) => Err(wrongtype()),
        }
    }
}

/// The store as a write changes it.
pub(crate) struct Txn<'a> {
    pub(crate) store: &'a mut KvStore,
    pub(crate) index: u64,
}

impl Txn<'_> {
    /// A read view at the store's clock.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            store: self.store,
            now: self.store.now_ms(),
        }
    }

    /// A copy (O(1)) of the live collection of type `ty` under `key`, to change and
    /// [`Txn::put`] back; `Err(WRONGTYPE)` if the key holds another type.
    pub(crate) fn get(&mut self, key: &[u8], ty: Type) -> Result<Option<Coll>, Reply> {
        self.store.purge_key(key);
        self.view().get(key, ty).map(|c| c.cloned())
    }

    /// Stores a changed collection under `key`, keeping the key's expiry; an empty one
    /// deletes the key (Redis never keeps an empty collection).
    pub(crate) fn put(&mut self, key: &[u8], c: Coll) {
        self.store.put_coll(key, c, true, self.index);
    }

    /// A copy of the live string under `key`; `Err(WRONGTYPE)` if it holds a collection.
    pub(crate) fn get_string(&mut self, key: &[u8]) -> Result<Option<Bytes>, Reply> {
        self.store.purge_key(key);
        self.view().string(key).map(|v| v.map(<[u8]>::to_vec))
    }

    /// Stores a string under `key`: a changed string keeps its flags and expiry (`keep`), a
    /// new value (`BITOP`'s destination) replaces whatever the key held, with no expiry.
    pub(crate) fn put_string(&mut self, key: &[u8], value: &[u8], keep: bool) {
        self.store.put_string(key, value, keep, self.index);
    }

    /// Stores a new value under `key` whatever it held (the `*STORE` commands): no expiry;
    /// `None` or an empty collection deletes the key.
    pub(crate) fn replace(&mut self, key: &[u8], c: Option<Coll>) {
        match c {
            Some(c) => self.store.put_coll(key, c, false, self.index),
            None => {
                self.store.delete_key(key);
            }
        }
    }
}

pub(crate) fn wrongtype() -> Reply {
    Reply::Error(WRONGTYPE.into())
}

pub(crate) fn err(msg: &str) -> Reply {
    Reply::Error(msg.into())
}

pub(crate) fn ok() -> Reply {
    Reply::Status("OK".into())
}

pub(crate) fn bulk(b: &[u8]) -> Reply {
    Reply::Bulk(b.to_vec())
}

pub(crate) fn len_reply(n: usize) -> Reply {
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A signed 64-bit integer argument in Redis's syntax.
pub(crate) fn int_arg(b: &[u8]) -> Result<i64, Reply> {
    crate::store::parse_i64(b).ok_or_else(|| err(NOT_INTEGER))
}

/// A double as Redis 7.0 prints one (`%.17g`; `inf`, `-inf`).
pub fn fmt_double(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // %.17g: 17 significant digits, fixed notation when -4 <= exponent < 17, trailing zeros
    // (and a trailing point) removed.
    let e = format!("{x:.16e}");
    let (mant, exp) = e.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent");
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..17).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            out.push_str(&digits[..int_len]);
            let frac = digits[int_len..].trim_end_matches('0');
            if !frac.is_empty() {
                out.push('.');
                out.push_str(frac);
            }
        } else {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(digits.trim_end_matches('0'));
        }
    } else {
        out.push_str(&digits[..1]);
        let frac = digits[1..].trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    }
    out
}

/// A double reply.
pub(crate) fn double(x: f64) -> Reply {
    Reply::Double(fmt_double(x))
}

/// A number picker from a seed (xorshift64*): the same picks on every replica.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (n > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `start..=stop` of a sequence of `len` as Redis's `LRANGE`/`ZRANGE` take them: negative
/// positions count from the end; `None` when the range is empty.
pub(crate) fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 { len + start } else { start }.max(0);
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((start as usize, stop as usize))
}

/// `… cursor [MATCH pattern] [COUNT count]` of `HSCAN`/`SSCAN`/`ZSCAN` (`a[2]` the cursor).
pub(crate) struct ScanArgs {
    /// The element to continue after (empty: from the first).
    pub(crate) cursor: Bytes,
    pub(crate) pattern: Option<Bytes>,
    pub(crate) count: usize,
}

pub(crate) fn scan_args(a: &[Bytes]) -> Result<ScanArgs, Reply> {
    let cursor = crate::resp::decode_cursor(&a[2]).ok_or_else(|| err("ERR invalid cursor"))?;
    let (mut pattern, mut count) = (None, 10usize);
    let mut j = 3;
    while j < a.len() {
        let Some(value) = a.get(j + 1) else {
            return Err(err(SYNTAX));
        };
        match a[j].to_ascii_lowercase().as_slice() {
            b"count" => {
                let n = int_arg(value)?;
                if n < 1 {
                    return Err(err(SYNTAX));
                }
                count = usize::try_from(n).unwrap_or(usize::MAX);
            }
            b"match" => pattern = (value.as_slice() != b"*").then(|| value.clone()),
            _ => return Err(err(SYNTAX)),
        }
        j += 2;
    }
    Ok(ScanArgs {
        cursor,
        pattern,
        count,
    })
}

/// One page of a scan over elements in order: up to `count` examined after the cursor
/// (never ending at the empty element, whose cursor would read as "done"); `out` turns a
/// matching element into its replies. The reply is `[cursor, [replies…]]`.
pub(crate) fn scan_page<'a, T: 'a>(
    s: &ScanArgs,
    iter: impl Iterator<Item = (&'a Bytes, T)>,
    mut out: impl FnMut(&'a Bytes, T, &mut Vec<Reply>),
) -> Reply {
    let mut iter = iter.peekable();
    let mut items = Vec::new();
    let mut examined = 0;
    let mut last: &[u8] = &[];
    for (k, v) in iter.by_ref() {
        examined += 1;
        last = k;
        if s.pattern
            .as_ref()
            .is_none_or(|p| crate::glob::glob_match(p, k))
        {
            out(k, v, &mut items);
        }
        if examined >= s.count && !k.is_empty() {
            break;
        }
    }
    let next = if iter.peek().is_some() { last } else { &[] };
    Reply::Array(vec![
        Reply::Bulk(crate::resp::encode_cursor(next)),
        Reply::Array(items),
    ])
}

/// The bound to start a scan page from.
pub(crate) fn after(cursor: &[u8]) -> std::ops::Bound<&[u8]> {
    if cursor.is_empty() {
        std::ops::Bound::Unbounded
    } else {
        std::ops::Bound::Excluded(cursor)
    }
}

/// A random byte string between `min` and `max` (inclusive, byte order): a probe to find a
/// random element of an ordered collection in O(log n), as `RANDOMKEY` does for keys.
pub(crate) fn probe(min: &[u8], max: &[u8], rng: &mut Rng) -> Bytes {
    crate::store::random_between(min, max, rng.next())
}

/// A random-pick count (`SRANDMEMBER`, `HRANDFIELD`), refused where Redis refuses it.
pub(crate) fn pick_count(count: Option<i64>) -> Result<Option<i64>, Reply> {
    match count {
        Some(n) if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) => {
            Err(err("ERR value is out of range"))
        }
        c => Ok(c),
    }
}

/// A random pick's answer for a missing key: nil without a count, an empty array with one.
pub(crate) fn no_pick(count: Option<i64>) -> Reply {
    if count.is_some() {
        Reply::Array(Vec::new())
    } else {
        Reply::Nil
    }
}

/// Up to this many elements, a random pick is uniform: it walks to a drawn position (O(len),
/// at most this many steps). Beyond, it probes ([`probe`], O(log len)): an element after a wide
/// gap in byte order is picked more often, as `RANDOMKEY` picks keys.
pub(crate) const EXACT_PICK_MAX: usize = 1 << 16;

/// One element of a collection of `len` (> 0): `all` walks it in order, `probe` finds the
/// first element at or after a random probe.
pub(crate) fn pick_one<T>(
    len: usize,
    rng: &mut Rng,
    mut all: impl Iterator<Item = T>,
    probe: impl FnOnce(&mut Rng) -> T,
) -> T {
    if len <= EXACT_PICK_MAX {
        all.nth(rng.below(len))
            .expect("a position below the length")
    } else {
        probe(rng)
    }
}

/// `n` elements of a collection of `len`, each drawn independently (repeats allowed), in the
/// order drawn.
pub(crate) fn pick_repeats<T: Clone>(
    len: usize,
    n: usize,
    rng: &mut Rng,
    all: impl Iterator<Item = T>,
    mut probe: impl FnMut(&mut Rng) -> T,
) -> Vec<T> {
    if len > EXACT_PICK_MAX {
        return (0..n).map(|_| probe(rng)).collect();
    }
    // Draw the positions, walk once, and put each element where its draw was.
    let mut draws: Vec<(usize, usize)> = (0..n).map(|i| (rng.below(len), i)).collect();
    draws.sort_unstable();
    let mut out: Vec<Option<T>> = vec![None; n];
    let mut d = 0;
    for (pos, e) in all.enumerate() {
        while d < draws.len() && draws[d].0 == pos {
            out[draws[d].1] = Some(e.clone());
            d += 1;
        }
        if d == draws.len() {
            break;
        }
    }
    out.into_iter()
        .map(|e| e.expect("every draw below the length"))
        .collect()
}

/// `n` distinct elements of a collection of `len` (all of them if `n ≥ len`), in random order.
/// Uniform by selection sampling in one walk, unless the collection is larger than
/// [`EXACT_PICK_MAX`] and `n` under a third of it: then distinct probes.
pub(crate) fn pick_distinct<T: Ord + Clone>(
    len: usize,
    n: usize,
    rng: &mut Rng,
    mut probe: impl FnMut(&mut Rng) -> T,
    all: impl Iterator<Item = T>,
) -> Vec<T> {
    let mut out = if n >= len {
        all.collect()
    } else if len <= EXACT_PICK_MAX || n.saturating_mul(3) > len {
        // Keep each element with the probability that leaves exactly n.
        let mut out = Vec::with_capacity(n);
        let mut left = len;
        for e in all {
            if rng.below(left) < n - out.len() {
                out.push(e);
            }
            left -= 1;
        }
        out
    } else {
        let mut seen = std::collections::BTreeSet::new();
        let mut tries = 0;
        while seen.len() < n && tries < n * 64 {
            seen.insert(probe(rng));
            tries += 1;
        }
        let mut all = all;
        while seen.len() < n {
            seen.insert(all.next().expect("n below the length"));
        }
        seen.into_iter().collect()
    };
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i + 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_redis_7_0() {
        assert_eq!(fmt_double(1.5), "1.5");
        assert_eq!(fmt_double(0.1), "0.10000000000000001");
        assert_eq!(fmt_double(10.0), "10");
        assert_eq!(fmt_double(-3.0), "-3");
        assert_eq!(fmt_double(1e20), "1e+20");
        assert_eq!(fmt_double(1.5e-7), "1.4999999999999999e-07");
        assert_eq!(fmt_double(0.0001), "0.0001");
        assert_eq!(fmt_double(123456789012345680.0), "1.2345678901234568e+17");
        assert_eq!(fmt_double(f64::INFINITY), "inf");
        assert_eq!(fmt_double(f64::NEG_INFINITY), "-inf");
        assert_eq!(fmt_double(0.0), "0");
    }

    #[test]
    fn list_hash_follows_pushes_pops_and_sets() {
        let mut c = Coll::list();
        for i in 0..50u8 {
            if i % 3 == 0 {
                c.lpush(vec![i]);
            } else {
                c.rpush(vec![i]);
            }
            c.check();
        }
        c.lset(7, b"x".to_vec());
        c.check();
        while c.len() > 5 {
            c.lpop();
            c.check();
            c.rpop();
            c.check();
        }
        let mut other = Coll::list();
        for e in c.as_list().iter().rev() {
            other.lpush(e.clone());
        }
        assert_eq!(other.sum, c.sum, "same elements, same order, same hash");
        let mut reversed = Coll::list();
        for e in c.as_list().iter() {
            reversed.lpush(e.clone());
        }
        assert_ne!(reversed.sum, c.sum, "order counts");
    }

    #[test]
    fn index_ranges_as_lrange() {
        assert_eq!(index_range(0, -1, 3), Some((0, 2)));
        assert_eq!(index_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(index_range(2, 1, 3), None);
        assert_eq!(index_range(5, 10, 3), None);
        assert_eq!(index_range(0, 0, 0), None);
        assert_eq!(index_range(-2, -1, 3), Some((1, 2)));
    }
}
