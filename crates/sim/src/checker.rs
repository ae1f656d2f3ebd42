//! The invariants of Raft (and of the hand-off), checked after every step.
//!
//! The checker keeps the ground truth that no single replica holds: which node led each term,
//! which entry each (index, term) names, which entry is decided (committed) at each index, and
//! which writes clients were told are done. Any disagreement is a violation.

use std::collections::{BTreeMap, HashMap, HashSet};

use waverunner_raft::{Entry, EntryKind, Index, NodeId, Term};

/// A stable 64-bit fingerprint of an entry's content (FNV-1a).
pub fn entry_hash(kind: EntryKind, data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let tag: u8 = match kind {
        EntryKind::Normal => 1,
        EntryKind::ConfChange => 2,
    };
    for b in std::iter::once(&tag).chain(data.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Where the checker stands.
#[derive(Default, Debug)]
pub struct Checker {
    /// Election safety: at most one leader per term.
    leaders: HashMap<Term, NodeId>,
    /// Log matching: an (index, term) pair names exactly one entry.
    named: HashMap<(Index, Term), u64>,
    /// State-machine safety: the entry decided at each index.
    decided: BTreeMap<Index, (Term, u64)>,
    /// The write in the entry decided at each index, if it holds one write.
    decided_write: BTreeMap<Index, u64>,
    /// Entries a data plane ordered whose native client was answered (by the data plane or
    /// by its host): exactly once each.
    fast_answered: HashSet<Index>,
    /// Writes acknowledged to clients: write id → (index, term, hash, by data plane).
    acked: BTreeMap<u64, (Index, Term, u64, bool)>,
    /// The same, by index: index → [(write id, term, hash)].
    acked_at: HashMap<Index, Vec<(u64, Term, u64)>>,
    /// The highest index of an acknowledged write: a read started now must reflect it.
    max_acked_index: Index,
    /// Replica state agreement: the key-value store's digest after each applied write entry.
    states: HashMap<Index, u64>,
    /// Every violation seen, in order.
    pub violations: Vec<String>,
}

impl Checker {
    fn violate(&mut self, now: u64, what: String) {
        if self.violations.len() < 32 {
            self.violations.push(format!("t={now}us: {what}"));
        }
    }

    /// A node's key-value store has digest `digest` after applying the entry at `index`:
    /// every replica must reach the same state at the same index (the store, its seeded
    /// random picks and its snapshots are deterministic).
    pub fn on_state(&mut self, now: u64, node: NodeId, index: Index, digest: u64) {
        match self.states.get(&index) {
            Some(&d) if d != digest => self.violate(
                now,
                format!(
                    "state agreement: node {node} has digest {digest:016x} after index {index}, \
                     another replica had {d:016x}"
                ),
            ),
            Some(_) => {}
            None => {
                self.states.insert(index, digest);
            }
        }
    }

    /// A node became leader of `term`.
    pub fn on_leader(&mut self, now: u64, node: NodeId, term: Term) {
        match self.leaders.get(&term) {
            Some(&other) if other != node => self.violate(
                now,
                format!("election safety: {node} and {other} both lead term {term}"),
            ),
            _ => {
                self.leaders.insert(term, node);
            }
        }
    }

    /// Leader completeness: a new leader's log holds every decided entry. `term_of` reads the
    /// leader's log; entries at or below `snapshot_index` are covered by its snapshot.
    pub fn check_leader_complete(
        &mut self,
        now: u64,
        node: NodeId,
        snapshot_index: Index,
        term_of: impl Fn(Index) -> Option<Term>,
    ) {
        let mut bad = None;
        for (&i, &(t, _)) in self.decided.range(snapshot_index + 1..) {
            if term_of(i) != Some(t) {
                bad = Some((i, t, term_of(i)));
                break;
            }
        }
        if let Some((i, t, got)) = bad {
            self.violate(
                now,
                format!(
                    "leader completeness: new leader {node} lacks decided entry {i} (term {t}), has {got:?}"
                ),
            );
        }
    }

    /// A node stored entries (appended to its log).
    pub fn on_entries(&mut self, now: u64, node: NodeId, entries: &[Entry]) {
        for e in entries {
            let h = entry_hash(e.kind, &e.data);
            match self.named.get(&(e.index, e.term)) {
                Some(&old) if old != h => self.violate(
                    now,
                    format!(
                        "log matching: node {node} holds a different entry at index {} term {}",
                        e.index, e.term
                    ),
                ),
                Some(_) => {}
                None => {
                    self.named.insert((e.index, e.term), h);
                }
            }
        }
    }

    /// A node believes the entry `(index, term, hash)` is committed.
    pub fn on_decided(
        &mut self,
        now: u64,
        node: NodeId,
        index: Index,
        term: Term,
        hash: u64,
        write: Option<u64>,
    ) {
        match self.decided.get(&index) {
            Some(&(t, h)) if (t, h) != (term, hash) => self.violate(
                now,
                format!(
                    "state-machine safety: node {node} commits index {index} term {term}, but term {t} was decided there"
                ),
            ),
            Some(_) => {}
            None => {
                self.decided.insert(index, (term, hash));
                if let Some(w) = write {
                    self.decided_write.insert(index, w);
                }
            }
        }
        let lost = self
            .acked_at
            .get(&index)
            .and_then(|v| v.iter().find(|&&(_, t, h)| (t, h) != (term, hash)))
            .map(|&(w, _, _)| w);
        if let Some(w) = lost {
            self.violate(
                now,
                format!("acknowledged write {w} at index {index} lost: node {node} commits another entry there"),
            );
        }
    }

    /// A client was told its write is done.
    pub fn on_ack(&mut self, now: u64, write: u64, index: Index, term: Term, hash: u64, dp: bool) {
        if let Some(&(t, h)) = self.decided.get(&index) {
            if (t, h) != (term, hash) {
                self.violate(
                    now,
                    format!("write {write} acknowledged at index {index} term {term} but term {t} is decided there"),
                );
            }
        }
        self.max_acked_index = self.max_acked_index.max(index);
        if self.acked.insert(write, (index, term, hash, dp)).is_none() {
            self.acked_at
                .entry(index)
                .or_default()
                .push((write, term, hash));
        }
    }

    /// Replica `node` told a client that its write `write` is committed at `index` (a host's
    /// reply to a request its data plane ordered): it is, if that write is decided there. A
    /// host answers after applying, so the index is decided already.
    pub fn on_client_reply(&mut self, now: u64, node: NodeId, write: u64, index: Index) {
        let decided = self.decided.get(&index).copied();
        match (decided, self.decided_write.get(&index)) {
            (Some((t, h)), Some(&w)) if w == write => self.on_ack(now, write, index, t, h, false),
            (_, held) => self.violate(
                now,
                format!(
                    "node {node} told a client write {write} is committed at index {index}, which holds {held:?}"
                ),
            ),
        }
    }

    /// The native client of the entry at `index`, which a data plane ordered, was answered
    /// (by that data plane, or by its host after applying it): at most once, for a committed
    /// index never holds another entry.
    pub fn on_fast_answer(&mut self, now: u64, node: NodeId, index: Index) {
        if !self.fast_answered.insert(index) {
            self.violate(
                now,
                format!("node {node} answered the client of entry {index} a second time"),
            );
        }
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> &BTreeMap<u64, (Index, Term, u64, bool)> {
        &self.acked
    }

    /// What a read started now must reflect: the highest index of an acknowledged write.
    pub fn read_floor(&self) -> Index {
        self.max_acked_index
    }

    /// Linearizable reads: a read started when `floor` was [`Checker::read_floor`] was given
    /// read index `index` by `node`; it is served once `index` is applied, so it is stale if
    /// `index` is below `floor` (a write acknowledged before the read began would be missed).
    pub fn on_read_index(&mut self, now: u64, node: NodeId, read: u64, index: Index, floor: Index) {
        if index < floor {
            self.violate(
                now,
                format!(
                    "stale read: read {read} at node {node} got read index {index}, but a write at index {floor} was acknowledged before it began"
                ),
            );
        }
    }

    /// The highest decided index.
    pub fn max_decided(&self) -> Index {
        self.decided.keys().next_back().copied().unwrap_or(0)
    }

    /// Records a violation found by the driver (liveness, convergence).
    pub fn report(&mut self, now: u64, what: String) {
        self.violate(now, what);
    }
}
