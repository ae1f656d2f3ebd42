//! `SORT` and `SORT_RO`: the elements of a list, set or sorted set, sorted (numerically, or
//! by byte order with `ALPHA`), optionally by other keys' values (`BY`), with other keys'
//! values fetched (`GET`), a window (`LIMIT`), and stored as a list (`STORE`).
//!
//! Cost: O(n log n) in the collection sorted, plus a lookup per element for `BY` and `GET`,
//! as Redis.

use std::cmp::Ordering;

use super::*;

/// The parsed options.
struct Sort {
    by: Option<Bytes>,
    gets: Vec<Bytes>,
    limit: Option<(i64, i64)>,
    desc: bool,
    alpha: bool,
    store: Option<Bytes>,
}

fn parse(a: &[Bytes], store_allowed: bool) -> Result<Sort, Reply> {
    let mut s = Sort {
        by: None,
        gets: Vec::new(),
        limit: None,
        desc: false,
        alpha: false,
        store: None,
    };
    let mut j = 2;
    while j < a.len() {
        let o = a[j].to_ascii_lowercase();
        let left = a.len() - j - 1;
        match o.as_slice() {
            b"asc" => s.desc = false,
            b"desc" => s.desc = true,
            b"alpha" => s.alpha = true,
            b"limit" if left >= 2 => {
                s.limit = Some((int_arg(&a[j + 1])?, int_arg(&a[j + 2])?));
                j += 2;
            }
            b"store" if left >= 1 && store_allowed => {
                s.store = Some(a[j + 1].clone());
                j += 1;
            }
            b"by" if left >= 1 => {
                s.by = Some(a[j + 1].clone());
                j += 1;
            }
            b"get" if left >= 1 => {
                s.gets.push(a[j + 1].clone());
                j += 1;
            }
            _ => return Err(err(SYNTAX)),
        }
        j += 1;
    }
    Ok(s)
}

/// The value a `BY`/`GET` pattern names for `elem`: the first `*` replaced by it, a string's
/// value, or with `->field` a hash's field. `#` is the element itself. `None`: no such value.
fn lookup(v: &View<'_>, pattern: &[u8], elem: &[u8]) -> Option<Bytes> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let star = pattern.iter().position(|&b| b == b'*')?;
    let (key_pat, field) = match pattern.windows(2).rposition(|w| w == b"->") {
        Some(i) if i > star && i + 2 < pattern.len() => (&pattern[..i], Some(&pattern[i + 2..])),
        _ => (pattern, None),
    };
    let mut key = key_pat[..star].to_vec();
    key.extend_from_slice(elem);
    key.extend_from_slice(&key_pat[star + 1..]);
    match field {
        None => v.string(&key).ok().flatten().map(<[u8]>::to_vec),
        Some(f) => v
            .get(&key, Type::Hash)
            .ok()
            .flatten()
            .and_then(|c| c.as_hash().get(f).cloned()),
    }
}

/// The sorted (and windowed, looked up) result, or an error reply.
fn run(v: &View<'_>, a: &[Bytes], s: &Sort) -> Result<Vec<Option<Bytes>>, Reply> {
    let elems: Vec<Bytes> = match v.store.type_of(&a[1], v.now) {
        None => Vec::new(),
        Some(t @ (Type::List | Type::Set | Type::ZSet)) => {
            let c = v.store.coll(&a[1]).expect("typed");
            match t {
                Type::List => c.as_list().iter().cloned().collect(),
                Type::Set => c.as_set().iter().cloned().collect(),
                _ => c.as_zset().iter().map(|(m, _)| m.clone()).collect(),
            }
        }
        Some(_) => return Err(wrongtype()),
    };
    // `BY` without a `*` means "do not sort" (a sorted set keeps its score order).
    let nosort = s.by.as_ref().is_some_and(|p| !p.contains(&b'*'));
    let mut keyed: Vec<(Bytes, Option<Bytes>)> = elems
        .into_iter()
        .map(|e| {
            let k = match &s.by {
                Some(p) if !nosort => lookup(v, p, &e),
                _ => Some(e.clone()),
            };
            (e, k)
        })
        .collect();
    if !nosort {
        if !s.alpha {
            // Numeric: every key must read as a double (a missing one counts as 0).
            let mut nums = Vec::with_capacity(keyed.len());
            for (_, k) in &keyed {
                let x = match k {
                    None => 0.0,
                    Some(k) => crate::store::parse_f64(k).ok_or_else(|| {
                        err("ERR One or more scores can't be converted into double")
                    })?,
                };
                nums.push(x);
            }
            let mut idx: Vec<usize> = (0..keyed.len()).collect();
            idx.sort_by(|&i, &j| {
                nums[i]
                    .partial_cmp(&nums[j])
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| keyed[i].0.cmp(&keyed[j].0))
            });
            keyed = idx.into_iter().map(|i| keyed[i].clone()).collect();
        } else {
            keyed.sort_by(|x, y| x.1.cmp(&y.1).then_with(|| x.0.cmp(&y.0)));
        }
        if s.desc {
            keyed.reverse();
        }
    } else if s.desc && v.store.type_of(&a[1], v.now) == Some(Type::ZSet) {
        keyed.reverse();
    }
    let n = keyed.len() as i64;
    let (start, count) = match s.limit {
        None => (0, n),
        Some((off, cnt)) => {
            let start = off.clamp(0, n);
            let count = if cnt < 0 { n } else { cnt.min(n - start) };
            (start, count)
        }
    };
    let window = keyed
        .into_iter()
        .skip(start as usize)
        .take(count.max(0) as usize);
    let mut out = Vec::new();
    for (e, _) in window {
        if s.gets.is_empty() {
            out.push(Some(e));
        } else {
            for g in &s.gets {
                out.push(lookup(v, g, &e));
            }
        }
    }
    Ok(out)
}

/// `SORT key [BY pattern] [LIMIT offset count] [GET pattern …] [ASC|DESC] [ALPHA] [STORE
/// destination]`: the elements, or with `STORE` their number, stored as a list (a missing
/// value an empty string) replacing the destination (deleted when empty).
fn sort(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let s = match parse(a, true) {
        Ok(s) => s,
        Err(e) => return e,
    };
    t.store.purge_key(&a[1]);
    let result = match run(&t.view(), a, &s) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some(dest) = &s.store else {
        return elements_reply(result);
    };
    let n = result.len();
    let mut c = Coll::list();
    for e in result {
        c.rpush(e.unwrap_or_default());
    }
    t.replace(dest, Some(c));
    len_reply(n)
}

/// `SORT_RO`: `SORT` without `STORE`, a read.
fn sort_ro(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let s = match parse(a, false) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match run(v, a, &s) {
        Ok(r) => elements_reply(r),
        Err(e) => e,
    }
}

fn elements_reply(r: Vec<Option<Bytes>>) -> Reply {
    Reply::Array(
        r.into_iter()
            .map(|e| e.map_or(Reply::Nil, Reply::Bulk))
            .collect(),
    )
}

pub(super) const SPECS: &[Spec] = &[w("sort", -2, sort), r("sort_ro", -2, sort_ro)];

#[cfg(test)]
mod tests {
    use crate::ops::{Cond, Expiry, Op, Reply, Response};
    use crate::store::KvStore;

    struct S(KvStore, u64);

    impl S {
        fn run(&mut self, line: &str) -> Reply {
            self.1 += 1;
            let args = line.split(' ').map(|w| w.as_bytes().to_vec()).collect();
            match self.0.apply(self.1, 1000, &Op::Cmd { args, seed: 0 }) {
                Response::Reply(r) => r,
                other => panic!("{other:?}"),
            }
        }

        fn set(&mut self, k: &str, v: &str) {
            self.1 += 1;
            self.0.apply(
                self.1,
                1000,
                &Op::Set {
                    key: k.into(),
                    value: v.into(),
                    flags: 0,
                    expiry: Expiry::None,
                    cond: Cond::Always,
                    get_old: false,
                },
            );
        }
    }

    fn arr(v: &[&str]) -> Reply {
        Reply::Array(
            v.iter()
                .map(|s| Reply::Bulk(s.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn sorts_as_redis() {
        let mut s = S(KvStore::new(), 0);
        s.run("rpush l 3 1 2 10");
        assert_eq!(s.run("sort l"), arr(&["1", "2", "3", "10"]));
        assert_eq!(s.run("sort l desc"), arr(&["10", "3", "2", "1"]));
        assert_eq!(s.run("sort l alpha"), arr(&["1", "10", "2", "3"]));
        assert_eq!(s.run("sort l limit 1 2"), arr(&["2", "3"]));
        assert_eq!(s.run("sort l limit 3 10"), arr(&["10"]));
        // BY other keys, GET other keys and the element.
        for (k, v) in [("w_1", "40"), ("w_2", "30"), ("w_3", "20"), ("w_10", "10")] {
            s.set(k, v);
        }
        s.run("hset h_1 f one");
        assert_eq!(s.run("sort l by w_*"), arr(&["10", "3", "2", "1"]));
        assert_eq!(
            s.run("sort l by w_* get # get h_*->f limit 2 2"),
            Reply::Array(vec![
                Reply::Bulk(b"2".to_vec()),
                Reply::Nil,
                Reply::Bulk(b"1".to_vec()),
                Reply::Bulk(b"one".to_vec())
            ])
        );
        assert_eq!(s.run("sort l by nosort"), arr(&["3", "1", "2", "10"]));
        // STORE: a list, replacing the destination; an empty result deletes it.
        s.set("dst", "x");
        assert_eq!(s.run("sort l store dst"), Reply::Int(4));
        assert_eq!(s.run("lrange dst 0 -1"), arr(&["1", "2", "3", "10"]));
        assert_eq!(s.run("sort nokey store dst"), Reply::Int(0));
        assert_eq!(s.run("type dst"), Reply::Status("none".into()));
        // Sets and sorted sets; errors.
        s.run("sadd st b a c");
        assert_eq!(s.run("sort st alpha"), arr(&["a", "b", "c"]));
        assert_eq!(
            s.run("sort st"),
            Reply::Error("ERR One or more scores can't be converted into double".into())
        );
        s.run("zadd z 3 x 1 y 2 w");
        assert_eq!(s.run("sort z by nosort"), arr(&["y", "w", "x"]));
        assert_eq!(s.run("sort z by nosort desc"), arr(&["x", "w", "y"]));
        s.set("str", "v");
        assert_eq!(
            s.run("sort str"),
            Reply::Error(super::super::WRONGTYPE.into())
        );
        assert_eq!(s.run("sort l foo"), Reply::Error("ERR syntax error".into()));
        assert_eq!(
            s.run("sort_ro l store x"),
            Reply::Error("ERR syntax error".into())
        );
        assert_eq!(s.run("sort_ro l desc"), arr(&["10", "3", "2", "1"]));
        s.0.check_invariants();
    }
}
