//! Reads given a read index (a ReadIndex round or the lease), waiting until the state machine
//! has applied that index: a linearizable read is served from a state at least as new as the
//! commit index the leader confirmed, never from an older one.
//!
//! With the data plane on, software Raft sends no heartbeats to confirm a ReadIndex with, so
//! a read goes through the log; but one entry serves a whole batch ([`ReadBatch`]): the first
//! read (the carrier) goes through the log, and every read that arrived before the carrier
//! was sent is served from the state the carrier's entry is applied to. The carrier was
//! appended by the leader after those reads began, so its index is above every write
//! acknowledged before any of them began (`docs/handoff.md`, "Reads while On"). Reads that
//! arrive while a carrier is in flight wait for the next one.

use std::collections::BTreeSet;

/// Reads waiting for the apply, by read index (bounded by the caller's requests in flight).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadQueue {
    waiting: BTreeSet<(u64, u64)>,
}

impl ReadQueue {
    /// Read `id` may be served once `index` is applied.
    pub fn wait(&mut self, index: u64, id: u64) {
        self.waiting.insert((index, id));
    }

    /// The reads waiting, by id.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|&(_, id)| id)
    }

    /// Keeps only the reads for which `keep` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        self.waiting.retain(|&(_, id)| keep(id));
    }

    /// Takes the reads that `applied` makes servable, as (read index, id), in the order of
    /// their read index.
    pub fn ready(&mut self, applied: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(&(index, id)) = self.waiting.first() {
            if index > applied {
                break;
            }
            self.waiting.pop_first();
            out.push((index, id));
        }
        out
    }

    /// Forgets every waiting read (the replica restarts).
    pub fn clear(&mut self) {
        self.waiting.clear();
    }
}

/// Reads batched behind one read through the log (data plane on). Bounded by the caller's
/// requests in flight. Ids are the caller's request ids; a read that left (answered, failed)
/// is filtered out by the caller when a batch is formed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadBatch {
    /// The read going through the log whose apply serves `riders` (0: none).
    carrier: u64,
    /// Reads that arrived before the carrier was first sent.
    riders: Vec<u64>,
    /// Reads that arrived after it: the next batch.
    next: Vec<u64>,
}

impl ReadBatch {
    /// The carrier in flight (0: none).
    pub fn carrier(&self) -> u64 {
        self.carrier
    }

    /// Read `id` arrived: it becomes the carrier when none is in flight (true: send it
    /// through the log now), or waits for the next batch (false).
    pub fn arrive(&mut self, id: u64) -> bool {
        assert_ne!(id, 0);
        if self.carrier == 0 {
            assert!(self.riders.is_empty(), "riders without a carrier");
            self.carrier = id;
            true
        } else {
            self.next.push(id);
            false
        }
    }

    /// The carrier's entry was applied: the riders it serves. The carrier is gone.
    pub fn carried(&mut self) -> Vec<u64> {
        self.carrier = 0;
        std::mem::take(&mut self.riders)
    }

    /// The carrier left without being applied (it failed): its riders go first in the next
    /// batch (they began before any carrier sent later).
    pub fn lost(&mut self) {
        self.carrier = 0;
        let mut riders = std::mem::take(&mut self.riders);
        riders.append(&mut self.next);
        self.next = riders;
    }

    /// With no carrier in flight, the reads waiting for one (in arrival order), taken; the
    /// caller keeps those still waiting and forms the next batch with [`ReadBatch::form`].
    pub fn take_waiting(&mut self) -> Vec<u64> {
        if self.carrier != 0 {
            return Vec::new();
        }
        std::mem::take(&mut self.next)
    }

    /// A new batch from reads that all began before now: `carrier` is sent through the log
    /// now; `riders` are served by its apply.
    pub fn form(&mut self, carrier: u64, riders: Vec<u64>) {
        assert_eq!(self.carrier, 0, "a second carrier in flight");
        assert!(self.riders.is_empty() && self.next.is_empty());
        assert_ne!(carrier, 0);
        self.carrier = carrier;
        self.riders = riders;
    }

    /// Forgets every batch (the replica restarts).
    pub fn clear(&mut self) {
        *self = ReadBatch::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_that_arrive_behind_a_carrier_wait_for_the_next_one() {
        let mut b = ReadBatch::default();
        assert!(b.arrive(1), "the first read carries");
        assert!(!b.arrive(2) && !b.arrive(3), "later reads wait");
        assert_eq!(
            b.take_waiting(),
            Vec::<u64>::new(),
            "not while 1 is in flight"
        );
        assert_eq!(
            b.carried(),
            Vec::<u64>::new(),
            "1 carried nobody: 2, 3 came after it"
        );
        assert_eq!(b.take_waiting(), vec![2, 3]);
        b.form(2, vec![3]);
        assert!(!b.arrive(4));
        assert_eq!(b.carried(), vec![3]);
        assert_eq!(b.take_waiting(), vec![4]);
        b.form(4, vec![]);
        assert!(!b.arrive(5));
        b.lost();
        assert_eq!(b.carrier(), 0);
        assert_eq!(b.take_waiting(), vec![5]);
        b.form(5, vec![6]);
        assert!(!b.arrive(7));
        b.lost();
        assert_eq!(
            b.take_waiting(),
            vec![6, 7],
            "a lost carrier's riders go first"
        );
    }

    #[test]
    fn a_read_waits_for_its_index() {
        let mut q = ReadQueue::default();
        q.wait(7, 1);
        q.wait(5, 2);
        q.wait(9, 3);
        assert_eq!(q.ready(4), vec![]);
        assert_eq!(q.ready(7), vec![(5, 2), (7, 1)], "in read-index order");
        q.retain(|id| id != 3);
        assert_eq!(q.ids().count(), 0);
    }
}
