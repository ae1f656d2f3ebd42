//! Majority arithmetic.

use crate::types::{Index, NodeId};

/// The number of voters that forms a majority of `n` voters.
pub fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The largest index that a majority of `voters` has matched: the `majority`-th largest of
/// their match indexes. Returns 0 for an empty voter set (nothing can be committed).
pub fn committed_index(voters: &[NodeId], match_of: impl Fn(NodeId) -> Index) -> Index {
    if voters.is_empty() {
        return 0;
    }
    let mut matched: Vec<Index> = voters.iter().map(|v| match_of(*v)).collect();
    matched.sort_unstable_by(|a, b| b.cmp(a));
    matched[majority(voters.len()) - 1]
}

/// Whether the voters for which `yes` holds form a majority.
pub fn has_quorum(voters: &[NodeId], yes: impl Fn(NodeId) -> bool) -> bool {
    !voters.is_empty() && voters.iter().filter(|v| yes(**v)).count() >= majority(voters.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_sizes() {
        assert_eq!(majority(1), 1);
        assert_eq!(majority(2), 2);
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }

    #[test]
    fn committed_is_quorum_th_largest() {
        let m = |id: NodeId| [0, 5, 3, 9, 1, 7][id as usize];
        assert_eq!(committed_index(&[1, 2, 3], m), 5);
        assert_eq!(committed_index(&[1, 2, 3, 4, 5], m), 5);
        assert_eq!(committed_index(&[1, 2, 3, 4], m), 3);
        assert_eq!(committed_index(&[], m), 0);
        assert!(has_quorum(&[1, 2, 3], |id| id != 3));
        assert!(!has_quorum(&[1, 2, 3, 4], |id| id > 2));
    }
}
