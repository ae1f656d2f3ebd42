//! Sets: members in byte order.

use std::ops::Bound;

use imbl::OrdSet;

use super::*;

fn take_set(t: &mut Txn<'_>, key: &[u8]) -> Result<Coll, Reply> {
    t.get(key, Type::Set).map(|c| c.unwrap_or_else(Coll::set))
}

fn members(c: Option<&Coll>) -> impl Iterator<Item = &Bytes> {
    c.into_iter().flat_map(|c| c.as_set().iter())
}

fn set_reply<'a>(ms: impl Iterator<Item = &'a Bytes>) -> Reply {
    Reply::Set(ms.map(|m| bulk(m)).collect())
}

/// `SADD key member…`: the number added.
fn sadd(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let mut c = match take_set(t, &a[1]) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let n = a[2..].iter().filter(|m| c.sadd((*m).clone())).count();
    t.put(&a[1], c);
    len_reply(n)
}

/// `SREM key member…`: the number removed.
fn srem(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let mut c = match t.get(&a[1], Type::Set) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let n = a[2..].iter().filter(|m| c.srem(m)).count();
    if n > 0 {
        t.put(&a[1], c);
    }
    len_reply(n)
}

/// `SCARD key`.
fn scard(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match v.get(&a[1], Type::Set) {
        Err(e) => e,
        Ok(c) => len_reply(c.map_or(0, Coll::len)),
    }
}

/// `SISMEMBER key member`.
fn sismember(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match v.get(&a[1], Type::Set) {
        Err(e) => e,
        Ok(c) => Reply::Int(i64::from(c.is_some_and(|c| c.as_set().contains(&a[2])))),
    }
}

/// `SMISMEMBER key member…`.
fn smismember(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match v.get(&a[1], Type::Set) {
        Err(e) => e,
        Ok(c) => Reply::Array(
            a[2..]
                .iter()
                .map(|m| Reply::Int(i64::from(c.is_some_and(|c| c.as_set().contains(m)))))
                .collect(),
        ),
    }
}

/// `SMEMBERS key` (a set in RESP3).
fn smembers(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match v.get(&a[1], Type::Set) {
        Err(e) => e,
        Ok(c) => set_reply(members(c)),
    }
}

/// A random member (see [`pick_one`]).
fn random_member(s: &OrdSet<Bytes>, rng: &mut Rng) -> Bytes {
    pick_one(s.len(), rng, s.iter().cloned(), |rng| probed_member(s, rng))
}

/// The first member at or after a random probe (wrapping to the first).
fn probed_member(s: &OrdSet<Bytes>, rng: &mut Rng) -> Bytes {
    let (min, max) = (
        s.get_min().expect("not empty"),
        s.get_max().expect("not empty"),
    );
    let p = probe(min, max, rng);
    s.range::<_, [u8]>((Bound::Included(p.as_slice()), Bound::Unbounded))
        .next()
        .unwrap_or(min)
        .clone()
}

/// The count argument of `SPOP`/`SRANDMEMBER`, if given.
fn count_arg(a: &[Bytes]) -> Result<Option<i64>, Reply> {
    match a.len() {
        2 => Ok(None),
        3 => int_arg(&a[2]).map(Some),
        _ => Err(err(SYNTAX)),
    }
}

/// `SPOP key [count]`: removes members picked from the operation's seed.
fn spop(t: &mut Txn<'_>, a: &[Bytes], seed: u64) -> Reply {
    let count = match count_arg(a) {
        Ok(c) => c,
        Err(e) => return e,
    };
    if count.is_some_and(|n| n < 0) {
        return err("ERR value is out of range, must be positive");
    }
    let mut c = match t.get(&a[1], Type::Set) {
        Err(e) => return e,
        Ok(None) => {
            return if count.is_some() {
                Reply::Set(Vec::new())
            } else {
                Reply::Nil
            }
        }
        Ok(Some(c)) => c,
    };
    let mut rng = Rng::new(seed);
    let picked = match count {
        None => vec![random_member(c.as_set(), &mut rng)],
        Some(n) => {
            let s = c.as_set().clone();
            pick_distinct(
                s.len(),
                usize::try_from(n).unwrap_or(usize::MAX),
                &mut rng,
                |rng| probed_member(&s, rng),
                s.iter().cloned(),
            )
        }
    };
    for m in &picked {
        c.srem(m);
    }
    t.put(&a[1], c);
    match count {
        None => Reply::Bulk(picked.into_iter().next().expect("one pick")),
        Some(_) => Reply::Set(picked.into_iter().map(Reply::Bulk).collect()),
    }
}

/// `SRANDMEMBER key [count]`: members picked from the operation's seed; a negative count may
/// repeat them.
fn srandmember(v: &View<'_>, a: &[Bytes], seed: u64) -> Reply {
    let count = match count_arg(a) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let count = match pick_count(count) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let s = match v.get(&a[1], Type::Set) {
        Err(e) => return e,
        Ok(None) => return no_pick(count),
        Ok(Some(c)) => c.as_set(),
    };
    let mut rng = Rng::new(seed);
    match count {
        None => Reply::Bulk(random_member(s, &mut rng)),
        Some(n) if n >= 0 => Reply::Array(
            pick_distinct(
                s.len(),
                n as usize,
                &mut rng,
                |rng| probed_member(s, rng),
                s.iter().cloned(),
            )
            .into_iter()
            .map(Reply::Bulk)
            .collect(),
        ),
        Some(n) => Reply::Array(
            pick_repeats(
                s.len(),
                usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX),
                &mut rng,
                s.iter().cloned(),
                |rng| probed_member(s, rng),
            )
            .into_iter()
            .map(Reply::Bulk)
            .collect(),
        ),
    }
}

/// `SMOVE source destination member`: 1 if moved.
fn smove(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let src = match t.get(&a[1], Type::Set) {
        Err(e) => return e,
        Ok(c) => c,
    };
    let dst = match take_set(t, &a[2]) {
        Err(e) => return e,
        Ok(c) => c,
    };
    let Some(mut src) = src.filter(|c| c.as_set().contains(&a[3])) else {
        return Reply::Int(0);
    };
    if a[1] == a[2] {
        return Reply::Int(1);
    }
    let mut dst = dst;
    src.srem(&a[3]);
    t.put(&a[1], src);
    // A member the destination holds already leaves it untouched (a WATCH on it holds).
    if dst.sadd(a[3].clone()) {
        t.put(&a[2], dst);
    }
    Reply::Int(1)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Algebra {
    Inter,
    Union,
    Diff,
}

/// The sets named by `keys` (absent ones empty); `Err(WRONGTYPE)` if one is not a set.
fn sets<'v>(v: &'v View<'_>, keys: &[Bytes]) -> Result<Vec<Option<&'v Coll>>, Reply> {
    keys.iter().map(|k| v.get(k, Type::Set)).collect()
}

/// Intersection, union or difference of sets; O(total size), as Redis. The intersection
/// walks the smallest set and stops at `limit` members (0: none).
fn algebra(op: Algebra, sets: &[Option<&Coll>], limit: usize) -> OrdSet<Bytes> {
    match op {
        Algebra::Inter => {
            if sets.iter().any(Option::is_none) {
                return OrdSet::new();
            }
            let all: Vec<&OrdSet<Bytes>> = sets.iter().flatten().map(|c| c.as_set()).collect();
            let smallest = all
                .iter()
                .min_by_key(|s| s.len())
                .expect("at least one key");
            let mut out = OrdSet::new();
            for m in smallest.iter() {
                if all.iter().all(|s| s.contains(m)) {
                    out.insert(m.clone());
                    if limit > 0 && out.len() >= limit {
                        break;
                    }
                }
            }
            out
        }
        Algebra::Union => {
            let mut out = OrdSet::new();
            for s in sets.iter().flatten() {
                out = out.union(s.as_set().clone());
            }
            out
        }
        Algebra::Diff => {
            let Some(Some(first)) = sets.first() else {
                return OrdSet::new();
            };
            let mut out = first.as_set().clone();
            for s in sets[1..].iter().flatten() {
                for m in s.as_set() {
                    out.remove(m);
                    if out.is_empty() {
                        return out;
                    }
                }
            }
            out
        }
    }
}

fn algebra_of(name: &[u8]) -> Algebra {
    if name.starts_with(b"sinter") {
        Algebra::Inter
    } else if name.starts_with(b"sunion") {
        Algebra::Union
    } else {
        Algebra::Diff
    }
}

/// `SINTER`, `SUNION`, `SDIFF key…` (a set in RESP3).
fn sread(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match sets(v, &a[1..]) {
        Err(e) => e,
        Ok(s) => set_reply(algebra(algebra_of(&a[0]), &s, 0).iter()),
    }
}

/// `SINTERSTORE`, `SUNIONSTORE`, `SDIFFSTORE destination key…`: the result's size; an empty
/// result deletes the destination.
fn sstore(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let result = {
        let v = t.view();
        match sets(&v, &a[2..]) {
            Err(e) => return e,
            Ok(s) => algebra(algebra_of(&a[0]), &s, 0),
        }
    };
    let n = result.len();
    let mut c = Coll::set();
    for m in result {
        c.sadd(m);
    }
    t.replace(&a[1], Some(c));
    len_reply(n)
}

/// `SINTERCARD numkeys key… [LIMIT limit]`.
fn sintercard(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    // Redis answers one message for any bad numkeys, and one for any bad LIMIT.
    let numkeys = match int_arg(&a[1]) {
        Ok(n) if n > 0 => n as usize,
        _ => return err("ERR numkeys should be greater than 0"),
    };
    if numkeys > a.len() - 2 {
        return err("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0usize;
    let mut j = 2 + numkeys;
    while j < a.len() {
        if a[j].eq_ignore_ascii_case(b"limit") && j + 1 < a.len() {
            match int_arg(&a[j + 1]) {
                Ok(l) if l >= 0 => limit = usize::try_from(l).unwrap_or(usize::MAX),
                _ => return err("ERR LIMIT can't be negative"),
            }
            j += 2;
        } else {
            return err(SYNTAX);
        }
    }
    match sets(v, &a[2..2 + numkeys]) {
        Err(e) => e,
        Ok(s) => len_reply(algebra(Algebra::Inter, &s, limit).len()),
    }
}

/// `SSCAN key cursor [MATCH pattern] [COUNT count]`.
fn sscan(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let s = match scan_args(a) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match v.get(&a[1], Type::Set) {
        Err(e) => e,
        Ok(None) => scan_page(&s, std::iter::empty::<(&Bytes, ())>(), |_, _, _| {}),
        Ok(Some(c)) => {
            let iter = c
                .as_set()
                .range::<_, [u8]>((after(&s.cursor), Bound::Unbounded))
                .map(|m| (m, ()));
            scan_page(&s, iter, |m, _, out| out.push(bulk(m)))
        }
    }
}

pub(super) const SPECS: &[Spec] = &[
    w("sadd", -3, sadd),
    w("srem", -3, srem),
    r("scard", 2, scard),
    r("sismember", 3, sismember),
    r("smismember", -3, smismember),
    r("smembers", 2, smembers),
    random(w("spop", -2, spop)),
    random(r("srandmember", -2, srandmember)),
    w("smove", 4, smove),
    r("sinter", -2, sread),
    r("sunion", -2, sread),
    r("sdiff", -2, sread),
    w("sinterstore", -3, sstore),
    w("sunionstore", -3, sstore),
    w("sdiffstore", -3, sstore),
    r("sintercard", -3, sintercard),
    r("sscan", -3, sscan),
];
