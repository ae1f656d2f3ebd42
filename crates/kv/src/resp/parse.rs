//! RESP2 requests: multibulk and inline, bounded by [`Limits`].

use super::*;

/// Parses one request from the start of `buf`: its arguments and the number of bytes it takes,
/// `Ok(None)` when `buf` holds only part of it (call again with more bytes), or an error (reply
/// [`ProtocolError::reply`] and close the connection).
///
/// A buffer starting with `*` is a multibulk request (`*<n>\r\n` then `n` times
/// `$<len>\r\n<len bytes>\r\n`); anything else is an inline request: a line ended by `\n`
/// (an `\r` before it is dropped) split into arguments with Redis's quoting rules (`"…"` with
/// `\n`, `\r`, `\t`, `\b`, `\a`, `\xHH` and `\<c>` escapes, `'…'` with `\'`; a closing quote
/// must be followed by white space or the end of the line; a NUL byte ends the line).
///
/// An empty argument vector (`*0\r\n`, `*-1\r\n`, a blank inline line) is a request to ignore:
/// Redis answers nothing; [`command`] returns an empty [`Action::Reply`] for it.
///
/// The parser keeps no state: after `Ok(None)` it parses from the start again, which costs
/// O(arguments) without copying any data; arguments are copied once the request is complete.
/// Nothing is allocated from a length before the bytes it announces have arrived. The caller
/// bounds its buffer (Redis's `client-query-buffer-limit`): a complete request may hold up to
/// `max_args` × `max_bulk` bytes.
#[allow(clippy::type_complexity)]
pub fn parse_command(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => {
            let Some(end) = multibulk(buf, limits, None)? else {
                return Ok(None);
            };
            let mut args = Vec::new();
            multibulk(buf, limits, Some(&mut args))?;
            Ok(Some((args, end)))
        }
        Some(_) => inline(buf, limits),
    }
}

/// Walks a multibulk request; returns where it ends, and pushes its arguments to `out` if
/// given (only once the request is known to be complete, so pushes copy arrived bytes only).
fn multibulk(
    buf: &[u8],
    limits: &Limits,
    mut out: Option<&mut Vec<Vec<u8>>>,
) -> Result<Option<usize>, ProtocolError> {
    let Some((n, mut pos)) = count_line(
        buf,
        1,
        limits.max_inline,
        ProtocolError::TooBigMultibulkCount,
        ProtocolError::InvalidMultibulkLength,
    )?
    else {
        return Ok(None);
    };
    if n <= 0 {
        return Ok(Some(pos));
    }
    if u64::try_from(n).map_or(true, |n| n > limits.max_args as u64) {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    if let Some(out) = out.as_deref_mut() {
        // Complete and valid: every argument takes at least 4 bytes of `buf`.
        out.reserve(n as usize);
    }
    for _ in 0..n {
        let Some(&b) = buf.get(pos) else {
            return Ok(None);
        };
        if b != b'$' {
            return Err(ProtocolError::ExpectedDollar(b));
        }
        let Some((len, start)) = count_line(
            buf,
            pos + 1,
            limits.max_inline,
            ProtocolError::TooBigBulkCount,
            ProtocolError::InvalidBulkLength,
        )?
        else {
            return Ok(None);
        };
        let len = match usize::try_from(len) {
            Ok(len) if len <= limits.max_bulk => len,
            _ => return Err(ProtocolError::InvalidBulkLength),
        };
        // `start <= buf.len()` and `len <= max_bulk`: no overflow short of a buffer near
        // usize::MAX, which cannot exist.
        let end = start.saturating_add(len);
        match buf.get(end..end.saturating_add(2)) {
            Some(b"\r\n") => {}
            Some(_) => return Err(ProtocolError::MissingBulkCrlf),
            None => {
                if buf.len() == end + 1 && buf[end] != b'\r' {
                    return Err(ProtocolError::MissingBulkCrlf);
                }
                return Ok(None);
            }
        }
        if let Some(out) = out.as_deref_mut() {
            out.push(buf[start..end].to_vec());
        }
        pos = end + 2;
    }
    Ok(Some(pos))
}

/// Reads the integer of a `*` or `$` line whose digits start at `start`: the value and the
/// position after its `\r\n`. Fails early on a byte that cannot be part of an integer.
fn count_line(
    buf: &[u8],
    start: usize,
    max_line: usize,
    too_big: ProtocolError,
    invalid: ProtocolError,
) -> Result<Option<(i64, usize)>, ProtocolError> {
    let mut i = start;
    loop {
        if i - start > max_line {
            return Err(too_big);
        }
        let Some(&b) = buf.get(i) else {
            return Ok(None);
        };
        if b == b'\r' {
            break;
        }
        // An i64 has at most 20 characters ("-9223372036854775808").
        if !(b.is_ascii_digit() || (b == b'-' && i == start)) || i - start >= 20 {
            return Err(invalid);
        }
        i += 1;
    }
    match buf.get(i + 1) {
        None => Ok(None),
        Some(b'\n') => match parse_int(&buf[start..i]) {
            Some(n) => Ok(Some((n, i + 2))),
            None => Err(invalid),
        },
        Some(_) => Err(invalid),
    }
}

#[allow(clippy::type_complexity)]
fn inline(buf: &[u8], limits: &Limits) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    // The line may hold `max_inline` bytes, then `\r\n`.
    let window = &buf[..buf.len().min(limits.max_inline.saturating_add(2))];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        // Too long already, or one byte over unless it is the CR of the CRLF.
        if buf.len() > limits.max_inline.saturating_add(1)
            || (buf.len() == limits.max_inline.saturating_add(1) && buf.last() != Some(&b'\r'))
        {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(None);
    };
    let mut line = &buf[..nl];
    if let Some(stripped) = line.strip_suffix(b"\r") {
        line = stripped;
    }
    if line.len() > limits.max_inline {
        return Err(ProtocolError::TooBigInline);
    }
    match split_args(line) {
        Some(args) => Ok(Some((args, nl + 1))),
        None => Err(ProtocolError::UnbalancedQuotes),
    }
}

/// Redis's `sdssplitargs`: `None` on unbalanced quotes.
fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // The C original works on a NUL-terminated string.
    let line = match line.iter().position(|&b| b == 0) {
        Some(i) => &line[..i],
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Some(args);
        }
        let mut cur = Vec::new();
        let (mut inq, mut insq) = (false, false);
        loop {
            let c = at(p);
            if inq {
                if c == b'\\'
                    && at(p + 1) == b'x'
                    && hex(at(p + 2)).is_some()
                    && hex(at(p + 3)).is_some()
                {
                    cur.push(hex(at(p + 2))? * 16 + hex(at(p + 3))?);
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    cur.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else if insq {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return None;
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return None;
                } else {
                    cur.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => {
                        if c != 0 {
                            p += 1;
                        }
                        break;
                    }
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    _ => cur.push(c),
                }
            }
            p += 1;
        }
        args.push(cur);
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Redis's `string2ll`: an optional `-`, then `0` alone or digits without a leading zero,
/// fitting in an i64. No `+`, no spaces, no `-0`.
pub(super) fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits {
        [] => return None,
        [b'0'] => return if neg { None } else { Some(0) },
        [b'0', ..] => return None,
        _ => {}
    }
    crate::decimal_i64(neg, digits)
}
