//! Vote counting for (pre-)elections.

use crate::quorum::majority;
use crate::types::NodeId;
use std::collections::{BTreeMap, BTreeSet};

/// Outcome of an election so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoteResult {
    /// Not decided yet.
    Pending,
    /// A majority granted.
    Won,
    /// A majority rejected.
    Lost,
}

/// The votes received in the current (pre-)election.
#[derive(Clone, Debug, Default)]
pub struct VoteTracker {
    granted: BTreeMap<NodeId, bool>,
    accelerated: BTreeSet<NodeId>,
}

impl VoteTracker {
    /// Forgets every vote.
    pub fn reset(&mut self) {
        self.granted.clear();
        self.accelerated.clear();
    }

    /// Records the first answer of `id`; later answers of the same voter are ignored.
    pub fn record(&mut self, id: NodeId, granted: bool, accelerated: bool) {
        if self.granted.contains_key(&id) {
            return;
        }
        self.granted.insert(id, granted);
        if granted && accelerated {
            self.accelerated.insert(id);
        }
    }

    /// Tally over `voters` (answers of non-voters do not count).
    pub fn result(&self, voters: &[NodeId]) -> VoteResult {
        let q = majority(voters.len());
        let yes = voters
            .iter()
            .filter(|v| self.granted.get(v) == Some(&true))
            .count();
        let no = voters
            .iter()
            .filter(|v| self.granted.get(v) == Some(&false))
            .count();
        if voters.is_empty() {
            VoteResult::Pending
        } else if yes >= q {
            VoteResult::Won
        } else if no >= q {
            VoteResult::Lost
        } else {
            VoteResult::Pending
        }
    }

    /// The voters that granted and enabled their data plane.
    pub fn accelerated(&self) -> &BTreeSet<NodeId> {
        &self.accelerated
    }

    /// Whether the accelerated grants form a majority of `voters`.
    pub fn accelerated_quorum(&self, voters: &[NodeId]) -> bool {
        let n = voters
            .iter()
            .filter(|v| self.accelerated.contains(v))
            .count();
        !voters.is_empty() && n >= majority(voters.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally() {
        let mut v = VoteTracker::default();
        v.record(1, true, true);
        assert_eq!(v.result(&[1, 2, 3]), VoteResult::Pending);
        v.record(2, false, false);
        v.record(2, true, true); // second answer ignored
        assert_eq!(v.result(&[1, 2, 3]), VoteResult::Pending);
        v.record(3, true, false);
        assert_eq!(v.result(&[1, 2, 3]), VoteResult::Won);
        assert!(!v.accelerated_quorum(&[1, 2, 3]));
        v.record(9, false, false); // not a voter
        assert_eq!(v.result(&[1, 2, 3]), VoteResult::Won);
    }
}
