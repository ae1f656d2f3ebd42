//! Hashes: fields and values, in field order.

use std::ops::Bound;

use super::*;

fn get_hash<'v>(v: &'v View<'_>, key: &[u8]) -> Result<Option<&'v Coll>, Reply> {
    v.get(key, Type::Hash)
}

fn take_hash(t: &mut Txn<'_>, key: &[u8]) -> Result<Coll, Reply> {
    t.get(key, Type::Hash).map(|c| c.unwrap_or_else(Coll::hash))
}

/// `HSET key field value [field value …]` (and `HMSET`, which answers `+OK`): the number of
/// fields added.
fn hset(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    if !a.len().is_multiple_of(2) {
        return err(&format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(&a[0])
        ));
    }
    let mut c = match take_hash(t, &a[1]) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let added = a[2..]
        .chunks_exact(2)
        .filter(|p| c.hset(p[0].clone(), p[1].clone()).is_none())
        .count();
    t.put(&a[1], c);
    if a[0] == b"hmset" {
        ok()
    } else {
        len_reply(added)
    }
}

/// `HSETNX key field value`: 1 if set, 0 if the field existed.
fn hsetnx(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let mut c = match take_hash(t, &a[1]) {
        Ok(c) => c,
        Err(e) => return e,
    };
    if c.as_hash().contains_key(&a[2]) {
        return Reply::Int(0);
    }
    c.hset(a[2].clone(), a[3].clone());
    t.put(&a[1], c);
    Reply::Int(1)
}

/// `HGET key field`.
fn hget(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match get_hash(v, &a[1]) {
        Err(e) => e,
        Ok(c) => c
            .and_then(|c| c.as_hash().get(&a[2]))
            .map_or(Reply::Nil, |x| bulk(x)),
    }
}

/// `HMGET key field…`: a value or nil per field.
fn hmget(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match get_hash(v, &a[1]) {
        Err(e) => e,
        Ok(c) => Reply::Array(
            a[2..]
                .iter()
                .map(|f| {
                    c.and_then(|c| c.as_hash().get(f))
                        .map_or(Reply::Nil, |x| bulk(x))
                })
                .collect(),
        ),
    }
}

/// `HDEL key field…`: the number removed.
fn hdel(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let mut c = match t.get(&a[1], Type::Hash) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let n = a[2..].iter().filter(|f| c.hdel(f).is_some()).count();
    if n > 0 {
        t.put(&a[1], c);
    }
    len_reply(n)
}

/// `HLEN key`.
fn hlen(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match get_hash(v, &a[1]) {
        Err(e) => e,
        Ok(c) => len_reply(c.map_or(0, Coll::len)),
    }
}

/// `HSTRLEN key field`.
fn hstrlen(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match get_hash(v, &a[1]) {
        Err(e) => e,
        Ok(c) => len_reply(c.and_then(|c| c.as_hash().get(&a[2])).map_or(0, Vec::len)),
    }
}

/// `HEXISTS key field`.
fn hexists(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match get_hash(v, &a[1]) {
        Err(e) => e,
        Ok(c) => Reply::Int(i64::from(
            c.is_some_and(|c| c.as_hash().contains_key(&a[2])),
        )),
    }
}

/// `HKEYS`, `HVALS`, `HGETALL key` (a map in RESP3).
fn hall(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let c = match get_hash(v, &a[1]) {
        Err(e) => return e,
        Ok(c) => c,
    };
    let pairs = c.into_iter().flat_map(|c| c.as_hash().iter());
    match a[0].as_slice() {
        b"hkeys" => Reply::Array(pairs.map(|(f, _)| bulk(f)).collect()),
        b"hvals" => Reply::Array(pairs.map(|(_, x)| bulk(x)).collect()),
        _ => Reply::Map(pairs.map(|(f, x)| (bulk(f), bulk(x))).collect()),
    }
}

/// `HINCRBY key field increment`.
fn hincrby(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let delta = match int_arg(&a[3]) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let mut c = match take_hash(t, &a[1]) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let old = match c.as_hash().get(&a[2]) {
        None => 0,
        Some(x) => match crate::store::parse_i64(x) {
            Some(n) => n,
            None => return err("ERR hash value is not an integer"),
        },
    };
    let Some(new) = old.checked_add(delta) else {
        return err("ERR increment or decrement would overflow");
    };
    c.hset(a[2].clone(), new.to_string().into_bytes());
    t.put(&a[1], c);
    Reply::Int(new)
}

/// `HINCRBYFLOAT key field increment`: the new value as a bulk string.
fn hincrbyfloat(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let Some(delta) = crate::store::parse_f64(&a[3]) else {
        return err(NOT_FLOAT);
    };
    if delta.is_infinite() {
        return err("ERR value is NaN or Infinity");
    }
    let mut c = match take_hash(t, &a[1]) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let old = match c.as_hash().get(&a[2]) {
        None => 0.0,
        Some(x) => match crate::store::parse_f64(x) {
            Some(n) => n,
            None => return err("ERR hash value is not a float"),
        },
    };
    let new = old + delta;
    if !new.is_finite() {
        return err("ERR increment would produce NaN or Infinity");
    }
    let text = crate::store::format_f64(new).into_bytes();
    c.hset(a[2].clone(), text.clone());
    t.put(&a[1], c);
    Reply::Bulk(text)
}

/// `HRANDFIELD key [count [WITHVALUES]]`: picks from the operation's seed. A negative count
/// may repeat fields.
fn hrandfield(v: &View<'_>, a: &[Bytes], seed: u64) -> Reply {
    let (count, values) = match a.len() {
        2 => (None, false),
        3 => match int_arg(&a[2]) {
            Ok(n) => (Some(n), false),
            Err(e) => return e,
        },
        4 if a[3].eq_ignore_ascii_case(b"withvalues") => match int_arg(&a[2]) {
            Ok(n) => (Some(n), true),
            Err(e) => return e,
        },
        _ => return err(SYNTAX),
    };
    let count = match pick_count(count) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let c = match get_hash(v, &a[1]) {
        Err(e) => return e,
        Ok(None) => return no_pick(count),
        Ok(Some(c)) => c.as_hash(),
    };
    let mut rng = Rng::new(seed);
    let probed = |rng: &mut Rng| -> (Bytes, Bytes) {
        let (min, max) = (
            c.get_min().expect("not empty"),
            c.get_max().expect("not empty"),
        );
        let p = probe(&min.0, &max.0, rng);
        let (f, x) = c
            .range::<_, [u8]>((Bound::Included(p.as_slice()), Bound::Unbounded))
            .next()
            .unwrap_or((&min.0, &min.1));
        (f.clone(), x.clone())
    };
    let all = || c.iter().map(|(f, x)| (f.clone(), x.clone()));
    let Some(n) = count else {
        let (f, _) = pick_one(c.len(), &mut rng, all(), probed);
        return Reply::Bulk(f);
    };
    let n_abs = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
    let picked: Vec<(Bytes, Bytes)> = if n >= 0 {
        pick_distinct(c.len(), n_abs, &mut rng, probed, all())
    } else {
        pick_repeats(c.len(), n_abs, &mut rng, all(), probed)
    };
    if values {
        return Reply::Pairs(
            picked
                .into_iter()
                .map(|(f, x)| (Reply::Bulk(f), Reply::Bulk(x)))
                .collect(),
        );
    }
    Reply::Array(picked.into_iter().map(|(f, _)| Reply::Bulk(f)).collect())
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count]`: `[cursor, [field, value, …]]`.
fn hscan(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let s = match scan_args(a) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let c = match get_hash(v, &a[1]) {
        Err(e) => return e,
        Ok(c) => c,
    };
    let Some(c) = c else {
        return scan_page(&s, std::iter::empty::<(&Bytes, ())>(), |_, _, _| {});
    };
    let iter = c
        .as_hash()
        .range::<_, [u8]>((after(&s.cursor), Bound::Unbounded));
    scan_page(&s, iter, |f, x, out| {
        out.push(bulk(f));
        out.push(bulk(x));
    })
}

pub(super) const SPECS: &[Spec] = &[
    w("hset", -4, hset),
    w("hmset", -4, hset),
    w("hsetnx", 4, hsetnx),
    r("hget", 3, hget),
    r("hmget", -3, hmget),
    w("hdel", -3, hdel),
    r("hlen", 2, hlen),
    r("hstrlen", 3, hstrlen),
    r("hexists", 3, hexists),
    r("hkeys", 2, hall),
    r("hvals", 2, hall),
    r("hgetall", 2, hall),
    w("hincrby", 4, hincrby),
    w("hincrbyfloat", 4, hincrbyfloat),
    random(r("hrandfield", -2, hrandfield)),
    r("hscan", -3, hscan),
];
