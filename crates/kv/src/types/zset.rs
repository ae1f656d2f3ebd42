//! Sorted sets: members with scores, ordered by (score, member).

use std::cmp::Ordering;

use imbl::{OrdMap, Vector};

use super::*;

/// A score with a total order (never NaN in a sorted set; -0 is stored as 0).
#[derive(Clone, Copy, Debug)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, o: &Score) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Score) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Score {
    fn cmp(&self, o: &Score) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// A sorted set: each member's score, and the members in (score, member) order in a
/// persistent vector, so rank, position and insertion are O(log n) (binary search, then the
/// vector's O(log n) insert and remove).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZSet {
    scores: OrdMap<Bytes, Score>,
    order: Vector<(Score, Bytes)>,
}

impl ZSet {
    /// Drops at most `budget` members, whatever they are (a zset being freed a piece at a
    /// time); how many.
    pub(crate) fn shed(&mut self, budget: usize) -> usize {
        let mut n = 0;
        while n < budget && super::remove_min(&mut self.scores) {
            self.order.pop_back();
            n += 1;
        }
        n
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// A member's score.
    pub fn score(&self, m: &[u8]) -> Option<f64> {
        self.scores.get(m).map(|s| s.0)
    }

    /// Members and scores in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Bytes, f64)> + '_ {
        self.order.iter().map(|(s, m)| (m, s.0))
    }

    /// The member at rank `i` (0: lowest score).
    pub fn at(&self, i: usize) -> Option<(&Bytes, f64)> {
        self.order.get(i).map(|(s, m)| (m, s.0))
    }

    /// A member's rank (0: lowest score).
    pub fn rank(&self, m: &[u8]) -> Option<usize> {
        let s = *self.scores.get(m)?;
        self.order
            .binary_search_by(|(os, om)| os.cmp(&s).then_with(|| om.as_slice().cmp(m)))
            .ok()
    }

    /// The rank of the first member whose (score, member) is not below `(score, member)`;
    /// `member` `None` sorts before every member of that score.
    pub fn lower_bound(&self, score: f64, member: Option<&[u8]>) -> usize {
        let s = Score(score);
        match self.order.binary_search_by(|(os, om)| {
            os.cmp(&s).then_with(|| match member {
                None => Ordering::Greater,
                Some(m) => om.as_slice().cmp(m),
            })
        }) {
            Ok(i) | Err(i) => i,
        }
    }

    /// The rank of the first member whose score is above `score`.
    pub fn upper_bound(&self, score: f64) -> usize {
        let s = Score(score);
        match self
            .order
            .binary_search_by(|(os, _)| os.cmp(&s).then(Ordering::Less))
        {
            Ok(i) | Err(i) => i,
        }
    }

    /// The rank of the first member not below `m` in member order, for a set whose members
    /// all have the same score (what Redis's lex commands assume).
    pub fn lex_lower_bound(&self, m: &[u8], inclusive: bool) -> usize {
        match self
            .order
            .binary_search_by(|(_, om)| match om.as_slice().cmp(m) {
                Ordering::Equal if inclusive => Ordering::Greater,
                Ordering::Equal => Ordering::Less,
                o => o,
            }) {
            Ok(i) | Err(i) => i,
        }
    }

    /// Members and scores of the ranks `lo..hi` (`hi` ≤ len), reached in O(log n).
    pub fn range(&self, lo: usize, hi: usize) -> impl DoubleEndedIterator<Item = (&Bytes, f64)> {
        self.order
            .focus()
            .narrow(lo..hi)
            .into_iter()
            .map(|(s, m)| (m, s.0))
    }

    /// The ranks `lo..hi` of the members whose scores are in `r`.
    fn score_span(&self, r: &ScoreRange) -> (usize, usize) {
        let lo = if r.minex {
            self.upper_bound(r.min)
        } else {
            self.lower_bound(r.min, None)
        };
        let hi = if r.maxex {
            self.lower_bound(r.max, None)
        } else {
            self.upper_bound(r.max)
        };
        (lo, hi.max(lo))
    }

    /// The ranks `lo..hi` of the members in the lex range `min`..`max`.
    fn lex_span(&self, min: &Lex, max: &Lex) -> (usize, usize) {
        let pos = |b: &Lex, as_max: bool| match b {
            Lex::Min => 0,
            Lex::Max => self.len(),
            Lex::In(m) => self.lex_lower_bound(m, !as_max),
            Lex::Ex(m) => self.lex_lower_bound(m, as_max),
        };
        let (lo, hi) = (pos(min, false), pos(max, true));
        (lo, hi.max(lo))
    }

    /// Sets a member's score; returns the old one.
    pub(super) fn insert(&mut self, m: Bytes, score: f64) -> Option<f64> {
        let s = Score(score);
        let old = self.scores.insert(m.clone(), s);
        if let Some(o) = old {
            if o == s {
                return Some(o.0);
            }
            let i = self.find(o, &m).expect("a member in the order");
            self.order.remove(i);
        }
        let i = match self.find(s, &m) {
            Ok(_) => unreachable!("a member twice in the order"),
            Err(i) => i,
        };
        self.order.insert(i, (s, m));
        old.map(|o| o.0)
    }

    /// Removes a member; returns its score.
    pub(super) fn remove(&mut self, m: &[u8]) -> Option<f64> {
        let s = self.scores.remove(m)?;
        let i = self.find(s, m).expect("a member in the order");
        self.order.remove(i);
        Some(s.0)
    }

    fn find(&self, s: Score, m: &[u8]) -> Result<usize, usize> {
        self.order
            .binary_search_by(|(os, om)| os.cmp(&s).then_with(|| om.as_slice().cmp(m)))
    }

    /// The two indexes agree (tests and invariant checks).
    pub(super) fn check(&self) {
        assert_eq!(self.scores.len(), self.order.len(), "zset indexes' sizes");
        let mut prev: Option<&(Score, Bytes)> = None;
        for e in &self.order {
            assert_eq!(self.scores.get(&e.1), Some(&e.0), "zset score index");
            assert!(!e.0 .0.is_nan(), "a NaN score");
            if let Some(p) = prev {
                assert!(p < e, "zset order");
            }
            prev = Some(e);
        }
    }
}

// ---- argument parsing

/// A score range as `ZRANGEBYSCORE` takes one (`(` marks an exclusive end).
struct ScoreRange {
    min: f64,
    minex: bool,
    max: f64,
    maxex: bool,
}

/// One end of a lex range: `-`, `+`, `[member` or `(member`.
enum Lex {
    Min,
    Max,
    In(Bytes),
    Ex(Bytes),
}

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// C's `isspace`.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// A float as Redis's `string2d` reads a score or weight: the whole text, no leading space,
/// not NaN, and refused when `strtod` reports a range error (an overflow to infinity from
/// finite digits, or an underflow to zero from non-zero digits). Hex floats are not read.
fn score_arg(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || c_space(b[0]) {
        return None;
    }
    let x: f64 = s.parse().ok()?;
    let body = s.trim_start_matches(['+', '-']);
    if x.is_nan()
        || (x.is_infinite() && !body.to_ascii_lowercase().starts_with("inf"))
        || (x == 0.0
            && body
                .split(['e', 'E'])
                .next()
                .is_some_and(|m| m.bytes().any(|c| matches!(c, b'1'..=b'9'))))
    {
        return None;
    }
    Some(x)
}

/// A range end as `zslParseRange` reads it with `strtod`: leading space allowed, an empty
/// text is 0, an overflow is infinite, NaN refused; -0 becomes 0 (they compare equal).
fn range_float(b: &[u8]) -> Option<f64> {
    if b.is_empty() {
        return Some(0.0);
    }
    let start = b.iter().position(|&c| !c_space(c))?;
    let x: f64 = std::str::from_utf8(&b[start..]).ok()?.parse().ok()?;
    (!x.is_nan()).then_some(x + 0.0)
}

fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
    let end = |b: &[u8]| match b.split_first() {
        Some((b'(', rest)) => range_float(rest).map(|x| (x, true)),
        _ => range_float(b).map(|x| (x, false)),
    };
    match (end(min), end(max)) {
        (Some((min, minex)), Some((max, maxex))) => Ok(ScoreRange {
            min,
            minex,
            max,
            maxex,
        }),
        _ => Err(err(NOT_FLOAT_RANGE)),
    }
}

fn lex_item(b: &[u8]) -> Option<Lex> {
    match b.split_first()? {
        (b'+', []) => Some(Lex::Max),
        (b'-', []) => Some(Lex::Min),
        (b'(', rest) => Some(Lex::Ex(rest.to_vec())),
        (b'[', rest) => Some(Lex::In(rest.to_vec())),
        _ => None,
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<(Lex, Lex), Reply> {
    match (lex_item(min), lex_item(max)) {
        (Some(min), Some(max)) => Ok((min, max)),
        _ => Err(err(NOT_LEX_RANGE)),
    }
}

/// A count in `0..=i64::MAX` (`getPositiveLongFromObjectOrReply`): anything else gets `msg`.
fn positive_arg(b: &[u8], msg: &str) -> Result<i64, Reply> {
    match crate::store::parse_i64(b) {
        Some(n) if n >= 0 => Ok(n),
        _ => Err(err(msg)),
    }
}

/// A blocking command's timeout in seconds, checked as Redis 7.0 does (the blocking itself
/// is the front-end's).
fn timeout_arg(b: &[u8]) -> Result<(), Reply> {
    let bad = || err("ERR timeout is not a float or out of range");
    let s = std::str::from_utf8(b).map_err(|_| bad())?;
    // string2ld: no leading space, the whole text, at most 5 KiB, not NaN.
    if s.is_empty() || s.len() >= 5 * 1024 || c_space(b[0]) {
        return Err(bad());
    }
    let x: f64 = s.parse().map_err(|_| bad())?;
    if x.is_nan() {
        return Err(bad());
    }
    let ms = (x * 1000.0).ceil();
    // Redis casts to long long; out of range (infinity included) that is i64::MIN on x86-64.
    let tval = if (i64::MIN as f64..i64::MAX as f64).contains(&ms) {
        ms as i64
    } else {
        i64::MIN
    };
    if tval < 0 {
        return Err(err("ERR timeout is negative"));
    }
    Ok(())
}

// ---- replies and helpers

/// Members, with their scores when `withscores` (pairs: flat in RESP2, nested in RESP3).
fn members_reply<'a>(items: impl Iterator<Item = (&'a Bytes, f64)>, withscores: bool) -> Reply {
    if withscores {
        return Reply::Pairs(items.map(|(m, s)| (bulk(m), double(s))).collect());
    }
    Reply::Array(items.map(|(m, _)| bulk(m)).collect())
}

fn owned_reply(items: &[(Bytes, f64)], withscores: bool) -> Reply {
    members_reply(items.iter().map(|(m, s)| (m, *s)), withscores)
}

fn zget<'a>(v: &'a View<'_>, key: &[u8]) -> Result<Option<&'a ZSet>, Reply> {
    Ok(v.get(key, Type::ZSet)?.map(Coll::as_zset))
}

/// A sorted set built from members and scores (a NaN score counts as 0, as Redis's
/// aggregation does).
fn build<'a>(items: impl IntoIterator<Item = (&'a Bytes, f64)>) -> Coll {
    let mut c = Coll::zset();
    for (m, s) in items {
        c.zadd(m.clone(), if s.is_nan() { 0.0 } else { s });
    }
    c
}

/// The ranks `lo..hi`, walked upwards or (`rev`) downwards, after skipping `offset` and
/// keeping at most `limit` (negative: all); a negative offset selects nothing, as in Redis.
fn pick(z: &ZSet, lo: usize, hi: usize, rev: bool, offset: i64, limit: i64) -> Vec<(Bytes, f64)> {
    let avail = hi.saturating_sub(lo);
    let Ok(skip) = usize::try_from(offset) else {
        return Vec::new();
    };
    if skip >= avail {
        return Vec::new();
    }
    let take = usize::try_from(limit).map_or(avail - skip, |l| l.min(avail - skip));
    let own = |(m, s): (&Bytes, f64)| (m.clone(), s);
    if rev {
        z.range(hi - skip - take, hi - skip)
            .rev()
            .map(own)
            .collect()
    } else {
        z.range(lo + skip, lo + skip + take).map(own).collect()
    }
}

// ---- the commands

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]`.
fn zadd(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    zadd_generic(t, a, false)
}

/// `ZINCRBY key increment member`: `ZADD … INCR`, options included, as Redis parses it.
fn zincrby(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    zadd_generic(t, a, true)
}

fn zadd_generic(t: &mut Txn<'_>, a: &[Bytes], mut incr: bool) -> Reply {
    let (mut nx, mut xx, mut gt, mut lt, mut ch) = (false, false, false, false, false);
    let mut i = 2;
    while i < a.len() {
        let o = &a[i];
        if is(o, "nx") {
            nx = true;
        } else if is(o, "xx") {
            xx = true;
        } else if is(o, "ch") {
            ch = true;
        } else if is(o, "incr") {
            incr = true;
        } else if is(o, "gt") {
            gt = true;
        } else if is(o, "lt") {
            lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let pairs = &a[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return err(SYNTAX);
    }
    if nx && xx {
        return err("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && pairs.len() > 2 {
        return err("ERR INCR option supports a single increment-element pair");
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        match score_arg(&p[0]) {
            Some(s) => scores.push(s),
            None => return err(NOT_FLOAT),
        }
    }
    let (mut added, mut updated, mut processed) = (0usize, 0usize, 0usize);
    let mut last = 0.0;
    let mut c = match t.get(&a[1], Type::ZSet) {
        Ok(Some(c)) => Some(c),
        Ok(None) if xx => None,
        Ok(None) => Some(Coll::zset()),
        Err(e) => return e,
    };
    if let Some(c) = &mut c {
        for (p, &score) in pairs.chunks(2).zip(&scores) {
            let m = &p[1];
            match c.as_zset().score(m) {
                Some(_) if nx => {}
                Some(cur) => {
                    let new = if incr { score + cur } else { score };
                    if new.is_nan() {
                        // Only INCR gets here, with one pair: nothing was changed yet.
                        return err("ERR resulting score is not a number (NaN)");
                    }
                    if (lt && new >= cur) || (gt && new <= cur) {
                        continue;
                    }
                    processed += 1;
                    last = new;
                    if new != cur {
                        c.zadd(m.clone(), new);
                        updated += 1;
                    }
                }
                None if xx => {}
                None => {
                    c.zadd(m.clone(), score);
                    added += 1;
                    processed += 1;
                    last = score;
                }
            }
        }
    }
    if added + updated > 0 {
        if let Some(c) = c {
            t.put(&a[1], c);
        }
    }
    if incr {
        if processed > 0 {
            double(last)
        } else {
            Reply::Nil
        }
    } else {
        len_reply(if ch { added + updated } else { added })
    }
}

/// `ZREM key member [member ...]`.
fn zrem(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let mut c = match t.get(&a[1], Type::ZSet) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let n = a[2..].iter().filter(|m| c.zrem(m).is_some()).count();
    if n > 0 {
        t.put(&a[1], c);
    }
    len_reply(n)
}

/// `ZCARD key`.
fn zcard(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match zget(v, &a[1]) {
        Ok(z) => len_reply(z.map_or(0, ZSet::len)),
        Err(e) => e,
    }
}

/// `ZSCORE key member`.
fn zscore(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match zget(v, &a[1]) {
        Ok(z) => z.and_then(|z| z.score(&a[2])).map_or(Reply::Nil, double),
        Err(e) => e,
    }
}

/// `ZMSCORE key member [member ...]`: a missing key is an empty set.
fn zmscore(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    match zget(v, &a[1]) {
        Ok(z) => Reply::Array(
            a[2..]
                .iter()
                .map(|m| z.and_then(|z| z.score(m)).map_or(Reply::Nil, double))
                .collect(),
        ),
        Err(e) => e,
    }
}

/// `ZRANK key member`.
fn zrank(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    rank_generic(v, a, false)
}

/// `ZREVRANK key member`.
fn zrevrank(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    rank_generic(v, a, true)
}

fn rank_generic(v: &View<'_>, a: &[Bytes], rev: bool) -> Reply {
    let z = match zget(v, &a[1]) {
        Ok(Some(z)) => z,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    match z.rank(&a[2]) {
        Some(r) if rev => len_reply(z.len() - 1 - r),
        Some(r) => len_reply(r),
        None => Reply::Nil,
    }
}

/// `ZCOUNT key min max`.
fn zcount(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let r = match score_range(&a[2], &a[3]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match zget(v, &a[1]) {
        Ok(z) => len_reply(z.map_or(0, |z| {
            let (lo, hi) = z.score_span(&r);
            hi - lo
        })),
        Err(e) => e,
    }
}

/// `ZLEXCOUNT key min max`.
fn zlexcount(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let (min, max) = match lex_range(&a[2], &a[3]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    match zget(v, &a[1]) {
        Ok(z) => len_reply(z.map_or(0, |z| {
            let (lo, hi) = z.lex_span(&min, &max);
            hi - lo
        })),
        Err(e) => e,
    }
}

/// What a range command ranges over; `Auto` until `BYSCORE`/`BYLEX` says (`ZRANGE`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Auto,
    Rank,
    Score,
    Lex,
}

/// Redis's `zrangeGenericCommand`: the arguments from the source key at `src` on, `by` and
/// `rev` (`None`: the options decide) preset by the command; the members and scores
/// selected, and whether `WITHSCORES` was given. Options and the range are checked before
/// the key, as Redis does.
fn range_generic(
    v: &View<'_>,
    a: &[Bytes],
    src: usize,
    store: bool,
    mut by: By,
    mut rev: Option<bool>,
) -> Result<(Vec<(Bytes, f64)>, bool), Reply> {
    let (mut withscores, mut offset, mut limit) = (false, 0i64, -1i64);
    let mut j = src + 3;
    while j < a.len() {
        let o = &a[j];
        if !store && is(o, "withscores") {
            withscores = true;
        } else if is(o, "limit") && a.len() - j > 2 {
            offset = int_arg(&a[j + 1])?;
            limit = int_arg(&a[j + 2])?;
            j += 2;
        } else if rev.is_none() && is(o, "rev") {
            rev = Some(true);
        } else if by == By::Auto && is(o, "bylex") {
            by = By::Lex;
        } else if by == By::Auto && is(o, "byscore") {
            by = By::Score;
        } else {
            return Err(err(SYNTAX));
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if by == By::Auto {
        by = By::Rank;
    }
    if limit != -1 && by == By::Rank {
        return Err(err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(err(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // Score and lex ranges come as max, min when reversed.
    let (lo_arg, hi_arg) = if rev && by != By::Rank {
        (&a[src + 2], &a[src + 1])
    } else {
        (&a[src + 1], &a[src + 2])
    };
    enum Bounds {
        Rank(i64, i64),
        Score(ScoreRange),
        Lex(Lex, Lex),
    }
    let range = match by {
        By::Score => Bounds::Score(score_range(lo_arg, hi_arg)?),
        By::Lex => {
            let (min, max) = lex_range(lo_arg, hi_arg)?;
            Bounds::Lex(min, max)
        }
        _ => Bounds::Rank(int_arg(lo_arg)?, int_arg(hi_arg)?),
    };
    let Some(z) = zget(v, &a[src])? else {
        return Ok((Vec::new(), withscores));
    };
    let items = match range {
        Bounds::Rank(start, stop) => match index_range(start, stop, z.len()) {
            None => Vec::new(),
            Some((s, e)) if rev => pick(z, z.len() - 1 - e, z.len() - s, true, 0, -1),
            Some((s, e)) => pick(z, s, e + 1, false, 0, -1),
        },
        Bounds::Score(r) => {
            let (lo, hi) = z.score_span(&r);
            pick(z, lo, hi, rev, offset, limit)
        }
        Bounds::Lex(min, max) => {
            let (lo, hi) = z.lex_span(&min, &max);
            pick(z, lo, hi, rev, offset, limit)
        }
    };
    Ok((items, withscores))
}

fn range_reply(v: &View<'_>, a: &[Bytes], by: By, rev: Option<bool>) -> Reply {
    match range_generic(v, a, 1, false, by, rev) {
        Ok((items, withscores)) => owned_reply(&items, withscores),
        Err(e) => e,
    }
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]`.
fn zrange(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    range_reply(v, a, By::Auto, None)
}

/// `ZREVRANGE key start stop [WITHSCORES]`.
fn zrevrange(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    range_reply(v, a, By::Rank, Some(true))
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
fn zrangebyscore(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    range_reply(v, a, By::Score, Some(false))
}

/// `ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]`.
fn zrevrangebyscore(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    range_reply(v, a, By::Score, Some(true))
}

/// `ZRANGEBYLEX key min max [LIMIT offset count]`.
fn zrangebylex(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    range_reply(v, a, By::Lex, Some(false))
}

/// `ZREVRANGEBYLEX key max min [LIMIT offset count]`.
fn zrevrangebylex(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    range_reply(v, a, By::Lex, Some(true))
}

/// `ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]`: an empty
/// result deletes `dst`.
fn zrangestore(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let items = match range_generic(&t.view(), a, 2, true, By::Auto, None) {
        Ok((items, _)) => items,
        Err(e) => return e,
    };
    t.replace(&a[1], Some(build(items.iter().map(|(m, s)| (m, *s)))));
    len_reply(items.len())
}

/// Removes the ranks `lo..hi` of the sorted set under `key`; the count removed.
fn remove_span(t: &mut Txn<'_>, key: &[u8], mut c: Coll, lo: usize, hi: usize) -> Reply {
    let doomed: Vec<Bytes> = c.as_zset().range(lo, hi).map(|(m, _)| m.clone()).collect();
    for m in &doomed {
        c.zrem(m);
    }
    if !doomed.is_empty() {
        t.put(key, c);
    }
    len_reply(doomed.len())
}

/// `ZREMRANGEBYRANK key start stop`.
fn zremrangebyrank(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let (start, stop) = match (int_arg(&a[2]), int_arg(&a[3])) {
        (Ok(s), Ok(e)) => (s, e),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let c = match t.get(&a[1], Type::ZSet) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    match index_range(start, stop, c.len()) {
        Some((s, e)) => remove_span(t, &a[1], c, s, e + 1),
        None => Reply::Int(0),
    }
}

/// `ZREMRANGEBYSCORE key min max`.
fn zremrangebyscore(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let r = match score_range(&a[2], &a[3]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let c = match t.get(&a[1], Type::ZSet) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let (lo, hi) = c.as_zset().score_span(&r);
    remove_span(t, &a[1], c, lo, hi)
}

/// `ZREMRANGEBYLEX key min max`.
fn zremrangebylex(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    let (min, max) = match lex_range(&a[2], &a[3]) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let c = match t.get(&a[1], Type::ZSet) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Int(0),
        Err(e) => return e,
    };
    let (lo, hi) = c.as_zset().lex_span(&min, &max);
    remove_span(t, &a[1], c, lo, hi)
}

/// Pops up to `n` members from the low end (or, `max`, the high end).
fn pop_n(c: &mut Coll, n: usize, max: bool) -> Vec<(Bytes, f64)> {
    let mut out = Vec::new();
    while out.len() < n {
        let z = c.as_zset();
        if z.is_empty() {
            break;
        }
        let Some((m, s)) = z.at(if max { z.len() - 1 } else { 0 }) else {
            break;
        };
        let m = m.clone();
        c.zrem(&m);
        out.push((m, s));
    }
    out
}

/// The first of `keys` that exists (a sorted set, else WRONGTYPE), as Redis's pops look:
/// the keys after it are not looked at.
fn first_zset(t: &mut Txn<'_>, keys: &[Bytes]) -> Result<Option<(usize, Coll)>, Reply> {
    for (i, k) in keys.iter().enumerate() {
        if let Some(c) = t.get(k, Type::ZSet)? {
            return Ok(Some((i, c)));
        }
    }
    Ok(None)
}

/// `ZPOPMIN key [count]`.
fn zpopmin(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    zpop(t, a, false)
}

/// `ZPOPMAX key [count]`.
fn zpopmax(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    zpop(t, a, true)
}

fn zpop(t: &mut Txn<'_>, a: &[Bytes], max: bool) -> Reply {
    if a.len() > 3 {
        return err(SYNTAX);
    }
    let mut n = 1;
    if a.len() == 3 {
        match positive_arg(&a[2], "ERR value is out of range, must be positive") {
            Ok(c) => n = usize::try_from(c).unwrap_or(usize::MAX),
            Err(e) => return e,
        }
    }
    let mut c = match t.get(&a[1], Type::ZSet) {
        Ok(Some(c)) => c,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    if n == 0 {
        return Reply::Array(Vec::new());
    }
    let items = pop_n(&mut c, n, max);
    t.put(&a[1], c);
    if a.len() == 2 {
        // Without a count: one flat pair, in RESP3 too.
        return Reply::Array(
            items
                .iter()
                .flat_map(|(m, s)| [bulk(m), double(*s)])
                .collect(),
        );
    }
    owned_reply(&items, true)
}

/// `BZPOPMIN key [key ...] timeout` without the wait: `[key, member, score]`, or a nil
/// array (Redis's answer on timeout) when every key is missing.
fn bzpopmin(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    bzpop(t, a, false)
}

/// `BZPOPMAX key [key ...] timeout` without the wait.
fn bzpopmax(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    bzpop(t, a, true)
}

fn bzpop(t: &mut Txn<'_>, a: &[Bytes], max: bool) -> Reply {
    if let Err(e) = timeout_arg(&a[a.len() - 1]) {
        return e;
    }
    let keys = &a[1..a.len() - 1];
    match first_zset(t, keys) {
        Err(e) => e,
        Ok(None) => Reply::NilArray,
        Ok(Some((i, mut c))) => {
            let mut items = pop_n(&mut c, 1, max);
            t.put(&keys[i], c);
            let (m, s) = items.pop().expect("a non-empty sorted set");
            Reply::Array(vec![bulk(&keys[i]), bulk(&m), double(s)])
        }
    }
}

/// `ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]`: `[key, [[member, score], ...]]`,
/// or a nil array.
fn zmpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    mpop(t, a, 1, false)
}

/// `BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count]` without the wait.
fn bzmpop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    mpop(t, a, 2, true)
}

fn mpop(t: &mut Txn<'_>, a: &[Bytes], idx: usize, blocking: bool) -> Reply {
    let numkeys = match crate::store::parse_i64(&a[idx]) {
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => return err("ERR numkeys should be greater than 0"),
    };
    let where_idx = idx.saturating_add(numkeys).saturating_add(1);
    if where_idx >= a.len() {
        return err(SYNTAX);
    }
    let max = if is(&a[where_idx], "min") {
        false
    } else if is(&a[where_idx], "max") {
        true
    } else {
        return err(SYNTAX);
    };
    let mut count = None;
    let mut j = where_idx + 1;
    while j < a.len() {
        if count.is_none() && is(&a[j], "count") && j + 1 < a.len() {
            j += 1;
            match crate::store::parse_i64(&a[j]) {
                Some(n) if n >= 1 => count = Some(usize::try_from(n).unwrap_or(usize::MAX)),
                _ => return err("ERR count should be greater than 0"),
            }
        } else {
            return err(SYNTAX);
        }
        j += 1;
    }
    if blocking {
        if let Err(e) = timeout_arg(&a[1]) {
            return e;
        }
    }
    let keys = &a[idx + 1..where_idx];
    match first_zset(t, keys) {
        Err(e) => e,
        Ok(None) => Reply::NilArray,
        Ok(Some((i, mut c))) => {
            let items = pop_n(&mut c, count.unwrap_or(1), max);
            t.put(&keys[i], c);
            let pairs = items
                .iter()
                .map(|(m, s)| Reply::Array(vec![bulk(m), double(*s)]))
                .collect();
            Reply::Array(vec![bulk(&keys[i]), Reply::Array(pairs)])
        }
    }
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`: picks from the operation's seed; a negative
/// count may repeat members.
fn zrandmember(v: &View<'_>, a: &[Bytes], seed: u64) -> Reply {
    let mut rng = Rng::new(seed);
    if a.len() < 3 {
        return match zget(v, &a[1]) {
            Ok(Some(z)) => z
                .at(rng.below(z.len()))
                .map_or(Reply::Nil, |(m, _)| bulk(m)),
            Ok(None) => Reply::Nil,
            Err(e) => e,
        };
    }
    let l = match int_arg(&a[2]) {
        Ok(i64::MIN) => {
            return err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
        }
        Ok(l) => l,
        Err(e) => return e,
    };
    if a.len() > 4 || (a.len() == 4 && !is(&a[3], "withscores")) {
        return err(SYNTAX);
    }
    let withscores = a.len() == 4;
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return err("ERR value is out of range");
    }
    let z = match zget(v, &a[1]) {
        Ok(Some(z)) => z,
        Ok(None) => return Reply::Array(Vec::new()),
        Err(e) => return e,
    };
    let count = usize::try_from(l.unsigned_abs()).unwrap_or(usize::MAX);
    let n = z.len();
    if count == 0 {
        return Reply::Array(Vec::new());
    }
    if l < 0 || count == 1 {
        let picks = (0..count).filter_map(|_| z.at(rng.below(n)));
        return members_reply(picks, withscores);
    }
    if count >= n {
        return members_reply(z.iter(), withscores);
    }
    // Floyd's sampling: `count` distinct ranks in O(count log count).
    let mut chosen = std::collections::BTreeSet::new();
    let mut picks = Vec::with_capacity(count);
    for j in n - count..n {
        let r = rng.below(j + 1);
        let r = if chosen.insert(r) { r } else { j };
        chosen.insert(r);
        picks.push(r);
    }
    members_reply(picks.into_iter().filter_map(|r| z.at(r)), withscores)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Agg {
    Sum,
    Min,
    Max,
}

/// A source of the set algebra: a sorted set, a set (every score 1), or a missing key.
enum Src<'a> {
    Missing,
    Z(&'a ZSet),
    S(&'a OrdSet<Bytes>),
}

impl<'a> Src<'a> {
    fn len(&self) -> usize {
        match self {
            Src::Missing => 0,
            Src::Z(z) => z.len(),
            Src::S(s) => s.len(),
        }
    }

    fn find(&self, m: &[u8]) -> Option<f64> {
        match self {
            Src::Missing => None,
            Src::Z(z) => z.score(m),
            Src::S(s) => s.contains(m).then_some(1.0),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&'a Bytes, f64)> + 'a> {
        match *self {
            Src::Missing => Box::new(std::iter::empty()),
            Src::Z(z) => Box::new(z.iter()),
            Src::S(s) => Box::new(s.iter().map(|m| (m, 1.0))),
        }
    }
}

/// `zunionInterAggregate`: a sum of +inf and -inf is 0; a NaN never wins MIN or MAX.
fn aggregate(target: &mut f64, val: f64, agg: Agg) {
    match agg {
        Agg::Sum => {
            *target += val;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Agg::Min => {
            if val < *target {
                *target = val;
            }
        }
        Agg::Max => {
            if val > *target {
                *target = val;
            }
        }
    }
}

/// What the set algebra computed: the result and whether `WITHSCORES` was given, or the
/// cardinality (`ZINTERCARD`).
enum Outcome {
    Set(Coll, bool),
    Card(usize),
}

/// Redis's `zunionInterDiffGenericCommand`, `numkeys` at `idx`. The source keys are looked
/// up (sets allowed) before the options are parsed, so WRONGTYPE comes before a syntax
/// error, as in Redis. O(the sizes of the sources).
fn set_op(
    v: &View<'_>,
    a: &[Bytes],
    idx: usize,
    op: SetOp,
    store: bool,
    card: bool,
) -> Result<Outcome, Reply> {
    let setnum = int_arg(&a[idx])?;
    if setnum < 1 {
        return Err(err(&format!(
            "ERR at least 1 input key is needed for '{}' command",
            String::from_utf8_lossy(&a[0]).to_ascii_lowercase()
        )));
    }
    let setnum = usize::try_from(setnum).unwrap_or(usize::MAX);
    if setnum > a.len() - idx - 1 {
        return Err(err(SYNTAX));
    }
    let mut srcs: Vec<(Src<'_>, f64)> = Vec::with_capacity(setnum);
    for k in &a[idx + 1..idx + 1 + setnum] {
        let src = match v.store.type_of(k, v.now) {
            None => Src::Missing,
            Some(Type::ZSet) => Src::Z(v.store.coll(k).expect("a typed key").as_zset()),
            Some(Type::Set) => Src::S(v.store.coll(k).expect("a typed key").as_set()),
            Some(_) => return Err(wrongtype()),
        };
        srcs.push((src, 1.0));
    }
    let (mut agg, mut withscores, mut limit) = (Agg::Sum, false, 0usize);
    let mut j = idx + 1 + setnum;
    while j < a.len() {
        let remaining = a.len() - j;
        let o = &a[j];
        if op != SetOp::Diff && !card && remaining > setnum && is(o, "weights") {
            for (k, s) in srcs.iter_mut().enumerate() {
                s.1 = score_arg(&a[j + 1 + k])
                    .ok_or_else(|| err("ERR weight value is not a float"))?;
            }
            j += 1 + setnum;
        } else if op != SetOp::Diff && !card && remaining >= 2 && is(o, "aggregate") {
            let x = &a[j + 1];
            agg = if is(x, "sum") {
                Agg::Sum
            } else if is(x, "min") {
                Agg::Min
            } else if is(x, "max") {
                Agg::Max
            } else {
                return Err(err(SYNTAX));
            };
            j += 2;
        } else if !store && !card && is(o, "withscores") {
            withscores = true;
            j += 1;
        } else if card && remaining >= 2 && is(o, "limit") {
            let n = positive_arg(&a[j + 1], "ERR LIMIT can't be negative")?;
            limit = usize::try_from(n).unwrap_or(usize::MAX);
            j += 2;
        } else {
            return Err(err(SYNTAX));
        }
    }
    if op != SetOp::Diff {
        // Smallest first, as Redis sorts them (a stable sort: equal sizes keep their order).
        srcs.sort_by_key(|s| s.0.len());
    }
    let (first, rest) = srcs.split_first().expect("at least one source");
    let mut out: Vec<(&Bytes, f64)> = Vec::new();
    match op {
        SetOp::Inter => {
            let mut n = 0usize;
            for (m, s) in first.0.iter() {
                let mut score = first.1 * s;
                if score.is_nan() {
                    score = 0.0;
                }
                let mut everywhere = true;
                for (src, w) in rest {
                    match src.find(m) {
                        Some(x) => aggregate(&mut score, x * w, agg),
                        None => {
                            everywhere = false;
                            break;
                        }
                    }
                }
                if !everywhere {
                    continue;
                }
                if card {
                    n += 1;
                    if limit > 0 && n >= limit {
                        break;
                    }
                } else {
                    out.push((m, score));
                }
            }
            if card {
                return Ok(Outcome::Card(n));
            }
        }
        SetOp::Union => {
            let mut acc: std::collections::BTreeMap<&Bytes, f64> = Default::default();
            for (src, w) in &srcs {
                for (m, s) in src.iter() {
                    let mut score = w * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    acc.entry(m)
                        .and_modify(|t| aggregate(t, score, agg))
                        .or_insert(score);
                }
            }
            out.extend(acc);
        }
        SetOp::Diff => {
            out.extend(
                first
                    .0
                    .iter()
                    .filter(|(m, _)| rest.iter().all(|(src, _)| src.find(m).is_none())),
            );
        }
    }
    Ok(Outcome::Set(build(out), withscores))
}

fn set_op_reply(v: &View<'_>, a: &[Bytes], op: SetOp, card: bool) -> Reply {
    match set_op(v, a, 1, op, false, card) {
        Ok(Outcome::Set(c, withscores)) => members_reply(c.as_zset().iter(), withscores),
        Ok(Outcome::Card(n)) => len_reply(n),
        Err(e) => e,
    }
}

fn set_op_store(t: &mut Txn<'_>, a: &[Bytes], op: SetOp) -> Reply {
    let res = set_op(&t.view(), a, 2, op, true, false);
    match res {
        Ok(Outcome::Set(c, _)) => {
            let n = c.len();
            t.replace(&a[1], Some(c));
            len_reply(n)
        }
        Ok(Outcome::Card(_)) => unreachable!("no cardinality from a store"),
        Err(e) => e,
    }
}

/// `ZUNION numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`.
fn zunion(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_reply(v, a, SetOp::Union, false)
}

/// `ZINTER numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`.
fn zinter(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_reply(v, a, SetOp::Inter, false)
}

/// `ZDIFF numkeys key [key ...] [WITHSCORES]`.
fn zdiff(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_reply(v, a, SetOp::Diff, false)
}

/// `ZINTERCARD numkeys key [key ...] [LIMIT limit]`.
fn zintercard(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_reply(v, a, SetOp::Inter, true)
}

/// `ZUNIONSTORE dst numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]`.
fn zunionstore(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_store(t, a, SetOp::Union)
}

/// `ZINTERSTORE dst numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]`.
fn zinterstore(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_store(t, a, SetOp::Inter)
}

/// `ZDIFFSTORE dst numkeys key [key ...]`.
fn zdiffstore(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    set_op_store(t, a, SetOp::Diff)
}

/// The sorted-set commands, with Redis 7.0's arities.
/// `ZSCAN key cursor [MATCH pattern] [COUNT count]`: `[cursor, [member, score, …]]` in
/// member order (flat in RESP3 too, as Redis).
fn zscan(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    let s = match scan_args(a) {
        Ok(s) => s,
        Err(e) => return e,
    };
    match v.get(&a[1], Type::ZSet) {
        Err(e) => e,
        Ok(None) => scan_page(&s, std::iter::empty::<(&Bytes, ())>(), |_, _, _| {}),
        Ok(Some(c)) => {
            let iter = c
                .as_zset()
                .scores
                .range::<_, [u8]>((after(&s.cursor), std::ops::Bound::Unbounded));
            scan_page(&s, iter, |m, score, out| {
                out.push(bulk(m));
                out.push(double(score.0));
            })
        }
    }
}

pub(super) const SPECS: &[Spec] = &[
    w("zadd", -4, zadd),
    w("zincrby", 4, zincrby),
    w("zrem", -3, zrem),
    r("zcard", 2, zcard),
    r("zscore", 3, zscore),
    r("zmscore", -3, zmscore),
    r("zrank", 3, zrank),
    r("zrevrank", 3, zrevrank),
    r("zcount", 4, zcount),
    r("zlexcount", 4, zlexcount),
    r("zrange", -4, zrange),
    w("zrangestore", -5, zrangestore),
    r("zrevrange", -4, zrevrange),
    r("zrangebyscore", -4, zrangebyscore),
    r("zrevrangebyscore", -4, zrevrangebyscore),
    r("zrangebylex", -4, zrangebylex),
    r("zrevrangebylex", -4, zrevrangebylex),
    w("zremrangebyrank", 4, zremrangebyrank),
    w("zremrangebyscore", 4, zremrangebyscore),
    w("zremrangebylex", 4, zremrangebylex),
    w("zpopmin", -2, zpopmin),
    w("zpopmax", -2, zpopmax),
    w("bzpopmin", -3, bzpopmin),
    w("bzpopmax", -3, bzpopmax),
    w("zmpop", -4, zmpop),
    w("bzmpop", -5, bzmpop),
    random(r("zrandmember", -2, zrandmember)),
    w("zunionstore", -4, zunionstore),
    w("zinterstore", -4, zinterstore),
    w("zdiffstore", -4, zdiffstore),
    r("zunion", -3, zunion),
    r("zinter", -3, zinter),
    r("zdiff", -3, zdiff),
    r("zintercard", -3, zintercard),
    r("zscan", -3, zscan),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Cond, Expiry, Op, Response};

    use crate::types::testing::Db;

    type S = Db;

    impl Db {
        fn args(&mut self, args: &[&str], seed: u64) -> Reply {
            let args = args.iter().map(|a| a.as_bytes().to_vec()).collect();
            match self.apply(&Op::Cmd { args, seed }) {
                Response::Reply(r) => r,
                other => panic!("not a reply: {other:?}"),
            }
        }

        /// Runs a command written with spaces between its arguments.
        fn run(&mut self, line: &str) -> Reply {
            self.args(&line.split_whitespace().collect::<Vec<_>>(), 7)
        }

        fn string(&mut self, key: &str) {
            let op = Op::Set {
                key: key.into(),
                value: b"x".to_vec(),
                flags: 0,
                expiry: Expiry::None,
                cond: Cond::Always,
                get_old: false,
            };
            assert_eq!(self.apply(&op), Response::Ok);
        }

        /// A set (no set command here yet): stored through a transaction.
        fn put_set(&mut self, key: &str, members: &[&str]) {
            self.index += 1;
            let mut c = Coll::set();
            for m in members {
                c.sadd(m.as_bytes().to_vec());
            }
            let mut t = Txn {
                store: &mut self.store,
                index: self.index,
            };
            t.put(key.as_bytes(), c);
        }

        fn type_of(&mut self, key: &str) -> Reply {
            self.run(&format!("type {key}"))
        }
    }

    fn b(s: &str) -> Reply {
        Reply::Bulk(s.into())
    }

    fn d(s: &str) -> Reply {
        Reply::Double(s.into())
    }

    fn e(s: &str) -> Reply {
        Reply::Error(s.into())
    }

    fn int(n: i64) -> Reply {
        Reply::Int(n)
    }

    fn none() -> Reply {
        Reply::Status("none".into())
    }

    fn names(ms: &[&str]) -> Reply {
        Reply::Array(ms.iter().map(|m| b(m)).collect())
    }

    /// RESP2's WITHSCORES form.
    fn scored(ps: &[(&str, &str)]) -> Reply {
        Reply::Pairs(ps.iter().map(|(m, s)| (b(m), d(s))).collect())
    }

    fn pairs(ps: &[(&str, &str)]) -> Reply {
        Reply::Array(
            ps.iter()
                .map(|(m, s)| Reply::Array(vec![b(m), d(s)]))
                .collect(),
        )
    }

    const WRONG: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

    fn five() -> S {
        let mut s = S::new();
        assert_eq!(s.run("zadd z 1 a 2 b 3 c 4 d 5 e"), int(5));
        s
    }

    fn lex() -> S {
        let mut s = S::new();
        assert_eq!(s.run("zadd l 0 a 0 b 0 c 0 d 0 e 0 f 0 g"), int(7));
        s
    }

    #[test]
    fn zadd_options() {
        let mut s = S::new();
        assert_eq!(s.run("zadd z 1 a 2 b 3 c"), int(3));
        assert_eq!(s.run("zadd z 1 a"), int(0));
        assert_eq!(s.run("zadd z CH 5 a 2 b 4 x"), int(2));
        assert_eq!(s.run("zscore z a"), d("5"));
        assert_eq!(s.run("zadd z nx 10 a 4 d"), int(1));
        assert_eq!(s.run("zscore z a"), d("5"));
        assert_eq!(s.run("zadd z xx ch 6 a 9 new"), int(1));
        assert_eq!(s.run("zscore z new"), Reply::Nil);
        assert_eq!(s.run("zadd z gt ch 1 a"), int(0));
        assert_eq!(s.run("zadd z gt ch 7 a"), int(1));
        assert_eq!(s.run("zadd z lt ch 8 a 0 b"), int(1));
        assert_eq!(s.run("zscore z a"), d("7"));
        assert_eq!(s.run("zscore z b"), d("0"));
        // GT and LT still add new members.
        assert_eq!(s.run("zadd z gt 1 g"), int(1));
        assert_eq!(s.run("zadd z xx gt ch 0.5 g 2 g"), int(1));
        assert_eq!(s.run("zscore z g"), d("2"));
        assert_eq!(s.run("zadd z incr 2.5 a"), d("9.5"));
        assert_eq!(s.run("zadd z incr 1 fresh"), d("1"));
        assert_eq!(s.run("zadd z nx incr 1 a"), Reply::Nil);
        assert_eq!(s.run("zadd z xx incr 1 nosuch"), Reply::Nil);
        assert_eq!(s.run("zadd z gt incr -1 a"), Reply::Nil);
        assert_eq!(s.run("zadd z lt incr -1 a"), d("8.5"));
        assert_eq!(s.run("zadd z incr 0 a"), d("8.5"));
        assert_eq!(s.run("zadd z 0.1 f"), int(1));
        assert_eq!(s.run("zscore z f"), d("0.10000000000000001"));
        assert_eq!(s.run("zadd z -inf lo +inf hi 1e3 k"), int(3));
        assert_eq!(s.run("zscore z hi"), d("inf"));
        assert_eq!(s.run("zscore z lo"), d("-inf"));
        assert_eq!(s.run("zscore z k"), d("1000"));
        // XX on a missing key creates nothing.
        assert_eq!(s.run("zadd nokey xx 1 a"), int(0));
        assert_eq!(s.run("zadd nokey xx incr 1 a"), Reply::Nil);
        assert_eq!(s.type_of("nokey"), none());
        s.store.check_invariants();
    }

    #[test]
    fn zadd_errors() {
        let mut s = S::new();
        s.string("str");
        let xxnx = e("ERR XX and NX options at the same time are not compatible");
        let gtlt = e("ERR GT, LT, and/or NX options at the same time are not compatible");
        assert_eq!(s.run("zadd z xx nx 1 a"), xxnx);
        assert_eq!(s.run("zadd z gt lt 1 a"), gtlt);
        assert_eq!(s.run("zadd z gt nx 1 a"), gtlt);
        assert_eq!(s.run("zadd z lt nx 1 a"), gtlt);
        assert_eq!(
            s.run("zadd z incr 1 a 2 b"),
            e("ERR INCR option supports a single increment-element pair")
        );
        assert_eq!(
            s.run("zadd z 1"),
            e("ERR wrong number of arguments for 'zadd' command")
        );
        assert_eq!(s.run("zadd z nx 1"), e(SYNTAX));
        assert_eq!(s.run("zadd z 1 a 2"), e(SYNTAX));
        // Syntax is checked before the incompatible options.
        assert_eq!(s.run("zadd z xx nx 1"), e(SYNTAX));
        for bad in [
            "abc", "nan", "", " 1", "1 ", "1e400", "1e-400", "0x10", "1e",
        ] {
            assert_eq!(s.args(&["zadd", "z", bad, "a"], 0), e(NOT_FLOAT), "{bad:?}");
        }
        // Scores are checked before any is added.
        assert_eq!(s.run("zadd z 1 a 2 b bad c"), e(NOT_FLOAT));
        assert_eq!(s.type_of("z"), none());
        assert_eq!(s.run("zadd str 1 a"), e(WRONG));
        // Parse errors come before the type check.
        assert_eq!(s.run("zadd str x a"), e(NOT_FLOAT));
        assert_eq!(s.run("zadd z inf a"), int(1));
        assert_eq!(
            s.run("zadd z incr -inf a"),
            e("ERR resulting score is not a number (NaN)")
        );
        assert_eq!(s.run("zscore z a"), d("inf"));
        s.store.check_invariants();
    }

    #[test]
    fn zincrby() {
        let mut s = S::new();
        s.string("str");
        assert_eq!(s.run("zincrby z 1.5 a"), d("1.5"));
        assert_eq!(s.run("zincrby z -3 a"), d("-1.5"));
        assert_eq!(s.run("zincrby z abc a"), e(NOT_FLOAT));
        assert_eq!(s.run("zincrby z inf b"), d("inf"));
        assert_eq!(
            s.run("zincrby z -inf b"),
            e("ERR resulting score is not a number (NaN)")
        );
        // Options are read as ZADD's: a lone pair is left.
        assert_eq!(s.run("zincrby z nx a"), e(SYNTAX));
        assert_eq!(s.run("zincrby str 1 a"), e(WRONG));
        assert_eq!(
            s.run("zincrby z 1"),
            e("ERR wrong number of arguments for 'zincrby' command")
        );
        s.store.check_invariants();
    }

    #[test]
    fn zrem_zcard_zscore_zmscore_zrank() {
        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zcard z"), int(5));
        assert_eq!(s.run("zcard nokey"), int(0));
        assert_eq!(s.run("zscore z c"), d("3"));
        assert_eq!(s.run("zscore z x"), Reply::Nil);
        assert_eq!(s.run("zscore nokey x"), Reply::Nil);
        assert_eq!(
            s.run("zmscore z a x e"),
            Reply::Array(vec![d("1"), Reply::Nil, d("5")])
        );
        assert_eq!(
            s.run("zmscore nokey a b"),
            Reply::Array(vec![Reply::Nil, Reply::Nil])
        );
        assert_eq!(s.run("zrank z a"), int(0));
        assert_eq!(s.run("zrank z e"), int(4));
        assert_eq!(s.run("zrevrank z a"), int(4));
        assert_eq!(s.run("zrevrank z e"), int(0));
        assert_eq!(s.run("zrank z x"), Reply::Nil);
        assert_eq!(s.run("zrevrank nokey x"), Reply::Nil);
        for cmd in [
            "zcard str",
            "zscore str a",
            "zmscore str a",
            "zrank str a",
            "zrevrank str a",
            "zrem str a",
        ] {
            assert_eq!(s.run(cmd), e(WRONG), "{cmd}");
        }
        assert_eq!(s.run("zrem z a x b a"), int(2));
        assert_eq!(s.run("zrem nokey a"), int(0));
        assert_eq!(s.run("zrank z c"), int(0));
        assert_eq!(s.run("zrem z c d e"), int(3));
        assert_eq!(s.type_of("z"), none());
        s.store.check_invariants();
    }

    #[test]
    fn zrange_by_rank() {
        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zrange z 0 -1"), names(&["a", "b", "c", "d", "e"]));
        assert_eq!(
            s.run("zrange z 1 2 withscores"),
            scored(&[("b", "2"), ("c", "3")])
        );
        assert_eq!(s.run("zrange z -2 -1"), names(&["d", "e"]));
        assert_eq!(
            s.run("zrange z -100 100"),
            names(&["a", "b", "c", "d", "e"])
        );
        assert_eq!(s.run("zrange z 3 1"), names(&[]));
        assert_eq!(s.run("zrange z 5 10"), names(&[]));
        assert_eq!(
            s.run("zrange z 0 -1 rev"),
            names(&["e", "d", "c", "b", "a"])
        );
        assert_eq!(
            s.run("zrange z 0 1 REV WITHSCORES"),
            scored(&[("e", "5"), ("d", "4")])
        );
        assert_eq!(s.run("zrevrange z 1 2"), names(&["d", "c"]));
        assert_eq!(s.run("zrevrange z -1 -1 withscores"), scored(&[("a", "1")]));
        // An explicit LIMIT 0 -1 is the default, which Redis lets through.
        assert_eq!(s.run("zrange z 0 0 limit 0 -1"), names(&["a"]));
        assert_eq!(s.run("zrange nokey 0 -1"), names(&[]));
        assert_eq!(
            s.run("zrange z 0 -1 limit 0 1"),
            e("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
        );
        assert_eq!(s.run("zrange z 0 -1 rev rev"), e(SYNTAX));
        assert_eq!(s.run("zrange z 0 -1 foo"), e(SYNTAX));
        assert_eq!(s.run("zrange z 0 -1 limit 1"), e(SYNTAX));
        assert_eq!(s.run("zrevrange z 0 -1 rev"), e(SYNTAX));
        assert_eq!(s.run("zrevrange z 0 -1 byscore"), e(SYNTAX));
        assert_eq!(s.run("zrange z x 1"), e(NOT_INTEGER));
        assert_eq!(s.run("zrange z 0 1.5"), e(NOT_INTEGER));
        assert_eq!(s.run("zrange str 0 -1"), e(WRONG));
        assert_eq!(s.run("zrange str x -1"), e(NOT_INTEGER));
    }

    #[test]
    fn zrange_by_score() {
        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zrange z (1 3 byscore"), names(&["b", "c"]));
        assert_eq!(s.run("zrange z 3 (1 byscore rev"), names(&["c", "b"]));
        assert_eq!(
            s.run("zrange z -inf +inf byscore limit 1 2"),
            names(&["b", "c"])
        );
        assert_eq!(
            s.run("zrange z -inf +inf byscore limit 1 -1 withscores"),
            scored(&[("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")])
        );
        assert_eq!(s.run("zrange z -inf +inf byscore limit -1 2"), names(&[]));
        assert_eq!(s.run("zrange z -inf +inf byscore limit 10 1"), names(&[]));
        assert_eq!(s.run("zrange z -inf +inf byscore limit 0 0"), names(&[]));
        assert_eq!(
            s.run("zrange z +inf -inf byscore rev limit 1 2"),
            names(&["d", "c"])
        );
        assert_eq!(
            s.run("zrangebyscore z 2 4 withscores"),
            scored(&[("b", "2"), ("c", "3"), ("d", "4")])
        );
        assert_eq!(s.run("zrangebyscore z (2 (4"), names(&["c"]));
        assert_eq!(s.run("zrangebyscore z (2 (2"), names(&[]));
        assert_eq!(s.run("zrangebyscore z 4 2"), names(&[]));
        assert_eq!(s.run("zrangebyscore z 2 2"), names(&["b"]));
        assert_eq!(
            s.run("zrangebyscore z -inf 2 limit 0 5"),
            names(&["a", "b"])
        );
        assert_eq!(s.run("zrevrangebyscore z 4 2"), names(&["d", "c", "b"]));
        assert_eq!(
            s.run("zrevrangebyscore z +inf (4 withscores"),
            scored(&[("e", "5")])
        );
        assert_eq!(
            s.run("zrevrangebyscore z +inf -inf limit 1 1"),
            names(&["d"])
        );
        // strtod's reading: leading space, an empty text (0), "(" alone (exclusive 0),
        // an overflow (infinite), -0 as 0.
        assert_eq!(s.run("zadd z 0 zero"), int(1));
        assert_eq!(
            s.args(&["zrangebyscore", "z", "", "0"], 0),
            names(&["zero"])
        );
        assert_eq!(s.args(&["zrangebyscore", "z", " 1", "1"], 0), names(&["a"]));
        assert_eq!(s.args(&["zrangebyscore", "z", "(", "1"], 0), names(&["a"]));
        assert_eq!(
            s.args(&["zrangebyscore", "z", "-0", "-0"], 0),
            names(&["zero"])
        );
        assert_eq!(s.run("zrangebyscore z 5 1e400"), names(&["e"]));
        assert_eq!(s.run("zrange nokey 0 1 byscore"), names(&[]));
        let nf = e("ERR min or max is not a float");
        for (lo, hi) in [
            ("a", "1"),
            ("1", "b"),
            ("1", "nan"),
            ("((1", "2"),
            (" ", "1"),
            ("1 ", "2"),
        ] {
            assert_eq!(
                s.args(&["zrangebyscore", "z", lo, hi], 0),
                nf,
                "{lo:?} {hi:?}"
            );
        }
        assert_eq!(s.run("zrange z a 1 byscore"), nf);
        assert_eq!(s.run("zrangebyscore z 0 1 rev"), e(SYNTAX));
        assert_eq!(s.run("zrangebyscore z 0 1 byscore"), e(SYNTAX));
        assert_eq!(s.run("zrange z 0 1 byscore bylex"), e(SYNTAX));
        assert_eq!(s.run("zrange z 0 1 byscore limit x 1"), e(NOT_INTEGER));
        assert_eq!(s.run("zrange z 0 1 byscore limit 1 x"), e(NOT_INTEGER));
        assert_eq!(s.run("zrangebyscore str 0 1"), e(WRONG));
        // The range is checked before the key's type.
        assert_eq!(s.run("zrangebyscore str x 1"), nf);
    }

    #[test]
    fn zrange_by_lex() {
        let mut s = lex();
        s.string("str");
        assert_eq!(
            s.run("zrangebylex l - +"),
            names(&["a", "b", "c", "d", "e", "f", "g"])
        );
        assert_eq!(s.run("zrangebylex l [b (e"), names(&["b", "c", "d"]));
        assert_eq!(s.run("zrangebylex l (b [e"), names(&["c", "d", "e"]));
        assert_eq!(
            s.run("zrangebylex l [bb +"),
            names(&["c", "d", "e", "f", "g"])
        );
        assert_eq!(s.run("zrangebylex l + -"), names(&[]));
        assert_eq!(s.run("zrangebylex l - -"), names(&[]));
        assert_eq!(s.run("zrangebylex l [e [b"), names(&[]));
        assert_eq!(s.run("zrangebylex l (c (c"), names(&[]));
        assert_eq!(s.run("zrangebylex l [c [c"), names(&["c"]));
        assert_eq!(
            s.run("zrangebylex l - + limit 2 3"),
            names(&["c", "d", "e"])
        );
        assert_eq!(s.run("zrangebylex l - + limit 5 -1"), names(&["f", "g"]));
        assert_eq!(s.run("zrevrangebylex l [e (b"), names(&["e", "d", "c"]));
        assert_eq!(s.run("zrevrangebylex l + - limit 1 2"), names(&["f", "e"]));
        assert_eq!(s.run("zrange l [c - bylex rev"), names(&["c", "b", "a"]));
        assert_eq!(s.run("zrange l - + bylex limit 1 2"), names(&["b", "c"]));
        assert_eq!(s.args(&["zrangebylex", "l", "[", "(b"], 0), names(&["a"]));
        assert_eq!(s.run("zrangebylex nokey - +"), names(&[]));
        let bad = e("ERR min or max not valid string range item");
        for (lo, hi) in [
            ("a", "[b"),
            ("[a", "b"),
            ("+x", "[b"),
            ("-x", "+"),
            ("", "+"),
        ] {
            assert_eq!(
                s.args(&["zrangebylex", "l", lo, hi], 0),
                bad,
                "{lo:?} {hi:?}"
            );
        }
        assert_eq!(s.run("zrange l 0 1 bylex"), bad);
        assert_eq!(
            s.run("zrange l - + bylex withscores"),
            e("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
        );
        assert_eq!(
            s.run("zrangebylex l - + withscores"),
            e("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
        );
        assert_eq!(s.run("zrangebylex l - + bylex"), e(SYNTAX));
        assert_eq!(s.run("zrangebylex str - +"), e(WRONG));
    }

    #[test]
    fn zcount_zlexcount() {
        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zcount z -inf +inf"), int(5));
        assert_eq!(s.run("zcount z (1 3"), int(2));
        assert_eq!(s.run("zcount z (1 (1"), int(0));
        assert_eq!(s.run("zcount z 3 1"), int(0));
        assert_eq!(s.run("zcount nokey 0 1"), int(0));
        assert_eq!(s.run("zcount z x 1"), e("ERR min or max is not a float"));
        assert_eq!(s.run("zcount str 0 1"), e(WRONG));
        assert_eq!(s.run("zcount str x 1"), e("ERR min or max is not a float"));
        let mut s = lex();
        s.string("str");
        assert_eq!(s.run("zlexcount l - +"), int(7));
        assert_eq!(s.run("zlexcount l [b (d"), int(2));
        assert_eq!(s.run("zlexcount l (g +"), int(0));
        assert_eq!(s.run("zlexcount nokey - +"), int(0));
        assert_eq!(
            s.run("zlexcount l a +"),
            e("ERR min or max not valid string range item")
        );
        assert_eq!(s.run("zlexcount str - +"), e(WRONG));
    }

    #[test]
    fn zrangestore() {
        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zrangestore dst z 1 2"), int(2));
        assert_eq!(
            s.run("zrange dst 0 -1 withscores"),
            scored(&[("b", "2"), ("c", "3")])
        );
        assert_eq!(s.run("zrangestore dst z 0 1 rev"), int(2));
        assert_eq!(s.run("zrange dst 0 -1"), names(&["d", "e"]));
        assert_eq!(s.run("zrangestore dst z (1 +inf byscore limit 0 2"), int(2));
        assert_eq!(
            s.run("zrange dst 0 -1 withscores"),
            scored(&[("b", "2"), ("c", "3")])
        );
        assert_eq!(s.run("zrangestore dst z [c - bylex rev"), int(3));
        assert_eq!(
            s.run("zrange dst 0 -1 withscores"),
            scored(&[("a", "1"), ("b", "2"), ("c", "3")])
        );
        // A destination of another type is replaced.
        assert_eq!(s.run("zrangestore str z 0 0"), int(1));
        assert_eq!(s.type_of("str"), Reply::Status("zset".into()));
        // An empty result deletes the destination.
        assert_eq!(s.run("zrangestore dst z 10 20"), int(0));
        assert_eq!(s.type_of("dst"), none());
        assert_eq!(s.run("zrangestore str nokey 0 -1"), int(0));
        assert_eq!(s.type_of("str"), none());
        assert_eq!(s.run("zrangestore dst z 0 -1 withscores"), e(SYNTAX));
        assert_eq!(
            s.run("zrangestore dst z 0 -1 limit 1 2"),
            e("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
        );
        s.string("str");
        assert_eq!(s.run("zrangestore dst str 0 -1"), e(WRONG));
        // The source itself as destination.
        assert_eq!(s.run("zrangestore z z 0 1"), int(2));
        assert_eq!(s.run("zrange z 0 -1"), names(&["a", "b"]));
        s.store.check_invariants();
    }

    #[test]
    fn zremrange() {
        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zremrangebyrank z 1 2"), int(2));
        assert_eq!(s.run("zrange z 0 -1"), names(&["a", "d", "e"]));
        assert_eq!(s.run("zremrangebyrank z 5 10"), int(0));
        assert_eq!(s.run("zremrangebyrank z -1 -1"), int(1));
        assert_eq!(s.run("zremrangebyrank nokey 0 -1"), int(0));
        assert_eq!(s.run("zremrangebyrank z x 1"), e(NOT_INTEGER));
        assert_eq!(s.run("zremrangebyrank str 0 1"), e(WRONG));
        assert_eq!(s.run("zremrangebyrank z 0 -1"), int(2));
        assert_eq!(s.type_of("z"), none());

        let mut s = five();
        s.string("str");
        assert_eq!(s.run("zremrangebyscore z (1 3"), int(2));
        assert_eq!(s.run("zrange z 0 -1"), names(&["a", "d", "e"]));
        assert_eq!(s.run("zremrangebyscore z 3 1"), int(0));
        assert_eq!(s.run("zremrangebyscore nokey 0 1"), int(0));
        assert_eq!(
            s.run("zremrangebyscore z 1 nan"),
            e("ERR min or max is not a float")
        );
        assert_eq!(s.run("zremrangebyscore str 0 1"), e(WRONG));
        assert_eq!(s.run("zremrangebyscore z -inf +inf"), int(3));
        assert_eq!(s.type_of("z"), none());

        let mut s = lex();
        s.string("str");
        assert_eq!(s.run("zremrangebylex l [b (e"), int(3));
        assert_eq!(s.run("zrange l 0 -1"), names(&["a", "e", "f", "g"]));
        assert_eq!(s.run("zremrangebylex l (g +"), int(0));
        assert_eq!(
            s.run("zremrangebylex l a b"),
            e("ERR min or max not valid string range item")
        );
        assert_eq!(s.run("zremrangebylex str - +"), e(WRONG));
        assert_eq!(s.run("zremrangebylex l - +"), int(4));
        assert_eq!(s.type_of("l"), none());
        s.store.check_invariants();
    }

    #[test]
    fn zscan_pages_every_member_once() {
        let mut s = S::new();
        let members: Vec<String> = (0..30).map(|i| format!("{i} m{i:02}")).collect();
        s.run(&format!("zadd z {}", members.join(" ")));
        let mut seen = Vec::new();
        let mut cursor = "0".to_string();
        loop {
            let Reply::Array(page) = s.run(&format!("zscan z {cursor} count 4")) else {
                panic!()
            };
            let (Reply::Bulk(next), Reply::Array(items)) = (&page[0], &page[1]) else {
                panic!()
            };
            for p in items.chunks(2) {
                seen.push((p[0].clone(), p[1].clone()));
            }
            cursor = String::from_utf8(next.clone()).unwrap();
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 30);
        assert_eq!(seen[3], (b("m03"), d("3")));
        assert_eq!(
            s.run("zscan z 0 match m1* count 100"),
            Reply::Array(vec![
                b("0"),
                Reply::Array(
                    (10..20)
                        .flat_map(|i| [b(&format!("m{i}")), d(&i.to_string())])
                        .collect()
                )
            ])
        );
        s.string("str");
        assert_eq!(s.run("zscan str 0"), e(WRONG));
    }

    #[test]
    fn zpop() {
        let mut s = five();
        s.string("str");
        // Without a count, one flat pair (in RESP3 too); with one, pairs.
        assert_eq!(s.run("zpopmin z"), Reply::Array(vec![b("a"), d("1")]));
        assert_eq!(s.run("zpopmax z"), Reply::Array(vec![b("e"), d("5")]));
        assert_eq!(s.run("zpopmin z 2"), scored(&[("b", "2"), ("c", "3")]));
        assert_eq!(s.run("zpopmin z 0"), names(&[]));
        assert_eq!(s.run("zpopmax z 10"), scored(&[("d", "4")]));
        assert_eq!(s.type_of("z"), none());
        assert_eq!(s.run("zpopmin z"), names(&[]));
        assert_eq!(s.run("zpopmax z 3"), names(&[]));
        let pos = e("ERR value is out of range, must be positive");
        assert_eq!(s.run("zpopmin z -1"), pos);
        assert_eq!(s.run("zpopmax z x"), pos);
        assert_eq!(s.run("zpopmin z 1 2"), e(SYNTAX));
        assert_eq!(s.run("zpopmin str"), e(WRONG));
        assert_eq!(s.run("zpopmin str 0"), e(WRONG));
        assert_eq!(s.run("zpopmax str 2"), e(WRONG));
        s.store.check_invariants();
    }

    #[test]
    fn bzpop() {
        let mut s = five();
        s.string("str");
        assert_eq!(
            s.run("bzpopmin nokey z 0"),
            Reply::Array(vec![b("z"), b("a"), d("1")])
        );
        assert_eq!(
            s.run("bzpopmax z str 0.5"),
            Reply::Array(vec![b("z"), b("e"), d("5")])
        );
        assert_eq!(s.run("bzpopmin nokey other 0"), Reply::NilArray);
        assert_eq!(s.run("bzpopmin nokey 0.0001"), Reply::NilArray);
        // ceil(-0.1 ms) is 0: not negative.
        assert_eq!(s.run("bzpopmin nokey -0.0001"), Reply::NilArray);
        assert_eq!(s.run("bzpopmin nokey str 0"), e(WRONG));
        let nf = e("ERR timeout is not a float or out of range");
        let neg = e("ERR timeout is negative");
        assert_eq!(s.run("bzpopmin z abc"), nf);
        assert_eq!(s.run("bzpopmin z nan"), nf);
        assert_eq!(s.args(&["bzpopmin", "z", " 1"], 0), nf);
        assert_eq!(s.run("bzpopmin z -1"), neg);
        assert_eq!(s.run("bzpopmax z inf"), neg);
        assert_eq!(s.run("bzpopmax z 1e300"), neg);
        assert_eq!(s.run("bzpopmin str abc"), nf);
        // Only the last argument is the timeout.
        assert_eq!(
            s.run("bzpopmin z 0 1 2 3"),
            Reply::Array(vec![b("z"), b("b"), d("2")])
        );
        s.store.check_invariants();
    }

    #[test]
    fn zmpop() {
        let mut s = five();
        s.string("str");
        assert_eq!(
            s.run("zmpop 2 nokey z min count 2"),
            Reply::Array(vec![b("z"), pairs(&[("a", "1"), ("b", "2")])])
        );
        assert_eq!(
            s.run("zmpop 1 z MAX"),
            Reply::Array(vec![b("z"), pairs(&[("e", "5")])])
        );
        // A key after the first existing one is not looked at.
        assert_eq!(
            s.run("zmpop 2 z str max count 10"),
            Reply::Array(vec![b("z"), pairs(&[("d", "4"), ("c", "3")])])
        );
        assert_eq!(s.type_of("z"), none());
        assert_eq!(s.run("zmpop 1 z min"), Reply::NilArray);
        assert_eq!(s.run("zmpop 2 z str min"), e(WRONG));
        let nk = e("ERR numkeys should be greater than 0");
        let cnt = e("ERR count should be greater than 0");
        assert_eq!(s.run("zmpop 0 z min"), nk);
        assert_eq!(s.run("zmpop a z min"), nk);
        assert_eq!(s.run("zmpop -1 z max"), nk);
        assert_eq!(s.run("zmpop 1 z bad_where"), e(SYNTAX));
        assert_eq!(s.run("zmpop 1 z min bar_arg"), e(SYNTAX));
        assert_eq!(s.run("zmpop 1 z max min"), e(SYNTAX));
        assert_eq!(s.run("zmpop 1 z count"), e(SYNTAX));
        assert_eq!(s.run("zmpop 1 z max count"), e(SYNTAX));
        assert_eq!(s.run("zmpop 1 z max count 1 count 2"), e(SYNTAX));
        assert_eq!(s.run("zmpop 2 z z2 bad_arg"), e(SYNTAX));
        assert_eq!(s.run("zmpop 5 z min"), e(SYNTAX));
        assert_eq!(s.run("zmpop 1 z min count 0"), cnt);
        assert_eq!(s.run("zmpop 1 z max count a"), cnt);
        assert_eq!(s.run("zmpop 1 z min count -1"), cnt);
        assert_eq!(
            s.run("zmpop 1 z"),
            e("ERR wrong number of arguments for 'zmpop' command")
        );

        let mut s = five();
        s.string("str");
        assert_eq!(
            s.run("bzmpop 0 2 nokey z max count 2"),
            Reply::Array(vec![b("z"), pairs(&[("e", "5"), ("d", "4")])])
        );
        assert_eq!(s.run("bzmpop 1 1 nokey min"), Reply::NilArray);
        assert_eq!(s.run("bzmpop 0 1 str min"), e(WRONG));
        assert_eq!(s.run("bzmpop -1 1 z min"), e("ERR timeout is negative"));
        assert_eq!(
            s.run("bzmpop x 1 z min"),
            e("ERR timeout is not a float or out of range")
        );
        // numkeys, MIN|MAX and COUNT come before the timeout.
        assert_eq!(s.run("bzmpop x 0 z min"), nk);
        assert_eq!(s.run("bzmpop x 1 z min count 0"), cnt);
        assert_eq!(s.run("bzmpop x 1 z left"), e(SYNTAX));
        assert_eq!(
            s.run("bzmpop 0 1 z"),
            e("ERR wrong number of arguments for 'bzmpop' command")
        );
        s.store.check_invariants();
    }

    #[test]
    fn zrandmember() {
        let mut s = five();
        s.string("str");
        let all = ["a", "b", "c", "d", "e"];
        let members = |r: &Reply| -> Vec<String> {
            let Reply::Array(v) = r else {
                panic!("not an array: {r:?}")
            };
            v.iter()
                .map(|x| match x {
                    Reply::Bulk(m) => String::from_utf8(m.clone()).unwrap(),
                    _ => panic!("not a member: {x:?}"),
                })
                .collect()
        };
        for seed in 0..20 {
            let Reply::Bulk(m) = s.args(&["zrandmember", "z"], seed) else {
                panic!()
            };
            assert!(all.contains(&std::str::from_utf8(&m).unwrap()));
            let r = s.args(&["zrandmember", "z", "3"], seed);
            let mut got = members(&r);
            assert_eq!(got.len(), 3);
            got.sort();
            got.dedup();
            assert_eq!(got.len(), 3, "distinct");
            assert!(got.iter().all(|m| all.contains(&m.as_str())));
            let r = s.args(&["zrandmember", "z", "-12"], seed);
            let got = members(&r);
            assert_eq!(got.len(), 12);
            assert!(got.iter().all(|m| all.contains(&m.as_str())));
            // WITHSCORES gives each member's own score.
            let Reply::Pairs(v) = s.args(&["zrandmember", "z", "-4", "withscores"], seed) else {
                panic!()
            };
            assert_eq!(v.len(), 4);
            for (m, score) in &v {
                let Reply::Bulk(m) = m else { panic!() };
                let want = (m[0] - b'a' + 1).to_string();
                assert_eq!(*score, d(&want));
            }
        }
        // The same seed, the same picks.
        assert_eq!(
            s.args(&["zrandmember", "z", "-7"], 42),
            s.args(&["zrandmember", "z", "-7"], 42)
        );
        assert_eq!(s.run("zrandmember z 5"), names(&all));
        assert_eq!(
            s.run("zrandmember z 10 withscores"),
            scored(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")])
        );
        assert_eq!(s.run("zrandmember z 0"), names(&[]));
        assert_eq!(s.run("zrandmember nokey"), Reply::Nil);
        assert_eq!(s.run("zrandmember nokey 3"), names(&[]));
        assert_eq!(s.run("zrandmember z 1 withscores extra"), e(SYNTAX));
        assert_eq!(s.run("zrandmember z 1 foo"), e(SYNTAX));
        assert_eq!(s.run("zrandmember z x"), e(NOT_INTEGER));
        assert_eq!(
            s.run("zrandmember z -9223372036854775808"),
            e("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807")
        );
        assert_eq!(
            s.run("zrandmember z -9223372036854770000 withscores"),
            e("ERR value is out of range")
        );
        assert_eq!(s.run("zrandmember str"), e(WRONG));
        assert_eq!(s.run("zrandmember str 2"), e(WRONG));
        assert!(spec(b"zrandmember").unwrap().random);
    }

    #[test]
    fn set_algebra() {
        let mut s = S::new();
        s.string("str");
        assert_eq!(s.run("zadd a 1 x 2 y 3 z"), int(3));
        assert_eq!(s.run("zadd b 10 y 20 z 30 w"), int(3));
        s.put_set("st", &["z", "w", "v"]);
        assert_eq!(
            s.run("zunion 2 a b withscores"),
            scored(&[("x", "1"), ("y", "12"), ("z", "23"), ("w", "30")])
        );
        assert_eq!(s.run("zunion 2 a b"), names(&["x", "y", "z", "w"]));
        assert_eq!(
            s.run("zunion 2 a b weights 2 -1 withscores"),
            scored(&[("w", "-30"), ("z", "-14"), ("y", "-6"), ("x", "2")])
        );
        assert_eq!(
            s.run("zunion 3 a b st aggregate max withscores"),
            scored(&[
                ("v", "1"),
                ("x", "1"),
                ("y", "10"),
                ("z", "20"),
                ("w", "30")
            ])
        );
        assert_eq!(
            s.run("zinter 2 a b aggregate min withscores"),
            scored(&[("y", "2"), ("z", "3")])
        );
        assert_eq!(s.run("zinter 3 a b st withscores"), scored(&[("z", "24")]));
        assert_eq!(s.run("zinter 2 a nokey"), names(&[]));
        assert_eq!(s.run("zdiff 2 a b withscores"), scored(&[("x", "1")]));
        assert_eq!(s.run("zdiff 2 b st"), names(&["y"]));
        assert_eq!(s.run("zdiff 2 nokey a"), names(&[]));
        assert_eq!(s.run("zintercard 2 a b"), int(2));
        assert_eq!(s.run("zintercard 2 a b limit 1"), int(1));
        assert_eq!(s.run("zintercard 2 a b limit 0"), int(2));
        assert_eq!(s.run("zintercard 2 a nokey"), int(0));
        // +inf and -inf sum to 0; inf * 0 is NaN, counted as 0.
        assert_eq!(s.run("zadd i 1 m"), int(1));
        assert_eq!(
            s.run("zunion 2 i i weights inf -inf withscores"),
            scored(&[("m", "0")])
        );
        assert_eq!(
            s.run("zinter 1 a weights 0 withscores"),
            scored(&[("x", "0"), ("y", "0"), ("z", "0")])
        );

        assert_eq!(s.run("zunionstore d 2 a b weights 1 2"), int(4));
        assert_eq!(
            s.run("zrange d 0 -1 withscores"),
            scored(&[("x", "1"), ("y", "22"), ("z", "43"), ("w", "60")])
        );
        assert_eq!(s.run("zinterstore d 2 a st"), int(1));
        assert_eq!(s.run("zrange d 0 -1 withscores"), scored(&[("z", "4")]));
        assert_eq!(s.run("zdiffstore d 2 a st"), int(2));
        assert_eq!(s.run("zrange d 0 -1"), names(&["x", "y"]));
        // The destination may be a source, or hold another type.
        assert_eq!(s.run("zunionstore a 2 a b aggregate max"), int(4));
        assert_eq!(
            s.run("zrange a 0 -1 withscores"),
            scored(&[("x", "1"), ("y", "10"), ("z", "20"), ("w", "30")])
        );
        assert_eq!(s.run("zinterstore str 1 b"), int(3));
        assert_eq!(s.type_of("str"), Reply::Status("zset".into()));
        // An empty result deletes the destination.
        assert_eq!(s.run("zinterstore d 2 a nokey"), int(0));
        assert_eq!(s.type_of("d"), none());
        assert_eq!(s.run("zdiffstore b 2 b b"), int(0));
        assert_eq!(s.type_of("b"), none());
        s.store.check_invariants();
    }

    #[test]
    fn set_algebra_errors() {
        let mut s = S::new();
        s.string("str");
        assert_eq!(s.run("zadd a 1 x"), int(1));
        for (cmd, name) in [
            ("zunion 0 a", "zunion"),
            ("zinter 0 a", "zinter"),
            ("zdiff 0 a", "zdiff"),
            ("zintercard 0 a", "zintercard"),
            ("zintercard -1 a", "zintercard"),
            ("zunionstore d 0 a", "zunionstore"),
            ("zinterstore d 0 a", "zinterstore"),
            ("zdiffstore d 0 a", "zdiffstore"),
        ] {
            assert_eq!(
                s.run(cmd),
                e(&format!(
                    "ERR at least 1 input key is needed for '{name}' command"
                ))
            );
        }
        assert_eq!(s.run("zunion x a"), e(NOT_INTEGER));
        assert_eq!(s.run("zunion 2 a"), e(SYNTAX));
        assert_eq!(s.run("zunionstore d 3 a b"), e(SYNTAX));
        assert_eq!(
            s.run("zunion 2 a a weights 1 x"),
            e("ERR weight value is not a float")
        );
        assert_eq!(s.run("zunion 2 a a weights 1"), e(SYNTAX));
        assert_eq!(s.run("zunion 1 a aggregate avg"), e(SYNTAX));
        assert_eq!(s.run("zunion 1 a aggregate"), e(SYNTAX));
        assert_eq!(s.run("zunion 1 a foo"), e(SYNTAX));
        assert_eq!(s.run("zdiff 1 a weights 1"), e(SYNTAX));
        assert_eq!(s.run("zdiff 1 a aggregate sum"), e(SYNTAX));
        assert_eq!(s.run("zunionstore d 1 a withscores"), e(SYNTAX));
        assert_eq!(s.run("zinterstore d 1 a withscores"), e(SYNTAX));
        assert_eq!(s.run("zdiffstore d 1 a withscores"), e(SYNTAX));
        assert_eq!(s.run("zintercard 1 a withscores"), e(SYNTAX));
        assert_eq!(s.run("zintercard 1 a weights 1"), e(SYNTAX));
        assert_eq!(s.run("zintercard 1 a limit"), e(SYNTAX));
        assert_eq!(s.run("zinter 1 a limit 1"), e(SYNTAX));
        let lim = e("ERR LIMIT can't be negative");
        assert_eq!(s.run("zintercard 1 a limit -1"), lim);
        assert_eq!(s.run("zintercard 1 a limit x"), lim);
        // Sources are type-checked before the options are read.
        assert_eq!(s.run("zunion 2 a str foo"), e(WRONG));
        assert_eq!(s.run("zunionstore d 2 str a"), e(WRONG));
        assert_eq!(s.run("zintercard 2 a str"), e(WRONG));
        assert_eq!(s.run("zdiffstore d 2 a str"), e(WRONG));
        assert_eq!(s.type_of("d"), none());
    }

    #[test]
    fn arities() {
        let want = [
            ("zadd", -4),
            ("zincrby", 4),
            ("zrem", -3),
            ("zcard", 2),
            ("zscore", 3),
            ("zmscore", -3),
            ("zrank", 3),
            ("zrevrank", 3),
            ("zcount", 4),
            ("zlexcount", 4),
            ("zrange", -4),
            ("zrangestore", -5),
            ("zrevrange", -4),
            ("zrangebyscore", -4),
            ("zrevrangebyscore", -4),
            ("zrangebylex", -4),
            ("zrevrangebylex", -4),
            ("zremrangebyrank", 4),
            ("zremrangebyscore", 4),
            ("zremrangebylex", 4),
            ("zpopmin", -2),
            ("zpopmax", -2),
            ("bzpopmin", -3),
            ("bzpopmax", -3),
            ("zmpop", -4),
            ("bzmpop", -5),
            ("zrandmember", -2),
            ("zunionstore", -4),
            ("zinterstore", -4),
            ("zdiffstore", -4),
            ("zunion", -3),
            ("zinter", -3),
            ("zdiff", -3),
            ("zintercard", -3),
            ("zscan", -3),
        ];
        assert_eq!(SPECS.len(), want.len());
        for (name, arity) in want {
            let sp = spec(name.as_bytes()).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(sp.arity, arity, "{name}");
        }
        for name in ["zcard", "zrange", "zunion", "zintercard", "zrandmember"] {
            assert!(spec(name.as_bytes()).unwrap().read_only(), "{name}");
        }
        for name in ["zadd", "zrangestore", "bzpopmin", "zmpop", "zunionstore"] {
            assert!(!spec(name.as_bytes()).unwrap().read_only(), "{name}");
        }
    }

    /// Ranges over a larger set agree with a plain filter of its members.
    #[test]
    fn ranges_match_a_scan() {
        let mut s = S::new();
        let mut model: Vec<(f64, String)> = Vec::new();
        let mut args = vec!["zadd".to_string(), "big".to_string()];
        for i in 0..300 {
            let (score, m) = (f64::from(i % 17) / 2.0, format!("m{:03}", (i * 37) % 300));
            args.push(score.to_string());
            args.push(m.clone());
            model.push((score, m));
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(s.args(&argv, 0), int(300));
        model.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        for (lo, hi) in [
            (0.0, 8.0),
            (1.5, 3.0),
            (2.0, 2.0),
            (7.5, 100.0),
            (-1.0, 0.0),
        ] {
            for (lox, hix) in [(false, false), (true, false), (false, true), (true, true)] {
                let inside = |x: f64| {
                    (if lox { x > lo } else { x >= lo }) && (if hix { x < hi } else { x <= hi })
                };
                let want: Vec<&str> = model
                    .iter()
                    .filter(|(x, _)| inside(*x))
                    .map(|(_, m)| m.as_str())
                    .collect();
                let lo_s = format!("{}{lo}", if lox { "(" } else { "" });
                let hi_s = format!("{}{hi}", if hix { "(" } else { "" });
                assert_eq!(
                    s.args(&["zrangebyscore", "big", &lo_s, &hi_s], 0),
                    names(&want)
                );
                assert_eq!(
                    s.args(&["zcount", "big", &lo_s, &hi_s], 0),
                    int(want.len() as i64)
                );
                let rev: Vec<&str> = want.iter().rev().copied().collect();
                assert_eq!(
                    s.args(&["zrevrangebyscore", "big", &hi_s, &lo_s], 0),
                    names(&rev)
                );
                let page: Vec<&str> = rev.iter().skip(3).take(5).copied().collect();
                assert_eq!(
                    s.args(
                        &["zrevrangebyscore", "big", &hi_s, &lo_s, "limit", "3", "5"],
                        0
                    ),
                    names(&page)
                );
            }
        }
        for (start, stop) in [(0i64, 9i64), (290, 400), (-10, -5), (-400, 3), (150, 149)] {
            let n = model.len() as i64;
            let norm = |x: i64| if x < 0 { n + x } else { x };
            let (a, z) = (norm(start).max(0), norm(stop).min(n - 1));
            let want: Vec<&str> = if a > z {
                Vec::new()
            } else {
                model[a as usize..=z as usize]
                    .iter()
                    .map(|(_, m)| m.as_str())
                    .collect()
            };
            let (ss, ee) = (start.to_string(), stop.to_string());
            assert_eq!(s.args(&["zrange", "big", &ss, &ee], 0), names(&want));
            let rev_model: Vec<&str> = model.iter().rev().map(|(_, m)| m.as_str()).collect();
            let want_rev: Vec<&str> = if a > z {
                Vec::new()
            } else {
                rev_model[a as usize..=z as usize].to_vec()
            };
            assert_eq!(s.args(&["zrevrange", "big", &ss, &ee], 0), names(&want_rev));
        }
        assert_eq!(
            s.run("zremrangebyscore big 1 (3"),
            int(model.iter().filter(|(x, _)| (1.0..3.0).contains(x)).count() as i64)
        );
        s.store.check_invariants();
    }

    #[test]
    fn snapshot_round_trip() {
        let mut s = five();
        s.run("zadd z 1.5 ab -inf lo +inf hi");
        s.run("zincrby z 2 a");
        s.run("zrem z c");
        s.run("zpopmax z");
        s.run("zadd other 0 a 0 b 0 c");
        s.run("zunionstore u 2 z other weights 2 3");
        s.run("zrangestore r z 0 2");
        s.run("zremrangebylex other [b [b");
        s.store.check_invariants();
        let back = KvStore::restore(&s.store.snapshot()).unwrap();
        assert_eq!(back, s.store);
        assert_eq!(back.digest(), s.store.digest());
        back.check_invariants();
        let mut t = S {
            store: back,
            index: s.index,
            now: s.now,
        };
        assert_eq!(
            t.run("zrange z 0 -1 withscores"),
            s.run("zrange z 0 -1 withscores")
        );
        assert_eq!(
            t.run("zrange u 0 -1 withscores"),
            s.run("zrange u 0 -1 withscores")
        );
        let before = s.store.digest();
        s.run("zadd other 5 x");
        assert_ne!(s.store.digest(), before);
    }
}
