//! The entries of the in-memory log, in blocks of [`BLOCK`]: appending never copies more than
//! one block, and compaction frees whole blocks from the front. A single growing buffer copied
//! all of its entries at each doubling; with millions of entries in the trailing window of a
//! large state that was a copy of hundreds of megabytes on the replica loop.

use std::collections::VecDeque;

use crate::types::{Bytes, Entry, EntryKind};

/// What a dropped slot holds until its block goes: no data.
fn placeholder() -> Entry {
    Entry {
        term: 0,
        index: 0,
        kind: EntryKind::Normal,
        data: Bytes::new(),
    }
}

/// Entries per block.
pub const BLOCK: usize = 4096;

/// A deque of entries. Every block but the last is full; the first `head` slots of the first
/// block were dropped (their entries replaced by empty ones, so their data is freed at once).
#[derive(Clone, Debug, Default)]
pub struct Entries {
    blocks: VecDeque<Vec<Entry>>,
    head: usize,
    len: usize,
}

impl Entries {
    /// Entries in order.
    pub fn from_vec(v: Vec<Entry>) -> Entries {
        let mut e = Entries::default();
        for x in v {
            e.push_back(x);
        }
        e
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, i: usize) -> (usize, usize) {
        let at = self.head + i;
        (at / BLOCK, at % BLOCK)
    }

    /// The `i`-th entry.
    pub fn get(&self, i: usize) -> Option<&Entry> {
        if i >= self.len {
            return None;
        }
        let (b, o) = self.slot(i);
        Some(&self.blocks[b][o])
    }

    /// The last entry.
    pub fn back(&self) -> Option<&Entry> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    /// Appends `e`.
    pub fn push_back(&mut self, e: Entry) {
        match self.blocks.back_mut() {
            Some(b) if b.len() < BLOCK => b.push(e),
            _ => {
                let mut b = Vec::with_capacity(BLOCK);
                b.push(e);
                self.blocks.push_back(b);
            }
        }
        self.len += 1;
    }

    /// Keeps the first `n` entries.
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        if n == 0 {
            self.clear();
            return;
        }
        let (b, o) = self.slot(n - 1);
        self.blocks.truncate(b + 1);
        self.blocks[b].truncate(o + 1);
        self.len = n;
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.head = 0;
        self.len = 0;
    }

    /// Removes the first `k` entries.
    pub fn drain_front(&mut self, k: usize) {
        assert!(k <= self.len, "dropping more entries than there are");
        if k == self.len {
            self.clear();
            return;
        }
        for i in 0..k {
            let (b, o) = self.slot(i);
            // Frees the entry's data now, not when its block goes.
            self.blocks[b][o] = placeholder();
        }
        self.head += k;
        self.len -= k;
        while self.head >= BLOCK {
            self.blocks.pop_front();
            self.head -= BLOCK;
        }
    }

    /// Clones of the entries from the `from`-th on.
    pub fn clone_from_index(&self, from: usize) -> Vec<Entry> {
        (from..self.len)
            .map(|i| self.get(i).expect("in range").clone())
            .collect()
    }
}

impl std::ops::Index<usize> for Entries {
    type Output = Entry;
    fn index(&self, i: usize) -> &Entry {
        self.get(i).expect("entry index out of range")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn e(i: u64) -> Entry {
        Entry {
            term: 1,
            index: i,
            kind: EntryKind::Normal,
            data: Bytes::from(i.to_le_bytes().to_vec()),
        }
    }

    /// Every operation, at random, against a `VecDeque` (a tiny xorshift: no dependency).
    #[test]
    fn behaves_as_a_deque() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n.max(1)
        };
        let (mut a, mut b) = (Entries::default(), VecDeque::new());
        let mut next = 1u64;
        for _ in 0..3_000 {
            match rnd(10) {
                0..=5 => {
                    for _ in 0..rnd(3 * BLOCK as u64) {
                        a.push_back(e(next));
                        b.push_back(e(next));
                        next += 1;
                    }
                }
                6 => {
                    let n = rnd(b.len() as u64 + 1) as usize;
                    a.truncate(n);
                    b.truncate(n);
                }
                7 | 8 => {
                    let k = rnd(b.len() as u64 + 1) as usize;
                    a.drain_front(k);
                    b.drain(..k);
                }
                _ => {
                    if rnd(20) == 0 {
                        a.clear();
                        b.clear();
                    }
                }
            }
            assert_eq!(a.len(), b.len());
            assert_eq!(a.back(), b.back());
            if !b.is_empty() {
                let i = rnd(b.len() as u64) as usize;
                assert_eq!(a[i], b[i]);
                assert_eq!(a[0], b[0]);
            }
            assert!(a.blocks.len() <= a.len / BLOCK + 2, "blocks are freed");
        }
        let from = b.len() / 2;
        assert_eq!(
            a.clone_from_index(from),
            b.range(from..).cloned().collect::<Vec<_>>()
        );
    }
}
