//! Lists: Redis 7.0's list commands.
//!
//! The blocking commands (`BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`, `BLMPOP`) run here in
//! their non-blocking form: they validate their timeout, pop when they can, and otherwise
//! answer what Redis answers when the timeout expires; the front-end does the waiting.

use super::*;

/// Returns the error of a `Result<_, Reply>` as the command's reply.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(reply) => return reply,
        }
    };
}

/// An end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

/// `LEFT` or `RIGHT` (any case).
fn end_arg(b: &[u8]) -> Result<End, Reply> {
    if b.eq_ignore_ascii_case(b"left") {
        Ok(End::Left)
    } else if b.eq_ignore_ascii_case(b"right") {
        Ok(End::Right)
    } else {
        Err(err(SYNTAX))
    }
}

fn push(c: &mut Coll, end: End, e: Bytes) {
    match end {
        End::Left => c.lpush(e),
        End::Right => c.rpush(e),
    }
}

fn pop(c: &mut Coll, end: End) -> Option<Bytes> {
    match end {
        End::Left => c.lpop(),
        End::Right => c.rpop(),
    }
}

/// An integer argument in `min..=max`, answered with `msg` when it is not one (Redis's
/// `getRangeLongFromObjectOrReply` with a message: the same error for both cases).
fn range_arg(b: &[u8], min: i64, max: i64, msg: &str) -> Result<i64, Reply> {
    match crate::store::parse_i64(b) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(err(msg)),
    }
}

/// The position `LINDEX`/`LSET` mean by `i` (negative: from the end), if inside the list.
fn position(i: i64, len: usize) -> Option<usize> {
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { len + i } else { i };
    (0..len).contains(&i).then_some(i as usize)
}

fn bulks<'a>(elems: impl Iterator<Item = &'a Bytes>) -> Reply {
    Reply::Array(elems.map(|e| bulk(e)).collect())
}

/// The number a blocking command's timeout (seconds) holds as Redis 7.0's `string2ld` reads
/// it (`strtold`: decimal or hexadecimal, `inf`; no NaN, no spaces, no overflow or underflow
/// to zero of a `long double`), as an `f64` (beyond its range: infinite or zero, which is
/// all the timeout check needs).
fn long_double(b: &[u8]) -> Option<f64> {
    // MAX_LONG_DOUBLE_CHARS
    if b.is_empty() || b.len() >= 5 * 1024 || b[0].is_ascii_whitespace() || b[0] == 0x0b {
        return None;
    }
    let (neg, rest) = match b[0] {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    let mag = if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        f64::INFINITY
    } else if rest.len() > 2 && rest[0] == b'0' && rest[1] | 0x20 == b'x' {
        hex_float(&rest[2..])?
    } else {
        dec_float(rest)?
    };
    Some(if neg { -mag } else { mag })
}

/// The exponent after a float's mantissa (`e`/`p` already matched at `s[0]`): its value and
/// where it ends, or `None` when no digit follows (`strtold` then stops before the letter).
fn float_exp(s: &[u8]) -> Option<(i64, usize)> {
    let mut j = 1;
    let neg = match s.get(j) {
        Some(b'-') => {
            j += 1;
            true
        }
        Some(b'+') => {
            j += 1;
            false
        }
        _ => false,
    };
    let start = j;
    let mut e: i64 = 0;
    while let Some(d) = s.get(j).filter(|d| d.is_ascii_digit()) {
        e = e.saturating_mul(10).saturating_add(i64::from(d - b'0'));
        j += 1;
    }
    (j > start).then_some((if neg { -e } else { e }, j))
}

/// A decimal `strtold` number without its sign.
fn dec_float(s: &[u8]) -> Option<f64> {
    let digits = |from: usize| from + s[from..].iter().take_while(|d| d.is_ascii_digit()).count();
    let int_end = digits(0);
    let (frac, mut i) = match s.get(int_end) {
        Some(b'.') => {
            let end = digits(int_end + 1);
            (&s[int_end + 1..end], end)
        }
        _ => (&s[..0], int_end),
    };
    let int = &s[..int_end];
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut exp = 0;
    if s.get(i).is_some_and(|c| c | 0x20 == b'e') {
        if let Some((e, len)) = float_exp(&s[i..]) {
            exp = e;
            i += len;
        }
    }
    if i != s.len() {
        return None;
    }
    let all = || int.iter().chain(frac);
    let Some(k) = all().position(|&d| d != b'0') else {
        return Some(0.0);
    };
    // The value is m·10^e10 with m in [1, 10).
    let e10 = i64::try_from(int.len())
        .unwrap_or(i64::MAX)
        .saturating_add(exp)
        .saturating_sub(i64::try_from(k).unwrap_or(i64::MAX))
        .saturating_sub(1);
    let (mut m, mut scale) = (0.0, 1.0);
    for d in all().skip(k).take(18) {
        m += f64::from(d - b'0') * scale;
        scale /= 10.0;
    }
    // Beyond LDBL_MAX: ERANGE with HUGE_VAL; below half of the least subnormal: ERANGE with 0.
    if e10 > 4932 || (e10 == 4932 && m >= 1.189_731_495_357_231_8) {
        return None;
    }
    if e10 < -4951 || (e10 == -4951 && m < 1.822_599_765_941_237_3) {
        return None;
    }
    if e10 > 308 {
        return Some(f64::INFINITY);
    }
    if e10 < -330 {
        return Some(0.0);
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// A hexadecimal `strtold` number after its `0x`.
fn hex_float(s: &[u8]) -> Option<f64> {
    let hex = |i: usize| s.get(i).and_then(|&c| char::from(c).to_digit(16));
    let (mut m, mut e2, mut sig, mut any) = (0.0f64, 0i64, 0, false);
    let mut i = 0;
    while let Some(d) = hex(i) {
        any = true;
        if m != 0.0 || d != 0 {
            // Digits past an f64's precision only scale the value.
            if sig < 15 {
                m = m * 16.0 + f64::from(d);
                sig += 1;
            } else {
                e2 += 4;
            }
        }
        i += 1;
    }
    if s.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = hex(i) {
            any = true;
            if m == 0.0 && d == 0 {
                e2 -= 4;
            } else if sig < 15 {
                m = m * 16.0 + f64::from(d);
                sig += 1;
                e2 -= 4;
            }
            i += 1;
        }
    }
    if !any {
        return None;
    }
    if s.get(i).is_some_and(|c| c | 0x20 == b'p') {
        if let Some((p, len)) = float_exp(&s[i..]) {
            e2 = e2.saturating_add(p);
            i += len;
        }
    }
    if i != s.len() {
        return None;
    }
    if m == 0.0 {
        return Some(0.0);
    }
    // m < 2^60, so its leading bit's exponent fits.
    let top = e2.saturating_add(m.log2().floor() as i64);
    if !(-16446..16384).contains(&top) {
        return None;
    }
    Some(if top > 1023 {
        f64::INFINITY
    } else if top < -1100 {
        0.0
    } else {
        m * 2f64.powi(e2 as i32)
    })
}

/// Checks a blocking command's timeout as Redis 7.0.15 does (`getTimeoutFromObjectOrReply`:
/// `(long long)ceill(seconds * 1000)`, refused when negative). A timeout whose milliseconds do
/// not fit a `long long` (`inf`, `1e30`) converts to `LLONG_MIN` on x86-64, so 7.0 answers it
/// "timeout is negative" (7.2 added "timeout is out of range").
fn timeout_arg(b: &[u8]) -> Result<(), Reply> {
    let secs = long_double(b).ok_or_else(|| err("ERR timeout is not a float or out of range"))?;
    let ms = (secs * 1000.0).ceil();
    // -0.0 (a timeout in (-0.001, 0]) passes as 0: wait forever.
    if (0.0..9_223_372_036_854_775_808.0).contains(&ms) {
        Ok(())
    } else {
        Err(err("ERR timeout is negative"))
    }
}

// ---- pushes and pops

/// `LPUSH`/`RPUSH`/`LPUSHX`/`RPUSHX`: pushes every element in order; the `X` forms (`xx`)
/// only onto an existing list.
fn push_cmd(t: &mut Txn<'_>, a: &[Bytes], end: End, xx: bool) -> Reply {
    let mut c = match tri!(t.get(&a[1], Type::List)) {
        Some(c) => c,
        None if xx => return Reply::Int(0),
        None => Coll::list(),
    };
    for e in &a[2..] {
        push(&mut c, end, e.clone());
    }
    let n = c.len();
    t.put(&a[1], c);
    len_reply(n)
}

/// `LPUSH key element…`: the list's new length.
fn lpush(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    push_cmd(t, a, End::Left, false)
}

/// `RPUSH key element…`: the list's new length.
fn rpush(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    push_cmd(t, a, End::Right, false)
}

/// `LPUSHX key element…`: as `LPUSH`, but 0 and nothing pushed when the key is missing.
fn lpushx(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    push_cmd(t, a, End::Left, true)
}

/// `RPUSHX key element…`: as `RPUSH`, but 0 and nothing pushed when the key is missing.
fn rpushx(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    push_cmd(t, a, End::Right, true)
}

/// `LPOP`/`RPOP key [count]`.
fn pop_cmd(t: &mut Txn<'_>, a: &[Bytes], end: End, name: &str) -> Reply {
    // The table's arity (-2) lets a fourth argument through; Redis refuses it here.
    if a.len() > 3 {
        return err(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    let count = match a.get(2) {
        Some(n) => Some(tri!(range_arg(
            n,
            0,
            i64::MAX,
            "ERR value is out of range, must be positive"
        ))),
        None => None,
    };
    let Some(mut c) = tri!(t.get(&a[1], Type::List)) else {
        return if count.is_some() {
            Reply::NilArray
        } else {
            Reply::Nil
        };
    };
    let reply = match count {
        None => Reply::Bulk(pop(&mut c, end).expect("a stored list is not empty")),
        Some(0) => return Reply::Array(Vec::new()),
        Some(n) => {
            let n = usize::try_from(n).unwrap_or(usize::MAX).min(c.len());
            Reply::Array(
                (0..n)
                    .filter_map(|_| pop(&mut c, end).map(Reply::Bulk))
                    .collect(),
            )
        }
    };
    t.put(&a[1], c);
    reply
}

/// `LPOP key [count]`: the head element (nil when missing), or with a count up to that
/// many from the head as an array (nil array when missing).
fn lpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    pop_cmd(t, a, End::Left, "lpop")
}

/// `RPOP key [count]`: as `LPOP`, from the tail.
fn rpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    pop_cmd(t, a, End::Right, "rpop")
}

/// Pops from the first of `keys` holding a list (Redis stops at the first key of another
/// type before it, with WRONGTYPE): `[key, element]` without `count` (`BLPOP`), `[key,
/// [elements…]]` with it (`LMPOP`); nil array when every key is missing.
fn pop_first(t: &mut Txn<'_>, keys: &[Bytes], end: End, count: Option<usize>) -> Reply {
    for key in keys {
        let Some(mut c) = tri!(t.get(key, Type::List)) else {
            continue;
        };
        let reply = match count {
            None => Reply::Array(vec![
                bulk(key),
                Reply::Bulk(pop(&mut c, end).expect("a stored list is not empty")),
            ]),
            Some(n) => {
                let n = n.min(c.len());
                let elems = (0..n).filter_map(|_| pop(&mut c, end).map(Reply::Bulk));
                Reply::Array(vec![bulk(key), Reply::Array(elems.collect())])
            }
        };
        t.put(key, c);
        return reply;
    }
    Reply::NilArray
}

/// `BLPOP key… timeout`: `[key, element]` from the first non-empty list's head; nil array
/// (Redis's timeout reply) when there is none.
fn blpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    tri!(timeout_arg(&a[a.len() - 1]));
    pop_first(t, &a[1..a.len() - 1], End::Left, None)
}

/// `BRPOP key… timeout`: as `BLPOP`, from the tail.
fn brpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    tri!(timeout_arg(&a[a.len() - 1]));
    pop_first(t, &a[1..a.len() - 1], End::Right, None)
}

/// `LMPOP`/`BLMPOP`, the number of keys at `a[numkeys_at]`, then the keys, `LEFT|RIGHT`,
/// `[COUNT count]`; `BLMPOP`'s timeout (`a[1]`) is checked after the rest, as Redis does.
fn mpop(t: &mut Txn<'_>, a: &[Bytes], numkeys_at: usize, blocking: bool) -> Reply {
    let numkeys = tri!(range_arg(
        &a[numkeys_at],
        1,
        i64::MAX,
        "ERR numkeys should be greater than 0"
    ));
    let where_at = usize::try_from(numkeys)
        .unwrap_or(usize::MAX)
        .saturating_add(numkeys_at + 1);
    if where_at >= a.len() {
        return err(SYNTAX);
    }
    let end = tri!(end_arg(&a[where_at]));
    let mut count = None;
    let mut j = where_at + 1;
    while j < a.len() {
        if count.is_none() && a[j].eq_ignore_ascii_case(b"count") && j + 1 < a.len() {
            j += 1;
            let n = tri!(range_arg(
                &a[j],
                1,
                i64::MAX,
                "ERR count should be greater than 0"
            ));
            count = Some(usize::try_from(n).unwrap_or(usize::MAX));
        } else {
            return err(SYNTAX);
        }
        j += 1;
    }
    if blocking {
        tri!(timeout_arg(&a[1]));
    }
    pop_first(
        t,
        &a[numkeys_at + 1..where_at],
        end,
        Some(count.unwrap_or(1)),
    )
}

/// `LMPOP numkeys key… LEFT|RIGHT [COUNT count]`: `[key, [elements…]]` from the first
/// non-empty list; nil array when there is none.
fn lmpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    mpop(t, a, 1, false)
}

/// `BLMPOP timeout numkeys key… LEFT|RIGHT [COUNT count]`: as `LMPOP`.
fn blmpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    mpop(t, a, 2, true)
}

/// Moves an element from `src`'s `from` end to `dst`'s `to` end: the element, or nil when
/// `src` is missing. Both types are checked before anything changes.
fn move_elem(t: &mut Txn<'_>, src: &[u8], dst: &[u8], from: End, to: End) -> Reply {
    let Some(mut s) = tri!(t.get(src, Type::List)) else {
        return Reply::Nil;
    };
    if src == dst {
        // One collection: a second copy would lose the pop.
        let e = pop(&mut s, from).expect("a stored list is not empty");
        push(&mut s, to, e.clone());
        t.put(src, s);
        return Reply::Bulk(e);
    }
    let mut d = tri!(t.get(dst, Type::List)).unwrap_or_else(Coll::list);
    let e = pop(&mut s, from).expect("a stored list is not empty");
    push(&mut d, to, e.clone());
    t.put(src, s);
    t.put(dst, d);
    Reply::Bulk(e)
}

/// `LMOVE source destination LEFT|RIGHT LEFT|RIGHT`: the element moved, nil when the
/// source is missing.
fn lmove(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let from = tri!(end_arg(&a[3]));
    let to = tri!(end_arg(&a[4]));
    move_elem(t, &a[1], &a[2], from, to)
}

/// `RPOPLPUSH source destination`: `LMOVE source destination RIGHT LEFT`.
fn rpoplpush(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    move_elem(t, &a[1], &a[2], End::Right, End::Left)
}

/// `BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout`: as `LMOVE` (nil, the timeout
/// reply, when the source is missing).
fn blmove(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let from = tri!(end_arg(&a[3]));
    let to = tri!(end_arg(&a[4]));
    tri!(timeout_arg(&a[5]));
    move_elem(t, &a[1], &a[2], from, to)
}

/// `BRPOPLPUSH source destination timeout`: as `RPOPLPUSH`.
fn brpoplpush(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    tri!(timeout_arg(&a[3]));
    move_elem(t, &a[1], &a[2], End::Right, End::Left)
}

// ---- reads

/// `LLEN key`: the length, 0 when missing.
fn llen(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    len_reply(tri!(v.get(&a[1], Type::List)).map_or(0, Coll::len))
}

/// `LINDEX key index`: the element at `index` (negative: from the tail), nil outside.
fn lindex(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    // Redis looks the key up before parsing the index.
    let Some(c) = tri!(v.get(&a[1], Type::List)) else {
        return Reply::Nil;
    };
    let i = tri!(int_arg(&a[2]));
    match position(i, c.len()) {
        Some(i) => bulk(&c.as_list()[i]),
        None => Reply::Nil,
    }
}

/// `LRANGE key start stop`: the elements `start..=stop` (negative: from the tail).
fn lrange(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let start = tri!(int_arg(&a[2]));
    let stop = tri!(int_arg(&a[3]));
    let Some(c) = tri!(v.get(&a[1], Type::List)) else {
        return Reply::Array(Vec::new());
    };
    match index_range(start, stop, c.len()) {
        // `skip` is O(log n), where iterating up to `start` would be O(start).
        Some((s, e)) => bulks(c.as_list().skip(s).iter().take(e - s + 1)),
        None => Reply::Array(Vec::new()),
    }
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]`: the index of the
/// `rank`-th match (negative: counting from the tail), nil when none; with `COUNT`, an
/// array of up to that many matches from the `rank`-th (0: all); `MAXLEN` bounds the
/// elements compared (0: all).
fn lpos(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut j = 3;
    while j < a.len() {
        let opt = &a[j];
        let more = j + 1 < a.len();
        if opt.eq_ignore_ascii_case(b"rank") && more {
            j += 1;
            rank = tri!(int_arg(&a[j]));
            if rank == 0 {
                return err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
        } else if opt.eq_ignore_ascii_case(b"count") && more {
            j += 1;
            count = Some(tri!(range_arg(
                &a[j],
                0,
                i64::MAX,
                "ERR COUNT can't be negative"
            )));
        } else if opt.eq_ignore_ascii_case(b"maxlen") && more {
            j += 1;
            maxlen = tri!(range_arg(
                &a[j],
                0,
                i64::MAX,
                "ERR MAXLEN can't be negative"
            ));
        } else {
            return err(SYNTAX);
        }
        j += 1;
    }
    let from_tail = rank < 0;
    // Redis 7.0 negates with C's wrap-around: RANK -9223372036854775808 stays negative, so
    // it takes the first match from the tail, and with COUNT every match.
    let rank = rank.wrapping_abs();
    let Some(c) = tri!(v.get(&a[1], Type::List)) else {
        return if count.is_some() {
            Reply::Array(Vec::new())
        } else {
            Reply::Nil
        };
    };
    let l = c.as_list();
    let len = l.len();
    let scan: Box<dyn Iterator<Item = &Bytes>> = if from_tail {
        Box::new(l.iter().rev())
    } else {
        Box::new(l.iter())
    };
    let limit = match maxlen {
        0 => usize::MAX,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    };
    let mut found = Vec::new();
    let mut matches = 0i64;
    for (i, e) in scan.take(limit).enumerate() {
        if *e != a[2] {
            continue;
        }
        matches += 1;
        if matches < rank {
            continue;
        }
        found.push(len_reply(if from_tail { len - 1 - i } else { i }));
        match count {
            None => break,
            Some(n) if n != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= n => break,
            Some(_) => {}
        }
    }
    match count {
        Some(_) => Reply::Array(found),
        None => found.pop().unwrap_or(Reply::Nil),
    }
}

// ---- O(n) writes

/// `LSET key index element`: OK; "no such key" when missing, "index out of range" outside.
fn lset(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let Some(mut c) = tri!(t.get(&a[1], Type::List)) else {
        return err("ERR no such key");
    };
    let i = tri!(int_arg(&a[2]));
    let Some(i) = position(i, c.len()) else {
        return err("ERR index out of range");
    };
    c.lset(i, a[3].clone());
    t.put(&a[1], c);
    ok()
}

/// `LTRIM key start stop`: keeps `start..=stop` only (an empty range deletes the key); OK.
fn ltrim(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let start = tri!(int_arg(&a[2]));
    let stop = tri!(int_arg(&a[3]));
    let Some(mut c) = tri!(t.get(&a[1], Type::List)) else {
        return ok();
    };
    let len = c.len();
    let (from, to) = index_range(start, stop, len).map_or((0, 0), |(s, e)| (s, e + 1));
    let kept = to - from;
    if kept == len {
        return ok();
    }
    // Whichever is fewer: popping the removed elements one by one (each keeps the hash in
    // O(log n)), or rebuilding from the kept ones (the hash recomputed over them).
    if kept < len - kept {
        let l = c.as_list().skip(from).take(kept);
        c.set_list(l);
    } else {
        for _ in 0..from {
            c.lpop();
        }
        for _ in to..len {
            c.rpop();
        }
    }
    t.put(&a[1], c);
    ok()
}

/// `LREM key count element`: removes the first `count` occurrences (negative: the last
/// `-count`; 0: all); how many were removed.
fn lrem(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let count = tri!(int_arg(&a[2]));
    let Some(mut c) = tri!(t.get(&a[1], Type::List)) else {
        return Reply::Int(0);
    };
    let limit = match count {
        0 => usize::MAX,
        n => usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX),
    };
    let l = c.as_list();
    let hit = |(_, e): &(usize, &Bytes)| **e == a[3];
    let gone: Vec<usize> = if count < 0 {
        let mut g: Vec<usize> = l
            .iter()
            .enumerate()
            .rev()
            .filter(hit)
            .take(limit)
            .map(|(i, _)| i)
            .collect();
        g.reverse();
        g
    } else {
        l.iter()
            .enumerate()
            .filter(hit)
            .take(limit)
            .map(|(i, _)| i)
            .collect()
    };
    if gone.is_empty() {
        return Reply::Int(0);
    }
    // The kept runs between the removed elements, joined without copying their elements.
    let mut kept = Vector::new();
    let mut from = 0;
    for &i in &gone {
        kept.append(l.skip(from).take(i - from));
        from = i + 1;
    }
    kept.append(l.skip(from));
    c.set_list(kept);
    t.put(&a[1], c);
    len_reply(gone.len())
}

/// `LINSERT key BEFORE|AFTER pivot element`: inserts next to the first `pivot`; the new
/// length, -1 when there is no pivot, 0 when the key is missing.
fn linsert(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let before = if a[2].eq_ignore_ascii_case(b"before") {
        true
    } else if a[2].eq_ignore_ascii_case(b"after") {
        false
    } else {
        return err(SYNTAX);
    };
    let Some(mut c) = tri!(t.get(&a[1], Type::List)) else {
        return Reply::Int(0);
    };
    let Some(i) = c.as_list().iter().position(|e| *e == a[3]) else {
        return Reply::Int(-1);
    };
    let mut l = c.as_list().clone();
    l.insert(if before { i } else { i + 1 }, a[4].clone());
    c.set_list(l);
    let n = c.len();
    t.put(&a[1], c);
    len_reply(n)
}

/// The list commands.
pub(super) const SPECS: &[Spec] = &[
    w("lpush", -3, lpush),
    w("rpush", -3, rpush),
    w("lpushx", -3, lpushx),
    w("rpushx", -3, rpushx),
    w("lpop", -2, lpop),
    w("rpop", -2, rpop),
    r("llen", 2, llen),
    r("lindex", 3, lindex),
    w("lset", 4, lset),
    r("lrange", 4, lrange),
    w("ltrim", 4, ltrim),
    w("lrem", 4, lrem),
    w("linsert", 5, linsert),
    r("lpos", -3, lpos),
    w("lmove", 5, lmove),
    w("rpoplpush", 3, rpoplpush),
    w("lmpop", -4, lmpop),
    w("blpop", -3, blpop),
    w("brpop", -3, brpop),
    w("blmove", 6, blmove),
    w("brpoplpush", 4, brpoplpush),
    w("blmpop", -5, blmpop),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Expiry, Op};

    use crate::types::testing::Db;

    impl Db {
        fn ty(&mut self, key: &str) -> Reply {
            self.cmd(&["type", key])
        }

        fn list(&mut self, key: &str) -> Reply {
            self.cmd(&["lrange", key, "0", "-1"])
        }

        /// Invariants, and a snapshot that restores to an equal store.
        fn check(&self) {
            self.store.check_invariants();
            let back = KvStore::restore(&self.store.snapshot()).expect("restore");
            assert!(back == self.store, "restored store differs");
            assert_eq!(back.digest(), self.store.digest());
            back.check_invariants();
        }
    }

    fn int(n: i64) -> Reply {
        Reply::Int(n)
    }

    fn b(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    fn arr(items: &[&str]) -> Reply {
        Reply::Array(items.iter().map(|s| b(s)).collect())
    }

    fn ints(items: &[i64]) -> Reply {
        Reply::Array(items.iter().map(|&n| int(n)).collect())
    }

    fn e(msg: &str) -> Reply {
        Reply::Error(msg.into())
    }

    fn none() -> Reply {
        Reply::Status("none".into())
    }

    fn wrong() -> Reply {
        e(WRONGTYPE)
    }

    const NEG: &str = "ERR timeout is negative";
    const NOT_TIMEOUT: &str = "ERR timeout is not a float or out of range";

    #[test]
    fn pushes() {
        let mut db = Db::new();
        assert_eq!(db.cmd(&["lpush", "l", "a", "b", "c"]), int(3));
        assert_eq!(db.list("l"), arr(&["c", "b", "a"]));
        assert_eq!(db.cmd(&["rpush", "l", "x", "y"]), int(5));
        assert_eq!(db.list("l"), arr(&["c", "b", "a", "x", "y"]));
        assert_eq!(db.cmd(&["LPUSH", "l", "z"]), int(6));
        assert_eq!(db.ty("l"), Reply::Status("list".into()));
        assert_eq!(db.cmd(&["lpushx", "nx", "a"]), int(0));
        assert_eq!(db.cmd(&["rpushx", "nx", "a", "b"]), int(0));
        assert_eq!(db.ty("nx"), none());
        assert_eq!(db.cmd(&["lpushx", "l", "p", "q"]), int(8));
        assert_eq!(db.cmd(&["rpushx", "l", "r"]), int(9));
        assert_eq!(
            db.list("l"),
            arr(&["q", "p", "z", "c", "b", "a", "x", "y", "r"])
        );
        db.set("s", "v");
        for c in ["lpush", "rpush", "lpushx", "rpushx"] {
            assert_eq!(db.cmd(&[c, "s", "a"]), wrong(), "{c}");
        }
        assert_eq!(
            db.cmd(&["lpush", "l"]),
            e("ERR wrong number of arguments for 'lpush' command")
        );
        db.check();
    }

    #[test]
    fn pops() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l", "a", "b", "c", "d", "e"]);
        assert_eq!(db.cmd(&["lpop", "l"]), b("a"));
        assert_eq!(db.cmd(&["rpop", "l"]), b("e"));
        assert_eq!(db.cmd(&["lpop", "l", "0"]), Reply::Array(vec![]));
        assert_eq!(db.cmd(&["rpop", "l", "2"]), arr(&["d", "c"]));
        assert_eq!(db.cmd(&["lpop", "l", "10"]), arr(&["b"]));
        assert_eq!(db.ty("l"), none());
        assert_eq!(db.cmd(&["lpop", "l"]), Reply::Nil);
        assert_eq!(db.cmd(&["rpop", "l"]), Reply::Nil);
        assert_eq!(db.cmd(&["lpop", "l", "1"]), Reply::NilArray);
        assert_eq!(db.cmd(&["rpop", "l", "0"]), Reply::NilArray);
        let range = "ERR value is out of range, must be positive";
        assert_eq!(db.cmd(&["lpop", "l", "-1"]), e(range));
        assert_eq!(db.cmd(&["rpop", "l", "x"]), e(range));
        assert_eq!(
            db.cmd(&["lpop", "l", "1", "2"]),
            e("ERR wrong number of arguments for 'lpop' command")
        );
        assert_eq!(
            db.cmd(&["rpop", "l", "1", "2"]),
            e("ERR wrong number of arguments for 'rpop' command")
        );
        db.cmd(&["rpush", "l", "a", "b", "c"]);
        assert_eq!(
            db.cmd(&["rpop", "l", "9223372036854775807"]),
            arr(&["c", "b", "a"])
        );
        assert_eq!(db.ty("l"), none());
        db.cmd(&["rpush", "l", "only"]);
        assert_eq!(db.cmd(&["rpop", "l"]), b("only"));
        assert_eq!(db.ty("l"), none());
        db.set("s", "v");
        assert_eq!(db.cmd(&["lpop", "s"]), wrong());
        assert_eq!(db.cmd(&["rpop", "s", "0"]), wrong());
        assert_eq!(db.cmd(&["lpop", "s", "-1"]), e(range));
        db.check();
    }

    #[test]
    fn reads() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l", "a", "b", "c", "d"]);
        assert_eq!(db.cmd(&["llen", "l"]), int(4));
        assert_eq!(db.cmd(&["llen", "nx"]), int(0));
        assert_eq!(db.cmd(&["lindex", "l", "0"]), b("a"));
        assert_eq!(db.cmd(&["lindex", "l", "3"]), b("d"));
        assert_eq!(db.cmd(&["lindex", "l", "-1"]), b("d"));
        assert_eq!(db.cmd(&["lindex", "l", "-4"]), b("a"));
        assert_eq!(db.cmd(&["lindex", "l", "4"]), Reply::Nil);
        assert_eq!(db.cmd(&["lindex", "l", "-5"]), Reply::Nil);
        assert_eq!(db.cmd(&["lindex", "l", "-9223372036854775808"]), Reply::Nil);
        assert_eq!(db.cmd(&["lindex", "l", "x"]), e(NOT_INTEGER));
        // The key is looked up first.
        assert_eq!(db.cmd(&["lindex", "nx", "x"]), Reply::Nil);
        assert_eq!(db.cmd(&["lindex", "nx", "0"]), Reply::Nil);
        assert_eq!(
            db.cmd(&["lrange", "l", "0", "-1"]),
            arr(&["a", "b", "c", "d"])
        );
        assert_eq!(db.cmd(&["lrange", "l", "1", "2"]), arr(&["b", "c"]));
        assert_eq!(db.cmd(&["lrange", "l", "-2", "100"]), arr(&["c", "d"]));
        assert_eq!(db.cmd(&["lrange", "l", "-100", "0"]), arr(&["a"]));
        assert_eq!(db.cmd(&["lrange", "l", "3", "1"]), arr(&[]));
        assert_eq!(db.cmd(&["lrange", "l", "4", "10"]), arr(&[]));
        assert_eq!(db.cmd(&["lrange", "nx", "0", "-1"]), arr(&[]));
        assert_eq!(db.cmd(&["lrange", "nx", "a", "-1"]), e(NOT_INTEGER));
        assert_eq!(db.cmd(&["lrange", "l", "0", "1.5"]), e(NOT_INTEGER));
        // Reads also answer outside the log.
        assert_eq!(db.read(&["lrange", "l", "1", "-2"]), arr(&["b", "c"]));
        assert_eq!(db.read(&["llen", "l"]), int(4));
        assert_eq!(db.read(&["lindex", "l", "-2"]), b("c"));
        assert_eq!(db.read(&["lpos", "l", "c"]), int(2));
        db.set("s", "v");
        assert_eq!(db.cmd(&["llen", "s"]), wrong());
        assert_eq!(db.cmd(&["lindex", "s", "x"]), wrong());
        assert_eq!(db.cmd(&["lrange", "s", "0", "-1"]), wrong());
        assert_eq!(db.cmd(&["lrange", "s", "x", "-1"]), e(NOT_INTEGER));
        assert_eq!(
            db.cmd(&["llen", "l", "x"]),
            e("ERR wrong number of arguments for 'llen' command")
        );
        db.check();
    }

    #[test]
    fn lset() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l", "a", "b", "c"]);
        assert_eq!(db.cmd(&["lset", "l", "1", "B"]), ok());
        assert_eq!(db.cmd(&["lset", "l", "-1", "C"]), ok());
        assert_eq!(db.cmd(&["lset", "l", "-3", "A"]), ok());
        assert_eq!(db.list("l"), arr(&["A", "B", "C"]));
        assert_eq!(
            db.cmd(&["lset", "l", "3", "x"]),
            e("ERR index out of range")
        );
        assert_eq!(
            db.cmd(&["lset", "l", "-4", "x"]),
            e("ERR index out of range")
        );
        assert_eq!(db.cmd(&["lset", "l", "x", "x"]), e(NOT_INTEGER));
        assert_eq!(db.cmd(&["lset", "nx", "0", "x"]), e("ERR no such key"));
        assert_eq!(db.cmd(&["lset", "nx", "x", "x"]), e("ERR no such key"));
        db.set("s", "v");
        assert_eq!(db.cmd(&["lset", "s", "0", "x"]), wrong());
        db.check();
    }

    #[test]
    fn ltrim() {
        let mut db = Db::new();
        let fill = |db: &mut Db| {
            db.apply(&Op::Del {
                keys: vec![b"l".to_vec()],
            });
            db.cmd(&["rpush", "l", "a", "b", "c", "d", "e"]);
        };
        fill(&mut db);
        assert_eq!(db.cmd(&["ltrim", "l", "1", "-2"]), ok());
        assert_eq!(db.list("l"), arr(&["b", "c", "d"]));
        assert_eq!(db.cmd(&["ltrim", "l", "0", "100"]), ok());
        assert_eq!(db.list("l"), arr(&["b", "c", "d"]));
        // Keeping few: rebuilt from the kept ones.
        db.cmd(&["rpush", "l", "e", "f", "g", "h"]);
        assert_eq!(db.cmd(&["ltrim", "l", "-2", "-2"]), ok());
        assert_eq!(db.list("l"), arr(&["g"]));
        db.check();
        assert_eq!(db.cmd(&["ltrim", "l", "1", "0"]), ok());
        assert_eq!(db.ty("l"), none());
        fill(&mut db);
        assert_eq!(db.cmd(&["ltrim", "l", "5", "10"]), ok());
        assert_eq!(db.ty("l"), none());
        fill(&mut db);
        assert_eq!(db.cmd(&["ltrim", "l", "-100", "-5"]), ok());
        assert_eq!(db.list("l"), arr(&["a"]));
        assert_eq!(db.cmd(&["ltrim", "nx", "0", "1"]), ok());
        assert_eq!(db.ty("nx"), none());
        assert_eq!(db.cmd(&["ltrim", "l", "x", "1"]), e(NOT_INTEGER));
        assert_eq!(db.cmd(&["ltrim", "nx", "0", "y"]), e(NOT_INTEGER));
        db.set("s", "v");
        assert_eq!(db.cmd(&["ltrim", "s", "0", "1"]), wrong());
        db.check();
    }

    #[test]
    fn lrem() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l", "x", "a", "x", "b", "x", "c", "x"]);
        assert_eq!(db.cmd(&["lrem", "l", "2", "x"]), int(2));
        assert_eq!(db.list("l"), arr(&["a", "b", "x", "c", "x"]));
        assert_eq!(db.cmd(&["lrem", "l", "-1", "x"]), int(1));
        assert_eq!(db.list("l"), arr(&["a", "b", "x", "c"]));
        assert_eq!(db.cmd(&["lrem", "l", "0", "nope"]), int(0));
        db.cmd(&["lpush", "l", "x", "x"]);
        assert_eq!(db.cmd(&["lrem", "l", "0", "x"]), int(3));
        assert_eq!(db.list("l"), arr(&["a", "b", "c"]));
        db.check();
        db.cmd(&["rpush", "l", "a"]);
        assert_eq!(db.cmd(&["lrem", "l", "-9223372036854775808", "a"]), int(2));
        assert_eq!(db.list("l"), arr(&["b", "c"]));
        assert_eq!(db.cmd(&["lrem", "l", "5", "b"]), int(1));
        assert_eq!(db.cmd(&["lrem", "l", "-5", "c"]), int(1));
        assert_eq!(db.ty("l"), none());
        assert_eq!(db.cmd(&["lrem", "nx", "0", "a"]), int(0));
        assert_eq!(db.cmd(&["lrem", "nx", "a", "a"]), e(NOT_INTEGER));
        db.set("s", "v");
        assert_eq!(db.cmd(&["lrem", "s", "0", "a"]), wrong());
        db.check();
    }

    #[test]
    fn linsert() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l", "a", "b", "a"]);
        assert_eq!(db.cmd(&["linsert", "l", "before", "a", "x"]), int(4));
        assert_eq!(db.cmd(&["linsert", "l", "AFTER", "b", "y"]), int(5));
        assert_eq!(db.cmd(&["linsert", "l", "After", "a", "z"]), int(6));
        assert_eq!(db.list("l"), arr(&["x", "a", "z", "b", "y", "a"]));
        assert_eq!(db.cmd(&["linsert", "l", "before", "nope", "q"]), int(-1));
        assert_eq!(db.cmd(&["linsert", "nx", "before", "a", "q"]), int(0));
        assert_eq!(db.ty("nx"), none());
        assert_eq!(db.cmd(&["linsert", "l", "middle", "a", "q"]), e(SYNTAX));
        assert_eq!(db.cmd(&["linsert", "nx", "middle", "a", "q"]), e(SYNTAX));
        db.set("s", "v");
        assert_eq!(db.cmd(&["linsert", "s", "before", "a", "q"]), wrong());
        assert_eq!(db.cmd(&["linsert", "s", "x", "a", "q"]), e(SYNTAX));
        db.check();
    }

    #[test]
    fn lpos() {
        let mut db = Db::new();
        // The example of Redis's documentation.
        db.cmd(&["rpush", "l", "a", "b", "c", "1", "2", "3", "c", "c"]);
        assert_eq!(db.cmd(&["lpos", "l", "c"]), int(2));
        assert_eq!(db.cmd(&["lpos", "l", "c", "rank", "2"]), int(6));
        assert_eq!(db.cmd(&["lpos", "l", "c", "RANK", "-1"]), int(7));
        assert_eq!(db.cmd(&["lpos", "l", "c", "rank", "4"]), Reply::Nil);
        assert_eq!(db.cmd(&["lpos", "l", "c", "count", "2"]), ints(&[2, 6]));
        assert_eq!(db.cmd(&["lpos", "l", "c", "count", "0"]), ints(&[2, 6, 7]));
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "-1", "count", "2"]),
            ints(&[7, 6])
        );
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "2", "count", "0"]),
            ints(&[6, 7])
        );
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "count", "0", "maxlen", "7"]),
            ints(&[2, 6])
        );
        assert_eq!(db.cmd(&["lpos", "l", "c", "maxlen", "2"]), Reply::Nil);
        assert_eq!(db.cmd(&["lpos", "l", "c", "maxlen", "3"]), int(2));
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "-1", "maxlen", "1"]),
            int(7)
        );
        assert_eq!(
            db.cmd(&["lpos", "l", "a", "rank", "-1", "maxlen", "7"]),
            Reply::Nil
        );
        assert_eq!(db.cmd(&["lpos", "l", "z"]), Reply::Nil);
        assert_eq!(db.cmd(&["lpos", "l", "z", "count", "1"]), ints(&[]));
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "9223372036854775807"]),
            Reply::Nil
        );
        // 7.0's wrapped negation: the last match, and every one with COUNT.
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "-9223372036854775808"]),
            int(7)
        );
        assert_eq!(
            db.cmd(&[
                "lpos",
                "l",
                "c",
                "rank",
                "-9223372036854775808",
                "count",
                "1"
            ]),
            ints(&[7, 6, 2])
        );
        // Later options override earlier ones.
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "5", "rank", "1"]),
            int(2)
        );
        assert_eq!(db.cmd(&["lpos", "nx", "c"]), Reply::Nil);
        assert_eq!(db.cmd(&["lpos", "nx", "c", "count", "0"]), ints(&[]));
        assert_eq!(
            db.cmd(&["lpos", "l", "c", "rank", "0"]),
            e("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
        );
        assert_eq!(db.cmd(&["lpos", "l", "c", "rank", "x"]), e(NOT_INTEGER));
        let count = e("ERR COUNT can't be negative");
        assert_eq!(db.cmd(&["lpos", "l", "c", "count", "-1"]), count);
        assert_eq!(db.cmd(&["lpos", "l", "c", "count", "x"]), count);
        let maxlen = e("ERR MAXLEN can't be negative");
        assert_eq!(db.cmd(&["lpos", "l", "c", "maxlen", "-1"]), maxlen);
        assert_eq!(db.cmd(&["lpos", "nx", "c", "maxlen", "x"]), maxlen);
        assert_eq!(db.cmd(&["lpos", "l", "c", "rank"]), e(SYNTAX));
        assert_eq!(db.cmd(&["lpos", "l", "c", "foo", "1"]), e(SYNTAX));
        assert_eq!(db.cmd(&["lpos", "nx", "c", "count"]), e(SYNTAX));
        db.set("s", "v");
        assert_eq!(db.cmd(&["lpos", "s", "c"]), wrong());
        assert_eq!(db.cmd(&["lpos", "s", "c", "rank", "0"]), e("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"));
        db.check();
    }

    #[test]
    fn moves() {
        let mut db = Db::new();
        db.cmd(&["rpush", "src", "a", "b", "c"]);
        assert_eq!(db.cmd(&["lmove", "src", "dst", "left", "right"]), b("a"));
        assert_eq!(db.cmd(&["lmove", "src", "dst", "RIGHT", "LEFT"]), b("c"));
        assert_eq!(db.list("dst"), arr(&["c", "a"]));
        assert_eq!(db.cmd(&["rpoplpush", "dst", "src"]), b("a"));
        assert_eq!(db.list("src"), arr(&["a", "b"]));
        assert_eq!(db.list("dst"), arr(&["c"]));
        assert_eq!(db.cmd(&["lmove", "dst", "src", "left", "left"]), b("c"));
        assert_eq!(db.ty("dst"), none());
        assert_eq!(db.list("src"), arr(&["c", "a", "b"]));
        // Onto itself: a rotation.
        assert_eq!(db.cmd(&["rpoplpush", "src", "src"]), b("b"));
        assert_eq!(db.list("src"), arr(&["b", "c", "a"]));
        assert_eq!(db.cmd(&["lmove", "src", "src", "left", "right"]), b("b"));
        assert_eq!(db.list("src"), arr(&["c", "a", "b"]));
        assert_eq!(db.cmd(&["lmove", "src", "src", "left", "left"]), b("c"));
        assert_eq!(db.list("src"), arr(&["c", "a", "b"]));
        db.cmd(&["rpush", "one", "x"]);
        assert_eq!(db.cmd(&["lmove", "one", "one", "right", "left"]), b("x"));
        assert_eq!(db.list("one"), arr(&["x"]));
        assert_eq!(db.cmd(&["lmove", "nx", "dst", "left", "right"]), Reply::Nil);
        assert_eq!(db.cmd(&["rpoplpush", "nx", "dst"]), Reply::Nil);
        assert_eq!(db.ty("dst"), none());
        assert_eq!(db.cmd(&["lmove", "src", "dst", "up", "right"]), e(SYNTAX));
        assert_eq!(db.cmd(&["lmove", "nx", "dst", "left", "down"]), e(SYNTAX));
        db.set("s", "v");
        // Nothing changes when the destination holds another type.
        assert_eq!(db.cmd(&["lmove", "src", "s", "left", "right"]), wrong());
        assert_eq!(db.cmd(&["rpoplpush", "src", "s"]), wrong());
        assert_eq!(db.list("src"), arr(&["c", "a", "b"]));
        assert_eq!(db.cmd(&["lmove", "s", "src", "left", "right"]), wrong());
        assert_eq!(db.cmd(&["rpoplpush", "s", "dst"]), wrong());
        // A missing source answers nil before the destination's type is looked at.
        assert_eq!(db.cmd(&["rpoplpush", "nx", "s"]), Reply::Nil);
        db.check();
    }

    #[test]
    fn blocking_forms() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l1", "a", "b"]);
        db.cmd(&["rpush", "l2", "c"]);
        assert_eq!(db.cmd(&["blpop", "nx", "l1", "l2", "0"]), arr(&["l1", "a"]));
        assert_eq!(
            db.cmd(&["brpop", "nx", "l2", "l1", "1.5"]),
            arr(&["l2", "c"])
        );
        assert_eq!(db.ty("l2"), none());
        assert_eq!(db.cmd(&["blpop", "nx", "l2", "0.1"]), Reply::NilArray);
        assert_eq!(db.cmd(&["brpop", "nx", "0"]), Reply::NilArray);
        db.set("s", "v");
        assert_eq!(db.cmd(&["blpop", "nx", "s", "l1", "0"]), wrong());
        // Keys after the first list are not looked at.
        assert_eq!(db.cmd(&["blpop", "l1", "s", "0"]), arr(&["l1", "b"]));
        assert_eq!(db.ty("l1"), none());
        assert_eq!(db.cmd(&["blpop", "l1", "-1"]), e(NEG));
        assert_eq!(db.cmd(&["brpop", "l1", "x"]), e(NOT_TIMEOUT));
        assert_eq!(db.cmd(&["blpop", "s", "x"]), e(NOT_TIMEOUT));

        db.cmd(&["rpush", "src", "a", "b"]);
        assert_eq!(
            db.cmd(&["blmove", "src", "dst", "right", "left", "0"]),
            b("b")
        );
        assert_eq!(db.cmd(&["brpoplpush", "src", "dst", "0"]), b("a"));
        assert_eq!(db.list("dst"), arr(&["a", "b"]));
        assert_eq!(db.ty("src"), none());
        assert_eq!(
            db.cmd(&["blmove", "src", "dst", "right", "left", "1"]),
            Reply::Nil
        );
        assert_eq!(db.cmd(&["brpoplpush", "src", "dst", "1"]), Reply::Nil);
        assert_eq!(
            db.cmd(&["blmove", "dst", "s", "right", "left", "0"]),
            wrong()
        );
        assert_eq!(db.cmd(&["brpoplpush", "s", "dst", "0"]), wrong());
        assert_eq!(
            db.cmd(&["blmove", "dst", "x", "up", "left", "0"]),
            e(SYNTAX)
        );
        assert_eq!(
            db.cmd(&["blmove", "dst", "x", "left", "left", "-2"]),
            e(NEG)
        );
        assert_eq!(
            db.cmd(&["blmove", "dst", "x", "up", "left", "-2"]),
            e(SYNTAX)
        );
        assert_eq!(db.cmd(&["brpoplpush", "s", "x", "abc"]), e(NOT_TIMEOUT));
        db.check();
    }

    #[test]
    fn timeouts_as_redis_7_0_reads_them() {
        for ok in [
            "0", "1", "0.5", ".5", "5.", "+1", "1e3", "1E+3", "2.5e-1", "-0", "-0.0005", "0x10",
            "0X1p-2", "0x.8", "1e-400", "1e-4950", "0e99999", "00012",
        ] {
            assert_eq!(timeout_arg(ok.as_bytes()), Ok(()), "{ok}");
        }
        for neg in [
            "-1",
            "-0.001",
            "-inf",
            "inf",
            "+Infinity",
            "1e30",
            "9223372036854775.808",
            "1e400",
            "1e4932",
            "-1e4000",
            "0x1p100",
        ] {
            assert_eq!(timeout_arg(neg.as_bytes()), Err(e(NEG)), "{neg}");
        }
        // The largest timeout that fits: (2^63 - 1024) ms.
        assert_eq!(timeout_arg(b"9223372036854774.784"), Ok(()));
        for bad in [
            "",
            " 1",
            "1 ",
            "\t1",
            "abc",
            "nan",
            "-nan",
            "1e",
            "1e+",
            "0x",
            "0xg",
            "0x1p",
            ".",
            "-",
            "1..2",
            "1e5000",
            "1e-5000",
            "0x1p20000",
            "1,5",
            "1\u{0}",
        ] {
            assert_eq!(timeout_arg(bad.as_bytes()), Err(e(NOT_TIMEOUT)), "{bad:?}");
        }
        assert_eq!(timeout_arg(&[b'1'; 5 * 1024]), Err(e(NOT_TIMEOUT)));
        let mut long = vec![b'0'; 5 * 1024 - 2];
        long.push(b'1');
        assert_eq!(timeout_arg(&long), Ok(()));
    }

    #[test]
    fn lmpop() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l1", "a", "b", "c"]);
        db.cmd(&["rpush", "l2", "d", "e"]);
        let popped = |key: &str, elems: &[&str]| Reply::Array(vec![b(key), arr(elems)]);
        assert_eq!(
            db.cmd(&["lmpop", "2", "nx", "l1", "left"]),
            popped("l1", &["a"])
        );
        assert_eq!(
            db.cmd(&["lmpop", "2", "l1", "l2", "RIGHT", "count", "10"]),
            popped("l1", &["c", "b"])
        );
        assert_eq!(db.ty("l1"), none());
        assert_eq!(
            db.cmd(&["lmpop", "3", "l1", "nx", "l2", "left", "COUNT", "1"]),
            popped("l2", &["d"])
        );
        assert_eq!(db.cmd(&["lmpop", "1", "nx", "left"]), Reply::NilArray);
        assert_eq!(
            db.cmd(&["lmpop", "1", "nx", "left", "count", "3"]),
            Reply::NilArray
        );
        let numkeys = e("ERR numkeys should be greater than 0");
        assert_eq!(db.cmd(&["lmpop", "0", "l2", "left"]), numkeys);
        assert_eq!(db.cmd(&["lmpop", "-1", "l2", "left"]), numkeys);
        assert_eq!(db.cmd(&["lmpop", "x", "l2", "left"]), numkeys);
        // 7.0 has no "numkeys can't be greater" error: the direction is missing.
        assert_eq!(db.cmd(&["lmpop", "2", "l2", "left"]), e(SYNTAX));
        assert_eq!(
            db.cmd(&["lmpop", "9223372036854775807", "l2", "left"]),
            e(SYNTAX)
        );
        assert_eq!(db.cmd(&["lmpop", "1", "l2", "up"]), e(SYNTAX));
        assert_eq!(db.cmd(&["lmpop", "1", "l2", "left", "count"]), e(SYNTAX));
        assert_eq!(db.cmd(&["lmpop", "1", "l2", "left", "foo", "1"]), e(SYNTAX));
        assert_eq!(
            db.cmd(&["lmpop", "1", "l2", "left", "count", "1", "count", "1"]),
            e(SYNTAX)
        );
        let count = e("ERR count should be greater than 0");
        assert_eq!(db.cmd(&["lmpop", "1", "l2", "left", "count", "0"]), count);
        assert_eq!(db.cmd(&["lmpop", "1", "l2", "left", "count", "x"]), count);
        db.set("s", "v");
        assert_eq!(db.cmd(&["lmpop", "2", "nx", "s", "left"]), wrong());
        assert_eq!(
            db.cmd(&["lmpop", "2", "l2", "s", "left"]),
            popped("l2", &["e"])
        );
        assert_eq!(db.ty("l2"), none());

        db.cmd(&["rpush", "l3", "x", "y", "z"]);
        assert_eq!(
            db.cmd(&["blmpop", "0", "2", "nx", "l3", "right", "count", "2"]),
            popped("l3", &["z", "y"])
        );
        assert_eq!(
            db.cmd(&["blmpop", "0.5", "1", "l3", "left"]),
            popped("l3", &["x"])
        );
        assert_eq!(db.cmd(&["blmpop", "1", "1", "l3", "left"]), Reply::NilArray);
        assert_eq!(db.cmd(&["blmpop", "-1", "1", "l3", "left"]), e(NEG));
        assert_eq!(db.cmd(&["blmpop", "x", "1", "l3", "left"]), e(NOT_TIMEOUT));
        // The rest is parsed before the timeout.
        assert_eq!(db.cmd(&["blmpop", "x", "0", "l3", "left"]), numkeys);
        assert_eq!(db.cmd(&["blmpop", "x", "1", "l3", "up"]), e(SYNTAX));
        assert_eq!(
            db.cmd(&["blmpop", "x", "1", "l3", "left", "count", "0"]),
            count
        );
        assert_eq!(db.cmd(&["blmpop", "0", "1", "s", "left"]), wrong());
        assert_eq!(
            db.cmd(&["blmpop", "0", "1", "l3"]),
            e("ERR wrong number of arguments for 'blmpop' command")
        );
        db.check();
    }

    #[test]
    fn arities_as_redis() {
        let want = [
            ("lpush", -3),
            ("rpush", -3),
            ("lpushx", -3),
            ("rpushx", -3),
            ("lpop", -2),
            ("rpop", -2),
            ("llen", 2),
            ("lindex", 3),
            ("lset", 4),
            ("lrange", 4),
            ("ltrim", 4),
            ("lrem", 4),
            ("linsert", 5),
            ("lpos", -3),
            ("lmove", 5),
            ("rpoplpush", 3),
            ("lmpop", -4),
            ("blpop", -3),
            ("brpop", -3),
            ("blmove", 6),
            ("brpoplpush", 4),
            ("blmpop", -5),
        ];
        assert_eq!(SPECS.len(), want.len());
        for (name, arity) in want {
            let s = spec(name.as_bytes()).expect(name);
            assert_eq!(s.arity, arity, "{name}");
            assert!(!s.random, "{name}");
            assert_eq!(
                s.read_only(),
                matches!(name, "llen" | "lindex" | "lrange" | "lpos"),
                "{name}"
            );
        }
    }

    #[test]
    fn expired_list_is_missing() {
        let mut db = Db::new();
        db.cmd(&["rpush", "l", "a", "b"]);
        db.apply(&Op::Touch {
            keys: vec![b"l".to_vec()],
            expiry: Expiry::AfterMs(10),
            get: false,
        });
        // Changes keep the expiry.
        assert_eq!(db.cmd(&["rpush", "l", "c"]), int(3));
        assert_eq!(db.cmd(&["lpop", "l"]), b("a"));
        db.check();
        db.now += 100;
        assert_eq!(db.read(&["llen", "l"]), int(0));
        assert_eq!(db.cmd(&["lpushx", "l", "x"]), int(0));
        assert_eq!(db.cmd(&["rpush", "l", "x"]), int(1));
        assert_eq!(db.list("l"), arr(&["x"]));
        db.now += 100;
        assert_eq!(db.cmd(&["llen", "l"]), int(1), "a new list has no expiry");
        db.check();
    }

    #[test]
    fn mixed_sequence_keeps_invariants() {
        let mut db = Db::new();
        let mut model: Vec<String> = Vec::new();
        for i in 0..300u32 {
            let v = format!("v{}", i % 7);
            match i % 9 {
                0 | 1 => {
                    db.cmd(&["rpush", "l", &v]);
                    model.push(v);
                }
                2 => {
                    db.cmd(&["lpush", "l", &v]);
                    model.insert(0, v);
                }
                3 => {
                    let got = db.cmd(&["lpop", "l"]);
                    let want = if model.is_empty() {
                        Reply::Nil
                    } else {
                        b(&model.remove(0))
                    };
                    assert_eq!(got, want);
                }
                4 => {
                    let n = model.len();
                    if n > 0 {
                        let idx = (i as usize * 7) % n;
                        db.cmd(&["lset", "l", &idx.to_string(), "set"]);
                        model[idx] = "set".into();
                    }
                }
                5 => {
                    let got = db.cmd(&["linsert", "l", "after", &v, "ins"]);
                    match model.iter().position(|e| *e == v) {
                        Some(p) => {
                            model.insert(p + 1, "ins".into());
                            assert_eq!(got, int(model.len() as i64));
                        }
                        None if model.is_empty() => assert_eq!(got, int(0)),
                        None => assert_eq!(got, int(-1)),
                    }
                }
                6 if i % 4 == 0 => {
                    db.cmd(&["lrem", "l", "-2", &v]);
                    for _ in 0..2 {
                        if let Some(p) = model.iter().rposition(|e| *e == v) {
                            model.remove(p);
                        }
                    }
                }
                7 if model.len() > 12 => {
                    db.cmd(&["ltrim", "l", "2", "-3"]);
                    model = model[2..model.len() - 2].to_vec();
                }
                8 => {
                    db.cmd(&["rpoplpush", "l", "l"]);
                    if let Some(last) = model.pop() {
                        model.insert(0, last);
                    }
                }
                _ => {}
            }
            let want: Vec<&str> = model.iter().map(String::as_str).collect();
            assert_eq!(db.list("l"), arr(&want), "step {i}");
            if i % 50 == 0 {
                db.check();
            }
        }
        db.check();
    }
}
