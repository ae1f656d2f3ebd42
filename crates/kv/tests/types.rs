//! Hashes and sets through the store, and what every collection type shares: keyspace
//! commands on them, expiry, WRONGTYPE, snapshots and the digest. Replies are Redis 7.0's.

use waverunner_kv::{Cond, Expiry, KvStore, Op, Reply, Response};

struct S {
    store: KvStore,
    index: u64,
    now: u64,
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(b(s))
}

fn int(n: i64) -> Reply {
    Reply::Int(n)
}

fn arr(v: &[&str]) -> Reply {
    Reply::Array(v.iter().map(|s| bulk(s)).collect())
}

fn set(v: &[&str]) -> Reply {
    Reply::Set(v.iter().map(|s| bulk(s)).collect())
}

fn status(s: &str) -> Reply {
    Reply::Status(s.into())
}

fn error(s: &str) -> Reply {
    Reply::Error(s.into())
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl S {
    fn new() -> S {
        S {
            store: KvStore::new(),
            index: 0,
            now: 1_700_000_000_000,
        }
    }

    fn op(&mut self, op: Op) -> Response {
        self.index += 1;
        let r = self.store.apply(self.index, self.now, &op);
        self.store.check_invariants();
        r
    }

    /// Applies a command given as words, with `seed`.
    fn seeded(&mut self, line: &str, seed: u64) -> Reply {
        let args = line.split(' ').map(b).collect();
        match self.op(Op::Cmd { args, seed }) {
            Response::Reply(r) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn c(&mut self, line: &str) -> Reply {
        self.seeded(line, 7)
    }

    /// A read-only command answered by `read` without the log: the same as applying it.
    fn read(&self, line: &str) -> Reply {
        let args = line.split(' ').map(b).collect();
        match self.store.read(self.now, &Op::Cmd { args, seed: 7 }) {
            Response::Reply(r) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    fn set_string(&mut self, k: &str, v: &str) {
        let r = self.op(Op::Set {
            key: b(k),
            value: b(v),
            flags: 0,
            expiry: Expiry::None,
            cond: Cond::Always,
            get_old: false,
        });
        assert_eq!(r, Response::Ok);
    }
}

#[test]
fn hashes() {
    let mut s = S::new();
    assert_eq!(s.c("hset h a 1 b 2"), int(2));
    assert_eq!(s.c("hset h a 10 c 3"), int(1));
    assert_eq!(s.c("hmset h d 4"), status("OK"));
    assert_eq!(
        s.c("hset h x"),
        error("ERR wrong number of arguments for 'hset' command")
    );
    assert_eq!(s.c("hget h a"), bulk("10"));
    assert_eq!(s.c("hget h zz"), Reply::Nil);
    assert_eq!(s.c("hget nokey a"), Reply::Nil);
    assert_eq!(
        s.read("hmget h a zz c"),
        Reply::Array(vec![bulk("10"), Reply::Nil, bulk("3")])
    );
    assert_eq!(s.c("hlen h"), int(4));
    assert_eq!(s.c("hstrlen h a"), int(2));
    assert_eq!(s.c("hexists h b"), int(1));
    assert_eq!(s.c("hexists h zz"), int(0));
    assert_eq!(s.c("hkeys h"), arr(&["a", "b", "c", "d"]));
    assert_eq!(s.c("hvals h"), arr(&["10", "2", "3", "4"]));
    assert_eq!(
        s.c("hgetall h"),
        Reply::Map(vec![
            (bulk("a"), bulk("10")),
            (bulk("b"), bulk("2")),
            (bulk("c"), bulk("3")),
            (bulk("d"), bulk("4")),
        ])
    );
    assert_eq!(s.c("hsetnx h a 5"), int(0));
    assert_eq!(s.c("hsetnx h e 5"), int(1));
    assert_eq!(s.c("hincrby h a 5"), int(15));
    assert_eq!(s.c("hincrby h new -3"), int(-3));
    assert_eq!(
        s.c("hincrby h a x"),
        error("ERR value is not an integer or out of range")
    );
    s.c("hset h s hello");
    assert_eq!(
        s.c("hincrby h s 1"),
        error("ERR hash value is not an integer")
    );
    s.c("hset h big 9223372036854775807");
    assert_eq!(
        s.c("hincrby h big 1"),
        error("ERR increment or decrement would overflow")
    );
    assert_eq!(s.c("hincrbyfloat h b 0.5"), bulk("2.5"));
    assert_eq!(
        s.c("hincrbyfloat h s 1"),
        error("ERR hash value is not a float")
    );
    assert_eq!(
        s.c("hincrbyfloat h b x"),
        error("ERR value is not a valid float")
    );
    assert_eq!(s.c("hdel h a zz b"), int(2));
    assert_eq!(s.c("hdel nokey a"), int(0));
    assert_eq!(s.c("type h"), status("hash"));
    for f in ["c", "d", "e", "new", "s", "big"] {
        s.c(&format!("hdel h {f}"));
    }
    assert_eq!(s.c("type h"), status("none"), "an emptied hash is deleted");
    assert_eq!(s.c("hlen h"), int(0));
    assert_eq!(s.c("hgetall h"), Reply::Map(vec![]));
}

#[test]
fn hash_random_fields_and_scan() {
    let mut s = S::new();
    let fields: Vec<String> = (0..50).map(|i| format!("f{i:02} {i}")).collect();
    s.c(&format!("hset h {}", fields.join(" ")));
    let Reply::Bulk(f) = s.c("hrandfield h") else {
        panic!()
    };
    assert_eq!(
        s.c(&format!("hexists h {}", String::from_utf8(f).unwrap())),
        int(1)
    );
    // Distinct, as many as asked; all when more are asked than there are.
    for n in [1usize, 5, 20, 40, 50, 80] {
        let Reply::Array(v) = s.c(&format!("hrandfield h {n}")) else {
            panic!()
        };
        let mut v: Vec<_> = v.into_iter().collect::<Vec<_>>();
        assert_eq!(v.len(), n.min(50), "{n}");
        v.sort_by_key(|r| format!("{r:?}"));
        v.dedup();
        assert_eq!(v.len(), n.min(50), "distinct for {n}");
    }
    let Reply::Pairs(v) = s.c("hrandfield h -80 withvalues") else {
        panic!()
    };
    assert_eq!(v.len(), 80, "a negative count repeats");
    // The same seed picks the same on every replica.
    assert_eq!(
        s.seeded("hrandfield h 5", 99),
        s.seeded("hrandfield h 5", 99)
    );
    assert_eq!(s.c("hrandfield nokey"), Reply::Nil);
    assert_eq!(s.c("hrandfield nokey 3"), Reply::Array(vec![]));
    // HSCAN visits every field once.
    let mut seen = Vec::new();
    let mut cursor = b("0");
    loop {
        let line = format!("hscan h {} count 7", String::from_utf8(cursor).unwrap());
        let Reply::Array(page) = s.c(&line) else {
            panic!()
        };
        let (Reply::Bulk(next), Reply::Array(items)) = (&page[0], &page[1]) else {
            panic!()
        };
        assert_eq!(items.len() % 2, 0);
        seen.extend(items.iter().step_by(2).cloned());
        cursor = next.clone();
        if cursor == b"0" {
            break;
        }
    }
    assert_eq!(seen.len(), 50);
    let Reply::Array(page) = s.c("hscan h 0 match f1* count 1000") else {
        panic!()
    };
    assert_eq!(page[1], {
        let mut v = Vec::new();
        for i in 10..20 {
            v.push(bulk(&format!("f{i}")));
            v.push(bulk(&format!("{i}")));
        }
        Reply::Array(v)
    });
    assert_eq!(s.c("hscan h x"), error("ERR invalid cursor"));
}

#[test]
fn sets() {
    let mut s = S::new();
    assert_eq!(s.c("sadd s c a b a"), int(3));
    assert_eq!(s.c("sadd s a d"), int(1));
    assert_eq!(s.c("scard s"), int(4));
    assert_eq!(s.c("smembers s"), set(&["a", "b", "c", "d"]));
    assert_eq!(s.c("sismember s a"), int(1));
    assert_eq!(s.c("sismember s z"), int(0));
    assert_eq!(s.c("smismember s a z"), Reply::Array(vec![int(1), int(0)]));
    assert_eq!(s.c("srem s a z"), int(1));
    s.c("sadd t b c x");
    assert_eq!(s.c("sinter s t"), set(&["b", "c"]));
    assert_eq!(s.c("sunion s t"), set(&["b", "c", "d", "x"]));
    assert_eq!(s.c("sdiff s t"), set(&["d"]));
    assert_eq!(s.c("sinter s t nokey"), set(&[]));
    assert_eq!(s.c("sdiff nokey s"), set(&[]));
    assert_eq!(s.c("sintercard 2 s t"), int(2));
    assert_eq!(s.c("sintercard 2 s t limit 1"), int(1));
    assert_eq!(
        s.c("sintercard 0 s"),
        error("ERR numkeys should be greater than 0")
    );
    assert_eq!(
        s.c("sintercard 3 s t"),
        error("ERR Number of keys can't be greater than number of args")
    );
    assert_eq!(
        s.c("sintercard 2 s t limit -1"),
        error("ERR LIMIT can't be negative")
    );
    assert_eq!(s.c("sinterstore d s t"), int(2));
    assert_eq!(s.c("smembers d"), set(&["b", "c"]));
    assert_eq!(s.c("sunionstore d s t"), int(4));
    assert_eq!(s.c("sdiffstore d s s"), int(0));
    assert_eq!(
        s.c("type d"),
        status("none"),
        "an empty result deletes the destination"
    );
    s.set_string("str", "v");
    assert_eq!(
        s.c("sinterstore str s t"),
        int(2),
        "a *STORE overwrites any type"
    );
    assert_eq!(s.c("type str"), status("set"));
    assert_eq!(s.c("smove s t d"), int(1));
    assert_eq!(s.c("smove s t nothere"), int(0));
    assert_eq!(s.c("sismember t d"), int(1));
    assert_eq!(s.c("smove s new b"), int(1));
    assert_eq!(s.c("smembers new"), set(&["b"]));
    s.set_string("str2", "v");
    assert_eq!(s.c("smove s str2 c"), error(WRONGTYPE));
    assert_eq!(
        s.c("smembers s"),
        set(&["c"]),
        "a failed move changes nothing"
    );
}

#[test]
fn set_random_members_are_seeded() {
    let mut s = S::new();
    let members: Vec<String> = (0..30).map(|i| format!("m{i}")).collect();
    s.c(&format!("sadd s {}", members.join(" ")));
    assert_eq!(
        s.seeded("srandmember s 5", 3),
        s.seeded("srandmember s 5", 3)
    );
    let Reply::Array(v) = s.c("srandmember s 40") else {
        panic!()
    };
    assert_eq!(v.len(), 30);
    let Reply::Array(v) = s.c("srandmember s -40") else {
        panic!()
    };
    assert_eq!(v.len(), 40);
    assert_eq!(s.c("srandmember nokey"), Reply::Nil);
    assert_eq!(s.c("srandmember nokey 2"), Reply::Array(vec![]));
    let Reply::Set(popped) = s.c("spop s 10") else {
        panic!()
    };
    assert_eq!(popped.len(), 10);
    assert_eq!(s.c("scard s"), int(20));
    for m in &popped {
        let Reply::Bulk(m) = m else { panic!() };
        assert_eq!(
            s.c(&format!("sismember s {}", String::from_utf8_lossy(m))),
            int(0)
        );
    }
    assert!(matches!(s.c("spop s"), Reply::Bulk(_)));
    assert_eq!(
        s.c("spop s -1"),
        error("ERR value is out of range, must be positive")
    );
    assert_eq!(s.c("spop s 100").clone_len(), 19);
    assert_eq!(s.c("type s"), status("none"));
    assert_eq!(s.c("spop s"), Reply::Nil);
    assert_eq!(s.c("spop s 3"), set(&[]));
    // Two stores given the same commands and seeds agree.
    let mut a = S::new();
    let mut b2 = S::new();
    for st in [&mut a, &mut b2] {
        st.c(&format!("sadd s {}", members.join(" ")));
        st.seeded("spop s 7", 11);
        st.seeded("spop s", 12);
    }
    assert_eq!(a.store.digest(), b2.store.digest());
    assert_eq!(a.c("smembers s"), b2.c("smembers s"));
}

trait Len {
    fn clone_len(&self) -> usize;
}

impl Len for Reply {
    fn clone_len(&self) -> usize {
        match self {
            Reply::Set(v) | Reply::Array(v) => v.len(),
            _ => panic!("{self:?}"),
        }
    }
}

#[test]
fn wrong_types_are_refused_both_ways() {
    let mut s = S::new();
    s.set_string("str", "v");
    s.c("hset h f v");
    s.c("sadd s m");
    for line in [
        "hset str f v",
        "hget str f",
        "sadd str m",
        "smembers str",
        "hlen s",
        "sadd h m",
    ] {
        assert_eq!(s.c(line), error(WRONGTYPE), "{line}");
    }
    for op in [
        Op::Get { keys: vec![b("h")] },
        Op::Strlen { key: b("s") },
        Op::IncrBy {
            key: b("h"),
            delta: 1,
        },
        Op::Append {
            key: b("s"),
            value: b("x"),
            must_exist: false,
            max_len: u64::MAX,
        },
        Op::GetDel { key: b("h") },
    ] {
        assert_eq!(
            s.op(op.clone()),
            Response::Error(WRONGTYPE.into()),
            "{op:?}"
        );
    }
    // MGET answers nil for a key of another type; SET overwrites it.
    let r = s.op(Op::Get {
        keys: vec![b("h"), b("str")],
    });
    let Response::Items(items) = r else { panic!() };
    assert!(items[0].is_none() && items[1].is_some());
    s.set_string("h", "now a string");
    assert_eq!(s.c("type h"), status("string"));
    assert_eq!(s.c("hget h f"), error(WRONGTYPE));
}

#[test]
fn keyspace_commands_see_every_type() {
    let mut s = S::new();
    s.c("hset h f v");
    s.c("sadd s a b");
    s.set_string("str", "v");
    assert_eq!(
        s.op(Op::Exists {
            keys: vec![b("h"), b("s"), b("x")]
        }),
        Response::Int(2)
    );
    assert_eq!(s.op(Op::DbSize), Response::Int(3));
    assert_eq!(
        s.op(Op::Keys { pattern: b("*") }),
        Response::Keys(vec![b("h"), b("s"), b("str")])
    );
    let scan = |kind: &str| Op::Scan {
        cursor: vec![],
        pattern: None,
        count: 100,
        kind: Some(b(kind)),
    };
    assert_eq!(
        s.op(scan("set")),
        Response::ScanPage {
            next: vec![],
            keys: vec![b("s")]
        }
    );
    assert_eq!(
        s.op(scan("string")),
        Response::ScanPage {
            next: vec![],
            keys: vec![b("str")]
        }
    );
    // RENAME and COPY carry the collection (and its expiry).
    assert_eq!(
        s.op(Op::Rename {
            from: b("h"),
            to: b("h2"),
            nx: false
        }),
        Response::Ok
    );
    assert_eq!(s.c("hget h2 f"), bulk("v"));
    assert_eq!(s.c("type h"), status("none"));
    assert_eq!(
        s.op(Op::Copy {
            from: b("s"),
            to: b("str"),
            replace: true
        }),
        Response::Int(1)
    );
    assert_eq!(s.c("smembers str"), set(&["a", "b"]));
    s.c("sadd str c");
    assert_eq!(s.c("smembers s"), set(&["a", "b"]), "a copy is independent");
    // Expiry: a collection keeps its expiry when changed, goes when it passes.
    assert_eq!(
        s.op(Op::Touch {
            keys: vec![b("s")],
            expiry: Expiry::AfterMs(1000),
            get: false
        }),
        Response::Int(1)
    );
    s.c("sadd s z");
    assert_eq!(s.op(Op::Ttl { key: b("s") }), Response::Int(1000));
    s.now += 1000;
    assert_eq!(s.c("type s"), status("none"));
    assert_eq!(s.c("scard s"), int(0));
    s.now += 1;
    s.op(Op::Sweep);
    assert_eq!(s.op(Op::DbSize), Response::Int(2));
    assert_eq!(
        s.op(Op::Del {
            keys: vec![b("h2"), b("str")]
        }),
        Response::Int(2)
    );
    assert_eq!(
        s.store.used_memory(),
        0,
        "every byte accounted is given back"
    );
    s.c("sadd s x");
    assert_eq!(s.op(Op::FlushAll), Response::Ok);
    assert_eq!(s.c("type s"), status("none"));
}

#[test]
fn snapshots_and_digests_cover_collections() {
    let mut s = S::new();
    s.set_string("str", "v");
    s.c("hset h f1 v1 f2 v2");
    s.c("sadd s a b c");
    s.op(Op::Touch {
        keys: vec![b("s")],
        expiry: Expiry::AfterMs(5000),
        get: false,
    });
    let snap = s.store.snapshot();
    let back = KvStore::restore(&snap).unwrap();
    assert_eq!(back, s.store);
    assert_eq!(back.digest(), s.store.digest());
    back.check_invariants();
    // Streamed restore too.
    let streamed = KvStore::restore_from(&snap[..]).unwrap();
    assert_eq!(streamed, s.store);
    // The digest sees a field's value, a member, and which key holds what.
    let d0 = s.store.digest();
    s.c("hset h f1 other");
    let d1 = s.store.digest();
    assert_ne!(d0, d1);
    // Like a string's CAS unique, the index of the last change is part of the state.
    s.c("hset h f1 v1");
    assert_ne!(s.store.digest(), d1);
    let mut x = S::new();
    x.c("sadd a 1");
    x.c("sadd b 2");
    let mut y = S::new();
    y.c("sadd a 2");
    y.c("sadd b 1");
    assert_ne!(x.store.digest(), y.store.digest());
    // Corruption is refused, never a panic.
    for i in (5..snap.len()).step_by(7) {
        let mut bad = snap.clone();
        bad[i] ^= 0x41;
        assert!(KvStore::restore(&bad).is_err());
        assert!(KvStore::restore_from(&bad[..]).is_err());
    }
}

/// A transaction behind `WATCH`: applied if no watched key changed after `since`, else
/// nothing and a nil array.
fn watched(s: &mut S, since: u64, keys: &[&str]) -> Response {
    s.op(Op::Multi(vec![
        Op::WatchCheck {
            since,
            keys: keys.iter().map(|k| b(k)).collect(),
        },
        Op::IncrBy {
            key: b("counter"),
            delta: 1,
        },
    ]))
}

#[test]
fn watch_aborts_on_every_kind_of_change_and_only_then() {
    let mut s = S::new();
    s.set_string("x", "1");
    s.c("sadd set a");
    s.op(Op::Touch {
        keys: vec![b("e")],
        expiry: Expiry::AfterMs(10),
        get: false,
    });
    let since = s.index;
    // Applied (the counter's new value), or aborted.
    struct Applied;
    impl PartialEq<Applied> for Response {
        fn eq(&self, _: &Applied) -> bool {
            matches!(self, Response::Batch(v) if matches!(v.as_slice(), [Response::Int(_)]))
        }
    }
    impl std::fmt::Debug for Applied {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("applied")
        }
    }
    let ok = Applied;
    let aborted = Response::Reply(Reply::NilArray);
    // Nothing changed (a key never seen, a key absent, keys present).
    assert_eq!(watched(&mut s, since, &["x", "set", "nothing"]), ok);
    let changes: Vec<(&str, Op)> = vec![
        ("x", Op::Del { keys: vec![b("x")] }),
        (
            "set",
            Op::Cmd {
                args: vec![b("sadd"), b("set"), b("b")],
                seed: 0,
            },
        ),
        (
            "y",
            Op::Set {
                key: b("y"),
                value: b("new"),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: false,
            },
        ),
        (
            "set",
            Op::Touch {
                keys: vec![b("set")],
                expiry: Expiry::AfterMs(100_000),
                get: false,
            },
        ),
        (
            "z",
            Op::Rename {
                from: b("set"),
                to: b("z"),
                nx: false,
            },
        ),
    ];
    for (key, change) in changes {
        let since = s.index;
        assert_eq!(
            watched(&mut s, since, &[key, "other"]),
            ok,
            "{key} unchanged"
        );
        let since = s.index;
        s.op(change.clone());
        assert_eq!(
            watched(&mut s, since, &["other", key]),
            aborted,
            "{change:?}"
        );
        let now = s.index;
        assert_eq!(
            watched(&mut s, now, &[key]),
            ok,
            "a later watch sees no change"
        );
    }
    // A removed collection, an expired key swept: changes too.
    s.c("sadd s2 a");
    let since = s.index;
    s.c("srem s2 a");
    assert_eq!(watched(&mut s, since, &["s2"]), aborted);
    s.set_string("t", "v");
    s.op(Op::Touch {
        keys: vec![b("t")],
        expiry: Expiry::AfterMs(5),
        get: false,
    });
    let since = s.index;
    s.now += 10;
    s.op(Op::Sweep);
    assert_eq!(watched(&mut s, since, &["t"]), aborted);
    // FLUSHALL: every watch from before aborts.
    let since = s.index;
    s.op(Op::FlushAll);
    assert_eq!(watched(&mut s, since, &["never"]), aborted);
    let now = s.index;
    assert_eq!(watched(&mut s, now, &["never"]), ok);
    // Aborted transactions applied nothing: the counter counts the ok ones.
    let Response::Items(v) = s.op(Op::Get {
        keys: vec![b("counter")],
    }) else {
        panic!()
    };
    assert_eq!(v[0].as_ref().unwrap().value, b("1"), "one since FLUSHALL's");
}

#[test]
fn watch_memory_is_bounded_and_forgetting_aborts() {
    use waverunner_kv::store::WATCH_MEMORY;
    let mut s = S::new();
    let since = s.index;
    // Deleting keys that do not exist touches nothing; deleting ones that do, touches them.
    for i in 0..(WATCH_MEMORY + 10) {
        s.index += 1;
        let k = format!("k{i}").into_bytes();
        s.store.apply(
            s.index,
            s.now,
            &Op::Set {
                key: k.clone(),
                value: b("v"),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: false,
            },
        );
        s.index += 1;
        s.store.apply(s.index, s.now, &Op::Del { keys: vec![k] });
    }
    s.store.check_invariants();
    // The oldest were forgotten: a watch from before them aborts, even on an untouched key.
    assert!(s.store.changed_since(b"untouched", since));
    assert!(!s.store.changed_since(b"untouched", s.index));
    // The state round trips through a snapshot, touched keys included.
    let back = KvStore::restore(&s.store.snapshot()).unwrap();
    assert_eq!(back, s.store);
    assert!(back.changed_since(b"untouched", since));
    assert!(back.changed_since(format!("k{}", WATCH_MEMORY + 9).as_bytes(), s.index - 2));
}

/// A command of `n` elements of `kind` under `key` (HSET, RPUSH, SADD or ZADD).
fn fill(s: &mut S, kind: &str, key: &str, n: usize) {
    let mut line = match kind {
        "hash" => format!("HSET {key}"),
        "list" => format!("RPUSH {key}"),
        "set" => format!("SADD {key}"),
        _ => format!("ZADD {key}"),
    };
    for i in 0..n {
        match kind {
            "hash" => line.push_str(&format!(" f{i} v{i}")),
            "zset" => line.push_str(&format!(" {i} m{i}")),
            _ => line.push_str(&format!(" e{i}")),
        }
    }
    assert!(matches!(s.c(&line), Reply::Int(_)), "{line}");
}

#[test]
fn a_large_collection_let_go_of_is_freed_a_piece_at_a_time() {
    use waverunner_kv::store::SHED_AT;
    let big = SHED_AT + 500;
    let mut s = S::new();
    for kind in ["hash", "list", "set", "zset"] {
        fill(&mut s, kind, "big", big);
        // Deleted: its elements wait for the store's steps (two went with the delete).
        assert_eq!(
            s.op(Op::Del {
                keys: vec![b("big")]
            }),
            Response::Int(1)
        );
        assert_eq!(s.store.buried(), big - 2, "{kind}");
        assert_eq!(s.store.reclaim(300), 300);
        assert_eq!(s.store.reclaim(usize::MAX), big - 302);
        assert_eq!(s.store.buried(), 0);
        // Replaced by a string: the same.
        fill(&mut s, kind, "big", big);
        s.set_string("big", "x");
        assert_eq!(s.store.buried(), big - 2, "{kind}");
        assert_eq!(s.store.reclaim(usize::MAX), big - 2);
        s.op(Op::Del {
            keys: vec![b("big")],
        });
    }
    // A small one goes at once.
    fill(&mut s, "hash", "small", SHED_AT);
    s.op(Op::Del {
        keys: vec![b("small")],
    });
    assert_eq!(s.store.buried(), 0);
    // A large one changed, or moved to another key, shares its nodes with what is stored:
    // nothing waits (freeing it a piece at a time would copy them).
    fill(&mut s, "hash", "big", big);
    s.c("HSET big f0 changed");
    s.c("HDEL big f1");
    s.op(Op::Rename {
        from: b("big"),
        to: b("moved"),
        nx: false,
    });
    assert_eq!(s.store.buried(), 0);
    assert_eq!(s.read("HLEN moved"), int(big as i64 - 1));
    assert_eq!(s.read("HGET moved f0"), bulk("changed"));
    // A FLUSHALL frees the elements of its collections a piece at a time as well.
    fill(&mut s, "list", "l", big);
    s.op(Op::FlushAll);
    let held = s.store.buried();
    // Two records, the hash's and the list's elements, less the two freed at once.
    assert_eq!(held, 2 + (big - 1) + big - 2);
    assert_eq!(s.store.reclaim(100), 100);
    assert_eq!(s.store.reclaim(usize::MAX), held - 100);
    assert_eq!(s.store.buried(), 0);
}

#[test]
fn a_collection_a_snapshot_view_shares_is_freed_by_the_store_once_the_view_is_gone() {
    let mut s = S::new();
    fill(&mut s, "set", "small", 10);
    let view = s.store.snapshot_view();
    s.op(Op::Del {
        keys: vec![b("small")],
    });
    // Its record and its ten members.
    assert_eq!(s.store.buried(), 11);
    assert_eq!(s.store.reclaim(usize::MAX), 0, "the view may still read it");
    std::thread::spawn(move || drop(view)).join().unwrap();
    assert_eq!(s.store.buried(), 11, "the view's thread freed none of it");
    assert_eq!(s.store.reclaim(usize::MAX), 11);
    assert_eq!(s.store.buried(), 0);
}

/// A plain SET replaces whatever the key held, expired or live, a string or a collection,
/// with the one lookup of its insert: the store ends exactly as if the key had been absent
/// (the digest, the accounted memory, the expiry index), and a WATCH sees the key changed.
#[test]
fn a_plain_set_replaces_expired_and_live_items_of_any_type() {
    let mut s = S::new();
    s.c("HSET h f v");
    s.c("PEXPIRE h 10");
    s.c("SET k old");
    s.c("PEXPIRE k 10");
    s.c("RPUSH l a b");
    s.c("SADD z m");
    s.now += 20; // h and k expired, not yet swept; l and z live
    let since = s.index;
    let mut fresh = S::new();
    fresh.now = s.now;
    fresh.index = s.index;
    for k in ["h", "k", "l", "z"] {
        s.set_string(k, "new");
        fresh.set_string(k, "new");
    }
    for k in ["h", "k", "l", "z"] {
        let got = s.op(Op::Get { keys: vec![b(k)] });
        assert!(
            matches!(&got, Response::Items(v) if v.len() == 1
                && v[0].as_ref().is_some_and(|i| i.value == b("new"))),
            "{k}: {got:?}"
        );
        assert_eq!(s.c(&format!("TYPE {k}")), status("string"), "{k}");
        assert_eq!(s.op(Op::Ttl { key: b(k) }), Response::Int(-1), "{k}");
        assert!(s.store.changed_since(k.as_bytes(), since), "{k}: WATCH");
    }
    assert_eq!(s.store.digest(), fresh.store.digest());
    assert_eq!(s.store.used_memory(), fresh.store.used_memory());
    assert_eq!(s.op(Op::DbSize), Response::Int(4));
}
