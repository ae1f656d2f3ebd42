//! Membership changes at the leader (Raft §4.1, one server at a time; `docs/membership.md`):
//! a change is checked against the configuration, proposed (after the entry that carries the
//! new member's address, if any), and answered once its entry commits — or as lost when
//! another entry takes its index (leadership changed), or as timed out when it has not
//! committed in time (it may still commit).

use std::time::Duration;

use waverunner_raft::{ConfChange, Entry, EntryKind, ProposeError, Raft, Role};

use crate::Time;

/// Why an admin command failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminError {
    /// This replica does not lead; `leader` is the one it knows (0: none). Ask there.
    NotLeader {
        /// The known leader, 0 if none.
        leader: u64,
    },
    /// Another membership change is not committed yet (one at a time): retry.
    ChangePending,
    /// The leader has not committed an entry of its term yet: retry in a moment.
    NotCommittedInTerm,
    /// Too few voters would be up and caught up after the change.
    WouldLoseQuorum,
    /// The change does not apply (already a member, not a member, a removed id, …).
    Invalid(String),
    /// A hand-off or a leader transfer is in progress: retry.
    Retry(String),
    /// The change was proposed but not committed in time: it may still commit.
    Timeout,
    /// The change was proposed but another entry took its place (leadership changed): it
    /// will never commit.
    Lost,
    /// Too many events queued: retry.
    Busy,
    /// The replica is stopping.
    ShuttingDown,
}

impl AdminError {
    /// A short, stable reason (`"not leader"`, `"change pending"`, …) for callers to match.
    pub fn reason(&self) -> &'static str {
        match self {
            AdminError::NotLeader { .. } => "not leader",
            AdminError::ChangePending => "change pending",
            AdminError::NotCommittedInTerm => "not committed in term",
            AdminError::WouldLoseQuorum => "would lose quorum",
            AdminError::Invalid(_) => "invalid",
            AdminError::Retry(_) => "retry",
            AdminError::Timeout => "timeout",
            AdminError::Lost => "lost",
            AdminError::Busy => "busy",
            AdminError::ShuttingDown => "shutting down",
        }
    }

    /// Whether the same command may simply be sent again (to the same replica or, for
    /// `not leader`, to the leader it names).
    pub fn retriable(&self) -> bool {
        !matches!(self, AdminError::Invalid(_) | AdminError::WouldLoseQuorum)
    }
}

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminError::NotLeader { leader: 0 } => write!(f, "not leader (no leader known)"),
            AdminError::NotLeader { leader } => write!(f, "not leader (the leader is {leader})"),
            AdminError::ChangePending => {
                write!(
                    f,
                    "change pending: another membership change is not committed yet"
                )
            }
            AdminError::NotCommittedInTerm => {
                write!(f, "not committed in term: the new leader has not committed an entry of its term yet")
            }
            AdminError::WouldLoseQuorum => write!(
                f,
                "would lose quorum: too few voters would be up and caught up after the change"
            ),
            AdminError::Invalid(why) => write!(f, "invalid: {why}"),
            AdminError::Retry(why) => write!(f, "retry: {why}"),
            AdminError::Timeout => write!(
                f,
                "timeout: proposed but not committed in time (it may still commit)"
            ),
            AdminError::Lost => write!(
                f,
                "lost: leadership changed before the change committed (it never will)"
            ),
            AdminError::Busy => write!(f, "busy: replica queue full, retry"),
            AdminError::ShuttingDown => write!(f, "shutting down"),
        }
    }
}

impl std::error::Error for AdminError {}

impl From<ProposeError> for AdminError {
    fn from(e: ProposeError) -> AdminError {
        match e {
            ProposeError::NotLeader { leader } => AdminError::NotLeader { leader },
            ProposeError::Retry => AdminError::Retry("the data plane is being handed over".into()),
            ProposeError::Busy => {
                AdminError::Retry("the leader holds too many uncommitted entries".into())
            }
            ProposeError::TransferInProgress => {
                AdminError::Retry("a leader transfer is in progress".into())
            }
            ProposeError::ConfChangePending => AdminError::ChangePending,
            ProposeError::NotCommittedInTerm => AdminError::NotCommittedInTerm,
            ProposeError::InvalidConfChange => {
                AdminError::Invalid("the change does not apply to the configuration".into())
            }
            ProposeError::WouldLoseQuorum => AdminError::WouldLoseQuorum,
            ProposeError::InvalidTransferTarget => AdminError::Invalid(
                "the transfer target is not a voter that can lead (caught up, not recovering)"
                    .into(),
            ),
        }
    }
}

/// A change proposed, waiting for its entry to commit.
struct Pending<T> {
    index: u64,
    term: u64,
    token: T,
    deadline: Time,
}

/// The membership changes this replica proposed as leader, until each is answered (at most
/// one uncommitted change at a time in the core; a few more wait here as lost or timed out).
pub struct Membership<T> {
    /// How long a change may take to commit before it is answered as timed out.
    timeout: Duration,
    pending: Vec<Pending<T>>,
    answers: Vec<(T, Result<u64, AdminError>)>,
}

impl<T> Membership<T> {
    /// Changes answered as timed out after `timeout`.
    pub fn new(timeout: Duration) -> Membership<T> {
        Membership {
            timeout,
            pending: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// Whether no change waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Proposes `cc`; `removed`: the member was removed from the group before (a removed id
    /// is never reused). Once the change is found to apply, `record` gives the entry that
    /// carries the new member's address, proposed first (whoever has the change then has the
    /// address), or the application's reason to refuse. Returns the change's index, its
    /// answer due when it commits; or why it was not proposed, with the token back.
    pub fn propose(
        &mut self,
        raft: &mut Raft,
        cc: ConfChange,
        removed: bool,
        record: impl FnOnce() -> Result<Option<Vec<u8>>, AdminError>,
        token: T,
        now: Time,
    ) -> Result<u64, (AdminError, T)> {
        let id = cc.node();
        if raft.role() != Role::Leader {
            let leader = raft.leader();
            return Err((AdminError::NotLeader { leader }, token));
        }
        if removed {
            let why = format!("node {id} was removed from the group; a removed id is never reused");
            return Err((AdminError::Invalid(why), token));
        }
        let conf = raft.conf_state().clone();
        if conf.apply(cc).is_none() {
            let why = format!(
                "{cc:?} does not apply to voters {:?}, learners {:?}",
                conf.voters, conf.learners
            );
            return Err((AdminError::Invalid(why), token));
        }
        match record() {
            Ok(Some(r)) => {
                if let Err(e) = raft.propose(r) {
                    return Err((e.into(), token));
                }
            }
            Ok(None) => {}
            Err(e) => return Err((e, token)),
        }
        match raft.propose_conf_change(cc) {
            Ok(index) => {
                self.pending.push(Pending {
                    index,
                    term: raft.term(),
                    token,
                    deadline: now + self.timeout,
                });
                Ok(index)
            }
            Err(e) => Err((e.into(), token)),
        }
    }

    /// An entry was applied: the change waiting for its index is answered (committed if it
    /// is that change, in the term it was proposed in; lost otherwise).
    pub fn on_applied(&mut self, e: &Entry) {
        let Some(i) = self.pending.iter().position(|p| p.index == e.index) else {
            return;
        };
        let p = self.pending.swap_remove(i);
        let r = if p.term == e.term && e.kind == EntryKind::ConfChange {
            Ok(e.index)
        } else {
            Err(AdminError::Lost)
        };
        self.answers.push((p.token, r));
    }

    /// A tick: changes not committed by their deadline are answered as timed out.
    pub fn on_tick(&mut self, now: Time) {
        let mut k = 0;
        while k < self.pending.len() {
            if self.pending[k].deadline <= now {
                let p = self.pending.swap_remove(k);
                self.answers.push((p.token, Err(AdminError::Timeout)));
            } else {
                k += 1;
            }
        }
    }

    /// Answers every waiting change with `e` (the replica stops).
    pub fn fail_all(&mut self, e: AdminError) {
        for p in self.pending.drain(..) {
            self.answers.push((p.token, Err(e.clone())));
        }
    }

    /// The answers due, in order.
    pub fn take_answers(&mut self) -> Vec<(T, Result<u64, AdminError>)> {
        std::mem::take(&mut self.answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::commit;
    use waverunner_raft::{Bootstrap, ConfState, Config};

    fn single_leader() -> Raft {
        crate::testing::single_leader(&[])
    }

    #[test]
    fn a_change_is_answered_when_its_entry_commits() {
        let mut r = single_leader();
        let mut m = Membership::new(Duration::from_secs(1));
        let record = || Ok(Some(b"address of 2".to_vec()));
        let index = m
            .propose(
                &mut r,
                ConfChange::AddLearner(2),
                false,
                record,
                "add",
                Time::ZERO,
            )
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(!m.is_empty());
        let entries = commit(&mut r);
        assert_eq!(
            entries[entries.len() - 2].data.as_ref(),
            b"address of 2",
            "first"
        );
        for e in &entries {
            m.on_applied(e);
        }
        assert_eq!(m.take_answers(), vec![("add", Ok(index))]);
        assert!(m.is_empty());
    }

    #[test]
    fn a_change_that_cannot_be_proposed_is_refused_with_its_reason() {
        let mut r = single_leader();
        let mut m = Membership::new(Duration::from_secs(1));
        let none = || Ok(None);
        let err = |r: Result<u64, (AdminError, &str)>| r.unwrap_err().0;
        assert!(matches!(
            err(m.propose(&mut r, ConfChange::AddLearner(2), true, none, "x", Time::ZERO)),
            AdminError::Invalid(why) if why.contains("never reused")
        ));
        assert!(matches!(
            err(m.propose(&mut r, ConfChange::Remove(7), false, none, "x", Time::ZERO)),
            AdminError::Invalid(_)
        ));
        let refuse = || Err(AdminError::Invalid("no address".into()));
        assert_eq!(
            err(m.propose(
                &mut r,
                ConfChange::AddLearner(2),
                false,
                refuse,
                "x",
                Time::ZERO
            )),
            AdminError::Invalid("no address".into())
        );
        assert_eq!(r.last_index(), 1, "nothing proposed");
        let mut follower = Raft::new(
            Config {
                id: 2,
                ..Config::default()
            },
            Bootstrap {
                conf: ConfState {
                    voters: vec![1, 2],
                    learners: vec![],
                },
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            err(m.propose(
                &mut follower,
                ConfChange::Remove(1),
                false,
                none,
                "x",
                Time::ZERO
            )),
            AdminError::NotLeader { leader: 0 }
        );
    }

    #[test]
    fn a_change_not_committed_in_time_times_out_and_one_overwritten_is_lost() {
        let mut r = single_leader();
        let mut m = Membership::new(Duration::from_secs(1));
        let none = || Ok(None);
        let index = m
            .propose(
                &mut r,
                ConfChange::AddLearner(2),
                false,
                none,
                "slow",
                Time::ZERO,
            )
            .map_err(|(e, _)| e)
            .unwrap();
        m.on_tick(Duration::from_millis(999));
        assert!(m.take_answers().is_empty());
        m.on_tick(Duration::from_secs(1));
        assert_eq!(m.take_answers(), vec![("slow", Err(AdminError::Timeout))]);

        commit(&mut r); // committed after its answer: nobody waits for it any more
        let lost = m
            .propose(
                &mut r,
                ConfChange::AddLearner(3),
                false,
                none,
                "lost",
                Time::ZERO,
            )
            .map_err(|(e, _)| e)
            .unwrap();
        assert!(lost > index);
        let other = Entry {
            index: lost,
            term: r.term() + 1,
            kind: EntryKind::Normal,
            data: Default::default(),
        };
        m.on_applied(&other);
        assert_eq!(m.take_answers(), vec![("lost", Err(AdminError::Lost))]);
    }
}
