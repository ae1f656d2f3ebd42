//! The store's semantics, operation by operation, with explicit log indices and timestamps;
//! snapshots; determinism; scans.

use waverunner_kv::store::{
    ERR_NON_NUMERIC, ERR_NOT_INTEGER, ERR_NOT_READ_ONLY, ERR_OVERFLOW, ERR_TOO_LARGE,
};
use waverunner_kv::{Cond, Expiry, Item, KvStore, Op, Response};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn keys(ks: &[&str]) -> Vec<Vec<u8>> {
    ks.iter().map(|k| b(k)).collect()
}

fn set(key: &str, value: &str) -> Op {
    set_full(key, value, 0, Expiry::None, Cond::Always, false)
}

fn set_exp(key: &str, value: &str, expiry: Expiry) -> Op {
    set_full(key, value, 0, expiry, Cond::Always, false)
}

fn set_full(key: &str, value: &str, flags: u32, expiry: Expiry, cond: Cond, get_old: bool) -> Op {
    Op::Set {
        key: b(key),
        value: b(value),
        flags,
        expiry,
        cond,
        get_old,
    }
}

fn get(key: &str) -> Op {
    Op::Get { keys: keys(&[key]) }
}

fn ttl(key: &str) -> Op {
    Op::Ttl { key: b(key) }
}

fn item(value: &str, flags: u32, cas: u64) -> Option<Item> {
    Some(Item {
        value: b(value),
        flags,
        cas,
    })
}

fn items(list: Vec<Option<Item>>) -> Response {
    Response::Items(list)
}

fn err(msg: &str) -> Response {
    Response::Error(msg.to_string())
}

/// A store that applies with consecutive indices from 1 at a settable time.
struct Log {
    s: KvStore,
    index: u64,
    now: u64,
}

impl Log {
    fn new(now: u64) -> Self {
        Log {
            s: KvStore::new(),
            index: 0,
            now,
        }
    }

    fn at(&mut self, now: u64) -> &mut Self {
        self.now = now;
        self
    }

    fn apply(&mut self, op: Op) -> Response {
        self.index += 1;
        self.s.apply(self.index, self.now, &op)
    }

    /// A read at the current time, checked to agree with the same read through the log.
    fn read(&mut self, op: Op) -> Response {
        let direct = self.s.read(self.now, &op);
        let mut copy = self.s.clone();
        let through_log = copy.apply(self.index + 1, self.now, &op);
        assert_eq!(direct, through_log, "read vs read through the log: {op:?}");
        direct
    }

    fn value(&mut self, key: &str) -> Option<Item> {
        match self.read(get(key)) {
            Response::Items(mut v) => v.pop().unwrap(),
            r => panic!("{r:?}"),
        }
    }
}

// ---- Set and Get

#[test]
fn set_get_and_cas_unique_is_the_log_index() {
    let mut l = Log::new(1000);
    assert_eq!(l.read(get("a")), items(vec![None]));
    assert_eq!(l.apply(set("a", "1")), Response::Ok);
    assert_eq!(l.apply(set("b", "2")), Response::Ok);
    assert_eq!(l.value("a"), item("1", 0, 1));
    assert_eq!(l.value("b"), item("2", 0, 2));
    assert_eq!(
        l.apply(set_full("a", "x", 7, Expiry::None, Cond::Always, false)),
        Response::Ok
    );
    assert_eq!(l.value("a"), item("x", 7, 3));
    assert_eq!(
        l.read(Op::Get {
            keys: keys(&["a", "zz", "b", "a"])
        }),
        items(vec![
            item("x", 7, 3),
            None,
            item("2", 0, 2),
            item("x", 7, 3)
        ])
    );
    // Indices need not be consecutive: the CAS unique is whatever index changed the item.
    assert_eq!(l.s.apply(100, 1000, &set("c", "3")), Response::Ok);
    assert_eq!(l.s.read(0, &get("c")), items(vec![item("3", 0, 100)]));
    assert_eq!(l.s.applied_index(), 100);
}

#[test]
fn set_conditions() {
    let mut l = Log::new(1000);
    assert_eq!(
        l.apply(set_full("a", "1", 0, Expiry::None, Cond::IfPresent, false)),
        Response::NotStored
    );
    assert_eq!(l.value("a"), None);
    assert_eq!(
        l.apply(set_full("a", "1", 0, Expiry::None, Cond::IfAbsent, false)),
        Response::Ok
    );
    assert_eq!(
        l.apply(set_full("a", "2", 0, Expiry::None, Cond::IfAbsent, false)),
        Response::NotStored
    );
    assert_eq!(l.value("a"), item("1", 0, 2));
    assert_eq!(
        l.apply(set_full("a", "3", 0, Expiry::None, Cond::IfPresent, false)),
        Response::Ok
    );
    assert_eq!(l.value("a"), item("3", 0, 4));
}

#[test]
fn set_get_old() {
    let mut l = Log::new(1000);
    // GETSET on a missing key: nil, stored.
    assert_eq!(
        l.apply(set_full("a", "1", 0, Expiry::None, Cond::Always, true)),
        items(vec![None])
    );
    assert_eq!(l.value("a"), item("1", 0, 1));
    assert_eq!(
        l.apply(set_full("a", "2", 5, Expiry::None, Cond::Always, true)),
        items(vec![item("1", 0, 1)])
    );
    assert_eq!(l.value("a"), item("2", 5, 2));
    // A failed condition with GET still returns the old value, and stores nothing.
    assert_eq!(
        l.apply(set_full("a", "3", 0, Expiry::None, Cond::IfAbsent, true)),
        items(vec![item("2", 5, 2)])
    );
    assert_eq!(l.value("a"), item("2", 5, 2));
    assert_eq!(
        l.apply(set_full("b", "3", 0, Expiry::None, Cond::IfPresent, true)),
        items(vec![None])
    );
    assert_eq!(l.value("b"), None);
    // SET NX GET on a missing key stores and returns nil.
    assert_eq!(
        l.apply(set_full("b", "4", 0, Expiry::None, Cond::IfAbsent, true)),
        items(vec![None])
    );
    assert_eq!(l.value("b"), item("4", 0, 5));
}

// ---- Expiry

#[test]
fn expiry_boundary_is_exclusive() {
    let mut l = Log::new(10_000);
    l.apply(set_exp("k", "v", Expiry::AfterMs(1000)));
    l.at(10_999);
    assert_eq!(l.value("k"), item("v", 0, 1));
    assert_eq!(l.read(ttl("k")), Response::Int(1));
    assert_eq!(l.read(Op::DbSize), Response::Int(1));
    l.at(11_000);
    assert_eq!(l.value("k"), None);
    assert_eq!(l.read(ttl("k")), Response::Int(-2));
    assert_eq!(l.read(Op::DbSize), Response::Int(0));
    assert_eq!(l.read(Op::Exists { keys: keys(&["k"]) }), Response::Int(0));
    assert_eq!(l.read(Op::Strlen { key: b("k") }), Response::Int(0));
    assert_eq!(l.read(Op::Keys { pattern: b("*") }), Response::Keys(vec![]));
    // Through the log too.
    assert_eq!(l.apply(get("k")), items(vec![None]));
    assert!(l.s.is_empty());
}

#[test]
fn time_never_goes_back() {
    let mut s = KvStore::new();
    s.apply(1, 10_000, &set_exp("k", "v", Expiry::AfterMs(1000)));
    s.apply(2, 11_000, &Op::DbSize);
    assert_eq!(s.now_ms(), 11_000);
    // A later entry with an older timestamp (a new leader with a slow clock) does not revive it.
    assert_eq!(s.apply(3, 10_500, &get("k")), items(vec![None]));
    assert_eq!(s.now_ms(), 11_000);
    // Nor does a read with an old local time.
    assert_eq!(s.read(10_000, &get("k")), items(vec![None]));
    // Relative expiries count from the store's clock, not the entry's older timestamp.
    s.apply(4, 5_000, &set_exp("j", "v", Expiry::AfterMs(100)));
    assert_eq!(s.read(0, &ttl("j")), Response::Int(100));
    // A read may look ahead of the store's clock.
    assert_eq!(s.read(11_050, &ttl("j")), Response::Int(50));
    assert_eq!(s.read(11_100, &get("j")), items(vec![None]));
    assert_eq!(s.read(0, &get("j")), items(vec![item("v", 0, 4)]));
}

#[test]
fn absolute_expiry_and_keep_and_clear() {
    let mut l = Log::new(1000);
    l.apply(set_exp("k", "v", Expiry::AtMs(5000)));
    assert_eq!(l.read(ttl("k")), Response::Int(4000));
    // KEEPTTL keeps it.
    l.apply(set_exp("k", "w", Expiry::Keep));
    assert_eq!(l.read(ttl("k")), Response::Int(4000));
    assert_eq!(l.value("k"), item("w", 0, 2));
    // A plain SET clears it.
    l.apply(set_exp("k", "x", Expiry::None));
    assert_eq!(l.read(ttl("k")), Response::Int(-1));
    l.at(100_000);
    assert_eq!(l.value("k"), item("x", 0, 3));
    // KEEPTTL on a new key: no expiry.
    l.apply(set_exp("n", "v", Expiry::Keep));
    assert_eq!(l.read(ttl("n")), Response::Int(-1));
}

#[test]
fn immediate_expiry_on_write_leaves_the_key_absent() {
    let mut l = Log::new(1000);
    for e in [
        Expiry::AfterMs(0),
        Expiry::AfterMs(-5),
        Expiry::AfterMs(i64::MIN),
        Expiry::AtMs(1000),
        Expiry::AtMs(1),
        Expiry::AtMs(0),
    ] {
        l.apply(set("k", "old"));
        assert_eq!(l.apply(set_exp("k", "v", e.clone())), Response::Ok, "{e:?}");
        assert_eq!(l.value("k"), None, "{e:?}");
        assert_eq!(l.read(Op::DbSize), Response::Int(0));
        assert_eq!(snapshot_item_count(&l.s), 0);
    }
    // With GET: the old value comes back.
    l.apply(set("k", "old"));
    let idx = l.index;
    assert_eq!(
        l.apply(set_full(
            "k",
            "v",
            0,
            Expiry::AfterMs(0),
            Cond::Always,
            true
        )),
        items(vec![item("old", 0, idx)])
    );
    assert_eq!(l.value("k"), None);
}

#[test]
fn extreme_expiries() {
    let mut l = Log::new(1000);
    l.apply(set_exp("k", "v", Expiry::AfterMs(i64::MAX)));
    let end = 1000 + i64::MAX as u64;
    l.at(end - 1);
    assert_eq!(l.read(ttl("k")), Response::Int(1));
    l.at(end);
    assert_eq!(l.value("k"), None);
    // Near the end of time a relative expiry saturates instead of wrapping into the past.
    l.at(u64::MAX - 10);
    l.apply(set_exp("s", "v", Expiry::AfterMs(100)));
    l.apply(set_exp("j", "v", Expiry::AtMs(u64::MAX)));
    assert_eq!(l.read(ttl("s")), Response::Int(10));
    assert_eq!(l.read(ttl("j")), Response::Int(10));
    l.at(u64::MAX);
    assert_eq!(l.read(Op::DbSize), Response::Int(0));
    assert_eq!(l.read(get("s")), items(vec![None]));
}

#[test]
fn expired_keys_are_absent_for_writes() {
    let mut l = Log::new(1000);
    l.apply(set_exp("k", "5", Expiry::AfterMs(10)));
    l.at(1010);
    // NX succeeds on an expired key, XX fails.
    assert_eq!(
        l.apply(set_full("x", "1", 0, Expiry::None, Cond::Always, false)),
        Response::Ok
    );
    assert_eq!(
        l.apply(set_full("k", "1", 0, Expiry::None, Cond::IfPresent, false)),
        Response::NotStored
    );
    assert_eq!(
        l.apply(set_full("k", "1", 0, Expiry::None, Cond::IfAbsent, true)),
        items(vec![None])
    );
    // INCRBY on an expired counter starts from 0 and the result does not expire.
    l.apply(set_exp("c", "5", Expiry::AfterMs(10)));
    l.at(1020);
    assert_eq!(
        l.apply(Op::IncrBy {
            key: b("c"),
            delta: 3
        }),
        Response::Int(3)
    );
    assert_eq!(l.read(ttl("c")), Response::Int(-1));
    // memcached ops see an expired key as missing.
    l.apply(set_exp("m", "5", Expiry::AfterMs(10)));
    let cas = l.index;
    l.at(1030);
    assert_eq!(
        l.apply(Op::McIncr {
            key: b("m"),
            delta: 1,
            decr: false
        }),
        Response::NotFound
    );
    assert_eq!(
        l.apply(Op::Cas {
            key: b("m"),
            value: b("v"),
            flags: 0,
            expiry: Expiry::None,
            unique: cas
        }),
        Response::NotFound
    );
    assert_eq!(
        l.apply(Op::Prepend {
            key: b("m"),
            value: b("v"),
            max_len: u64::MAX,
        }),
        Response::NotStored
    );
    assert_eq!(
        l.apply(Op::Append {
            key: b("m"),
            value: b("v"),
            must_exist: true,
            max_len: u64::MAX,
        }),
        Response::NotStored
    );
    assert_eq!(l.apply(Op::Del { keys: keys(&["m"]) }), Response::Int(0));
    // Redis APPEND creates a fresh key without the old expiry.
    assert_eq!(
        l.apply(Op::Append {
            key: b("m"),
            value: b("v"),
            must_exist: false,
            max_len: u64::MAX,
        }),
        Response::Int(1)
    );
    assert_eq!(l.read(ttl("m")), Response::Int(-1));
}

#[test]
fn expired_keys_are_swept_without_being_touched() {
    let mut s = KvStore::new();
    let mut i = 0;
    for k in 0..100 {
        i += 1;
        s.apply(
            i,
            1000,
            &set_exp(&format!("k{k:03}"), "v", Expiry::AfterMs(10 + k)),
        );
    }
    s.apply(1000, 1000, &set("keep", "v"));
    assert_eq!(snapshot_item_count(&s), 101);
    assert_eq!(s.len(), 101);
    // All expire by 1110; each apply removes a few, in expiry order.
    // Reads through the log change nothing.
    s.apply(1001, 2000, &Op::DbSize);
    assert_eq!(snapshot_item_count(&s), 101);
    let mut index = 1001;
    for _ in 0..10 {
        index += 1;
        s.apply(index, 2000, &set("other", "v"));
    }
    assert_eq!(s.len(), 2);
    assert_eq!(snapshot_item_count(&s), 2);
    assert_eq!(
        s.read(0, &Op::Keys { pattern: b("*") }),
        Response::Keys(keys(&["keep", "other"]))
    );
}

/// The item count recorded in a snapshot (expired items not yet removed included).
fn snapshot_item_count(s: &KvStore) -> u64 {
    let snap = s.snapshot();
    u64::from_le_bytes(snap[21..29].try_into().unwrap())
}

// ---- Touch

#[test]
fn touch_sets_expiry_and_counts() {
    let mut l = Log::new(1000);
    l.apply(set("a", "1"));
    l.apply(set("b", "2"));
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["a", "missing", "b"]),
            expiry: Expiry::AfterMs(500),
            get: false
        }),
        Response::Int(2)
    );
    assert_eq!(l.read(ttl("a")), Response::Int(500));
    assert_eq!(l.read(ttl("b")), Response::Int(500));
    // The CAS unique is unchanged by a touch (memcached).
    assert_eq!(l.value("a"), item("1", 0, 1));
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["a"]),
            expiry: Expiry::AtMs(9000),
            get: false
        }),
        Response::Int(1)
    );
    assert_eq!(l.read(ttl("a")), Response::Int(8000));
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["missing"]),
            expiry: Expiry::AfterMs(500),
            get: false
        }),
        Response::Int(0)
    );
    assert_eq!(l.value("missing"), None);
    // Keep changes nothing and counts existing keys.
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["a", "x"]),
            expiry: Expiry::Keep,
            get: false
        }),
        Response::Int(1)
    );
    assert_eq!(l.read(ttl("a")), Response::Int(8000));
    // The new expiry takes effect.
    l.at(1500);
    assert_eq!(l.value("b"), None);
    assert_eq!(l.value("a"), item("1", 0, 1));
}

#[test]
fn touch_persist() {
    let mut l = Log::new(1000);
    l.apply(set_exp("a", "1", Expiry::AfterMs(100)));
    l.apply(set("b", "2"));
    let persist = |k: &str| Op::Touch {
        keys: keys(&[k]),
        expiry: Expiry::None,
        get: false,
    };
    assert_eq!(l.apply(persist("a")), Response::Int(1));
    assert_eq!(l.read(ttl("a")), Response::Int(-1));
    assert_eq!(l.apply(persist("a")), Response::Int(0));
    assert_eq!(l.apply(persist("b")), Response::Int(0));
    assert_eq!(l.apply(persist("missing")), Response::Int(0));
    l.at(5000);
    assert_eq!(l.value("a"), item("1", 0, 1));
}

#[test]
fn touch_with_a_past_expiry_deletes() {
    let mut l = Log::new(1000);
    l.apply(set("a", "1"));
    l.apply(set("b", "2"));
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["a"]),
            expiry: Expiry::AfterMs(-1),
            get: false
        }),
        Response::Int(1)
    );
    assert_eq!(l.value("a"), None);
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["b"]),
            expiry: Expiry::AtMs(999),
            get: false
        }),
        Response::Int(1)
    );
    assert_eq!(l.read(Op::DbSize), Response::Int(0));
    assert_eq!(snapshot_item_count(&l.s), 0);
}

#[test]
fn touch_with_get_is_gat() {
    let mut l = Log::new(1000);
    l.apply(set_full("a", "1", 9, Expiry::None, Cond::Always, false));
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["a", "missing"]),
            expiry: Expiry::AfterMs(100),
            get: true
        }),
        items(vec![item("1", 9, 1), None])
    );
    assert_eq!(l.read(ttl("a")), Response::Int(100));
    // gat with a negative exptime returns the item, then it is gone.
    assert_eq!(
        l.apply(Op::Touch {
            keys: keys(&["a"]),
            expiry: Expiry::AfterMs(-1),
            get: true
        }),
        items(vec![item("1", 9, 1)])
    );
    assert_eq!(l.value("a"), None);
}

// ---- MSet, Cas, Del

#[test]
fn mset() {
    let mut l = Log::new(1000);
    l.apply(set_full(
        "a",
        "old",
        3,
        Expiry::AfterMs(10),
        Cond::Always,
        false,
    ));
    assert_eq!(
        l.apply(Op::MSet {
            pairs: vec![(b("a"), b("1")), (b("b"), b("2")), (b("a"), b("3"))]
        }),
        Response::Ok
    );
    assert_eq!(l.value("a"), item("3", 0, 2));
    assert_eq!(l.value("b"), item("2", 0, 2));
    assert_eq!(l.read(ttl("a")), Response::Int(-1));
    l.at(2000);
    assert_eq!(l.read(Op::DbSize), Response::Int(2));
}

#[test]
fn cas() {
    let mut l = Log::new(1000);
    let cas = |unique, value: &str, expiry| Op::Cas {
        key: b("k"),
        value: b(value),
        flags: 4,
        expiry,
        unique,
    };
    assert_eq!(l.apply(cas(1, "x", Expiry::None)), Response::NotFound);
    l.apply(set("k", "v")); // index 2
    assert_eq!(l.apply(cas(1, "x", Expiry::None)), Response::CasMismatch);
    assert_eq!(l.value("k"), item("v", 0, 2));
    assert_eq!(l.apply(cas(2, "x", Expiry::AfterMs(50))), Response::Ok); // index 4
    assert_eq!(l.value("k"), item("x", 4, 4));
    assert_eq!(l.read(ttl("k")), Response::Int(50));
    // The old unique no longer works.
    assert_eq!(l.apply(cas(2, "y", Expiry::None)), Response::CasMismatch);
    assert_eq!(l.apply(cas(4, "y", Expiry::Keep)), Response::Ok); // index 6
    assert_eq!(l.read(ttl("k")), Response::Int(50));
    assert_eq!(l.apply(cas(6, "z", Expiry::None)), Response::Ok);
    assert_eq!(l.read(ttl("k")), Response::Int(-1));
    // A touch does not change the unique, so a cas after it still succeeds.
    l.apply(Op::Touch {
        keys: keys(&["k"]),
        expiry: Expiry::AfterMs(100),
        get: false,
    });
    assert_eq!(l.apply(cas(7, "w", Expiry::None)), Response::Ok);
    // A cas with an expiry in the past stores nothing that survives.
    let idx = l.index;
    assert_eq!(l.apply(cas(idx, "gone", Expiry::AfterMs(-1))), Response::Ok);
    assert_eq!(l.value("k"), None);
}

#[test]
fn del() {
    let mut l = Log::new(1000);
    l.apply(set("a", "1"));
    l.apply(set("b", "2"));
    l.apply(set_exp("c", "3", Expiry::AfterMs(10)));
    l.at(1010);
    assert_eq!(
        l.apply(Op::Del {
            keys: keys(&["a", "a", "c", "zz", "b"])
        }),
        Response::Int(2)
    );
    assert_eq!(l.read(Op::DbSize), Response::Int(0));
    assert_eq!(snapshot_item_count(&l.s), 0);
    assert_eq!(l.apply(Op::Del { keys: vec![] }), Response::Int(0));
}

// ---- Counters

#[test]
fn incrby() {
    let mut l = Log::new(1000);
    let incr = |k: &str, delta| Op::IncrBy { key: b(k), delta };
    assert_eq!(l.apply(incr("n", 5)), Response::Int(5));
    assert_eq!(l.value("n"), item("5", 0, 1));
    assert_eq!(l.apply(incr("n", -7)), Response::Int(-2));
    assert_eq!(l.value("n"), item("-2", 0, 2));
    // Keeps flags and expiry; the unique moves.
    l.apply(set_full(
        "f",
        "10",
        3,
        Expiry::AfterMs(100),
        Cond::Always,
        false,
    ));
    assert_eq!(l.apply(incr("f", 1)), Response::Int(11));
    assert_eq!(l.value("f"), item("11", 3, 4));
    assert_eq!(l.read(ttl("f")), Response::Int(100));
    // Not an integer: the value is untouched.
    for bad in [
        "abc",
        "",
        " 1",
        "1 ",
        "01",
        "+1",
        "1.5",
        "-0",
        "9223372036854775808",
    ] {
        l.apply(set("x", bad));
        let idx = l.index;
        assert_eq!(l.apply(incr("x", 1)), err(ERR_NOT_INTEGER), "{bad:?}");
        assert_eq!(l.value("x"), item(bad, 0, idx));
    }
    // Overflow both ways.
    l.apply(set("m", "9223372036854775807"));
    assert_eq!(l.apply(incr("m", 1)), err(ERR_OVERFLOW));
    assert_eq!(l.apply(incr("m", 0)), Response::Int(i64::MAX));
    l.apply(set("m", "-9223372036854775808"));
    assert_eq!(l.apply(incr("m", -1)), err(ERR_OVERFLOW));
    assert_eq!(l.apply(incr("m", i64::MAX)), Response::Int(-1));
    assert_eq!(l.apply(incr("new", i64::MIN)), Response::Int(i64::MIN));
    assert_eq!(l.value("new").unwrap().value, b("-9223372036854775808"));
}

#[test]
fn mcincr() {
    let mut l = Log::new(1000);
    let incr = |k: &str, delta| Op::McIncr {
        key: b(k),
        delta,
        decr: false,
    };
    let decr = |k: &str, delta| Op::McIncr {
        key: b(k),
        delta,
        decr: true,
    };
    assert_eq!(l.apply(incr("n", 1)), Response::NotFound);
    assert_eq!(l.value("n"), None);
    l.apply(set_full(
        "n",
        "10",
        8,
        Expiry::AfterMs(100),
        Cond::Always,
        false,
    ));
    assert_eq!(l.apply(incr("n", 5)), Response::UInt(15));
    assert_eq!(l.value("n"), item("15", 8, 3));
    assert_eq!(l.read(ttl("n")), Response::Int(100));
    assert_eq!(l.apply(decr("n", 6)), Response::UInt(9));
    assert_eq!(l.value("n"), item("9", 8, 4));
    // decr stops at 0.
    assert_eq!(l.apply(decr("n", 100)), Response::UInt(0));
    assert_eq!(l.value("n").unwrap().value, b("0"));
    // incr wraps at 2^64.
    l.apply(set("w", "18446744073709551615"));
    assert_eq!(l.apply(incr("w", 2)), Response::UInt(1));
    // Leading zeros are fine.
    l.apply(set("z", "007"));
    assert_eq!(l.apply(incr("z", 1)), Response::UInt(8));
    // Non-numeric.
    for bad in ["abc", "", "-1", " 1", "1 ", "18446744073709551616", "1.0"] {
        l.apply(set("x", bad));
        assert_eq!(l.apply(incr("x", 1)), err(ERR_NON_NUMERIC), "{bad:?}");
        assert_eq!(l.apply(decr("x", 1)), err(ERR_NON_NUMERIC), "{bad:?}");
        assert_eq!(l.value("x").unwrap().value, b(bad));
    }
}

// ---- Append and Prepend

#[test]
fn append_and_prepend() {
    let mut l = Log::new(1000);
    let append = |k: &str, v: &str, must_exist| Op::Append {
        key: b(k),
        value: b(v),
        must_exist,
        max_len: u64::MAX,
    };
    let prepend = |k: &str, v: &str| Op::Prepend {
        key: b(k),
        value: b(v),
        max_len: u64::MAX,
    };
    // memcached append/prepend need the key.
    assert_eq!(l.apply(append("a", "x", true)), Response::NotStored);
    assert_eq!(l.apply(prepend("a", "x")), Response::NotStored);
    assert_eq!(l.value("a"), None);
    // Redis APPEND creates it.
    assert_eq!(l.apply(append("a", "hello", false)), Response::Int(5));
    assert_eq!(l.value("a"), item("hello", 0, 3));
    assert_eq!(l.apply(append("a", " world", false)), Response::Int(11));
    assert_eq!(l.apply(append("a", "!", true)), Response::Int(12));
    assert_eq!(l.value("a"), item("hello world!", 0, 5));
    assert_eq!(l.apply(prepend("a", ">> ")), Response::Ok);
    assert_eq!(l.value("a"), item(">> hello world!", 0, 6));
    // Flags and expiry are kept.
    l.apply(set_full(
        "f",
        "b",
        2,
        Expiry::AfterMs(100),
        Cond::Always,
        false,
    ));
    l.apply(append("f", "c", true));
    l.apply(prepend("f", "a"));
    assert_eq!(l.value("f"), item("abc", 2, 9));
    assert_eq!(l.read(ttl("f")), Response::Int(100));
    assert_eq!(l.apply(append("e", "", false)), Response::Int(0));
    assert_eq!(l.value("e"), item("", 0, 10));
}

#[test]
fn append_and_prepend_stop_at_max_len() {
    let mut l = Log::new(1000);
    let append = |k: &str, v: &str, must_exist, max_len| Op::Append {
        key: b(k),
        value: b(v),
        must_exist,
        max_len,
    };
    let prepend = |k: &str, v: &str, max_len| Op::Prepend {
        key: b(k),
        value: b(v),
        max_len,
    };
    let too_large = Response::Error(ERR_TOO_LARGE.into());
    l.apply(set_full("a", "abc", 7, Expiry::None, Cond::Always, false));
    assert_eq!(l.value("a"), item("abc", 7, 1));
    // Exactly at the limit succeeds.
    assert_eq!(l.apply(append("a", "de", false, 5)), Response::Int(5));
    assert_eq!(l.value("a"), item("abcde", 7, 2));
    assert_eq!(l.apply(prepend("a", "_", 6)), Response::Ok);
    assert_eq!(l.value("a"), item("_abcde", 7, 3));
    // One byte over fails and changes nothing, not even the CAS unique.
    for must_exist in [false, true] {
        assert_eq!(l.apply(append("a", "fg", must_exist, 7)), too_large);
        assert_eq!(l.value("a"), item("_abcde", 7, 3));
    }
    assert_eq!(l.apply(prepend("a", "!", 6)), too_large);
    assert_eq!(l.value("a"), item("_abcde", 7, 3));
    assert_eq!(l.apply(prepend("a", "!", 0)), too_large);
    assert_eq!(l.value("a"), item("_abcde", 7, 3));
    // Appending nothing to a value at the limit is fine.
    assert_eq!(l.apply(append("a", "", true, 6)), Response::Int(6));
    assert_eq!(l.apply(prepend("a", "", 6)), Response::Ok);
    // A Redis APPEND creating the key obeys the limit too.
    assert_eq!(l.apply(append("n", "xyz", false, 2)), too_large);
    assert_eq!(l.value("n"), None);
    assert_eq!(l.apply(append("n", "xy", false, 2)), Response::Int(2));
    assert_eq!(l.value("n").unwrap().value, b("xy"));
    // A missing key is NotStored for memcached, whatever the limit.
    assert_eq!(l.apply(append("m", "xyz", true, 0)), Response::NotStored);
    assert_eq!(l.apply(prepend("m", "xyz", 0)), Response::NotStored);
}

#[test]
fn flushall() {
    let mut l = Log::new(1000);
    for i in 0..10 {
        l.apply(set_exp(&format!("k{i}"), "v", Expiry::AfterMs(i * 100)));
    }
    assert_eq!(l.apply(Op::FlushAll), Response::Ok);
    assert!(l.s.is_empty());
    assert_eq!(l.read(Op::DbSize), Response::Int(0));
    assert_eq!(snapshot_item_count(&l.s), 0);
    assert_eq!(l.apply(Op::FlushAll), Response::Ok);
    l.apply(set("a", "1"));
    assert_eq!(l.read(Op::DbSize), Response::Int(1));
}

// ---- Reads

#[test]
fn read_only_ops() {
    let mut l = Log::new(1000);
    l.apply(set("b", "bee"));
    l.apply(set("a", "a"));
    l.apply(set_exp("c", "sea", Expiry::AfterMs(100)));
    l.apply(set("", "empty key"));
    // EXISTS counts a repeated key every time.
    assert_eq!(
        l.read(Op::Exists {
            keys: keys(&["a", "a", "x", "b"])
        }),
        Response::Int(3)
    );
    assert_eq!(l.read(Op::Strlen { key: b("b") }), Response::Int(3));
    assert_eq!(l.read(Op::Strlen { key: b("x") }), Response::Int(0));
    assert_eq!(l.read(ttl("a")), Response::Int(-1));
    assert_eq!(l.read(ttl("c")), Response::Int(100));
    assert_eq!(l.read(ttl("x")), Response::Int(-2));
    assert_eq!(l.read(Op::DbSize), Response::Int(4));
    assert_eq!(
        l.read(Op::Keys { pattern: b("*") }),
        Response::Keys(keys(&["", "a", "b", "c"]))
    );
    assert_eq!(
        l.read(Op::Keys {
            pattern: b("[bc]*")
        }),
        Response::Keys(keys(&["b", "c"]))
    );
    assert_eq!(
        l.read(Op::Keys { pattern: b("?") }),
        Response::Keys(keys(&["a", "b", "c"]))
    );
    l.at(1100);
    assert_eq!(
        l.read(Op::Keys { pattern: b("*") }),
        Response::Keys(keys(&["", "a", "b"]))
    );
    assert_eq!(l.read(Op::DbSize), Response::Int(3));
    assert_eq!(l.s.len(), 4, "the store's own clock is still 1000");
}

#[test]
fn read_refuses_writes() {
    let s = KvStore::new();
    for op in [set("a", "1"), Op::FlushAll, Op::Del { keys: vec![] }] {
        assert!(!op.is_read_only());
        assert_eq!(s.read(0, &op), err(ERR_NOT_READ_ONLY));
    }
    assert_eq!(s, KvStore::new());
}

#[test]
fn read_only_classification() {
    let reads = [
        Op::Get { keys: vec![] },
        Op::Exists { keys: vec![] },
        Op::Strlen { key: vec![] },
        Op::Ttl { key: vec![] },
        Op::DbSize,
        Op::Keys { pattern: vec![] },
        Op::Scan {
            cursor: vec![],
            pattern: None,
            count: 1,
            kind: None,
        },
    ];
    for op in &reads {
        assert!(op.is_read_only(), "{op:?}");
    }
    let writes = [
        set("k", "v"),
        Op::MSet { pairs: vec![] },
        Op::Cas {
            key: vec![],
            value: vec![],
            flags: 0,
            expiry: Expiry::None,
            unique: 0,
        },
        Op::Del { keys: vec![] },
        Op::IncrBy {
            key: vec![],
            delta: 1,
        },
        Op::McIncr {
            key: vec![],
            delta: 1,
            decr: false,
        },
        Op::Append {
            key: vec![],
            value: vec![],
            must_exist: false,
            max_len: u64::MAX,
        },
        Op::Prepend {
            key: vec![],
            value: vec![],
            max_len: u64::MAX,
        },
        Op::Touch {
            keys: vec![],
            expiry: Expiry::None,
            get: false,
        },
        Op::FlushAll,
    ];
    for op in &writes {
        assert!(!op.is_read_only(), "{op:?}");
    }
}

#[test]
fn reads_through_the_log_advance_index_and_clock_only() {
    let mut s = KvStore::new();
    s.apply(1, 1000, &set("a", "1"));
    let d = s.digest();
    assert_eq!(s.apply(2, 2000, &get("a")), items(vec![item("1", 0, 1)]));
    assert_eq!(s.applied_index(), 2);
    assert_eq!(s.now_ms(), 2000);
    assert_eq!(s.digest(), d);
}

#[test]
#[should_panic(expected = "log index")]
fn apply_rejects_a_repeated_index() {
    let mut s = KvStore::new();
    s.apply(5, 0, &set("a", "1"));
    s.apply(5, 0, &set("a", "1"));
}

#[test]
#[should_panic(expected = "log index")]
fn apply_rejects_an_older_index() {
    let mut s = KvStore::new();
    s.apply(5, 0, &set("a", "1"));
    s.apply(4, 0, &Op::DbSize);
}

#[test]
#[should_panic(expected = "log index")]
fn apply_rejects_index_zero() {
    KvStore::new().apply(0, 0, &Op::DbSize);
}

// ---- Scan

fn scan_all(s: &KvStore, now: u64, pattern: Option<&str>, count: u32) -> (Vec<Vec<u8>>, usize) {
    let mut cursor = Vec::new();
    let mut out = Vec::new();
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages < 100_000, "scan does not terminate");
        let r = s.read(
            now,
            &Op::Scan {
                cursor: cursor.clone(),
                pattern: pattern.map(b),
                count,
                kind: None,
            },
        );
        let Response::ScanPage { next, keys } = r else {
            panic!("{r:?}")
        };
        assert!(keys.len() <= count.max(1) as usize + 1);
        out.extend(keys);
        if next.is_empty() {
            return (out, pages);
        }
        cursor = next;
    }
}

#[test]
fn scan_covers_every_key_exactly_once() {
    let mut s = KvStore::new();
    let mut index = 0;
    let mut all = Vec::new();
    for i in 0..257u32 {
        index += 1;
        let k = format!("key:{}", i * 7919 % 1000);
        s.apply(index, 1000, &set(&k, "v"));
        all.push(b(&k));
    }
    index += 1;
    s.apply(index, 1000, &set("", "the empty key"));
    all.push(vec![]);
    all.sort();
    all.dedup();
    for count in [0, 1, 2, 3, 10, 100, 256, 257, 258, 1000, u32::MAX] {
        let (got, pages) = scan_all(&s, 1000, None, count);
        assert_eq!(got, all, "count {count}");
        if count >= 258 {
            assert_eq!(pages, 1);
        }
    }
    // With a pattern: exactly the matching keys, each once.
    let want: Vec<_> = all.iter().filter(|k| k.ends_with(b"7")).cloned().collect();
    for count in [1, 5, 1000] {
        assert_eq!(scan_all(&s, 1000, Some("*7"), count).0, want);
    }
    assert!(scan_all(&s, 1000, Some("nothing*"), 3).0.is_empty());
}

#[test]
fn scan_details() {
    let mut l = Log::new(1000);
    let scan = |cursor: &str, count| Op::Scan {
        cursor: b(cursor),
        pattern: None,
        count,
        kind: None,
    };
    // Empty store: one empty page, done.
    assert_eq!(
        l.read(scan("", 10)),
        Response::ScanPage {
            next: vec![],
            keys: vec![]
        }
    );
    for k in ["a", "b", "c", "d"] {
        l.apply(set(k, "v"));
    }
    l.apply(set_exp("bb", "v", Expiry::AfterMs(10)));
    assert_eq!(
        l.read(scan("", 2)),
        Response::ScanPage {
            next: b("b"),
            keys: keys(&["a", "b"])
        }
    );
    // The cursor need not be a key.
    assert_eq!(
        l.read(scan("a0", 2)),
        Response::ScanPage {
            next: b("bb"),
            keys: keys(&["b", "bb"])
        }
    );
    // Expired keys are examined (they count) but not returned.
    l.at(2000);
    assert_eq!(
        l.read(scan("b", 1)),
        Response::ScanPage {
            next: b("bb"),
            keys: vec![]
        }
    );
    // The last page says done even when it is full.
    assert_eq!(
        l.read(scan("b", 3)),
        Response::ScanPage {
            next: vec![],
            keys: keys(&["c", "d"])
        }
    );
    assert_eq!(
        l.read(scan("d", 3)),
        Response::ScanPage {
            next: vec![],
            keys: vec![]
        }
    );
    // A page never ends at the empty key (an empty cursor means "start" and "done").
    l.apply(set("", "v"));
    assert_eq!(
        l.read(scan("", 1)),
        Response::ScanPage {
            next: b("a"),
            keys: keys(&["", "a"])
        }
    );
}

#[test]
fn scan_survives_concurrent_writes() {
    // Keys present for the whole scan are returned exactly once even if others come and go.
    let mut s = KvStore::new();
    let mut index = 0;
    for i in 0..100 {
        index += 1;
        s.apply(index, 0, &set(&format!("stable{i:03}"), "v"));
    }
    let mut cursor = Vec::new();
    let mut seen = Vec::new();
    let mut round = 0u64;
    loop {
        // Keys come and go between pages, all around the cursor.
        round += 1;
        index += 1;
        s.apply(
            index,
            0,
            &set(&format!("stable{:03}x", round * 37 % 100), "v"),
        );
        index += 1;
        s.apply(
            index,
            0,
            &Op::Del {
                keys: vec![format!("stable{:03}x", (round - 1) * 37 % 100).into_bytes()],
            },
        );
        let Response::ScanPage { next, keys } = s.read(
            0,
            &Op::Scan {
                cursor,
                pattern: Some(b("stable???")),
                count: 7,
                kind: None,
            },
        ) else {
            panic!()
        };
        seen.extend(keys);
        if next.is_empty() {
            break;
        }
        cursor = next;
    }
    let want: Vec<_> = (0..100)
        .map(|i| format!("stable{i:03}").into_bytes())
        .collect();
    assert_eq!(seen, want);
}

// ---- Snapshots and determinism

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn key(&mut self) -> Vec<u8> {
        format!("k{}", self.below(40)).into_bytes()
    }

    fn value(&mut self) -> Vec<u8> {
        match self.below(4) {
            0 => self.below(1000).to_string().into_bytes(),
            1 => (self.below(3) as i64 - 1).to_string().into_bytes(),
            2 => vec![],
            _ => (0..self.below(12)).map(|_| self.below(256) as u8).collect(),
        }
    }

    fn expiry(&mut self) -> Expiry {
        match self.below(6) {
            0 | 1 => Expiry::None,
            2 => Expiry::Keep,
            3 => Expiry::AfterMs(self.below(3000) as i64 - 100),
            4 => Expiry::AtMs(self.below(100_000)),
            _ => Expiry::AfterMs(self.below(500) as i64),
        }
    }

    /// Mostly no limit, sometimes one values run into.
    fn max_len(&mut self) -> u64 {
        if self.below(3) == 0 {
            self.below(24)
        } else {
            u64::MAX
        }
    }

    fn keys(&mut self) -> Vec<Vec<u8>> {
        (0..self.below(4)).map(|_| self.key()).collect()
    }

    fn op(&mut self, last_index: u64) -> Op {
        match self.below(20) {
            0 => Op::Get { keys: self.keys() },
            1 => Op::Exists { keys: self.keys() },
            2 => Op::Strlen { key: self.key() },
            3 => Op::Ttl { key: self.key() },
            4 => Op::DbSize,
            5 => Op::Keys { pattern: b("k1*") },
            6 => Op::Scan {
                cursor: if self.below(2) == 0 {
                    vec![]
                } else {
                    self.key()
                },
                pattern: None,
                count: self.below(10) as u32,
                kind: None,
            },
            7..=9 => Op::Set {
                key: self.key(),
                value: self.value(),
                flags: self.below(4) as u32,
                expiry: self.expiry(),
                cond: [Cond::Always, Cond::IfAbsent, Cond::IfPresent][self.below(3) as usize],
                get_old: self.below(2) == 0,
            },
            10 => Op::MSet {
                pairs: (0..self.below(4))
                    .map(|_| (self.key(), self.value()))
                    .collect(),
            },
            11 => Op::Cas {
                key: self.key(),
                value: self.value(),
                flags: 1,
                expiry: self.expiry(),
                unique: last_index.saturating_sub(self.below(30)),
            },
            12 => Op::Del { keys: self.keys() },
            13 => Op::IncrBy {
                key: self.key(),
                delta: self.below(200) as i64 - 100,
            },
            14 => Op::McIncr {
                key: self.key(),
                delta: self.below(200),
                decr: self.below(2) == 0,
            },
            15 => Op::Append {
                key: self.key(),
                value: self.value(),
                must_exist: self.below(2) == 0,
                max_len: self.max_len(),
            },
            16 => Op::Prepend {
                key: self.key(),
                value: self.value(),
                max_len: self.max_len(),
            },
            17 | 18 => Op::Touch {
                keys: self.keys(),
                expiry: self.expiry(),
                get: self.below(2) == 0,
            },
            _ => {
                if self.below(20) == 0 {
                    Op::FlushAll
                } else {
                    Op::DbSize
                }
            }
        }
    }
}

/// Generates `n` entries (index, time, op); time mostly moves forward, sometimes back a bit.
fn workload(seed: u64, n: usize) -> Vec<(u64, u64, Op)> {
    let mut rng = Rng(seed);
    let mut index = 0;
    let mut now = 50_000;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        index += 1 + rng.below(3);
        now = if rng.below(10) == 0 {
            now - rng.below(200)
        } else {
            now + rng.below(60)
        };
        out.push((index, now, rng.op(index)));
    }
    out
}

#[test]
fn determinism() {
    for seed in 1..=20 {
        let w = workload(seed, 2000);
        let mut a = KvStore::new();
        let mut b = KvStore::new();
        let mut kinds = std::collections::BTreeSet::new();
        for (index, now, op) in &w {
            let ra = a.apply(*index, *now, op);
            let rb = b.apply(*index, *now, op);
            assert_eq!(ra, rb);
            assert_eq!(a.digest(), b.digest());
            kinds.insert(match ra {
                Response::Items(v) if v.iter().any(Option::is_some) => "items",
                Response::Error(_) => "error",
                r => match r {
                    Response::Ok => "ok",
                    Response::NotStored => "not stored",
                    Response::CasMismatch => "cas mismatch",
                    Response::NotFound => "not found",
                    Response::Int(_) => "int",
                    Response::UInt(_) => "uint",
                    Response::Keys(k) if !k.is_empty() => "keys",
                    Response::ScanPage { keys, .. } if !keys.is_empty() => "scan",
                    _ => "other",
                },
            });
        }
        // The workload reaches every kind of result.
        assert_eq!(kinds.len(), 11, "{kinds:?}");
        assert_eq!(a, b);
        assert_eq!(a.snapshot(), b.snapshot());
        // A different workload ends elsewhere.
        let mut c = KvStore::new();
        for (index, now, op) in workload(seed + 1000, 2000) {
            c.apply(index, now, &op);
        }
        assert_ne!(a.digest(), c.digest());
    }
}

#[test]
fn snapshot_restore_round_trip_behaves_the_same_afterwards() {
    for seed in 1..=10 {
        let w = workload(seed, 3000);
        let (first, rest) = w.split_at(1500);
        let mut a = KvStore::new();
        for (index, now, op) in first {
            a.apply(*index, *now, op);
        }
        let snap = a.snapshot();
        let mut b = KvStore::restore(&snap).expect("restore");
        assert_eq!(b, a);
        assert_eq!(b.digest(), a.digest());
        assert_eq!(b.applied_index(), a.applied_index());
        assert_eq!(b.now_ms(), a.now_ms());
        assert_eq!(b.len(), a.len());
        assert_eq!(b.snapshot(), snap);
        for (index, now, op) in rest {
            assert_eq!(a.apply(*index, *now, op), b.apply(*index, *now, op));
            assert_eq!(a.read(*now + 500, op), b.read(*now + 500, op));
        }
        assert_eq!(a.digest(), b.digest());
        assert_eq!(a, b);
    }
}

#[test]
fn snapshot_of_an_empty_store() {
    let s = KvStore::new();
    let r = KvStore::restore(&s.snapshot()).unwrap();
    assert_eq!(r, s);
    assert!(r.is_empty());
    assert_eq!(r.applied_index(), 0);
    assert_eq!(r.digest(), s.digest());
}

#[test]
fn restore_keeps_expiries_and_the_clock() {
    let mut s = KvStore::new();
    s.apply(1, 10_000, &set_exp("k", "v", Expiry::AfterMs(1000)));
    s.apply(2, 10_500, &set_exp("gone", "v", Expiry::AfterMs(1)));
    let mut r = KvStore::restore(&s.snapshot()).unwrap();
    assert_eq!(r.now_ms(), 10_500);
    assert_eq!(r.read(0, &ttl("k")), Response::Int(500));
    assert_eq!(r.read(0, &get("gone")), items(vec![item("v", 0, 2)]));
    assert_eq!(r.apply(3, 11_000, &get("k")), items(vec![None]));
    assert_eq!(r.len(), 0);
    // The restored store refuses indices it already applied.
    let res = std::panic::catch_unwind(move || {
        let mut r = KvStore::restore(&s.snapshot()).unwrap();
        r.apply(2, 0, &Op::DbSize);
    });
    assert!(res.is_err());
}

#[test]
fn digest_covers_values_flags_cas_and_expiry() {
    let base = || {
        let mut s = KvStore::new();
        s.apply(1, 1000, &set("a", "1"));
        s
    };
    let d = base().digest();
    assert_eq!(base().digest(), d);
    let variants = [
        set("a", "2"),
        set_full("a", "1", 1, Expiry::None, Cond::Always, false),
        set("a", "1"), // same value, newer CAS unique
        set_exp("a", "1", Expiry::AfterMs(10)),
        set("b", "1"),
        Op::Del { keys: keys(&["a"]) },
    ];
    for op in variants {
        let mut s = base();
        s.apply(2, 1000, &op);
        assert_ne!(s.digest(), d, "{op:?}");
    }
    // Keys and values are delimited: ("ab","c") differs from ("a","bc").
    let mut x = KvStore::new();
    x.apply(1, 0, &set("ab", "c"));
    let mut y = KvStore::new();
    y.apply(1, 0, &set("a", "bc"));
    assert_ne!(x.digest(), y.digest());
}

#[test]
fn restore_rejects_corruption_without_panicking() {
    let mut s = KvStore::new();
    for (index, now, op) in workload(7, 300) {
        s.apply(index, now, &op);
    }
    let snap = s.snapshot();
    assert!(KvStore::restore(&snap).is_ok());
    // Every truncation.
    // Whole in memory the checksum is checked first; streamed, last: both refuse.
    for n in 0..snap.len() {
        assert!(KvStore::restore(&snap[..n]).is_err(), "prefix {n}");
        assert!(KvStore::restore_from(&snap[..n]).is_err(), "prefix {n}");
    }
    // A trailing byte.
    let mut longer = snap.clone();
    longer.push(0);
    assert!(KvStore::restore(&longer).is_err());
    // Every single-bit flip.
    for i in 0..snap.len() {
        for bit in [0, 3, 7] {
            let mut c = snap.clone();
            c[i] ^= 1 << bit;
            assert!(KvStore::restore(&c).is_err(), "flip byte {i} bit {bit}");
            assert!(
                KvStore::restore_from(&c[..]).is_err(),
                "flip byte {i} bit {bit}"
            );
        }
    }
    // Garbage.
    let mut rng = Rng(0x5eed);
    for _ in 0..3000 {
        let len = rng.below(80) as usize;
        let g: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let _ = KvStore::restore(&g);
        let mut g2 = b("WKVS\x02");
        g2.extend(g);
        let _ = KvStore::restore(&g2);
    }
}

/// 64-bit FNV-1a, as the snapshot trailer uses.
fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A snapshot body with a correct checksum appended (xxh3-64, format version 2).
fn sealed(body: &[u8]) -> Vec<u8> {
    let mut v = body.to_vec();
    v.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(body).to_le_bytes());
    v
}

fn header(applied: u64, now: u64, count: u64) -> Vec<u8> {
    let mut v = b("WKVS\x03");
    v.extend_from_slice(&applied.to_le_bytes());
    v.extend_from_slice(&now.to_le_bytes());
    v.extend_from_slice(&count.to_le_bytes());
    v
}

fn snap_item(key: &str, value: &str, flags: u32, cas: u64, expiry: Option<u64>) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&(key.len() as u32).to_le_bytes());
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(&(value.len() as u32).to_le_bytes());
    v.extend_from_slice(value.as_bytes());
    v.extend_from_slice(&flags.to_le_bytes());
    v.extend_from_slice(&cas.to_le_bytes());
    match expiry {
        None => v.push(0),
        Some(t) => {
            v.push(1);
            v.extend_from_slice(&t.to_le_bytes());
        }
    }
    // Its type: a string.
    v.push(0);
    v
}

#[test]
fn snapshot_layout_is_as_documented() {
    let mut s = KvStore::new();
    s.apply(
        3,
        100,
        &set_full("a", "x", 9, Expiry::AtMs(500), Cond::Always, false),
    );
    s.apply(4, 200, &set("b", "yz"));
    let mut body = header(4, 200, 2);
    body[4] = 4;
    body.extend(snap_item("a", "x", 9, 3, Some(500)));
    body.extend(snap_item("b", "yz", 0, 4, None));
    // WATCH's part: the floor, and no touched key.
    body.extend_from_slice(&[0; 16]);
    assert_eq!(s.snapshot(), sealed(&body));
    // A touched key: its name and index, in key order after the floor.
    s.apply(5, 300, &Op::Del { keys: vec![b("b")] });
    let mut body = header(5, 300, 1);
    body[4] = 4;
    body.extend(snap_item("a", "x", 9, 3, Some(500)));
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&1u64.to_le_bytes());
    body.extend_from_slice(&1u32.to_le_bytes());
    body.push(b'b');
    body.extend_from_slice(&5u64.to_le_bytes());
    assert_eq!(s.snapshot(), sealed(&body));
    assert_eq!(KvStore::restore(&sealed(&body)).unwrap(), s);
    // A touched key after the applied index is refused.
    let n = body.len();
    body[n - 8..].copy_from_slice(&6u64.to_le_bytes());
    assert!(KvStore::restore(&sealed(&body)).is_err());
    // Version 2 (no type byte: strings only) is still restored.
    let mut s = KvStore::new();
    s.apply(
        3,
        100,
        &set_full("a", "x", 9, Expiry::AtMs(500), Cond::Always, false),
    );
    s.apply(4, 200, &set("b", "yz"));
    let mut v2 = header(4, 200, 2);
    v2[4] = 2;
    for item in [
        snap_item("a", "x", 9, 3, Some(500)),
        snap_item("b", "yz", 0, 4, None),
    ] {
        v2.extend_from_slice(&item[..item.len() - 1]);
    }
    assert_eq!(KvStore::restore(&sealed(&v2)).unwrap(), s);
}

#[test]
fn restore_validates_contents_behind_a_good_checksum() {
    let ok = |items: &[Vec<u8>]| {
        let mut body = header(10, 0, items.len() as u64);
        for i in items {
            body.extend_from_slice(i);
        }
        KvStore::restore(&sealed(&body))
    };
    assert!(ok(&[
        snap_item("a", "1", 0, 10, None),
        snap_item("b", "2", 0, 1, Some(5))
    ])
    .is_ok());
    // Keys out of order, or repeated.
    assert!(ok(&[
        snap_item("b", "1", 0, 1, None),
        snap_item("a", "2", 0, 1, None)
    ])
    .is_err());
    assert!(ok(&[
        snap_item("a", "1", 0, 1, None),
        snap_item("a", "2", 0, 1, None)
    ])
    .is_err());
    // A CAS unique after the applied index.
    assert!(ok(&[snap_item("a", "1", 0, 11, None)]).is_err());
    // A bad expiry tag, a bad type.
    let mut bad = snap_item("a", "1", 0, 1, None);
    let n = bad.len();
    bad[n - 2] = 2;
    assert!(ok(&[bad]).is_err());
    let mut bad = snap_item("a", "1", 0, 1, None);
    *bad.last_mut().unwrap() = 9;
    assert!(ok(&[bad]).is_err());
    // A collection with a string value, and an empty collection.
    let mut bad = snap_item("a", "1", 0, 1, None);
    *bad.last_mut().unwrap() = 3;
    bad.extend_from_slice(&1u64.to_le_bytes());
    bad.extend_from_slice(&1u32.to_le_bytes());
    bad.push(b'm');
    assert!(ok(&[bad]).is_err());
    let mut empty = snap_item("a", "", 0, 1, None);
    *empty.last_mut().unwrap() = 3;
    empty.extend_from_slice(&0u64.to_le_bytes());
    assert!(ok(&[empty]).is_err());
    let mut one = snap_item("a", "", 0, 1, None);
    *one.last_mut().unwrap() = 3;
    one.extend_from_slice(&1u64.to_le_bytes());
    one.extend_from_slice(&1u32.to_le_bytes());
    one.push(b'm');
    assert!(ok(&[one.clone()]).is_ok());
    // A set member twice.
    let mut twice = one.clone();
    let at = twice.len() - 13;
    twice[at..at + 8].copy_from_slice(&2u64.to_le_bytes());
    twice.extend_from_slice(&1u32.to_le_bytes());
    twice.push(b'm');
    assert!(ok(&[twice]).is_err());
    // A count larger than the items present, or absurdly large.
    let mut body = header(10, 0, 2);
    body.extend(snap_item("a", "1", 0, 1, None));
    assert!(KvStore::restore(&sealed(&body)).is_err());
    let body = header(10, 0, u64::MAX);
    assert!(KvStore::restore(&sealed(&body)).is_err());
    // A key length past the end.
    let mut body = header(10, 0, 1);
    body.extend_from_slice(&u32::MAX.to_le_bytes());
    body.extend_from_slice(&[0; 40]);
    assert!(KvStore::restore(&sealed(&body)).is_err());
    // Wrong magic or version.
    let mut body = header(10, 0, 0);
    body[0] = b'X';
    assert!(KvStore::restore(&sealed(&body)).is_err());
    let mut body = header(10, 0, 0);
    body[4] = 4;
    assert!(KvStore::restore(&sealed(&body)).is_err());
    // Error messages are displayable.
    let e = KvStore::restore(b"short").unwrap_err();
    assert!(!e.to_string().is_empty());
}

#[test]
fn digest_and_accounting_are_kept_on_every_change() {
    for seed in 1..=10 {
        let mut s = KvStore::new();
        for (index, now, op) in workload(seed, 1500) {
            s.apply(index, now, &op);
            // The running digest sum, memory and expiry index equal a recount.
            s.check_invariants();
        }
        let r = KvStore::restore(&s.snapshot()).unwrap();
        r.check_invariants();
        assert_eq!(r.digest(), s.digest());
        assert_eq!(r.used_memory(), s.used_memory());
        assert_eq!(r.held(), s.held());
    }
}

#[test]
fn digest_does_not_depend_on_the_order_items_arrived_in() {
    let mut a = KvStore::new();
    a.apply(1, 1000, &set("x", "1"));
    a.apply(2, 1000, &set("y", "2"));
    let mut b = KvStore::new();
    b.apply(1, 1000, &set("y", "0"));
    b.apply(2, 1000, &set("x", "1"));
    assert_ne!(a.digest(), b.digest(), "y differs in value and CAS");
    let mut c = KvStore::new();
    c.apply(1, 1000, &set("x", "1"));
    c.apply(2, 1000, &set("y", "2"));
    c.apply(3, 1000, &set("z", "3"));
    c.apply(4, 1000, &Op::Del { keys: keys(&["z"]) });
    assert_eq!(a.digest(), c.digest());
}

#[test]
fn memory_is_accounted_and_given_back() {
    let mut s = KvStore::new();
    assert_eq!(s.used_memory(), 0);
    s.apply(1, 1000, &set("k", &"v".repeat(1000)));
    let one = s.used_memory();
    assert!(one > 1000 && one < 1200, "{one}");
    s.apply(2, 1000, &set_exp("e", "v", Expiry::AfterMs(10)));
    assert!(s.used_memory() > one);
    s.apply(3, 1000, &Op::Del { keys: keys(&["e"]) });
    assert_eq!(s.used_memory(), one);
    s.apply(4, 1000, &Op::FlushAll);
    assert_eq!(s.used_memory(), 0);
    assert_eq!(s.held(), 0);
}

#[test]
fn a_snapshot_view_is_unchanged_by_later_writes() {
    let mut s = KvStore::new();
    let w = workload(3, 2000);
    let (first, rest) = w.split_at(1000);
    for (index, now, op) in first {
        s.apply(*index, *now, op);
    }
    let before = s.clone();
    let view = s.snapshot_view();
    for (index, now, op) in rest {
        s.apply(*index, *now, op);
    }
    assert_ne!(s.digest(), before.digest());
    let mut bytes = Vec::new();
    let n = view.write_to(&mut bytes).unwrap();
    assert_eq!(n as usize, bytes.len());
    assert_eq!(bytes, before.snapshot());
    let r = KvStore::restore(&bytes).unwrap();
    assert_eq!(r, before);
    assert_eq!(view.applied_index(), before.applied_index());
}

/// `view` still reads the state `before` was taken of; then it is dropped on another thread,
/// as the replica's snapshot thread drops it.
fn view_reads_then_goes(view: waverunner_kv::store::SnapshotView, before: &[u8]) {
    let mut bytes = Vec::new();
    view.write_to(&mut bytes).unwrap();
    assert_eq!(bytes, before);
    std::thread::spawn(move || drop(view)).join().unwrap();
}

#[test]
fn values_a_view_kept_are_freed_by_the_store_once_the_view_is_gone() {
    let mut l = Log::new(1000);
    for i in 0..100 {
        l.apply(set(&format!("k{i}"), "old"));
    }
    let before = l.s.snapshot();
    let view = l.s.snapshot_view();
    // Overwritten or deleted while the view shares them: the store keeps them.
    for i in 0..90 {
        l.apply(set(&format!("k{i}"), "new"));
    }
    for i in 90..100 {
        l.apply(Op::Del {
            keys: keys(&[&format!("k{i}")]),
        });
    }
    assert_eq!(l.s.buried(), 100);
    // Values written after the view was taken are the store's alone: freed at once.
    l.apply(set("k0", "newer"));
    l.apply(set("fresh", "1"));
    l.apply(Op::Del {
        keys: keys(&["fresh"]),
    });
    assert_eq!(l.s.buried(), 100);
    // Nothing goes while the view may still read it; the view's thread frees none of them:
    // they wait for the store, which frees them in bounded steps.
    assert_eq!(l.s.reclaim(usize::MAX), 0);
    view_reads_then_goes(view, &before);
    assert_eq!(l.s.buried(), 100);
    assert_eq!(l.s.reclaim(30), 30);
    assert_eq!(l.s.buried(), 70);
    // Each item a later view makes the store let go of frees two of the earlier ones first.
    let second = l.s.snapshot_view();
    l.apply(set("k1", "again"));
    assert_eq!(l.s.buried(), 70 - 2 + 1);
    assert_eq!(
        l.s.reclaim(usize::MAX),
        68,
        "the second view's grave stays shut"
    );
    drop(second);
    assert_eq!(l.s.reclaim(usize::MAX), 1);
    assert_eq!(l.s.buried(), 0);
    let cas = l.index;
    assert_eq!(l.value("k1"), item("again", 0, cas));
}

#[test]
fn a_flushall_lets_go_of_the_state_a_piece_at_a_time() {
    let mut l = Log::new(1000);
    for i in 0..100 {
        l.apply(set(&format!("k{i}"), "v"));
    }
    for i in 0..10 {
        l.apply(set_exp(&format!("t{i}"), "v", Expiry::AtMs(1_000_000)));
    }
    let empty = KvStore::new();
    // 110 items and 10 expiry entries, none freed by the FLUSHALL itself but two.
    assert_eq!(l.apply(Op::FlushAll), Response::Ok);
    assert_eq!(
        (l.s.held(), l.s.used_memory(), l.s.digest()),
        (0, 0, empty.digest())
    );
    assert_eq!(l.value("k1"), None);
    assert_eq!(l.s.buried(), 120 - 2);
    l.s.check_invariants();
    assert_eq!(l.s.reclaim(18), 18);
    assert_eq!(l.s.reclaim(usize::MAX), 100);
    assert_eq!(l.s.buried(), 0);

    // While a snapshot view shares the state, nothing of it goes; the view still reads it.
    for i in 0..50 {
        l.apply(set(&format!("k{i}"), "w"));
    }
    let before = l.s.snapshot();
    let view = l.s.snapshot_view();
    l.apply(Op::FlushAll);
    assert_eq!(l.s.buried(), 50);
    assert_eq!(l.s.reclaim(usize::MAX), 0);
    view_reads_then_goes(view, &before);
    assert_eq!(l.s.buried(), 50, "the view's thread freed none of it");
    assert_eq!(l.s.reclaim(usize::MAX), 50);
    assert_eq!(l.s.buried(), 0);
    l.s.check_invariants();
}

#[test]
fn restore_streams_from_a_reader() {
    let mut s = KvStore::new();
    for (index, now, op) in workload(11, 500) {
        s.apply(index, now, &op);
    }
    let snap = s.snapshot();
    // A reader that hands out a few bytes at a time, as a socket or a file may.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(7);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    assert_eq!(KvStore::restore_from(Trickle(&snap)).unwrap(), s);
    assert!(KvStore::restore_from(Trickle(&snap[..snap.len() - 1])).is_err());
}

#[test]
fn sweep_reclaims_expired_items_in_bounded_steps() {
    use waverunner_kv::store::{SWEEP_PER_APPLY, SWEEP_PER_OP};
    let mut s = KvStore::new();
    let n = 2 * SWEEP_PER_OP + 10;
    let mut index = 0;
    for i in 0..n {
        index += 1;
        s.apply(
            index,
            1000,
            &set_exp(&format!("k{i}"), "v", Expiry::AfterMs(5)),
        );
    }
    assert!(!s.expired_waiting(1004));
    assert!(s.expired_waiting(1005));
    // Reads remove nothing.
    index += 1;
    s.apply(index, 2000, &Op::DbSize);
    assert_eq!(s.held(), n);
    assert_eq!(s.len(), 0);
    index += 1;
    let r = s.apply(index, 2000, &Op::Sweep);
    assert_eq!(r, Response::Int(SWEEP_PER_OP as i64));
    assert_eq!(s.held(), n - SWEEP_PER_APPLY - SWEEP_PER_OP);
    while s.expired_waiting(s.now_ms()) {
        index += 1;
        s.apply(index, 2000, &Op::Sweep);
    }
    assert_eq!(s.held(), 0);
    assert_eq!(s.used_memory(), 0);
    s.check_invariants();
}

#[test]
fn a_version_1_snapshot_still_restores() {
    // Version 1 ended with FNV-1a; a replica restarted on a newer build reads it.
    let mut body = b("WKVS\x01");
    body.extend_from_slice(&4u64.to_le_bytes());
    body.extend_from_slice(&200u64.to_le_bytes());
    body.extend_from_slice(&1u64.to_le_bytes());
    let one = snap_item("b", "yz", 0, 4, None);
    // Without version 3's type byte.
    body.extend_from_slice(&one[..one.len() - 1]);
    let mut v1 = body.clone();
    v1.extend_from_slice(&fnv(&body).to_le_bytes());
    let r = KvStore::restore(&v1).expect("a version 1 snapshot");
    assert_eq!(r.read(0, &get("b")), items(vec![item("yz", 0, 4)]));
    // Its checksum is checked too.
    let mut bad = v1.clone();
    bad[20] ^= 1;
    assert!(KvStore::restore(&bad).is_err());
}

/// A batch (a connection's pipeline in one log entry) is its operations applied in order:
/// each sees the ones before it, the results come in order, and the state is what applying
/// them one at a time would leave (but for CAS uniques, which are the entry's index).
#[test]
fn a_batch_applies_its_operations_in_order() {
    let ops = vec![
        set("k", "1"),
        Op::IncrBy {
            key: b("k"),
            delta: 4,
        },
        get("k"),
        Op::Del { keys: keys(&["k"]) },
        get("k"),
        Op::IncrBy {
            key: b("k"),
            delta: 1,
        },
        Op::Append {
            key: b("k"),
            value: b("x"),
            must_exist: false,
            max_len: u64::MAX,
        },
    ];
    let mut one = KvStore::new();
    let mut each = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        each.push(one.apply(1 + i as u64, 1000, op));
    }
    let mut batched = KvStore::new();
    let r = batched.apply(1, 1000, &Op::Batch(ops.clone()));
    let Response::Batch(rs) = r else {
        panic!("a batch answers with a batch: {r:?}")
    };
    assert_eq!(rs.len(), ops.len());
    assert_eq!(rs[1], Response::Int(5));
    assert_eq!(rs[3], Response::Int(1));
    assert_eq!(rs[4], Response::Items(vec![None]));
    assert_eq!(rs[6], Response::Int(2));
    for (i, (a, b)) in rs.iter().zip(&each).enumerate() {
        let strip = |r: &Response| match r {
            Response::Items(v) => Response::Items(
                v.iter()
                    .map(|i| i.clone().map(|i| Item { cas: 0, ..i }))
                    .collect(),
            ),
            r => r.clone(),
        };
        assert_eq!(strip(a), strip(b), "operation {i}");
    }
    assert_eq!(
        batched.read(1000, &get("k")),
        Response::Items(vec![Some(Item {
            value: b("1x"),
            flags: 0,
            cas: 1
        })])
    );
    // A batch of reads is answered by a read, in order; a write in it makes it a write.
    let reads = Op::Batch(vec![get("k"), Op::DbSize, get("nope")]);
    assert!(reads.is_read_only());
    assert_eq!(
        batched.read(1000, &reads),
        Response::Batch(vec![
            Response::Items(vec![Some(Item {
                value: b("1x"),
                flags: 0,
                cas: 1
            })]),
            Response::Int(1),
            Response::Items(vec![None]),
        ])
    );
    assert!(!Op::Batch(vec![get("k"), set("a", "b")]).is_read_only());
    assert!(!Op::Batch(vec![]).is_read_only());
}

// ---- Redis 7 string and keyspace commands (GETDEL … EXPIRETIME)

#[test]
fn getdel_getex_rename_copy() {
    let mut l = Log::new(1000);
    l.apply(set_exp("a", "1", Expiry::AfterMs(5000)));
    // GETDEL: the item, then gone.
    assert_eq!(
        l.apply(Op::GetDel { key: b("a") }),
        items(vec![item("1", 0, 1)])
    );
    assert_eq!(l.value("a"), None);
    assert_eq!(l.apply(Op::GetDel { key: b("a") }), items(vec![None]));
    // GETEX: the item; with an expiry, retimed (CAS unchanged); PERSIST clears it; a time in
    // the past deletes.
    l.apply(set("b", "2"));
    let getex = |e: Option<Expiry>| Op::GetEx {
        key: b("b"),
        expiry: e,
    };
    assert_eq!(l.apply(getex(None)), items(vec![item("2", 0, 4)]));
    assert_eq!(
        l.apply(getex(Some(Expiry::AfterMs(100)))),
        items(vec![item("2", 0, 4)])
    );
    assert_eq!(l.read(ttl("b")), Response::Int(100));
    assert_eq!(l.read(Op::ExpireTime { key: b("b") }), Response::Int(1100));
    assert_eq!(
        l.apply(getex(Some(Expiry::None))),
        items(vec![item("2", 0, 4)])
    );
    assert_eq!(l.read(ttl("b")), Response::Int(-1));
    assert_eq!(l.read(Op::ExpireTime { key: b("b") }), Response::Int(-1));
    assert_eq!(l.read(Op::ExpireTime { key: b("zz") }), Response::Int(-2));
    assert_eq!(
        l.apply(getex(Some(Expiry::AtMs(10)))),
        items(vec![item("2", 0, 4)])
    );
    assert_eq!(l.value("b"), None, "an expiry in the past deletes");
    // RENAME moves the value and expiry; RENAMENX refuses an existing target.
    l.apply(set_exp("c", "3", Expiry::AfterMs(700)));
    l.apply(set("d", "4"));
    let rename = |from: &str, to: &str, nx: bool| Op::Rename {
        from: b(from),
        to: b(to),
        nx,
    };
    assert_eq!(l.apply(rename("c", "d", true)), Response::NotStored);
    assert_eq!(l.apply(rename("c", "e", false)), Response::Ok);
    assert_eq!(l.value("c"), None);
    assert_eq!(l.value("e").unwrap().value, b("3"));
    assert_eq!(l.read(ttl("e")), Response::Int(700));
    assert_eq!(
        l.apply(rename("e", "e", false)),
        Response::Ok,
        "onto itself"
    );
    assert_eq!(l.value("e").unwrap().value, b("3"));
    assert_eq!(l.apply(rename("zz", "y", false)), err("no such key"));
    // COPY: value and expiry; not over an existing key without REPLACE.
    let copy = |from: &str, to: &str, replace: bool| Op::Copy {
        from: b(from),
        to: b(to),
        replace,
    };
    assert_eq!(l.apply(copy("e", "d", false)), Response::Int(0));
    assert_eq!(l.apply(copy("e", "d", true)), Response::Int(1));
    assert_eq!(l.value("d").unwrap().value, b("3"));
    assert_eq!(l.read(ttl("d")), Response::Int(700));
    assert_eq!(l.apply(copy("zz", "f", false)), Response::Int(0));
    l.s.check_invariants();
}

#[test]
fn setrange_getrange_msetnx() {
    let mut l = Log::new(1000);
    let setrange = |k: &str, offset: u64, v: &str| Op::SetRange {
        key: b(k),
        offset,
        value: b(v),
        max_len: 16,
    };
    let getrange = |k: &str, start: i64, end: i64| Op::GetRange {
        key: b(k),
        start,
        end,
    };
    let range = |r: Response| match r {
        Response::Items(mut v) => v.pop().unwrap().unwrap().value,
        r => panic!("{r:?}"),
    };
    // Padding with zero bytes; an empty value creates nothing; past max_len refused.
    assert_eq!(l.apply(setrange("a", 3, "xy")), Response::Int(5));
    assert_eq!(l.value("a").unwrap().value, b("\0\0\0xy"));
    assert_eq!(l.apply(setrange("b", 3, "")), Response::Int(0));
    assert_eq!(l.value("b"), None);
    assert_eq!(l.apply(setrange("a", 0, "Hello")), Response::Int(5));
    assert_eq!(l.apply(setrange("a", 15, "zz")), err(ERR_TOO_LARGE));
    assert_eq!(l.apply(setrange("a", u64::MAX, "z")), err(ERR_TOO_LARGE));
    // GETRANGE as Redis: negative from the end, clamped, empty when crossed or absent.
    assert_eq!(range(l.read(getrange("a", 0, -1))), b("Hello"));
    assert_eq!(range(l.read(getrange("a", 1, 2))), b("el"));
    assert_eq!(range(l.read(getrange("a", -3, -1))), b("llo"));
    assert_eq!(range(l.read(getrange("a", 3, 100))), b("lo"));
    assert_eq!(range(l.read(getrange("a", -100, 0))), b("H"));
    assert_eq!(range(l.read(getrange("a", 3, 1))), b(""));
    assert_eq!(range(l.read(getrange("a", -1, -3))), b(""));
    assert_eq!(range(l.read(getrange("zz", 0, -1))), b(""));
    // MSETNX: all or nothing.
    let msetnx = |pairs: &[(&str, &str)]| Op::MSetNx {
        pairs: pairs.iter().map(|(k, v)| (b(k), b(v))).collect(),
    };
    assert_eq!(l.apply(msetnx(&[("x", "1"), ("a", "2")])), Response::Int(0));
    assert_eq!(l.value("x"), None);
    assert_eq!(l.apply(msetnx(&[("x", "1"), ("y", "2")])), Response::Int(1));
    assert_eq!(l.value("y").unwrap().value, b("2"));
    l.s.check_invariants();
}

#[test]
fn expire_with_nx_xx_gt_lt() {
    use waverunner_kv::ExpireCond::*;
    let mut l = Log::new(1000);
    l.apply(set("k", "v"));
    let exp = |ms: i64, cond| Op::ExpireIf {
        key: b("k"),
        expiry: Expiry::AfterMs(ms),
        cond,
    };
    // No expiry: XX and GT fail (none counts as infinite), NX and LT hold.
    assert_eq!(l.apply(exp(100, Xx)), Response::Int(0));
    assert_eq!(l.apply(exp(100, Gt)), Response::Int(0));
    assert_eq!(l.apply(exp(100, XxLt)), Response::Int(0));
    assert_eq!(l.apply(exp(100, Lt)), Response::Int(1));
    assert_eq!(l.read(ttl("k")), Response::Int(100));
    assert_eq!(l.apply(exp(50, Nx)), Response::Int(0), "it has one now");
    assert_eq!(l.apply(exp(50, Gt)), Response::Int(0));
    assert_eq!(l.apply(exp(200, Gt)), Response::Int(1));
    assert_eq!(l.apply(exp(300, XxLt)), Response::Int(0));
    assert_eq!(l.apply(exp(150, XxLt)), Response::Int(1));
    assert_eq!(l.apply(exp(400, Xx)), Response::Int(1));
    assert_eq!(l.read(ttl("k")), Response::Int(400));
    // A past time under a condition that holds deletes; an absent key is 0.
    assert_eq!(l.apply(exp(-1, Lt)), Response::Int(1));
    assert_eq!(l.value("k"), None);
    assert_eq!(l.apply(exp(100, Lt)), Response::Int(0));
    l.s.check_invariants();
}

#[test]
fn incrbyfloat_setbit_getbit_randomkey() {
    use waverunner_kv::store::{ERR_NAN_OR_INF, ERR_NOT_FLOAT};
    let mut l = Log::new(1000);
    let incr = |k: &str, d: f64| Op::IncrByFloat {
        key: b(k),
        delta: d.to_bits(),
    };
    let text = |r: Response| match r {
        Response::Items(mut v) => String::from_utf8(v.pop().unwrap().unwrap().value).unwrap(),
        r => panic!("{r:?}"),
    };
    assert_eq!(text(l.apply(incr("f", 10.5))), "10.5");
    assert_eq!(text(l.apply(incr("f", 0.1))), "10.6");
    l.apply(set("g", "5.0e3"));
    assert_eq!(text(l.apply(incr("g", 17179869184.0))), "17179874184");
    l.apply(set("h", "5.0"));
    assert_eq!(text(l.apply(incr("h", -1.1))), "3.9");
    let third = 1.0 / 41.0;
    assert_eq!(text(l.apply(incr("z", third))), format!("{third}"));
    assert_eq!(text(l.apply(incr("z", -third))), "0", "no negative zero");
    l.apply(set("s", " 11"));
    assert_eq!(l.apply(incr("s", 1.0)), err(ERR_NOT_FLOAT));
    l.apply(set("n", "0"));
    assert_eq!(l.apply(incr("n", f64::INFINITY)), err(ERR_NAN_OR_INF));
    assert_eq!(l.value("n").unwrap().value, b("0"));
    // Bits: bit 0 is the first byte's most significant; growth pads with zero bytes.
    let setbit = |k: &str, offset: u64, bit: bool| Op::SetBit {
        key: b(k),
        offset,
        bit,
        max_len: 8,
    };
    let getbit = |k: &str, offset: u64| Op::GetBit { key: b(k), offset };
    assert_eq!(l.apply(setbit("b", 1, true)), Response::Int(0));
    assert_eq!(l.value("b").unwrap().value, vec![0x40]);
    assert_eq!(l.apply(setbit("b", 1, true)), Response::Int(1));
    assert_eq!(l.apply(setbit("b", 15, true)), Response::Int(0));
    assert_eq!(l.value("b").unwrap().value, vec![0x40, 0x01]);
    assert_eq!(l.apply(setbit("b", 1, false)), Response::Int(1));
    assert_eq!(l.read(getbit("b", 15)), Response::Int(1));
    assert_eq!(l.read(getbit("b", 1)), Response::Int(0));
    assert_eq!(l.read(getbit("b", 1000)), Response::Int(0));
    assert_eq!(l.read(getbit("nope", 0)), Response::Int(0));
    assert_eq!(l.apply(setbit("b", 64, true)), err(ERR_TOO_LARGE));
    // RANDOMKEY: the same seed the same key (so replicas agree); over seeds, keys spread
    // even when they share a prefix; none in an empty store.
    let mut r = Log::new(1000);
    assert_eq!(r.read(Op::RandomKey { seed: 1 }), items(vec![None]));
    for i in 0..50 {
        r.apply(set(&format!("user:{i}"), "x"));
    }
    let pick = |r: &mut Log, seed| match r.read(Op::RandomKey { seed }) {
        Response::Items(mut v) => v.pop().unwrap().unwrap().value,
        x => panic!("{x:?}"),
    };
    assert_eq!(pick(&mut r, 42), pick(&mut r, 42));
    let seen: std::collections::BTreeSet<Vec<u8>> = (0..200).map(|s| pick(&mut r, s)).collect();
    assert!(seen.len() >= 10, "only {} keys picked", seen.len());
    l.s.check_invariants();
}

#[test]
fn memcached_binary_incr_creates_with_its_initial_value() {
    let mut l = Log::new(1000);
    let incr = |initial: Option<u64>| Op::McIncrOr {
        key: b("n"),
        delta: 3,
        decr: false,
        initial,
        expiry: Expiry::AfterMs(500),
    };
    assert_eq!(
        l.apply(incr(None)),
        Response::NotFound,
        "no initial: not created"
    );
    assert_eq!(
        l.apply(incr(Some(10))),
        Response::UInt(10),
        "created, not incremented"
    );
    assert_eq!(l.read(ttl("n")), Response::Int(500));
    assert_eq!(l.apply(incr(Some(10))), Response::UInt(13));
    l.apply(set("s", "x"));
    let on_s = Op::McIncrOr {
        key: b("s"),
        delta: 1,
        decr: true,
        initial: Some(0),
        expiry: Expiry::None,
    };
    assert_eq!(l.apply(on_s), err(ERR_NON_NUMERIC));
}
