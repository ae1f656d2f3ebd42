//! The in-memory Raft log: a snapshot offset, the entries after it, and what the host has
//! persisted and applied.
//!
//! Indexes: `snapshot index (offset) < first_index() <= ... <= last_index()`.
//! Watermarks: `applied <= committed <= last_index()`, `stable <= handed <= last_index()`.

use crate::entries::{Entries, RECLAIM_STEP};
use crate::types::{Entry, Index, Snapshot, Term};

/// The log of one replica.
#[derive(Clone, Debug, Default)]
pub struct RaftLog {
    /// Latest snapshot (persisted, or pending in the next ready when `snapshot_pending`).
    snapshot: Option<Snapshot>,
    snapshot_pending: bool,
    /// Index and term of the last entry covered by the snapshot.
    offset: Index,
    offset_term: Term,
    /// Entries `offset + 1 ..= last_index()`, in blocks: compaction drops entries from the
    /// front in O(dropped) and growth copies no more than a block (a vector moved or copied
    /// every entry: millions of them in the trailing window of a large state, 100 ms and more
    /// on the loop).
    entries: Entries,
    /// Highest index known to be committed.
    committed: Index,
    /// Committed entries up to here were handed out in a ready.
    handed_committed: Index,
    /// Committed entries up to here were applied by the host (`advance`).
    applied: Index,
    /// Entries up to here are persisted by the host.
    stable: Index,
    /// Entries up to here were handed out for persistence.
    handed: Index,
}

impl RaftLog {
    /// A log that starts after `snapshot` (if any) with persisted `entries`.
    pub fn new(snapshot: Option<Snapshot>, entries: Vec<Entry>) -> RaftLog {
        let (offset, offset_term) = snapshot
            .as_ref()
            .map(|s| (s.meta.index, s.meta.term))
            .unwrap_or((0, 0));
        let last = offset + entries.len() as Index;
        RaftLog {
            snapshot,
            snapshot_pending: false,
            offset,
            offset_term,
            entries: Entries::from_vec(entries),
            committed: offset,
            handed_committed: offset,
            applied: offset,
            stable: last,
            handed: last,
        }
    }

    /// Index of the first entry still in memory.
    pub fn first_index(&self) -> Index {
        self.offset + 1
    }

    /// Index of the last entry (the snapshot index if there is none).
    pub fn last_index(&self) -> Index {
        self.offset + self.entries.len() as Index
    }

    /// Term of the last entry.
    pub fn last_term(&self) -> Term {
        self.entries
            .back()
            .map(|e| e.term)
            .unwrap_or(self.offset_term)
    }

    /// Index covered by the snapshot.
    pub fn snapshot_index(&self) -> Index {
        self.offset
    }

    /// The snapshot, if any.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.snapshot.as_ref()
    }

    /// Committed index.
    pub fn committed(&self) -> Index {
        self.committed
    }

    /// Applied index (acknowledged by the host).
    pub fn applied(&self) -> Index {
        self.applied
    }

    /// Persisted index.
    pub fn stable(&self) -> Index {
        self.stable
    }

    /// Term of the entry at `index`, if known (the snapshot's last entry included).
    pub fn term(&self, index: Index) -> Option<Term> {
        if index == self.offset {
            return Some(self.offset_term);
        }
        if index < self.offset || index > self.last_index() {
            return None;
        }
        Some(self.entries[(index - self.offset - 1) as usize].term)
    }

    /// Whether the entry at `index` has term `term`.
    pub fn match_term(&self, index: Index, term: Term) -> bool {
        self.term(index) == Some(term)
    }

    /// Raft §5.4.1: a log ending at (`last_index`, `last_term`) is at least as up to date as
    /// this one.
    pub fn is_up_to_date(&self, last_index: Index, last_term: Term) -> bool {
        last_term > self.last_term()
            || (last_term == self.last_term() && last_index >= self.last_index())
    }

    /// The entry at `index`, if in memory.
    pub fn entry(&self, index: Index) -> Option<&Entry> {
        if index <= self.offset || index > self.last_index() {
            return None;
        }
        Some(&self.entries[(index - self.offset - 1) as usize])
    }

    /// Entries `lo ..= hi` that are in memory, limited to `max_entries` entries and
    /// `max_bytes` bytes of data (at least one entry when any is available).
    pub fn slice(&self, lo: Index, hi: Index, max_entries: usize, max_bytes: usize) -> Vec<Entry> {
        let lo = lo.max(self.first_index());
        let hi = hi.min(self.last_index());
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut i = lo;
        while i <= hi && out.len() < max_entries {
            let e = self.entry(i).expect("index within bounds");
            bytes = bytes.saturating_add(e.data.len());
            if !out.is_empty() && bytes > max_bytes {
                break;
            }
            out.push(e.clone());
            i += 1;
        }
        out
    }

    /// Appends entries exactly at the tail.
    pub fn append(&mut self, entries: &[Entry]) {
        for e in entries {
            assert_eq!(e.index, self.last_index() + 1, "append not at the tail");
            assert!(e.term >= self.last_term(), "entry terms must not decrease");
            self.entries.push_back(e.clone());
        }
    }

    /// Index of the first entry of `entries` that is not in the log with the same term, or 0
    /// if every entry is already present (entries are consecutive).
    pub fn find_conflict(&self, entries: &[Entry]) -> Index {
        for e in entries {
            if !self.match_term(e.index, e.term) {
                return e.index;
            }
        }
        0
    }

    /// Largest `(index, term)` with `index <= index` whose term is `<= term` (fast conflict
    /// backtracking: everything above cannot match an entry of term `term`). Entries below the
    /// snapshot are not known; returns the snapshot index then.
    pub fn find_conflict_by_term(&self, index: Index, term: Term) -> (Index, Term) {
        let mut i = index.min(self.last_index());
        loop {
            match self.term(i) {
                Some(t) if t > term && i > self.offset => i -= 1,
                Some(t) => return (i, t),
                None => return (self.offset, self.offset_term),
            }
        }
    }

    /// Removes entries `from ..`. Never removes a committed entry.
    pub fn truncate(&mut self, from: Index) {
        assert!(
            from > self.committed,
            "truncating committed entry {from} (commit {})",
            self.committed
        );
        assert!(from > self.offset);
        if from > self.last_index() {
            return;
        }
        self.entries.truncate((from - self.offset - 1) as usize);
        self.stable = self.stable.min(from - 1);
        self.handed = self.handed.min(from - 1);
    }

    /// Advances the commit index. The commit index never decreases and never passes the log.
    pub fn commit_to(&mut self, index: Index) -> bool {
        assert!(
            index <= self.last_index(),
            "commit {index} beyond last index {}",
            self.last_index()
        );
        if index > self.committed {
            self.committed = index;
            true
        } else {
            false
        }
    }

    /// Replaces the log by a snapshot received from the leader.
    pub fn restore(&mut self, snapshot: Snapshot) {
        assert!(
            snapshot.meta.index > self.committed,
            "restoring an older snapshot"
        );
        self.offset = snapshot.meta.index;
        self.offset_term = snapshot.meta.term;
        self.entries.clear();
        self.committed = self.offset;
        self.handed_committed = self.offset;
        self.applied = self.offset;
        self.stable = self.offset;
        self.handed = self.offset;
        self.snapshot = Some(snapshot);
        self.snapshot_pending = true;
    }

    /// The host snapshotted its state at `snapshot.meta.index` (applied): drop entries up to it.
    pub fn compact(&mut self, snapshot: Snapshot) {
        let index = snapshot.meta.index;
        assert!(index > self.offset && index <= self.applied);
        assert_eq!(self.term(index), Some(snapshot.meta.term));
        self.entries.drain_front((index - self.offset) as usize);
        self.offset = index;
        self.offset_term = snapshot.meta.term;
        self.snapshot = Some(snapshot);
    }

    /// Frees the data of dropped entries, a bounded step at a time (see [`RECLAIM_STEP`]).
    pub fn reclaim(&mut self) {
        self.entries.reclaim(RECLAIM_STEP);
    }

    /// Entries not yet handed out for persistence; marks them handed.
    pub fn take_unstable(&mut self) -> Vec<Entry> {
        let lo = self.handed + 1;
        let out = if lo <= self.last_index() {
            let from = (lo - self.offset - 1) as usize;
            self.entries.clone_from_index(from)
        } else {
            Vec::new()
        };
        self.handed = self.last_index();
        out
    }

    /// Whether entries wait to be handed out for persistence.
    pub fn has_unstable(&self) -> bool {
        self.handed < self.last_index()
    }

    /// The snapshot to persist, once.
    pub fn take_pending_snapshot(&mut self) -> Option<Snapshot> {
        if self.snapshot_pending {
            self.snapshot_pending = false;
            self.snapshot.clone()
        } else {
            None
        }
    }

    /// Whether a received snapshot waits to be persisted.
    pub fn has_pending_snapshot(&self) -> bool {
        self.snapshot_pending
    }

    /// Committed entries not yet handed out for applying; marks them handed.
    pub fn take_committed(&mut self, max_bytes: usize) -> Vec<Entry> {
        let out = self.slice(
            self.handed_committed + 1,
            self.committed,
            usize::MAX,
            max_bytes,
        );
        debug_assert!(out
            .first()
            .is_none_or(|e| e.index == self.handed_committed + 1));
        // The rest waits for the next ready (at least one entry goes each time).
        self.handed_committed = out.last().map_or(self.committed, |e| e.index);
        assert!(self.handed_committed <= self.committed);
        out
    }

    /// Whether committed entries wait to be handed out.
    pub fn has_committed(&self) -> bool {
        self.handed_committed < self.committed
    }

    /// The host persisted everything handed out so far and applied every committed entry
    /// handed out so far.
    pub fn advance(&mut self) {
        debug_assert!(self.handed <= self.last_index());
        self.stable = self.stable.max(self.handed);
        self.applied = self.applied.max(self.handed_committed);
        assert!(self.applied <= self.committed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{EntryKind, SnapshotMeta};

    fn ents(terms: &[Term]) -> Vec<Entry> {
        terms
            .iter()
            .enumerate()
            .map(|(i, t)| Entry {
                term: *t,
                index: i as Index + 1,
                kind: EntryKind::Normal,
                data: vec![].into(),
            })
            .collect()
    }

    #[test]
    fn conflict_by_term_skips_whole_terms() {
        let log = RaftLog::new(None, ents(&[1, 1, 2, 2, 2, 5, 5]));
        assert_eq!(log.find_conflict_by_term(7, 4), (5, 2));
        assert_eq!(log.find_conflict_by_term(7, 1), (2, 1));
        assert_eq!(log.find_conflict_by_term(7, 0), (0, 0));
        assert_eq!(log.find_conflict_by_term(9, 5), (7, 5));
    }

    /// Committed entries are handed out in slices of at most `max_bytes` (at least one entry
    /// each), in order, each exactly once; what is applied follows what was handed out.
    #[test]
    fn committed_entries_are_handed_out_in_bounded_slices() {
        let mut log = RaftLog::new(None, Vec::new());
        let e = |index: u64, len: usize| Entry {
            term: 1,
            index,
            kind: EntryKind::Normal,
            data: vec![7; len].into(),
        };
        log.append(&[e(1, 10), e(2, 10), e(3, 10), e(4, 100), e(5, 10)]);
        log.take_unstable();
        log.commit_to(5);
        let idx = |v: Vec<Entry>| v.iter().map(|e| e.index).collect::<Vec<_>>();
        assert_eq!(idx(log.take_committed(25)), vec![1, 2]);
        assert!(log.has_committed());
        log.advance();
        assert_eq!(log.applied(), 2);
        // One entry larger than the slice still goes, alone.
        assert_eq!(idx(log.take_committed(25)), vec![3]);
        assert_eq!(idx(log.take_committed(25)), vec![4]);
        assert_eq!(idx(log.take_committed(25)), vec![5]);
        assert!(!log.has_committed());
        assert!(log.take_committed(25).is_empty());
        log.advance();
        assert_eq!(log.applied(), 5);
    }

    #[test]
    fn truncate_clamps_persistence_watermarks_and_compaction_keeps_terms() {
        let mut log = RaftLog::new(None, ents(&[1, 1, 2]));
        log.commit_to(1);
        log.truncate(2);
        assert_eq!(log.last_index(), 1);
        assert_eq!(log.stable(), 1);
        let e = Entry {
            term: 3,
            index: 2,
            kind: EntryKind::Normal,
            data: vec![].into(),
        };
        log.append(&[e]);
        assert_eq!(log.take_unstable().len(), 1);
        log.commit_to(2);
        assert_eq!(log.take_committed(usize::MAX).len(), 2);
        log.advance();
        assert_eq!(log.applied(), 2);
        let snap = Snapshot {
            meta: SnapshotMeta {
                index: 2,
                term: 3,
                conf: Default::default(),
            },
            data: vec![].into(),
        };
        log.compact(snap);
        assert_eq!(log.first_index(), 3);
        assert_eq!(log.term(2), Some(3));
        assert_eq!(log.term(1), None);
        assert_eq!(log.last_index(), 2);
    }

    #[test]
    #[should_panic(expected = "truncating committed")]
    fn never_truncates_committed() {
        let mut log = RaftLog::new(None, ents(&[1, 1, 2]));
        log.commit_to(2);
        log.truncate(2);
    }

    #[test]
    fn slice_respects_limits() {
        let mut es = ents(&[1, 1, 1, 1]);
        for e in &mut es {
            e.data = vec![0; 10].into();
        }
        let log = RaftLog::new(None, es);
        assert_eq!(log.slice(1, 4, 2, 1000).len(), 2);
        assert_eq!(log.slice(1, 4, 10, 25).len(), 2);
        assert_eq!(log.slice(1, 4, 10, 1).len(), 1);
    }
}
