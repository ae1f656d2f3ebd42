//! Glob patterns with the semantics of Redis `KEYS` and `SCAN … MATCH`, over bytes.
//!
//! - `*` matches any run of bytes (also the empty one),
//! - `?` matches exactly one byte,
//! - `[abc]` one byte of the set, `[^abc]` one byte not in it, `[a-z]` a range (inclusive; the
//!   ends may be given in either order), `\x` inside a set is a literal `x`,
//! - `\x` matches the byte `x` literally (a `\` at the very end of the pattern matches `\`),
//! - any other byte matches itself (case-sensitive).
//!
//! Malformed sets behave as in Redis's `stringmatchlen`: a set without its closing `]` runs to
//! the end of the pattern, `[]` is an empty set (it never matches; `[^]` matches any byte), and
//! a `-` right before the closing `]` makes a range ending at `]` (`[a-]` is the range `]`–`a`,
//! unterminated).
//!
//! One deliberate difference from `stringmatchlen`: a pattern made only of `*` matches the empty
//! string (Redis's `KEYS *` lists the empty key too, by a special case; here `**` does as well).
//!
//! The matcher is iterative: every token other than `*` consumes exactly one byte, so
//! backtracking to the last `*` only is complete, and the work is bounded by
//! O(`pattern.len()` × `s.len()`) whatever the pattern (no exponential blow-up on `*a*a*a*…b`).

/// Whether `s` matches the glob `pattern` (Redis `KEYS` semantics; see the [module](self)).
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    // Where to resume after the last `*` seen: (pattern position after the stars, the
    // position in `s` the star's match currently ends at).
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, i));
            continue;
        }
        if p < pattern.len() {
            let (matched, next) = match_one(pattern, p, s[i]);
            if matched {
                p = next;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                // Let the last star swallow one more byte and retry the rest from there.
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

/// Matches the single-byte token at `pattern[p]` (not `*`) against `c`: whether it matched and
/// where the next token starts. The token's extent depends on the pattern only.
fn match_one(pattern: &[u8], p: usize, c: u8) -> (bool, usize) {
    match pattern[p] {
        b'?' => (true, p + 1),
        b'[' => match_set(pattern, p + 1, c),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c, p + 2),
        b => (b == c, p + 1),
    }
}

/// Matches a set whose body starts at `pattern[p]` (just after the `[`), following Redis's
/// `stringmatchlen` step by step.
fn match_set(pattern: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    let negate = p < pattern.len() && pattern[p] == b'^';
    if negate {
        p += 1;
    }
    let mut matched = false;
    loop {
        let rest = pattern.len() - p;
        if rest == 0 {
            // Unterminated: the set runs to the end of the pattern.
            break;
        }
        let b = pattern[p];
        if b == b'\\' && rest >= 2 {
            p += 1;
            if pattern[p] == c {
                matched = true;
            }
        } else if b == b']' {
            p += 1;
            break;
        } else if rest >= 3 && pattern[p + 1] == b'-' {
            let (mut lo, mut hi) = (b, pattern[p + 2]);
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            if (lo..=hi).contains(&c) {
                matched = true;
            }
            p += 2;
        } else if b == c {
            matched = true;
        }
        p += 1;
    }
    (matched != negate, p)
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    fn m(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes())
    }

    #[test]
    fn literals_and_wildcards() {
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(!m("a", ""));
        assert!(m("abc", "abc"));
        assert!(!m("abc", "abd"));
        assert!(!m("abc", "abcd"));
        assert!(m("*", ""));
        assert!(m("**", ""));
        assert!(m("*", "anything"));
        assert!(m("a*", "a"));
        assert!(m("a*", "abc"));
        assert!(!m("a*", "ba"));
        assert!(m("*c", "abc"));
        assert!(m("a*c", "ac"));
        assert!(m("a*c", "abbbc"));
        assert!(!m("a*c", "abbbd"));
        assert!(m("a*b*c", "aXbYc"));
        assert!(m("a*b*c", "abcbc"));
        assert!(!m("a*b*c", "acb"));
        assert!(m("?", "x"));
        assert!(!m("?", ""));
        assert!(!m("?", "xy"));
        assert!(m("h?llo", "hello"));
        assert!(m("h?llo", "hallo"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("*?", "a"));
        assert!(!m("*??", "a"));
        assert!(m("user:*:name", "user:42:name"));
        assert!(m("a**b", "ab"));
    }

    #[test]
    fn sets() {
        assert!(m("h[ae]llo", "hello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(!m("h[a-b]llo", "hcllo"));
        assert!(m("h[b-a]llo", "hallo"), "reversed range");
        assert!(m("[a-cx-z]", "y"));
        assert!(!m("[a-cx-z]", "m"));
        assert!(m("[^a-c]", "d"));
        assert!(!m("[^a-c]", "b"));
        assert!(m("[\\]]", "]"));
        assert!(m("[\\-]", "-"));
        assert!(m("[*]", "*"));
        assert!(!m("[*]", "x"));
        assert!(m("[?]", "?"));
        assert!(!m("[?]", "x"));
        // Empty sets.
        assert!(!m("[]", "a"));
        assert!(m("[^]", "a"));
        assert!(m("[]a", "a") == m("[]a", "a"));
        // Unterminated set runs to the end of the pattern.
        assert!(m("[abc", "b"));
        assert!(!m("[abc", "d"));
        assert!(!m("[abc", "bx"));
        // `a-]`: a range from `]` to `a` (Redis quirk), unterminated.
        assert!(m("[a-]", "^"));
        assert!(!m("[a-]", "-"));
    }

    #[test]
    fn escapes() {
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("\\?", "?"));
        assert!(!m("\\?", "a"));
        assert!(m("\\[a]", "[a]"));
        assert!(m("a\\\\b", "a\\b"));
        assert!(m("\\", "\\"), "a trailing backslash is literal");
        assert!(m("a\\", "a\\"));
        assert!(m("\\a", "a"));
    }

    #[test]
    fn bytes_not_text() {
        assert!(glob_match(b"\xff*", b"\xff\x00\x01"));
        assert!(glob_match(b"[\x00-\x10]", b"\x05"));
        assert!(glob_match(b"?", b"\x80"));
        assert!(!glob_match(b"?", "é".as_bytes()), "two bytes");
        assert!(glob_match(b"??", "é".as_bytes()));
    }

    #[test]
    fn no_exponential_blowup() {
        let pattern = "*a".repeat(40) + "b";
        let s = "a".repeat(5000);
        let t = std::time::Instant::now();
        assert!(!glob_match(pattern.as_bytes(), s.as_bytes()));
        assert!(glob_match(pattern.as_bytes(), (s.clone() + "b").as_bytes()));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }

    /// A direct port of Redis's recursive `stringmatchlen` (without the `nocase` option and
    /// without the skip-longer-matches optimisation), as a reference on small inputs. Indices
    /// stand for C's pointers; `at` reads like C would (a 0 past the end).
    fn reference(pat: &[u8], st: &[u8]) -> bool {
        fn at(b: &[u8], i: usize) -> u8 {
            b.get(i).copied().unwrap_or(0)
        }
        fn go(pat: &[u8], mut p: usize, st: &[u8], mut s: usize) -> bool {
            while p < pat.len() && s < st.len() {
                match pat[p] {
                    b'*' => {
                        while p + 1 < pat.len() && pat[p + 1] == b'*' {
                            p += 1;
                        }
                        if p + 1 == pat.len() {
                            return true;
                        }
                        while s < st.len() {
                            if go(pat, p + 1, st, s) {
                                return true;
                            }
                            s += 1;
                        }
                        return false;
                    }
                    b'?' => s += 1,
                    b'[' => {
                        p += 1;
                        let not = at(pat, p) == b'^';
                        if not {
                            p += 1;
                        }
                        let mut matched = false;
                        loop {
                            let len = pat.len() - p;
                            if at(pat, p) == b'\\' && len >= 2 {
                                p += 1;
                                if pat[p] == st[s] {
                                    matched = true;
                                }
                            } else if at(pat, p) == b']' {
                                break;
                            } else if len == 0 {
                                p -= 1;
                                break;
                            } else if len >= 3 && pat[p + 1] == b'-' {
                                let (mut a, mut b) = (pat[p], pat[p + 2]);
                                if a > b {
                                    std::mem::swap(&mut a, &mut b);
                                }
                                p += 2;
                                if st[s] >= a && st[s] <= b {
                                    matched = true;
                                }
                            } else if pat[p] == st[s] {
                                matched = true;
                            }
                            p += 1;
                        }
                        if not {
                            matched = !matched;
                        }
                        if !matched {
                            return false;
                        }
                        s += 1;
                    }
                    b'\\' => {
                        if pat.len() - p >= 2 {
                            p += 1;
                        }
                        if pat[p] != st[s] {
                            return false;
                        }
                        s += 1;
                    }
                    c => {
                        if c != st[s] {
                            return false;
                        }
                        s += 1;
                    }
                }
                p += 1;
                if s == st.len() {
                    while at(pat, p) == b'*' {
                        p += 1;
                    }
                    break;
                }
            }
            p == pat.len() && s == st.len()
        }
        // The `KEYS *` special case, generalised to all-star patterns (see the module docs).
        if st.is_empty() && pat.iter().all(|&b| b == b'*') {
            return true;
        }
        go(pat, 0, st, 0)
    }

    #[test]
    fn agrees_with_redis_reference() {
        // Exhaustive over short patterns and strings on a small alphabet.
        let palpha: &[u8] = b"ab*?[]^-\\";
        let salpha: &[u8] = b"ab]-";
        let mut patterns: Vec<Vec<u8>> = vec![vec![]];
        for len in 1..=4 {
            let mut next = Vec::new();
            for p in patterns.iter().filter(|p| p.len() == len - 1) {
                for &c in palpha {
                    let mut q = p.clone();
                    q.push(c);
                    next.push(q);
                }
            }
            patterns.extend(next);
        }
        let mut strings: Vec<Vec<u8>> = vec![vec![]];
        for len in 1..=3 {
            let mut next = Vec::new();
            for s in strings.iter().filter(|s| s.len() == len - 1) {
                for &c in salpha {
                    let mut t = s.clone();
                    t.push(c);
                    next.push(t);
                }
            }
            strings.extend(next);
        }
        for p in &patterns {
            for s in &strings {
                assert_eq!(
                    glob_match(p, s),
                    reference(p, s),
                    "pattern {:?} string {:?}",
                    String::from_utf8_lossy(p),
                    String::from_utf8_lossy(s)
                );
            }
        }
    }
}
