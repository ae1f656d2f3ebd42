//! Reads given a read index (a ReadIndex round or the lease), waiting until the state machine
//! has applied that index: a linearizable read is served from a state at least as new as the
//! commit index the leader confirmed, never from an older one.

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

#[cfg(test)]
mod tests {
    use super::*;

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
