//! Operations on the key-value store and their results: the language every front-end
//! (RESP, memcached, the native protocol) is translated into, and what goes into the log.
//!
//! Times: every relative expiry is turned into an absolute time (ms since the Unix epoch) when
//! the operation is applied, from the timestamp the leader put in the log entry, so every
//! replica agrees on it.

/// A key or a value: arbitrary bytes.
pub type Bytes = Vec<u8>;

/// An expiry as a client gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No change to the key's expiry: a write clears it (Redis `SET` without options).
    None,
    /// Keep the key's current expiry (Redis `KEEPTTL`).
    Keep,
    /// Expire this many milliseconds after the entry's timestamp (≤ 0: already expired).
    AfterMs(i64),
    /// Expire at this absolute time, ms since the Unix epoch (memcached exptime > 30 days).
    AtMs(u64),
}

/// When `EXPIRE` changes an expiry (Redis 7's options); a key without an expiry has an
/// infinite one for `GT` and `LT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpireCond {
    /// Only if the key has no expiry.
    Nx,
    /// Only if the key has one.
    Xx,
    /// Only if the new one is later.
    Gt,
    /// Only if the new one is sooner.
    Lt,
    /// Only if the key has one and the new one is sooner (`XX LT`).
    XxLt,
}

/// When a store happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// Always.
    Always,
    /// Only if the key does not exist (Redis `NX`, memcached `add`).
    IfAbsent,
    /// Only if the key exists (Redis `XX`, memcached `replace`).
    IfPresent,
}

/// One operation. Read-only operations may be served by a linearizable read (ReadIndex or
/// lease) without going through the log; see [`Op::is_read_only`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each variant's doc describes its fields
pub enum Op {
    // ---- reads
    /// Values of these keys, with flags and CAS unique (`GET`, `MGET`, memcached `get`/`gets`).
    Get { keys: Vec<Bytes> },
    /// How many of these keys exist (`EXISTS`).
    Exists { keys: Vec<Bytes> },
    /// Length of the value (`STRLEN`).
    Strlen { key: Bytes },
    /// Remaining time to live in ms (`TTL`, `PTTL`).
    Ttl { key: Bytes },
    /// Number of live keys (`DBSIZE`).
    DbSize,
    /// Keys matching a glob pattern (`KEYS`), sorted.
    Keys { pattern: Bytes },
    /// One page of a scan in key order (`SCAN`): keys after `cursor`, at most `count`
    /// examined; with `kind`, only keys of that type (`SCAN … TYPE`, its name as given).
    Scan {
        cursor: Bytes,
        pattern: Option<Bytes>,
        count: u32,
        kind: Option<Bytes>,
    },

    // ---- writes
    /// Store a value (`SET` with its options, `SETNX`, `GETSET`, memcached `set`/`add`/`replace`).
    Set {
        key: Bytes,
        value: Bytes,
        flags: u32,
        expiry: Expiry,
        cond: Cond,
        /// Return the old value (`SET … GET`, `GETSET`).
        get_old: bool,
    },
    /// Store several values (`MSET`).
    MSet { pairs: Vec<(Bytes, Bytes)> },
    /// Store only if the key's CAS unique is `unique` (memcached `cas`).
    Cas {
        key: Bytes,
        value: Bytes,
        flags: u32,
        expiry: Expiry,
        unique: u64,
    },
    /// Delete keys (`DEL`, memcached `delete`); the result counts those that existed.
    Del { keys: Vec<Bytes> },
    /// Redis `INCRBY` family: a missing key counts as 0; the value must be a signed 64-bit
    /// decimal; overflow is an error.
    IncrBy { key: Bytes, delta: i64 },
    /// memcached `incr`/`decr`: the key must exist and hold an unsigned 64-bit decimal; incr
    /// wraps at 2^64, decr stops at 0.
    McIncr { key: Bytes, delta: u64, decr: bool },
    /// Append (`APPEND` creates a missing key; memcached `append` needs it: `must_exist`).
    Append {
        key: Bytes,
        value: Bytes,
        must_exist: bool,
        /// The longest value the result may have; `u64::MAX` = no limit. The front-end that
        /// takes the command fills it from its configuration; it travels in the log entry, so
        /// every replica enforces the same limit.
        max_len: u64,
    },
    /// memcached `prepend` (the key must exist).
    Prepend {
        key: Bytes,
        value: Bytes,
        /// The longest value the result may have; `u64::MAX` = no limit. The front-end that
        /// takes the command fills it from its configuration; it travels in the log entry, so
        /// every replica enforces the same limit.
        max_len: u64,
    },
    /// Set or clear the expiry of an existing key (`EXPIRE`, `PEXPIRE`, `PERSIST`,
    /// memcached `touch`); with `get`, also return the value (memcached `gat`).
    Touch {
        keys: Vec<Bytes>,
        expiry: Expiry,
        get: bool,
    },
    /// Remove every key (`FLUSHALL`, memcached `flush_all`).
    FlushAll,
    /// Remove expired items, a bounded number (no client sends it: a leader proposes it when
    /// expired items wait and no write removes them).
    Sweep,
    /// Several operations in one log entry, applied in order (a connection's pipelined
    /// commands: one entry, one replication round). Never nested; never empty.
    Batch(Vec<Op>),
    /// Remove a key and return its item (`GETDEL`): `Items([item or None])`.
    GetDel { key: Bytes },
    /// Return a key's item and, with `expiry`, set its expiry (`GETEX`; `Some(Expiry::None)`
    /// is `PERSIST`): `Items([item or None])`. A time in the past deletes the key.
    GetEx { key: Bytes, expiry: Option<Expiry> },
    /// Move `from`'s item (value and expiry) to `to` (`RENAME`, `RENAMENX` with `nx`): `Ok`,
    /// `NotStored` when `nx` and `to` exists, `Error("no such key")` when `from` is absent.
    Rename { from: Bytes, to: Bytes, nx: bool },
    /// Copy `from`'s item (value and expiry) to `to` (`COPY`): `Int(1)` copied, `Int(0)` not
    /// (absent `from`, or `to` exists without `replace`).
    Copy {
        from: Bytes,
        to: Bytes,
        replace: bool,
    },
    /// Overwrite part of a value at `offset`, padding with zero bytes (`SETRANGE`):
    /// `Int(new length)`; a result longer than `max_len` is refused.
    SetRange {
        key: Bytes,
        offset: u64,
        value: Bytes,
        max_len: u64,
    },
    /// The bytes `start..=end` of a value, negative positions counted from the end
    /// (`GETRANGE`): `Items([Some(item with those bytes)])`, empty when out of range.
    GetRange { key: Bytes, start: i64, end: i64 },
    /// Set every pair only if no key exists (`MSETNX`): `Int(1)` set, `Int(0)` none.
    MSetNx { pairs: Vec<(Bytes, Bytes)> },
    /// Set a key's expiry if `cond` holds (`EXPIRE … NX|XX|GT|LT`): `Int(1)` set, `Int(0)` not.
    /// A time in the past deletes the key.
    ExpireIf {
        key: Bytes,
        expiry: Expiry,
        cond: ExpireCond,
    },
    /// The absolute expiry time of a key in ms since the Unix epoch (`EXPIRETIME`,
    /// `PEXPIRETIME`): `Int(ms)`, -1 without expiry, -2 for an absent key.
    ExpireTime { key: Bytes },
    /// Add a float to a value (`INCRBYFLOAT`; `delta` is an `f64`'s bits): `Items([the new
    /// value])`, written without an exponent and without a negative zero; a value that is not
    /// a float, or a result that is not finite, is refused.
    IncrByFloat { key: Bytes, delta: u64 },
    /// A key picked from `seed` (`RANDOMKEY`; the seed travels with the operation, so a pick
    /// through the log is the same on every replica): `Items([Some(item whose value is the
    /// key)])`, `Items([None])` when there is none.
    RandomKey { seed: u64 },
    /// Set or clear one bit (`SETBIT`; bit 0 is the first byte's most significant), padding
    /// with zero bytes: `Int(the old bit)`; a result longer than `max_len` is refused.
    SetBit {
        key: Bytes,
        offset: u64,
        bit: bool,
        max_len: u64,
    },
    /// One bit of a value (`GETBIT`): `Int(0|1)`, 0 past the end or for an absent key.
    GetBit { key: Bytes, offset: u64 },
    /// memcached binary `incr`/`decr`: as [`Op::McIncr`], but a missing key is created with
    /// `initial` (and `expiry`) and answered `UInt(initial)`, unless `initial` is `None`
    /// (`NotFound`).
    McIncrOr {
        key: Bytes,
        delta: u64,
        decr: bool,
        initial: Option<u64>,
        expiry: Expiry,
    },
    /// A transaction (`MULTI` … `EXEC`): its operations applied in order with nothing between
    /// them, on every replica (one log entry, never split: a front-end that sends a batch
    /// again piece by piece sends a transaction whole). It may sit in a batch; it holds
    /// neither a batch nor a transaction. Never empty. Answered by [`Response::Batch`].
    Multi(Vec<Op>),
    /// A command on a hash, list, set or sorted set, or one of the keyspace commands that
    /// see every type (`TYPE`, `OBJECT ENCODING`): its arguments as the client sent them,
    /// the name first, checked for arity by the front-end (see [`crate::types`]), and a seed
    /// for the commands that pick at random (`SPOP`, `SRANDMEMBER`, `HRANDFIELD`,
    /// `ZRANDMEMBER`): drawn once by the replica that took the command and carried in the
    /// log, so every replica picks the same. Answered by [`Response::Reply`].
    Cmd { args: Vec<Bytes>, seed: u64 },
    /// `WATCH`'s check, first in a transaction ([`Op::Multi`]) and nowhere else: the
    /// transaction applies only if none of `keys` changed after log index `since` (the index
    /// the watching replica had applied when the client said `WATCH`); otherwise it changes
    /// nothing and answers [`Reply::NilArray`]. See [`crate::KvStore`]'s `changed_since`.
    WatchCheck { since: u64, keys: Vec<Bytes> },
    /// How many of `keys` hold a collection of type `kind` (`list`, `zset`), a read: what a
    /// parked blocking pop asks before trying again (no client sends it).
    Ready { keys: Vec<Bytes>, kind: Bytes },
}

/// A stored value as reads return it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The value.
    pub value: Bytes,
    /// memcached client flags (0 from Redis).
    pub flags: u32,
    /// memcached CAS unique: the log index of the write that last changed the item.
    pub cas: u64,
}

/// The result of an operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each variant's doc describes its fields
pub enum Response {
    /// Done, nothing to return.
    Ok,
    /// A write's condition did not hold (`NX`/`XX`, memcached `NOT_STORED`).
    NotStored,
    /// memcached `cas` on an item changed since `gets` (`EXISTS`).
    CasMismatch,
    /// The key does not exist (memcached `NOT_FOUND`).
    NotFound,
    /// One optional item per key asked (Get, Touch with `get`, Set with `get_old`).
    Items(Vec<Option<Item>>),
    /// A number (counts, lengths, new counter values, TTLs: -2 missing key, -1 no expiry).
    Int(i64),
    /// An unsigned number (memcached incr/decr).
    UInt(u64),
    /// Keys (KEYS).
    Keys(Vec<Bytes>),
    /// A scan page: the cursor to continue from (empty: done) and the keys.
    ScanPage { next: Bytes, keys: Vec<Bytes> },
    /// The operation failed on this value; the message is for the client (e.g. "value is not
    /// an integer or out of range").
    Error(String),
    /// The results of an [`Op::Batch`], one per operation, in order.
    Batch(Vec<Response>),
    /// The result of an [`Op::Cmd`], shaped as Redis replies.
    Reply(Reply),
}

/// A reply shaped as Redis's (RESP2 or RESP3 decides the bytes: see
/// [`crate::resp::render_proto`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A missing value: RESP2's nil bulk, RESP3's null.
    Nil,
    /// A missing array: RESP2's nil array, RESP3's null.
    NilArray,
    /// `+OK` and the like.
    Status(String),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// A double, as Redis prints it (`%.17g`, `inf`, `-inf`): a bulk string in RESP2, `,` in
    /// RESP3.
    Double(String),
    /// An array.
    Array(Vec<Reply>),
    /// Field/value pairs: a flat array in RESP2, `%` in RESP3.
    Map(Vec<(Reply, Reply)>),
    /// Members: an array in RESP2, `~` in RESP3.
    Set(Vec<Reply>),
    /// Member/score (or field/value) pairs that may repeat (`WITHSCORES`, `WITHVALUES`): a
    /// flat array in RESP2, an array of two-element arrays in RESP3, as Redis 7 answers.
    Pairs(Vec<(Reply, Reply)>),
    /// An error: the code word first (`ERR …`, `WRONGTYPE …`), as Redis sends it after `-`.
    Error(String),
}
