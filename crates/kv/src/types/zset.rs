//! Sorted sets: members with scores, ordered by (score, member).

use std::cmp::Ordering;

use imbl::{OrdMap, Vector};

use super::*;

/// A score with a total order (never NaN in a sorted set; -0 is stored as 0).
#[derive(Clone, Copy, Debug)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, o: &Score) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Score) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Score {
    fn cmp(&self, o: &Score) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// A sorted set: each member's score, and the members in (score, member) order in a
/// persistent vector, so rank, position and insertion are O(log n) (binary search, then the
/// vector's O(log n) insert and remove).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZSet {
    scores: OrdMap<Bytes, Score>,
    order: Vector<(Score, Bytes)>,
}

impl ZSet {
    /// Number of members.
    pub fn len(&self) -> usize {
        self.scores.len()
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.scores.is_empty()
    }

    /// A member's score.
    pub fn score(&self, m: &[u8]) -> Option<f64> {
        self.scores.get(m).map(|s| s.0)
    }

    /// Members and scores in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Bytes, f64)> + '_ {
        self.order.iter().map(|(s, m)| (m, s.0))
    }

    /// The member at rank `i` (0: lowest score).
    pub fn at(&self, i: usize) -> Option<(&Bytes, f64)> {
        self.order.get(i).map(|(s, m)| (m, s.0))
    }

    /// A member's rank (0: lowest score).
    pub fn rank(&self, m: &[u8]) -> Option<usize> {
        let s = *self.scores.get(m)?;
        self.order
            .binary_search_by(|(os, om)| os.cmp(&s).then_with(|| om.as_slice().cmp(m)))
            .ok()
    }

    /// The rank of the first member whose (score, member) is not below `(score, member)`;
    /// `member` `None` sorts before every member of that score.
    pub fn lower_bound(&self, score: f64, member: Option<&[u8]>) -> usize {
        let s = Score(score);
        match self.order.binary_search_by(|(os, om)| {
            os.cmp(&s).then_with(|| match member {
                None => Ordering::Greater,
                Some(m) => om.as_slice().cmp(m),
            })
        }) {
            Ok(i) | Err(i) => i,
        }
    }

    /// The rank of the first member whose score is above `score`.
    pub fn upper_bound(&self, score: f64) -> usize {
        let s = Score(score);
        match self
            .order
            .binary_search_by(|(os, _)| os.cmp(&s).then(Ordering::Less))
        {
            Ok(i) | Err(i) => i,
        }
    }

    /// The rank of the first member not below `m` in member order, for a set whose members
    /// all have the same score (what Redis's lex commands assume).
    pub fn lex_lower_bound(&self, m: &[u8], inclusive: bool) -> usize {
        match self
            .order
            .binary_search_by(|(_, om)| match om.as_slice().cmp(m) {
                Ordering::Equal if inclusive => Ordering::Greater,
                Ordering::Equal => Ordering::Less,
                o => o,
            }) {
            Ok(i) | Err(i) => i,
        }
    }

    /// Sets a member's score; returns the old one.
    pub(super) fn insert(&mut self, m: Bytes, score: f64) -> Option<f64> {
        let s = Score(score);
        let old = self.scores.insert(m.clone(), s);
        if let Some(o) = old {
            if o == s {
                return Some(o.0);
            }
            let i = self.find(o, &m).expect("a member in the order");
            self.order.remove(i);
        }
        let i = match self.find(s, &m) {
            Ok(_) => unreachable!("a member twice in the order"),
            Err(i) => i,
        };
        self.order.insert(i, (s, m));
        old.map(|o| o.0)
    }

    /// Removes a member; returns its score.
    pub(super) fn remove(&mut self, m: &[u8]) -> Option<f64> {
        let s = self.scores.remove(m)?;
        let i = self.find(s, m).expect("a member in the order");
        self.order.remove(i);
        Some(s.0)
    }

    fn find(&self, s: Score, m: &[u8]) -> Result<usize, usize> {
        self.order
            .binary_search_by(|(os, om)| os.cmp(&s).then_with(|| om.as_slice().cmp(m)))
    }

    /// The two indexes agree (tests and invariant checks).
    pub(super) fn check(&self) {
        assert_eq!(self.scores.len(), self.order.len(), "zset indexes' sizes");
        let mut prev: Option<&(Score, Bytes)> = None;
        for e in &self.order {
            assert_eq!(self.scores.get(&e.1), Some(&e.0), "zset score index");
            assert!(!e.0 .0.is_nan(), "a NaN score");
            if let Some(p) = prev {
                assert!(p < e, "zset order");
            }
            prev = Some(e);
        }
    }
}

/// The sorted-set commands.
pub(super) const SPECS: &[Spec] = &[];
