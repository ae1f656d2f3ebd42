//! String commands beyond the store's own operations: `LCS` and the bit operations
//! (`BITCOUNT`, `BITPOS`, `BITOP`, `BITFIELD`, `BITFIELD_RO`), as Redis 7.0 answers them.
//!
//! Bit 0 is the most significant bit of the first byte, as `SETBIT` numbers them. Every
//! command costs O(length of the strings it names), except `LCS`, O(n·m) as in Redis and
//! refused when its table would exceed [`MAX_LEN`] bytes.

use super::*;

/// Redis's default `proto-max-bulk-len`: the longest string a command may build, and the
/// largest transient table `LCS` may allocate.
const MAX_LEN: u64 = 512 * 1024 * 1024;

const ERR_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
const ERR_BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const ERR_BF_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

/// A command written with `?`: its error is its reply.
fn run(r: Result<Reply, Reply>) -> Reply {
    r.unwrap_or_else(|e| e)
}

// ---- LCS

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`: the longest common
/// subsequence, its length, or the matching ranges (from the ends of the strings backwards,
/// as Redis walks its table).
fn lcs(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    run(lcs_(v, a))
}

fn lcs_(v: &View<'_>, a: &[Bytes]) -> Result<Reply, Reply> {
    // Redis 7.0 answers this, not WRONGTYPE, and before looking at the options.
    let get = |k: &[u8]| {
        v.string(k)
            .map_err(|_| err("ERR The specified keys must contain string values"))
    };
    let x = get(&a[1])?.unwrap_or_default();
    let y = get(&a[2])?.unwrap_or_default();
    let (mut want_len, mut want_idx, mut with_len) = (false, false, false);
    let mut min_len = 0i64;
    let mut j = 3;
    while j < a.len() {
        match a[j].to_ascii_lowercase().as_slice() {
            b"idx" => want_idx = true,
            b"len" => want_len = true,
            b"withmatchlen" => with_len = true,
            b"minmatchlen" if j + 1 < a.len() => {
                min_len = int_arg(&a[j + 1])?.max(0);
                j += 1;
            }
            _ => return Err(err(SYNTAX)),
        }
        j += 1;
    }
    if want_len && want_idx {
        return Err(err(
            "ERR If you want both the length and indexes, please just use IDX.",
        ));
    }
    let (n, m) = (x.len(), y.len());
    let cells = (n as u64 + 1).saturating_mul(m as u64 + 1);
    if cells.saturating_mul(4) > MAX_LEN {
        return Err(err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    // table[i * w + j]: the LCS length of x[..i] and y[..j].
    let w = m + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=n {
        for j in 1..=m {
            table[i * w + j] = if x[i - 1] == y[j - 1] {
                table[(i - 1) * w + j - 1] + 1
            } else {
                table[(i - 1) * w + j].max(table[i * w + j - 1])
            };
        }
    }
    let total = table[n * w + m];
    if want_len {
        return Ok(Reply::Int(i64::from(total)));
    }
    // Walk back from the end; the ties go the way Redis's walk goes, so the same ranges come
    // out in the same order.
    let mut out = vec![0u8; total as usize];
    let mut k = out.len();
    let mut matches = Vec::new();
    // The current range: [x start, x end, y start, y end].
    let mut range: Option<[usize; 4]> = None;
    let (mut i, mut j) = (n, m);
    while i > 0 && j > 0 {
        let mut emit = false;
        if x[i - 1] == y[j - 1] {
            out[k - 1] = x[i - 1];
            k -= 1;
            match &mut range {
                None => range = Some([i - 1, i - 1, j - 1, j - 1]),
                Some(r) if r[0] == i && r[2] == j => {
                    r[0] -= 1;
                    r[2] -= 1;
                }
                Some(_) => emit = true,
            }
            if let Some(r) = range {
                emit |= r[0] == 0 || r[2] == 0;
            }
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * w + j] > table[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = range.is_some();
        }
        if emit {
            if let Some(r) = range.take() {
                let len = (r[1] - r[0] + 1) as i64;
                if want_idx && (min_len == 0 || len >= min_len) {
                    let pair = |s: usize, e: usize| {
                        Reply::Array(vec![Reply::Int(s as i64), Reply::Int(e as i64)])
                    };
                    let mut one = vec![pair(r[0], r[1]), pair(r[2], r[3])];
                    if with_len {
                        one.push(Reply::Int(len));
                    }
                    matches.push(Reply::Array(one));
                }
            }
        }
    }
    if want_idx {
        return Ok(Reply::Map(vec![
            (bulk(b"matches"), Reply::Array(matches)),
            (bulk(b"len"), Reply::Int(i64::from(total))),
        ]));
    }
    Ok(Reply::Bulk(out))
}

// ---- bit ranges

/// `BYTE|BIT`: whether the range counts bits.
fn unit_is_bit(arg: &[u8]) -> Result<bool, Reply> {
    match arg.to_ascii_lowercase().as_slice() {
        b"bit" => Ok(true),
        b"byte" => Ok(false),
        _ => Err(err(SYNTAX)),
    }
}

/// `start..=end` in units (bytes or bits) of a string of `total` units as `BITCOUNT` and
/// `BITPOS` take them (negative counts from the end, clamped), turned into bits; `None`
/// when empty.
fn bit_range(start: i64, end: i64, total: i64, bits: bool) -> Option<(u64, u64)> {
    let fix = |p: i64| if p < 0 { total.saturating_add(p) } else { p }.max(0);
    let (start, end) = (fix(start), fix(end).min(total - 1));
    if start > end {
        return None;
    }
    let (start, end) = (start as u64, end as u64);
    Some(if bits {
        (start, end)
    } else {
        (start * 8, end * 8 + 7)
    })
}

/// The bits of byte `b` of a string that lie in `from..=to` (a mask, bit 0 the MSB).
fn mask(b: u64, from: u64, to: u64) -> u8 {
    let lo = if b == from / 8 { from % 8 } else { 0 };
    let hi = if b == to / 8 { to % 8 } else { 7 };
    (0xffu8 >> lo) & (0xffu8 << (7 - hi))
}

/// The set bits of `s` in `from..=to` (within the string).
fn count_bits(s: &[u8], from: u64, to: u64) -> u64 {
    let (first, last) = ((from / 8) as usize, (to / 8) as usize);
    let edge = |b: usize| u64::from((s[b] & mask(b as u64, from, to)).count_ones());
    if first == last {
        return edge(first);
    }
    let middle: u64 = s[first + 1..last]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    edge(first) + middle + edge(last)
}

/// The first bit of `s` in `from..=to` (within the string) equal to `bit`.
fn first_bit(s: &[u8], from: u64, to: u64, bit: bool) -> Option<u64> {
    let at = |b: usize| {
        let byte = (if bit { s[b] } else { !s[b] }) & mask(b as u64, from, to);
        (byte != 0).then(|| b as u64 * 8 + u64::from(byte.leading_zeros()))
    };
    let (first, last) = ((from / 8) as usize, (to / 8) as usize);
    if let Some(p) = at(first) {
        return Some(p);
    }
    if first == last {
        return None;
    }
    let skip = if bit { 0 } else { 0xff };
    let middle = s[first + 1..last].iter().position(|&b| b != skip);
    match middle {
        Some(off) => at(first + 1 + off),
        None => at(last),
    }
}

/// `BITCOUNT key [start end [BYTE|BIT]]`: the number of set bits.
fn bitcount(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    run(bitcount_(v, a))
}

fn bitcount_(v: &View<'_>, a: &[Bytes]) -> Result<Reply, Reply> {
    // A missing key answers 0 before the arguments are looked at, as in Redis.
    let Some(s) = v.string(&a[1])? else {
        return Ok(Reply::Int(0));
    };
    let len = s.len() as i64;
    let range = match a.len() {
        2 => bit_range(0, len - 1, len, false),
        4 | 5 => {
            let start = int_arg(&a[2])?;
            let end = int_arg(&a[3])?;
            // Redis answers this before looking at the unit.
            if start < 0 && end < 0 && start > end {
                return Ok(Reply::Int(0));
            }
            let bits = a.len() == 5 && unit_is_bit(&a[4])?;
            bit_range(start, end, if bits { len * 8 } else { len }, bits)
        }
        _ => return Err(err(SYNTAX)),
    };
    let n = range.map_or(0, |(from, to)| count_bits(s, from, to));
    Ok(Reply::Int(n as i64))
}

/// `BITPOS key bit [start [end [BYTE|BIT]]]`: the first bit set (or clear) in the range, -1
/// if none; looking for a clear bit without an end finds the first bit past the string.
fn bitpos(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    run(bitpos_(v, a))
}

fn bitpos_(v: &View<'_>, a: &[Bytes]) -> Result<Reply, Reply> {
    let bit = match int_arg(&a[2])? {
        0 => false,
        1 => true,
        _ => return Err(err("ERR The bit argument must be 1 or 0.")),
    };
    // A missing key is an endless run of zero bits.
    let Some(s) = v.string(&a[1])? else {
        return Ok(Reply::Int(if bit { -1 } else { 0 }));
    };
    let len = s.len() as i64;
    let (range, end_given) = match a.len() {
        3 => (bit_range(0, len - 1, len, false), false),
        4..=6 => {
            let start = int_arg(&a[3])?;
            let bits = a.len() == 6 && unit_is_bit(&a[5])?;
            let total = if bits { len * 8 } else { len };
            let end = match a.get(4) {
                Some(e) => int_arg(e)?,
                None => total - 1,
            };
            (bit_range(start, end, total, bits), a.len() >= 5)
        }
        _ => return Err(err(SYNTAX)),
    };
    let Some((from, to)) = range else {
        return Ok(Reply::Int(-1));
    };
    Ok(Reply::Int(match first_bit(s, from, to, bit) {
        Some(p) => p as i64,
        None if bit || end_given => -1,
        // The string continues with zero bits past its end.
        None => to as i64 + 1,
    }))
}

// ---- BITOP

/// `BITOP AND|OR|XOR|NOT destkey key [key …]`: stores the result (as long as the longest
/// source, shorter ones padded with zero bytes) in `destkey` whatever it held, with no
/// expiry; an empty result deletes `destkey`. Answers the result's length.
fn bitop(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    #[derive(PartialEq)]
    enum BitOp {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match a[1].to_ascii_lowercase().as_slice() {
        b"and" => BitOp::And,
        b"or" => BitOp::Or,
        b"xor" => BitOp::Xor,
        b"not" => BitOp::Not,
        _ => return err(SYNTAX),
    };
    if op == BitOp::Not && a.len() != 4 {
        return err("ERR BITOP NOT must be called with a single source key.");
    }
    let out = {
        let view = t.view();
        let mut srcs = Vec::with_capacity(a.len() - 3);
        for k in &a[3..] {
            match view.string(k) {
                Ok(s) => srcs.push(s.unwrap_or_default()),
                Err(e) => return e,
            }
        }
        let max = srcs.iter().map(|s| s.len()).max().unwrap_or(0);
        let mut out = vec![0u8; max];
        out[..srcs[0].len()].copy_from_slice(srcs[0]);
        for s in &srcs[1..] {
            let (mine, rest) = out.split_at_mut(s.len());
            match op {
                BitOp::And => {
                    mine.iter_mut().zip(s.iter()).for_each(|(o, b)| *o &= b);
                    rest.fill(0);
                }
                BitOp::Or => mine.iter_mut().zip(s.iter()).for_each(|(o, b)| *o |= b),
                BitOp::Xor => mine.iter_mut().zip(s.iter()).for_each(|(o, b)| *o ^= b),
                BitOp::Not => unreachable!("NOT has one source"),
            }
        }
        if op == BitOp::Not {
            out.iter_mut().for_each(|o| *o = !*o);
        }
        out
    };
    if out.is_empty() {
        t.replace(&a[2], None);
    } else {
        t.put_string(&a[2], &out, false);
    }
    len_reply(out.len())
}

// ---- BITFIELD

/// What happens to a `SET` or `INCRBY` whose result does not fit.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One subcommand of `BITFIELD`, parsed.
#[derive(Clone, Copy, Debug)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// `i1`…`i64`, `u1`…`u63`: (signed, bits).
fn field_type(arg: &[u8]) -> Result<(bool, u32), Reply> {
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err(ERR_BF_TYPE)),
    };
    // Redis reads the width as a C string: it ends at a zero byte.
    let digits = arg[1..].split(|&b| b == 0).next().unwrap_or_default();
    match crate::store::parse_i64(digits) {
        Some(n @ 1..=64) if signed => Ok((true, n as u32)),
        Some(n @ 1..=63) => Ok((false, n as u32)),
        _ => Err(err(ERR_BF_TYPE)),
    }
}

/// A bit offset: `n`, or `#n` meaning `n` fields of `bits` (refused if that overflows);
/// below 2³² bits (the longest string's).
fn field_offset(arg: &[u8], bits: u32) -> Result<u64, Reply> {
    let (hash, digits) = match arg.split_first() {
        Some((b'#', rest)) => (true, rest),
        _ => (false, arg),
    };
    let bad = || err(ERR_BIT_OFFSET);
    let n = crate::store::parse_i64(digits).ok_or_else(bad)?;
    let n = if hash {
        n.checked_mul(i64::from(bits)).ok_or_else(bad)?
    } else {
        n
    };
    if n < 0 || (n as u64 >> 3) >= MAX_LEN {
        return Err(bad());
    }
    Ok(n as u64)
}

/// The subcommands of `BITFIELD key …`, checked whole before any runs (as Redis does).
fn parse_fields(a: &[Bytes]) -> Result<Vec<Field>, Reply> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        let sub = a[j].to_ascii_lowercase();
        let op = match sub.as_slice() {
            b"get" if left >= 2 => FieldOp::Get,
            b"set" if left >= 3 => FieldOp::Set(0),
            b"incrby" if left >= 3 => FieldOp::IncrBy(0),
            b"overflow" if left >= 1 => {
                overflow = match a[j + 1].to_ascii_lowercase().as_slice() {
                    b"wrap" => Overflow::Wrap,
                    b"sat" => Overflow::Sat,
                    b"fail" => Overflow::Fail,
                    _ => return Err(err("ERR Invalid OVERFLOW type specified")),
                };
                j += 2;
                continue;
            }
            _ => return Err(err(SYNTAX)),
        };
        let (signed, bits) = field_type(&a[j + 1])?;
        let offset = field_offset(&a[j + 2], bits)?;
        let op = match op {
            FieldOp::Get => op,
            FieldOp::Set(_) => FieldOp::Set(int_arg(&a[j + 3])?),
            FieldOp::IncrBy(_) => FieldOp::IncrBy(int_arg(&a[j + 3])?),
        };
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    Ok(fields)
}

/// The `bits` bits at `offset` as an unsigned number (zero past the end of `s`).
fn get_bits(s: &[u8], offset: u64, bits: u32) -> u64 {
    (offset..offset + u64::from(bits)).fold(0u64, |v, p| {
        let byte = s.get((p >> 3) as usize).copied().unwrap_or(0);
        (v << 1) | u64::from((byte >> (7 - (p & 7))) & 1)
    })
}

/// Writes the low `bits` bits of `value` at `offset` (within `s`).
fn set_bits(s: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let p = offset + j;
        let bit = 7 - (p & 7);
        let on = (value >> (u64::from(bits) - 1 - j)) & 1 == 1;
        let byte = &mut s[(p >> 3) as usize];
        if on {
            *byte |= 1 << bit;
        } else {
            *byte &= !(1 << bit);
        }
    }
}

/// `v`'s low `bits` bits as a signed number (the higher bits ignored).
fn sign_extend(v: u64, bits: u32) -> i64 {
    if bits == 64 {
        v as i64
    } else if v & (1 << (bits - 1)) != 0 {
        (v | (u64::MAX << bits)) as i64
    } else {
        (v & !(u64::MAX << bits)) as i64
    }
}

/// The field read as its type.
fn read_field(s: &[u8], f: &Field) -> i64 {
    let v = get_bits(s, f.offset, f.bits);
    if f.signed {
        sign_extend(v, f.bits)
    } else {
        v as i64
    }
}

/// `value + incr` in an unsigned field of `bits` (< 64) under `mode`; `None` if it does not fit
/// and `mode` is `FAIL`. A `SET` passes its value (a negative one as its two's complement,
/// which never fits, as Redis sees it) and 0.
fn unsigned_add(value: u64, incr: i64, bits: u32, mode: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let sum = i128::from(value) + i128::from(incr);
    let over = value > max || sum > i128::from(max);
    if !over && sum >= 0 {
        return Some(sum as u64);
    }
    match mode {
        Overflow::Fail => None,
        Overflow::Sat => Some(if over { max } else { 0 }),
        Overflow::Wrap => Some(value.wrapping_add(incr as u64) & max),
    }
}

/// `value + incr` in a signed field of `bits` under `mode`; `None` if it does not fit and
/// `mode` is `FAIL`. The tests are Redis's, with its two's-complement wrap-arounds: a `SET`
/// of a value near `i64::MIN` in a narrow field saturates to the maximum, as in Redis.
fn signed_add(value: i64, incr: i64, bits: u32, mode: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wide = bits != 64;
    let over =
        value > max || (wide && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr);
    let under =
        value < min || (wide && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr);
    if !over && !under {
        return Some(value.wrapping_add(incr));
    }
    match mode {
        Overflow::Fail => None,
        Overflow::Sat => Some(if over { max } else { min }),
        Overflow::Wrap => Some(sign_extend((value as u64).wrapping_add(incr as u64), bits)),
    }
}

/// Runs a `SET` or `INCRBY` on `s` (long enough): its reply (the old value for `SET`, the new
/// for `INCRBY`, nil when `FAIL` refuses) and whether the bits changed.
fn write_field(s: &mut [u8], f: &Field) -> (Reply, bool) {
    let raw = get_bits(s, f.offset, f.bits);
    let (incr, set) = match f.op {
        FieldOp::Set(v) => (0, Some(v)),
        FieldOp::IncrBy(d) => (d, None),
        FieldOp::Get => unreachable!("a write"),
    };
    let (new, reply) = if f.signed {
        let old = sign_extend(raw, f.bits);
        match signed_add(set.unwrap_or(old), incr, f.bits, f.overflow) {
            None => return (Reply::Nil, false),
            Some(new) => (new as u64, if set.is_some() { old } else { new }),
        }
    } else {
        let base = set.map_or(raw, |v| v as u64);
        match unsigned_add(base, incr, f.bits, f.overflow) {
            None => return (Reply::Nil, false),
            Some(new) => (new, if set.is_some() { raw } else { new } as i64),
        }
    };
    let mask = if f.bits == 64 {
        u64::MAX
    } else {
        (1u64 << f.bits) - 1
    };
    set_bits(s, f.offset, f.bits, new);
    (Reply::Int(reply), raw != (new & mask))
}

/// `BITFIELD key [GET type offset] [SET type offset value] [INCRBY type offset increment]
/// [OVERFLOW WRAP|SAT|FAIL] …`: one reply per `GET`, `SET`, `INCRBY`, in order. A write
/// creates the key or pads it with zero bytes up to the farthest bit written, even when
/// `OVERFLOW FAIL` then refuses every write (as Redis does).
fn bitfield(t: &mut Txn<'_>, a: &[Bytes], _: u64) -> Reply {
    run(bitfield_(t, a))
}

fn bitfield_(t: &mut Txn<'_>, a: &[Bytes]) -> Result<Reply, Reply> {
    let fields = parse_fields(a)?;
    if fields.iter().all(|f| f.op == FieldOp::Get) {
        return read_fields(&t.view(), &a[1], &fields);
    }
    let old = t.get_string(&a[1])?;
    let created = old.is_none();
    let mut s = old.unwrap_or_default();
    let need = fields
        .iter()
        .filter(|f| f.op != FieldOp::Get)
        .map(|f| (f.offset + u64::from(f.bits) - 1) / 8 + 1)
        .max()
        .unwrap_or(0);
    if need > MAX_LEN {
        return Err(err(ERR_TOO_LONG));
    }
    let mut changed = created;
    if need > s.len() as u64 {
        s.resize(need as usize, 0);
        changed = true;
    }
    let mut replies = Vec::with_capacity(fields.len());
    for f in &fields {
        if f.op == FieldOp::Get {
            replies.push(Reply::Int(read_field(&s, f)));
        } else {
            let (reply, diff) = write_field(&mut s, f);
            replies.push(reply);
            changed |= diff;
        }
    }
    if changed {
        t.put_string(&a[1], &s, true);
    }
    Ok(Reply::Array(replies))
}

/// `GET`s only: a missing key reads as zeros.
fn read_fields(v: &View<'_>, key: &[u8], fields: &[Field]) -> Result<Reply, Reply> {
    let s = v.string(key)?.unwrap_or_default();
    Ok(Reply::Array(
        fields
            .iter()
            .map(|f| Reply::Int(read_field(s, f)))
            .collect(),
    ))
}

/// `BITFIELD_RO key [GET type offset …]`.
fn bitfield_ro(v: &View<'_>, a: &[Bytes], _: u64) -> Reply {
    run(parse_fields(a).and_then(|fields| {
        if fields.iter().any(|f| f.op != FieldOp::Get) {
            return Err(err("ERR BITFIELD_RO only supports the GET subcommand"));
        }
        read_fields(v, &a[1], &fields)
    }))
}

/// The string commands of this module.
pub(super) const SPECS: &[Spec] = &[
    r("lcs", -3, lcs),
    r("bitcount", -2, bitcount),
    r("bitpos", -3, bitpos),
    w("bitop", -4, bitop),
    w("bitfield", -2, bitfield),
    r("bitfield_ro", -2, bitfield_ro),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Expiry, Item, Op, Response};

    use crate::types::testing::Db;

    fn int(n: i64) -> Reply {
        Reply::Int(n)
    }

    fn ints(ns: &[i64]) -> Reply {
        Reply::Array(ns.iter().map(|&n| Reply::Int(n)).collect())
    }

    fn e(msg: &str) -> Reply {
        Reply::Error(msg.into())
    }

    /// A small deterministic generator for the fuzz tests.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 11
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn bytes(&mut self, max: u64) -> Vec<u8> {
            let n = self.below(max + 1);
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    impl Db {
        fn get(&mut self, key: &str) -> Option<Bytes> {
            match self.apply(&Op::Get {
                keys: vec![key.into()],
            }) {
                Response::Items(mut items) => items.pop().flatten().map(|i: Item| i.value),
                other => panic!("not items: {other:?}"),
            }
        }

        fn ttl(&mut self, key: &str) -> Response {
            self.apply(&Op::Ttl { key: key.into() })
        }

        fn del(&mut self, key: &str) {
            self.apply(&Op::Del {
                keys: vec![key.into()],
            });
        }

        fn sadd(&mut self, key: &str) {
            self.cmd(&["sadd", key, "m"]);
        }
    }

    const RNA1: &str = "CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTG";
    const RNA2: &str = "ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
    const RNA_LCS: &str = "ACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";

    /// A match as Redis lists it: `[[a1, a2], [b1, b2]]`, with its length if given.
    fn m(a: (i64, i64), b: (i64, i64), len: Option<i64>) -> Reply {
        let mut v = vec![ints(&[a.0, a.1]), ints(&[b.0, b.1])];
        v.extend(len.map(Reply::Int));
        Reply::Array(v)
    }

    fn idx(matches: Vec<Reply>, len: i64) -> Reply {
        Reply::Map(vec![
            (bulk(b"matches"), Reply::Array(matches)),
            (bulk(b"len"), int(len)),
        ])
    }

    #[test]
    fn lcs_as_redis_test_suite() {
        let mut db = Db::new();
        db.set("virus1", RNA1.as_bytes());
        db.set("virus2", RNA2.as_bytes());
        assert_eq!(
            db.cmd(&["lcs", "virus1", "virus2"]),
            bulk(RNA_LCS.as_bytes())
        );
        assert_eq!(
            db.cmd(&["LCS", "virus1", "virus2", "LEN"]),
            len_reply(RNA_LCS.len())
        );
        let all = |w: bool| {
            let l = |n| w.then_some(n);
            vec![
                m((238, 238), (239, 239), l(1)),
                m((236, 236), (238, 238), l(1)),
                m((229, 230), (236, 237), l(2)),
                m((224, 224), (235, 235), l(1)),
                m((1, 222), (13, 234), l(222)),
            ]
        };
        let len = RNA_LCS.len() as i64;
        assert_eq!(
            db.cmd(&["lcs", "virus1", "virus2", "IDX"]),
            idx(all(false), len)
        );
        assert_eq!(
            db.cmd(&["lcs", "virus1", "virus2", "IDX", "WITHMATCHLEN"]),
            idx(all(true), len)
        );
        assert_eq!(
            db.cmd(&[
                "lcs",
                "virus1",
                "virus2",
                "IDX",
                "WITHMATCHLEN",
                "MINMATCHLEN",
                "5"
            ]),
            idx(vec![m((1, 222), (13, 234), Some(222))], len)
        );
        // Served by a read without the log too.
        assert_eq!(
            db.read(&["lcs", "virus1", "virus2"]),
            bulk(RNA_LCS.as_bytes())
        );
    }

    #[test]
    fn lcs_as_redis_docs() {
        let mut db = Db::new();
        db.set("key1", b"ohmytext");
        db.set("key2", b"mynewtext");
        assert_eq!(db.cmd(&["lcs", "key1", "key2"]), bulk(b"mytext"));
        assert_eq!(db.cmd(&["lcs", "key1", "key2", "len"]), int(6));
        assert_eq!(
            db.cmd(&["lcs", "key1", "key2", "idx"]),
            idx(vec![m((4, 7), (5, 8), None), m((2, 3), (0, 1), None)], 6)
        );
        assert_eq!(
            db.cmd(&["lcs", "key1", "key2", "idx", "minmatchlen", "4"]),
            idx(vec![m((4, 7), (5, 8), None)], 6)
        );
        assert_eq!(
            db.cmd(&[
                "lcs",
                "key1",
                "key2",
                "idx",
                "minmatchlen",
                "4",
                "withmatchlen"
            ]),
            idx(vec![m((4, 7), (5, 8), Some(4))], 6)
        );
        // A negative minimum is no minimum; LEN repeated is fine.
        assert_eq!(
            db.cmd(&["lcs", "key1", "key2", "idx", "minmatchlen", "-3"]),
            idx(vec![m((4, 7), (5, 8), None), m((2, 3), (0, 1), None)], 6)
        );
        assert_eq!(db.cmd(&["lcs", "key1", "key2", "len", "len"]), int(6));
        // Missing keys are empty strings.
        assert_eq!(db.cmd(&["lcs", "key1", "nokey"]), bulk(b""));
        assert_eq!(db.cmd(&["lcs", "nokey", "key2", "len"]), int(0));
        assert_eq!(
            db.cmd(&["lcs", "nokey", "nokey2", "idx", "withmatchlen"]),
            idx(vec![], 0)
        );
        assert_eq!(db.cmd(&["lcs", "key1", "key1"]), bulk(b"ohmytext"));
        assert_eq!(
            db.cmd(&["lcs", "key1", "key1", "idx", "withmatchlen"]),
            idx(vec![m((0, 7), (0, 7), Some(8))], 8)
        );
    }

    #[test]
    fn lcs_errors() {
        let mut db = Db::new();
        db.set("a", b"abc");
        db.set("b", b"abd");
        db.sadd("s");
        assert_eq!(
            db.cmd(&["lcs", "a", "b", "len", "idx"]),
            e("ERR If you want both the length and indexes, please just use IDX.")
        );
        assert_eq!(db.cmd(&["lcs", "a", "b", "foo"]), e(SYNTAX));
        assert_eq!(db.cmd(&["lcs", "a", "b", "minmatchlen"]), e(SYNTAX));
        assert_eq!(
            db.cmd(&["lcs", "a", "b", "minmatchlen", "x"]),
            e(NOT_INTEGER)
        );
        let typed = e("ERR The specified keys must contain string values");
        assert_eq!(db.cmd(&["lcs", "a", "s"]), typed);
        assert_eq!(db.cmd(&["lcs", "s", "nokey", "foo"]), typed);
        assert_eq!(
            db.cmd(&["lcs", "a"]),
            e("ERR wrong number of arguments for 'lcs' command")
        );
        // 12001² cells of 4 bytes exceed 512 MB: refused before allocating.
        db.set("big1", &[b'x'; 12_000]);
        db.set("big2", &[b'y'; 12_000]);
        assert_eq!(
            db.cmd(&["lcs", "big1", "big2"]),
            e("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
        );
    }

    /// Set bits of `s` in bits `from..=to` (a naive model).
    fn naive_count(s: &[u8], from: usize, to: usize) -> i64 {
        (from..=to)
            .filter(|&p| s[p / 8] >> (7 - p % 8) & 1 == 1)
            .count() as i64
    }

    #[test]
    fn bitcount_as_redis() {
        let mut db = Db::new();
        assert_eq!(db.cmd(&["bitcount", "no-key"]), int(0));
        assert_eq!(db.cmd(&["bitcount", "no-key", "0", "1000", "bit"]), int(0));
        // A missing key answers before the arguments are checked.
        assert_eq!(db.cmd(&["bitcount", "no-key", "x"]), int(0));
        db.set("str", b"xxxx");
        assert_eq!(db.cmd(&["bitcount", "str", "4", "10"]), int(0));
        assert_eq!(db.cmd(&["bitcount", "str", "32", "87", "bit"]), int(0));
        assert_eq!(db.cmd(&["bitcount", "str", "-6", "-7"]), int(0));
        assert_eq!(db.cmd(&["bitcount", "str", "-6", "-15", "bit"]), int(0));
        // That check comes before the unit's.
        assert_eq!(db.cmd(&["bitcount", "str", "-6", "-7", "bad"]), int(0));
        for vec in [&b""[..], b"\xaa", b"\x00\x00\xff", b"foobar", b"123"] {
            db.set("str", vec);
            let n: i64 = vec.iter().map(|b| i64::from(b.count_ones())).sum();
            assert_eq!(db.cmdb(&[b"bitcount", b"str"]), int(n));
            assert_eq!(db.cmdb(&[b"bitcount", b"str", b"0", b"-1", b"bit"]), int(n));
        }
        db.set("s", b"foobar");
        let ones = |s: &[u8]| int(s.iter().map(|b| i64::from(b.count_ones())).sum());
        assert_eq!(db.cmd(&["bitcount", "s"]), int(26));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "0"]), int(4));
        assert_eq!(db.cmd(&["bitcount", "s", "1", "1"]), int(6));
        assert_eq!(db.cmd(&["bitcount", "s", "1", "1", "BYTE"]), int(6));
        assert_eq!(db.cmd(&["bitcount", "s", "5", "30", "BIT"]), int(17));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "-1"]), ones(b"foobar"));
        assert_eq!(db.cmd(&["bitcount", "s", "1", "-2"]), ones(b"ooba"));
        assert_eq!(db.cmd(&["bitcount", "s", "-2", "1"]), int(0));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "1000"]), ones(b"foobar"));
        for (a, b, from, to) in [
            ("10", "14", 10, 14),
            ("3", "14", 3, 14),
            ("3", "29", 3, 29),
            ("10", "-34", 10, 14),
            ("3", "-34", 3, 14),
            ("3", "-19", 3, 29),
        ] {
            assert_eq!(
                db.cmd(&["bitcount", "s", a, b, "bit"]),
                int(naive_count(b"foobar", from, to)),
                "{a} {b}"
            );
        }
        assert_eq!(db.cmd(&["bitcount", "s", "-2", "1", "bit"]), int(0));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "1000", "bit"]), int(26));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "4294967296"]), int(26));
        db.set("str", b"ab");
        assert_eq!(db.cmd(&["bitcount", "str", "1", "-1"]), int(3));
        db.set("str", b"__PPxxxxxxxxxxxxxxxxRR__");
        assert_eq!(db.cmd(&["bitcount", "str", "2", "-3"]), int(74));
        // Errors.
        assert_eq!(db.cmd(&["bitcount", "s", "0"]), e(SYNTAX));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "1", "hello"]), e(SYNTAX));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "1", "bit", "x"]), e(SYNTAX));
        assert_eq!(db.cmd(&["bitcount", "s", "a", "1"]), e(NOT_INTEGER));
        assert_eq!(db.cmd(&["bitcount", "s", "0", "1.5"]), e(NOT_INTEGER));
        db.sadd("set");
        assert_eq!(db.cmd(&["bitcount", "set"]), wrongtype());
        assert_eq!(db.read(&["bitcount", "s", "1", "1"]), int(6));
    }

    #[test]
    fn bitcount_fuzz() {
        let mut db = Db::new();
        let mut g = Gen(7);
        for _ in 0..200 {
            let s = g.bytes(300);
            db.set("str", &s);
            let bits = s.len() * 8;
            assert_eq!(
                db.cmd(&["bitcount", "str"]),
                int(if bits == 0 {
                    0
                } else {
                    naive_count(&s, 0, bits - 1)
                })
            );
            if s.is_empty() {
                continue;
            }
            let (x, y) = (g.below(s.len() as u64), g.below(s.len() as u64));
            let (lo, hi) = (x.min(y) as usize, x.max(y) as usize);
            assert_eq!(
                db.cmd(&["bitcount", "str", &lo.to_string(), &hi.to_string()]),
                int(naive_count(&s, lo * 8, hi * 8 + 7))
            );
            let (x, y) = (g.below(bits as u64), g.below(bits as u64));
            let (lo, hi) = (x.min(y) as usize, x.max(y) as usize);
            assert_eq!(
                db.cmd(&["bitcount", "str", &lo.to_string(), &hi.to_string(), "bit"]),
                int(naive_count(&s, lo, hi))
            );
        }
    }

    #[test]
    fn bitpos_as_redis() {
        let mut db = Db::new();
        let pos = |db: &mut Db, args: &[&str]| {
            let mut all = vec!["bitpos", "str"];
            all.extend_from_slice(args);
            db.cmd(&all)
        };
        assert_eq!(pos(&mut db, &["0"]), int(0));
        assert_eq!(pos(&mut db, &["0", "0", "-1", "bit"]), int(0));
        assert_eq!(pos(&mut db, &["1"]), int(-1));
        assert_eq!(pos(&mut db, &["1", "0", "-1"]), int(-1));
        db.set("str", b"\xff\xf0\x00");
        assert_eq!(pos(&mut db, &["0"]), int(12));
        assert_eq!(pos(&mut db, &["0", "0", "-1", "bit"]), int(12));
        assert_eq!(pos(&mut db, &["0", "1"]), int(12));
        assert_eq!(pos(&mut db, &["0", "1", "-1", "bit"]), int(12));
        db.set("str", b"\x00\x0f\x00");
        assert_eq!(pos(&mut db, &["1"]), int(12));
        assert_eq!(pos(&mut db, &["1", "0", "-1", "bit"]), int(12));
        db.set("str", b"\x00\x0f\xff");
        assert_eq!(pos(&mut db, &["1", "1"]), int(12));
        assert_eq!(pos(&mut db, &["1", "1", "-1", "bit"]), int(12));
        // A prefix, three words, then the first bit looked for.
        for (fill, last, bit) in [(0xffu8, 0x0fu8, "0"), (0x00, 0xf0, "1")] {
            let mut s = vec![fill; 27];
            s.push(last);
            db.set("str", &s);
            assert_eq!(pos(&mut db, &[bit]), int(216));
            for start in 1..=8 {
                assert_eq!(pos(&mut db, &[bit, &start.to_string()]), int(216));
            }
            for start in [1, 9, 17, 25, 33, 41, 49, 57, 65] {
                let start = start.to_string();
                assert_eq!(pos(&mut db, &[bit, &start, "-1", "bit"]), int(216));
            }
        }
        let mut s = Vec::new();
        for _ in 0..20 {
            db.set("str", &s);
            assert_eq!(pos(&mut db, &["1"]), int(-1));
            assert_eq!(pos(&mut db, &["1", "0", "-1", "bit"]), int(-1));
            s.push(0);
        }
        db.set("str", b"\x00\xff\x00");
        for (args, want) in [
            (&["0", "0", "-1"][..], 0),
            (&["0", "1", "-1"], 16),
            (&["0", "2", "-1"], 16),
            (&["0", "2", "200"], 16),
            (&["0", "1", "1"], -1),
            (&["0", "0", "-1", "bit"], 0),
            (&["0", "8", "-1", "bit"], 16),
            (&["0", "16", "-1", "bit"], 16),
            (&["0", "16", "200", "bit"], 16),
            (&["0", "8", "8", "bit"], -1),
            (&["1", "0", "-1"], 8),
            (&["1", "1", "-1"], 8),
            (&["1", "2", "-1"], -1),
            (&["1", "2", "200"], -1),
            (&["1", "1", "1"], 8),
            (&["1", "0", "-1", "bit"], 8),
            (&["1", "8", "-1", "bit"], 8),
            (&["1", "16", "-1", "bit"], -1),
            (&["1", "16", "200", "bit"], -1),
            (&["1", "8", "8", "bit"], 8),
        ] {
            assert_eq!(pos(&mut db, args), int(want), "{args:?}");
        }
        db.set("str", b"\xff\xff\xff");
        assert_eq!(pos(&mut db, &["0"]), int(24));
        assert_eq!(pos(&mut db, &["0", "0"]), int(24));
        assert_eq!(pos(&mut db, &["0", "0", "-1"]), int(-1));
        assert_eq!(pos(&mut db, &["0", "0", "-1", "bit"]), int(-1));
        // Past the end with only a start: empty range.
        assert_eq!(pos(&mut db, &["0", "5"]), int(-1));
        // The docs' examples.
        db.set("str", b"\x00\xff\xf0");
        assert_eq!(pos(&mut db, &["1", "0"]), int(8));
        assert_eq!(pos(&mut db, &["1", "2"]), int(16));
        assert_eq!(pos(&mut db, &["1", "2", "-1", "BYTE"]), int(16));
        assert_eq!(pos(&mut db, &["1", "7", "15", "BIT"]), int(8));
        db.set("str", b"\x00\x00\x00");
        assert_eq!(pos(&mut db, &["1"]), int(-1));
        assert_eq!(pos(&mut db, &["1", "7", "-3", "BIT"]), int(-1));
        // An existing empty string has no bit at all.
        db.set("str", b"");
        assert_eq!(pos(&mut db, &["0"]), int(-1));
        // Errors, in Redis's order.
        let bad_bit = e("ERR The bit argument must be 1 or 0.");
        assert_eq!(pos(&mut db, &["2"]), bad_bit);
        assert_eq!(db.cmd(&["bitpos", "nokey", "2"]), bad_bit);
        assert_eq!(pos(&mut db, &["x"]), e(NOT_INTEGER));
        assert_eq!(db.cmd(&["bitpos", "nokey", "0", "x"]), int(0));
        db.set("str", b"ab");
        assert_eq!(pos(&mut db, &["1", "x"]), e(NOT_INTEGER));
        assert_eq!(pos(&mut db, &["1", "0", "x"]), e(NOT_INTEGER));
        assert_eq!(pos(&mut db, &["1", "0", "x", "foo"]), e(SYNTAX));
        assert_eq!(pos(&mut db, &["1", "0", "1", "bit", "x"]), e(SYNTAX));
        db.sadd("set");
        assert_eq!(db.cmd(&["bitpos", "set", "1"]), wrongtype());
        assert_eq!(db.cmd(&["bitpos", "set", "2"]), bad_bit);
        assert_eq!(db.read(&["bitpos", "str", "1"]), int(1));
    }

    #[test]
    fn bitpos_fuzz() {
        let mut db = Db::new();
        let mut g = Gen(11);
        let bit_at = |s: &[u8], p: usize| s[p / 8] >> (7 - p % 8) & 1;
        for round in 0..300 {
            // Sparse bits, so both answers are found and missed.
            let mut s = vec![if round % 2 == 0 { 0u8 } else { 0xff }; g.below(40) as usize];
            for _ in 0..g.below(3) {
                if !s.is_empty() {
                    let p = g.below(s.len() as u64 * 8) as usize;
                    s[p / 8] ^= 0x80 >> (p % 8);
                }
            }
            db.set("str", &s);
            let bits = s.len() * 8;
            for b in [0u8, 1] {
                let whole = (0..bits).find(|&p| bit_at(&s, p) == b);
                let want = match whole {
                    Some(p) => p as i64,
                    None if b == 1 => -1,
                    None if bits == 0 => -1,
                    None => bits as i64,
                };
                assert_eq!(db.cmd(&["bitpos", "str", &b.to_string()]), int(want));
                if bits == 0 {
                    continue;
                }
                let (x, y) = (g.below(bits as u64), g.below(bits as u64));
                let (lo, hi) = (x.min(y) as usize, x.max(y) as usize);
                let want = (lo..=hi)
                    .find(|&p| bit_at(&s, p) == b)
                    .map_or(-1, |p| p as i64);
                let (l, h) = (lo.to_string(), hi.to_string());
                assert_eq!(
                    db.cmd(&["bitpos", "str", &b.to_string(), &l, &h, "bit"]),
                    int(want),
                    "{s:?} {b} {lo} {hi}"
                );
            }
        }
    }

    #[test]
    fn bitop_as_redis() {
        let mut db = Db::new();
        db.set("s", b"");
        assert_eq!(db.cmd(&["bitop", "not", "dest", "s"]), int(0));
        assert_eq!(db.get("dest"), None);
        db.set("s", b"\xaa\x00\xff\x55");
        assert_eq!(db.cmd(&["bitop", "not", "dest", "s"]), int(4));
        assert_eq!(db.get("dest"), Some(b"\x55\xff\x00\xaa".to_vec()));
        assert_eq!(db.cmd(&["BITOP", "NOT", "s", "s"]), int(4));
        assert_eq!(db.get("s"), Some(b"\x55\xff\x00\xaa".to_vec()));
        db.set("a", b"\x01\x02\xff");
        for op in ["and", "or", "xor"] {
            assert_eq!(db.cmd(&["bitop", op, "res", "a"]), int(3));
            assert_eq!(db.get("res"), Some(b"\x01\x02\xff".to_vec()));
        }
        db.cmd(&["bitop", "and", "res1", "no-such-key", "a"]);
        db.cmd(&["bitop", "or", "res2", "no-such-key", "a", "no-such-key"]);
        db.cmd(&["bitop", "xor", "res3", "no-such-key", "a"]);
        assert_eq!(db.get("res1"), Some(b"\x00\x00\x00".to_vec()));
        assert_eq!(db.get("res2"), Some(b"\x01\x02\xff".to_vec()));
        assert_eq!(db.get("res3"), Some(b"\x01\x02\xff".to_vec()));
        db.set("a", b"\x01\x02\xff\xff");
        db.set("b", b"\x01\x02\xff");
        db.cmd(&["bitop", "and", "res1", "a", "b"]);
        db.cmd(&["bitop", "or", "res2", "a", "b"]);
        db.cmd(&["bitop", "xor", "res3", "a", "b"]);
        assert_eq!(db.get("res1"), Some(b"\x01\x02\xff\x00".to_vec()));
        assert_eq!(db.get("res2"), Some(b"\x01\x02\xff\xff".to_vec()));
        assert_eq!(db.get("res3"), Some(b"\x00\x00\x00\xff".to_vec()));
        db.set("a", b"1");
        db.set("b", b"2");
        db.cmd(&["bitop", "xor", "dest", "a", "b", "a"]);
        assert_eq!(db.get("dest"), Some(b"2".to_vec()));
        db.set("a", &[0; 32]);
        db.del("b");
        assert_eq!(db.cmd(&["bitop", "or", "x", "a", "b"]), int(32));
        // Errors.
        db.set("a", b"1");
        db.set("b", b"2");
        db.sadd("c");
        assert_eq!(
            db.cmd(&["bitop", "xor", "dest", "a", "b", "c", "d"]),
            wrongtype()
        );
        assert_eq!(db.cmd(&["bitop", "nand", "dest", "a"]), e(SYNTAX));
        assert_eq!(
            db.cmd(&["bitop", "not", "dest", "a", "b"]),
            e("ERR BITOP NOT must be called with a single source key.")
        );
        assert_eq!(
            db.cmd(&["bitop", "and", "dest"]),
            e("ERR wrong number of arguments for 'bitop' command")
        );
        // The result replaces whatever the destination held, with no expiry.
        db.set_with("dest", b"old", Expiry::AfterMs(100_000));
        assert_eq!(db.cmd(&["bitop", "or", "dest", "a"]), int(1));
        assert_eq!(db.ttl("dest"), Response::Int(-1));
        assert_eq!(db.cmd(&["bitop", "and", "c", "a", "b"]), int(1));
        assert_eq!(db.cmd(&["type", "c"]), Reply::Status("string".into()));
        assert_eq!(db.get("c"), Some(vec![b'1' & b'2']));
        // An empty result deletes the destination, whatever it held.
        db.sadd("set");
        assert_eq!(db.cmd(&["bitop", "and", "set", "nokey"]), int(0));
        assert_eq!(db.cmd(&["type", "set"]), Reply::Status("none".into()));
        assert_eq!(db.cmd(&["bitop", "and", "dest", "nokey", "nokey2"]), int(0));
        assert_eq!(db.get("dest"), None);
    }

    #[test]
    fn bitop_fuzz() {
        let mut db = Db::new();
        let mut g = Gen(3);
        for op in ["and", "or", "xor", "not"] {
            for _ in 0..10 {
                let n = if op == "not" { 1 } else { g.below(10) + 1 };
                let vecs: Vec<Vec<u8>> = (0..n).map(|_| g.bytes(100)).collect();
                let keys: Vec<String> = (0..n).map(|j| format!("v{j}")).collect();
                for (k, v) in keys.iter().zip(&vecs) {
                    db.set(k, v);
                }
                let max = vecs.iter().map(Vec::len).max().unwrap_or(0);
                let byte = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
                let want: Vec<u8> = (0..max)
                    .map(|i| {
                        let mut x = byte(&vecs[0], i);
                        for v in &vecs[1..] {
                            match op {
                                "and" => x &= byte(v, i),
                                "or" => x |= byte(v, i),
                                _ => x ^= byte(v, i),
                            }
                        }
                        if op == "not" {
                            !x
                        } else {
                            x
                        }
                    })
                    .collect();
                let mut args = vec!["bitop", op, "target"];
                args.extend(keys.iter().map(String::as_str));
                assert_eq!(db.cmd(&args), len_reply(max));
                assert_eq!(db.get("target"), (max > 0).then_some(want));
            }
        }
    }

    #[test]
    fn bitfield_as_redis_test_suite() {
        let mut db = Db::new();
        let bf = |db: &mut Db, args: &[&str]| {
            let mut all = vec!["bitfield", "bits"];
            all.extend_from_slice(args);
            db.cmd(&all)
        };
        assert_eq!(bf(&mut db, &["set", "i8", "0", "-100"]), ints(&[0]));
        assert_eq!(bf(&mut db, &["set", "i8", "0", "101"]), ints(&[-100]));
        assert_eq!(bf(&mut db, &["get", "i8", "0"]), ints(&[101]));
        db.del("bits");
        assert_eq!(bf(&mut db, &["set", "u8", "0", "255"]), ints(&[0]));
        assert_eq!(bf(&mut db, &["set", "u8", "0", "100"]), ints(&[255]));
        assert_eq!(bf(&mut db, &["get", "u8", "0"]), ints(&[100]));
        db.del("bits");
        assert_eq!(
            bf(
                &mut db,
                &["set", "i8", "0", "255", "set", "i8", "0", "100", "get", "i8", "0"]
            ),
            ints(&[0, -1, 100])
        );
        db.del("bits");
        assert_eq!(
            bf(
                &mut db,
                &["set", "u8", "0", "255", "incrby", "u8", "0", "100", "get", "u8", "0"]
            ),
            ints(&[0, 99, 99])
        );
        db.del("bits");
        assert_eq!(bf(&mut db, &[]), ints(&[]));
        assert_eq!(db.get("bits"), None);
        bf(&mut db, &["set", "u8", "#0", "65"]);
        bf(&mut db, &["set", "u8", "#1", "66"]);
        bf(&mut db, &["set", "u8", "#2", "67"]);
        assert_eq!(db.get("bits"), Some(b"ABC".to_vec()));
        db.del("bits");
        bf(&mut db, &["set", "u8", "#0", "10"]);
        assert_eq!(bf(&mut db, &["incrby", "u8", "#0", "100"]), ints(&[110]));
        assert_eq!(bf(&mut db, &["incrby", "u8", "#0", "100"]), ints(&[210]));
        db.del("bits");
        bf(&mut db, &["set", "u8", "#0", "10"]);
        assert_eq!(
            bf(
                &mut db,
                &["incrby", "u8", "#0", "100", "incrby", "u8", "#0", "100"]
            ),
            ints(&[110, 210])
        );
        for (ty, mode, second, want) in [
            ("u8", "wrap", "255", [101, 101, 100, 100]),
            ("u8", "sat", "-255", [255, 255, 0, 0]),
            ("i8", "wrap", "255", [101, 101, 100, 100]),
            ("i8", "sat", "-255", [127, 127, -128, -128]),
        ] {
            db.del("bits");
            bf(&mut db, &["set", "u8", "#0", "100"]);
            let got = [
                bf(&mut db, &["overflow", mode, "incrby", ty, "#0", "257"]),
                bf(&mut db, &["get", ty, "#0"]),
                bf(&mut db, &["overflow", mode, "incrby", ty, "#0", second]),
                bf(&mut db, &["get", ty, "#0"]),
            ];
            assert_eq!(got, want.map(|n| ints(&[n])), "{ty} {mode}");
        }
        db.set("bits", b"1");
        assert_eq!(bf(&mut db, &["get", "u1", "0"]), ints(&[0]));
        for _ in 0..3 {
            db.del("mystring");
            assert_eq!(
                db.cmd(&[
                    "BITFIELD", "mystring", "SET", "i8", "0", "10", "SET", "i8", "64", "10",
                    "INCRBY", "i8", "10", "99900"
                ]),
                ints(&[0, 0, 60])
            );
        }
        // BITFIELD_RO.
        db.del("bits");
        assert_eq!(bf(&mut db, &["set", "u8", "0", "255"]), ints(&[0]));
        assert_eq!(bf(&mut db, &["set", "u8", "0", "100"]), ints(&[255]));
        assert_eq!(
            db.cmd(&["bitfield_ro", "bits", "get", "u8", "0"]),
            ints(&[100])
        );
        assert_eq!(
            db.read(&["bitfield_ro", "bits", "get", "u8", "0"]),
            ints(&[100])
        );
        assert_eq!(db.cmd(&["bitfield_ro", "bits"]), ints(&[]));
        assert_eq!(
            db.cmd(&[
                "bitfield_ro",
                "bits",
                "set",
                "u8",
                "0",
                "100",
                "get",
                "u8",
                "0"
            ]),
            e("ERR BITFIELD_RO only supports the GET subcommand")
        );
    }

    #[test]
    fn bitfield_docs_and_edges() {
        let mut db = Db::new();
        assert_eq!(
            db.cmd(&["bitfield", "mykey", "incrby", "i5", "100", "1", "get", "u4", "0"]),
            ints(&[1, 0])
        );
        db.del("mykey");
        for want in [[1, 1], [2, 2], [3, 3], [0, 3]] {
            assert_eq!(
                db.cmd(&[
                    "bitfield", "mykey", "incrby", "u2", "100", "1", "overflow", "sat", "incrby",
                    "u2", "102", "1"
                ]),
                ints(&want)
            );
        }
        assert_eq!(
            db.cmd(&["bitfield", "mykey", "OVERFLOW", "FAIL", "incrby", "u2", "102", "1"]),
            Reply::Array(vec![Reply::Nil])
        );
        // A write refused by FAIL still creates (or pads) the key, as in Redis.
        assert_eq!(
            db.cmd(&["bitfield", "new", "overflow", "fail", "set", "u2", "9", "7"]),
            Reply::Array(vec![Reply::Nil])
        );
        assert_eq!(db.get("new"), Some(vec![0, 0]));
        // GETs only: no key is created; reads past the end are zeros.
        assert_eq!(
            db.cmd(&["bitfield", "none", "get", "i64", "4294967295"]),
            ints(&[0])
        );
        assert_eq!(db.get("none"), None);
        db.set("k", b"\xff");
        assert_eq!(
            db.cmd(&["bitfield", "k", "get", "i8", "0", "get", "u4", "4", "get", "i4", "6"]),
            ints(&[-1, 15, -4])
        );
        // A GET after a write in the same command sees it, and past the grown end reads 0.
        assert_eq!(
            db.cmd(&[
                "bitfield", "k", "set", "u8", "8", "170", "get", "u16", "0", "get", "u8", "16"
            ]),
            ints(&[0, 0xffaa, 0])
        );
        // Writes keep the key's expiry.
        db.set_with("e", b"a", Expiry::AfterMs(100_000));
        db.cmd(&["bitfield", "e", "set", "u8", "8", "98"]);
        assert_eq!(db.get("e"), Some(b"ab".to_vec()));
        assert!(matches!(db.ttl("e"), Response::Int(n) if n > 0));
        // i64 works both ways; a signed SET answers the old value.
        assert_eq!(
            db.cmd(&[
                "bitfield",
                "w",
                "set",
                "i64",
                "3",
                "-9223372036854775808",
                "get",
                "i64",
                "3"
            ]),
            ints(&[0, i64::MIN])
        );
        assert_eq!(
            db.cmd(&["bitfield", "w", "overflow", "sat", "incrby", "i64", "3", "-1"]),
            ints(&[i64::MIN])
        );
        assert_eq!(
            db.cmd(&["bitfield", "w", "incrby", "i64", "3", "-1"]),
            ints(&[i64::MAX])
        );
        // Negative SET of an unsigned field: Redis sees a huge value, so SAT gives the max.
        assert_eq!(
            db.cmd(&["bitfield", "u", "overflow", "sat", "set", "u8", "0", "-1", "get", "u8", "0"]),
            ints(&[0, 255])
        );
        assert_eq!(
            db.cmd(&[
                "bitfield", "u", "overflow", "wrap", "set", "u8", "0", "-2", "get", "u8", "0"
            ]),
            ints(&[255, 254])
        );
        // And a SET near i64::MIN in a narrow signed field saturates to the maximum.
        assert_eq!(
            db.cmd(&[
                "bitfield",
                "u",
                "overflow",
                "sat",
                "set",
                "i8",
                "0",
                "-9223372036854775800",
                "get",
                "i8",
                "0"
            ]),
            ints(&[-2, 127])
        );
        assert_eq!(
            db.cmd(&[
                "bitfield", "u", "overflow", "sat", "set", "i8", "0", "-1000", "get", "i8", "0"
            ]),
            ints(&[127, -128])
        );
    }

    #[test]
    fn bitfield_errors() {
        let mut db = Db::new();
        let bad_type = e(ERR_BF_TYPE);
        let bad_offset = e(ERR_BIT_OFFSET);
        for args in [
            &["get", "u64", "0"][..],
            &["get", "i65", "0"],
            &["get", "i0", "0"],
            &["get", "u", "0"],
            &["get", "x8", "0"],
            &["get", "I8", "0"],
            &["get", "", "0"],
            &["set", "u08", "0", "1"],
        ] {
            let mut all = vec!["bitfield", "k"];
            all.extend_from_slice(args);
            assert_eq!(db.cmd(&all), bad_type, "{args:?}");
        }
        for off in ["-1", "x", "#", "#-1", "4294967296", "#536870912", "1.0"] {
            assert_eq!(
                db.cmd(&["bitfield", "k", "get", "u8", off]),
                bad_offset,
                "{off}"
            );
        }
        assert_eq!(
            db.cmd(&["bitfield", "k", "get", "i64", "#9223372036854775807"]),
            bad_offset
        );
        assert_eq!(
            db.cmd(&["bitfield", "k", "get", "u8", "#536870911"]),
            ints(&[0])
        );
        assert_eq!(
            db.cmd(&["bitfield", "k", "set", "u8", "0", "x"]),
            e(NOT_INTEGER)
        );
        assert_eq!(db.cmd(&["bitfield", "k", "incrby", "u8", "0"]), e(SYNTAX));
        assert_eq!(db.cmd(&["bitfield", "k", "get", "u8"]), e(SYNTAX));
        assert_eq!(db.cmd(&["bitfield", "k", "foo", "u8", "0"]), e(SYNTAX));
        assert_eq!(db.cmd(&["bitfield", "k", "overflow"]), e(SYNTAX));
        assert_eq!(
            db.cmd(&["bitfield", "k", "overflow", "foo", "get", "u8", "0"]),
            e("ERR Invalid OVERFLOW type specified")
        );
        // Parse errors come first, before the type, and before BITFIELD_RO's refusal.
        db.sadd("s");
        assert_eq!(db.cmd(&["bitfield", "s", "get", "u64", "0"]), bad_type);
        assert_eq!(
            db.cmd(&["bitfield_ro", "s", "set", "u8", "0", "1", "get", "u65", "0"]),
            bad_type
        );
        assert_eq!(
            db.cmd(&["bitfield_ro", "s", "set", "u8", "0", "1"]),
            e("ERR BITFIELD_RO only supports the GET subcommand")
        );
        assert_eq!(db.cmd(&["bitfield", "s"]), wrongtype());
        assert_eq!(db.cmd(&["bitfield", "s", "get", "u8", "0"]), wrongtype());
        assert_eq!(
            db.cmd(&["bitfield", "s", "set", "u8", "0", "1"]),
            wrongtype()
        );
        assert_eq!(db.cmd(&["bitfield_ro", "s", "get", "u8", "0"]), wrongtype());
        // A write past 512 MB is refused (the offset itself is valid).
        assert_eq!(
            db.cmd(&["bitfield", "k", "set", "u8", "4294967295", "1"]),
            e(ERR_TOO_LONG)
        );
        assert_eq!(db.get("k"), None);
        assert_eq!(
            db.cmd(&["bitfield", "k", "get", "u8", "4294967295"]),
            ints(&[0])
        );
    }

    #[test]
    fn bitfield_overflow_fuzz() {
        // Redis's fuzz tests: FAIL detects exactly the overflows, WRAP wraps modulo 2^bits.
        let mut db = Db::new();
        let mut g = Gen(5);
        for _ in 0..1000 {
            let bits = g.below(64) as u32 + 1;
            let signed = bits == 64 || g.below(2) == 1;
            let range = 1i128 << bits;
            let (min, ty) = if signed {
                (-(range / 2), format!("i{bits}"))
            } else {
                (0, format!("u{bits}"))
            };
            let max = min + range - 1;
            let mut draw = || {
                let r = (i128::from(g.next()) << 64 | i128::from(g.next())) % (range * 2);
                (min * 2 + r).clamp(i128::from(i64::MIN), i128::from(i64::MAX))
            };
            let (value, incr) = (draw(), draw());
            let overflow = value > max || value < min || value + incr > max || value + incr < min;
            let (vs, is) = (value.to_string(), incr.to_string());
            db.del("bits");
            let r1 = db.cmd(&["bitfield", "bits", "overflow", "fail", "set", &ty, "0", &vs]);
            let r2 = db.cmd(&[
                "bitfield", "bits", "overflow", "fail", "incrby", &ty, "0", &is,
            ]);
            let nil = Reply::Array(vec![Reply::Nil]);
            if overflow {
                assert!(r1 == nil || r2 == nil, "{ty} {value}+{incr}");
            } else {
                assert!(r1 != nil && r2 != nil, "{ty} {value}+{incr}");
            }
            db.del("bits");
            db.cmd(&["bitfield", "bits", "overflow", "wrap", "set", &ty, "0", &vs]);
            db.cmd(&[
                "bitfield", "bits", "overflow", "wrap", "incrby", &ty, "0", &is,
            ]);
            let want = (value + incr - min).rem_euclid(range) + min;
            assert_eq!(
                db.cmd(&["bitfield", "bits", "get", &ty, "0"]),
                ints(&[want as i64]),
                "{ty} {value}+{incr}"
            );
        }
    }

    #[test]
    fn specs_have_redis_arities() {
        for (name, arity, read_only) in [
            ("lcs", -3, true),
            ("bitcount", -2, true),
            ("bitpos", -3, true),
            ("bitop", -4, false),
            ("bitfield", -2, false),
            ("bitfield_ro", -2, true),
        ] {
            let s = spec(name.as_bytes()).expect(name);
            assert_eq!((s.arity, s.read_only()), (arity, read_only), "{name}");
        }
    }
}
