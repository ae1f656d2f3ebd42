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

/// The most dropped entries one call frees: compacting a window of 57 000 entries freed them
/// all at once and held the loop 3–4 ms; the rest is freed by later calls of [`Entries::reclaim`]
/// (each Raft tick).
pub const RECLAIM_STEP: usize = BLOCK;

/// A deque of entries. Every block but the last is full. The first `head` slots are dropped;
/// of those, the first `freed` of the first block hold no data any more, the others are freed
/// in bounded steps.
#[derive(Clone, Debug, Default)]
pub struct Entries {
    blocks: VecDeque<Vec<Entry>>,
    head: usize,
    freed: usize,
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

    /// Keeps the first `n` entries (frees the others now: a conflict truncates few).
    pub fn truncate(&mut self, n: usize) {
        if n >= self.len {
            return;
        }
        let slots = self.head + n;
        self.blocks.truncate(slots.div_ceil(BLOCK));
        if let Some(b) = self.blocks.back_mut() {
            b.truncate(slots - (slots - 1) / BLOCK * BLOCK);
        }
        self.len = n;
        debug_assert_eq!(self.slots(), self.head + self.len);
    }

    /// Removes every entry (their data is freed in bounded steps).
    pub fn clear(&mut self) {
        self.drain_front(self.len);
    }

    /// Removes the first `k` entries; frees at most [`RECLAIM_STEP`] of the dropped ones now.
    pub fn drain_front(&mut self, k: usize) {
        assert!(k <= self.len, "dropping more entries than there are");
        self.head += k;
        self.len -= k;
        self.reclaim(RECLAIM_STEP);
    }

    /// Frees the data of up to `budget` dropped entries (whole blocks once all of theirs are
    /// dropped). Returns how many dropped entries still hold data.
    pub fn reclaim(&mut self, mut budget: usize) -> usize {
        while budget > 0 && self.freed < self.head {
            if self.head >= BLOCK && BLOCK - self.freed <= budget {
                budget -= BLOCK - self.freed;
                self.blocks.pop_front();
                self.head -= BLOCK;
                self.freed = 0;
                continue;
            }
            let to = self.head.min(BLOCK).min(self.freed.saturating_add(budget));
            let b = &mut self.blocks[0];
            for slot in &mut b[self.freed..to] {
                *slot = placeholder();
            }
            budget -= to - self.freed;
            self.freed = to;
            if self.freed == BLOCK {
                self.blocks.pop_front();
                self.head -= BLOCK;
                self.freed = 0;
            }
        }
        debug_assert!(self.freed <= self.head);
        self.head - self.freed
    }

    /// Slots in the blocks.
    fn slots(&self) -> usize {
        match self.blocks.back() {
            Some(b) => (self.blocks.len() - 1) * BLOCK + b.len(),
            None => 0,
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

    /// A large compaction frees a step at a time, and every step frees its share.
    #[test]
    fn a_large_drop_is_freed_in_bounded_steps() {
        let mut a = Entries::default();
        for i in 1..=(14 * BLOCK as u64) {
            a.push_back(e(i));
        }
        a.drain_front(13 * BLOCK + 5);
        assert_eq!(a.reclaim(0), 12 * BLOCK + 5, "one step freed at the drop");
        let mut steps = 0;
        while a.reclaim(RECLAIM_STEP) > 0 {
            steps += 1;
        }
        assert_eq!(steps, 12);
        assert_eq!(a.blocks.len(), 1);
        assert!(a.blocks[0][..5].iter().all(|x| x.data.is_empty()));
        assert_eq!(a[0], e(13 * BLOCK as u64 + 6));
        a.clear();
        assert_eq!(a.reclaim(usize::MAX), 0);
        assert!(a.blocks.len() <= 1);
        a.push_back(e(1));
        assert_eq!(a[0], e(1));
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
            assert_eq!(a.slots(), a.head + a.len);
            if rnd(4) == 0 {
                let before = a.head - a.freed;
                let left = a.reclaim(BLOCK);
                assert!(left + BLOCK >= before, "a step frees at most its budget");
            }
            if rnd(8) == 0 {
                assert_eq!(a.reclaim(usize::MAX), 0);
                assert!(a.blocks.len() <= a.len / BLOCK + 2, "blocks are freed");
            }
        }
        let from = b.len() / 2;
        assert_eq!(
            a.clone_from_index(from),
            b.range(from..).cloned().collect::<Vec<_>>()
        );
    }
}
