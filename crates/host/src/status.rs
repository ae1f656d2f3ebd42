//! What a replica reports about its place in the protocol: its role, term, leader, indexes,
//! configuration and, at the leader, how far each member's log matches. The node publishes it
//! in `/status` and `/metrics` (with its addresses, counters and latencies); the simulator
//! prints it for every replica of a seed that fails.

use std::fmt;

use waverunner_raft::{DataPlaneState, Raft, Role};

/// A role as status shows it (snake case).
pub fn role_name(r: Role) -> &'static str {
    match r {
        Role::Follower => "follower",
        Role::PreCandidate => "pre_candidate",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
        Role::Recovering => "recovering",
    }
}

/// A member of the configuration as this replica sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its id.
    pub id: u64,
    /// A voter (else a learner).
    pub voter: bool,
    /// Leader only: the highest index known to be in its log (0 elsewhere).
    pub match_index: u64,
}

/// A replica's protocol state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protocol {
    /// [`role_name`] of its role.
    pub role: &'static str,
    /// Its term.
    pub term: u64,
    /// The leader it knows (0: none).
    pub leader: u64,
    /// Its commit index.
    pub commit_index: u64,
    /// Its state machine's applied index.
    pub applied_index: u64,
    /// The first index in its log (after the snapshot).
    pub first_index: u64,
    /// The last index in its log.
    pub last_index: u64,
    /// The members of its configuration, by id.
    pub members: Vec<Member>,
    /// Replication is handed to its data plane.
    pub dataplane_enabled: bool,
}

impl Protocol {
    /// The state of `raft`, whose state machine has applied `applied`.
    pub fn of(raft: &Raft, applied: u64) -> Protocol {
        assert!(
            applied <= raft.commit_index(),
            "applied past the commit index"
        );
        let conf = raft.conf_state();
        let leader = raft.role() == Role::Leader;
        let match_index = |id: u64| match (leader, id == raft.id()) {
            (false, _) => 0,
            (true, true) => raft.last_index(),
            (true, false) => raft.progress(id).map_or(0, |(m, _)| m),
        };
        let mut members: Vec<Member> = conf
            .voters
            .iter()
            .map(|&id| (id, true))
            .chain(conf.learners.iter().map(|&id| (id, false)))
            .map(|(id, voter)| Member {
                id,
                voter,
                match_index: match_index(id),
            })
            .collect();
        members.sort_by_key(|m| m.id);
        Protocol {
            role: role_name(raft.role()),
            term: raft.term(),
            leader: raft.leader(),
            commit_index: raft.commit_index(),
            applied_index: applied,
            first_index: raft.first_index(),
            last_index: raft.last_index(),
            members,
            dataplane_enabled: matches!(raft.dataplane_state(), DataPlaneState::On { .. }),
        }
    }

    /// The voters' ids.
    pub fn voters(&self) -> Vec<u64> {
        self.members
            .iter()
            .filter(|m| m.voter)
            .map(|m| m.id)
            .collect()
    }

    /// The learners' ids.
    pub fn learners(&self) -> Vec<u64> {
        self.members
            .iter()
            .filter(|m| !m.voter)
            .map(|m| m.id)
            .collect()
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} term={} leader={} commit={} applied={} log={}..={} voters={:?} learners={:?} dataplane={}",
            self.role,
            self.term,
            self.leader,
            self.commit_index,
            self.applied_index,
            self.first_index,
            self.last_index,
            self.voters(),
            self.learners(),
            if self.dataplane_enabled { "on" } else { "off" }
        )?;
        if self.role == "leader" {
            let m: Vec<(u64, u64)> = self.members.iter().map(|m| (m.id, m.match_index)).collect();
            write!(f, " match={m:?}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use waverunner_raft::{Bootstrap, ConfState, Config};

    #[test]
    fn a_leader_reports_its_members_match() {
        let mut r = Raft::new(
            Config {
                id: 1,
                ..Config::default()
            },
            Bootstrap {
                conf: ConfState {
                    voters: vec![1],
                    learners: vec![3],
                },
                ..Default::default()
            },
        )
        .unwrap();
        let p = Protocol::of(&r, 0);
        assert_eq!((p.role, p.term, p.leader), ("follower", 0, 0));
        assert_eq!(p.voters(), vec![1]);
        assert_eq!(p.learners(), vec![3]);
        assert!(p.members.iter().all(|m| m.match_index == 0));
        r.campaign();
        let _ = r.ready();
        r.advance();
        let p = Protocol::of(&r, 0);
        assert_eq!(p.role, "leader");
        assert_eq!(p.members[0].match_index, r.last_index(), "its own log");
        assert_eq!(p.members[1].match_index, 0, "the learner has nothing yet");
        assert!(p.to_string().starts_with("leader term=1 leader=1"), "{p}");
    }
}
