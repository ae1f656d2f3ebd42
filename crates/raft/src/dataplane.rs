//! The hand-off between software Raft and the data plane (DESIGN §3, `docs/handoff.md`).
//!
//! The core never touches the data plane: it asks the host through `Ready::dataplane` and
//! `Ready::dataplane_proposals`, and learns what the data plane did through
//! [`Raft::dataplane_append`], [`Raft::dataplane_commit`], [`Raft::dataplane_halted`] and
//! [`Raft::dataplane_disabled`].
//!
//! Life cycle: `Off` → (leader, everything committed and every voter synchronized)
//! RequestVoteFPGA in a new term → `Enabling` (candidate) → `On` (leader and the granting
//! followers) → a deviation → `Disabling` (messages stashed, time stands still) →
//! `dataplane_disabled` → `Off`, stashed messages replayed, the deviation's follow-up runs.

use crate::errors::{ProposeError, StepError};
use crate::raft::{Raft, TickKind, STASH_BOUND};
use crate::types::*;
use std::collections::VecDeque;

/// The data-plane state of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataPlaneState {
    /// Software Raft does everything.
    Off,
    /// The leader runs RequestVoteFPGA as a candidate in `term`.
    Enabling {
        /// The term of the accelerate election.
        term: Term,
    },
    /// The data plane replicates in `term`.
    On {
        /// The enabled term.
        term: Term,
    },
    /// A `Disable` was requested; waiting for [`Raft::dataplane_disabled`].
    Disabling {
        /// Why.
        reason: DisableReason,
    },
}

/// Bookkeeping of the hand-off.
#[derive(Clone, Debug)]
pub(crate) struct DataPlane {
    pub(crate) state: DataPlaneState,
    /// Command waiting for the next ready.
    pub(crate) cmd: Option<DataPlaneCommand>,
    /// Payloads to push through the data plane (leader, On).
    pub(crate) proposals: Vec<Vec<u8>>,
    /// Messages received while disabling, with the tick each came at, replayed in order
    /// afterwards.
    pub(crate) stash: VecDeque<(u64, Message)>,
    /// Ticks since the last enable attempt or disable.
    pub(crate) backoff_elapsed: u32,
    /// The enabled term (valid in On and Disabling).
    pub(crate) enabled_term: Term,
    /// Leader: ticks since the last ring append (idle heartbeat).
    pub(crate) since_append: u32,
    /// Leader check-quorum while On: ticks in the window, commit at its start, pushes handed
    /// out (`Ready::dataplane_proposals`) in it.
    pub(crate) window_elapsed: u32,
    pub(crate) window_commit: Index,
    pub(crate) window_pushed: u64,
}

impl DataPlane {
    pub(crate) fn new(backoff_ticks: u32) -> DataPlane {
        DataPlane {
            state: DataPlaneState::Off,
            cmd: None,
            proposals: Vec::new(),
            stash: VecDeque::new(),
            backoff_elapsed: backoff_ticks,
            enabled_term: 0,
            since_append: 0,
            window_elapsed: 0,
            window_commit: 0,
            window_pushed: 0,
        }
    }

    /// Whether software replication (Append, Heartbeat, commit by counting) may run.
    pub(crate) fn software_replication(&self) -> bool {
        self.state == DataPlaneState::Off
    }

    /// An accelerate campaign ended without enabling: back to Off, backoff restarts.
    pub(crate) fn campaign_over(&mut self) {
        if let DataPlaneState::Enabling { .. } = self.state {
            self.state = DataPlaneState::Off;
            self.backoff_elapsed = 0;
        }
    }

    fn enable(&mut self, regs: DataPlaneRegisters) {
        debug_assert!(self.cmd.is_none(), "a data-plane command is still pending");
        self.state = DataPlaneState::On { term: regs.term };
        self.enabled_term = regs.term;
        self.since_append = 0;
        self.window_elapsed = 0;
        self.window_commit = regs.commit_index;
        self.window_pushed = 0;
        self.cmd = Some(DataPlaneCommand::Enable(regs));
    }

    pub(crate) fn enable_leader(&mut self, regs: DataPlaneRegisters) {
        assert!(regs.is_leader);
        assert!(matches!(self.state, DataPlaneState::Enabling { term } if term == regs.term));
        self.enable(regs);
    }

    pub(crate) fn enable_follower(&mut self, regs: DataPlaneRegisters) {
        assert!(!regs.is_leader);
        assert_eq!(self.state, DataPlaneState::Off);
        self.enable(regs);
    }
}

impl Raft {
    /// The data-plane state.
    pub fn dataplane_state(&self) -> DataPlaneState {
        self.dp.state
    }

    /// Registers for the leader's data plane after a won accelerate election.
    pub(crate) fn leader_regs(&self) -> DataPlaneRegisters {
        let last = self.log.last_index();
        let acc = self.votes.accelerated();
        DataPlaneRegisters {
            self_id: self.cfg.id,
            leader_id: self.cfg.id,
            is_leader: true,
            term: self.term,
            last_index: last,
            last_term: self.log.last_term(),
            commit_index: self.log.committed(),
            term_start_index: last + 1,
            match_index: self
                .voters()
                .into_iter()
                .map(|v| {
                    (
                        v,
                        if v == self.cfg.id || acc.contains(&v) {
                            last
                        } else {
                            0
                        },
                    )
                })
                .collect(),
            defer_ack: self.cfg.defer_ack,
        }
    }

    /// Registers for a follower that granted an accelerate vote to `leader`.
    pub(crate) fn follower_regs(&self, leader: NodeId) -> DataPlaneRegisters {
        let last = self.log.last_index();
        DataPlaneRegisters {
            self_id: self.cfg.id,
            leader_id: leader,
            is_leader: false,
            term: self.term,
            last_index: last,
            last_term: self.log.last_term(),
            commit_index: self.log.committed(),
            term_start_index: last + 1,
            match_index: self.voters().into_iter().map(|v| (v, 0)).collect(),
            defer_ack: self.cfg.defer_ack,
        }
    }

    /// Leader tick while Off: run RequestVoteFPGA when everything is synchronized.
    /// Why the data plane is not being enabled now, or `None` when it may be (leader only;
    /// operators see this in status).
    pub fn dataplane_blocker(&self) -> Option<&'static str> {
        if !self.cfg.dataplane {
            return Some("no data plane configured");
        }
        if self.dp.state != DataPlaneState::Off {
            return Some("data plane not off");
        }
        if self.role != Role::Leader {
            return Some("not leader");
        }
        if self.dp.backoff_elapsed < self.cfg.enable_backoff_ticks {
            return Some("backing off after the last attempt");
        }
        let last = self.log.last_index();
        let commit = self.log.committed();
        if self.log.term(commit) != Some(self.term) {
            return Some("no entry of this term committed");
        }
        if commit != last {
            return Some("uncommitted entries");
        }
        if self.log.stable() != last {
            return Some("unpersisted entries");
        }
        let conf = self.conf_state();
        let latest_conf_index = self.confs.last().expect("non-empty").0;
        if !conf.learners.is_empty() {
            return Some("learners present");
        }
        if !conf.is_voter(self.cfg.id) {
            return Some("leader is not a voter");
        }
        if latest_conf_index > commit {
            return Some("membership change pending");
        }
        if self.transferee != 0 {
            return Some("leader transfer in progress");
        }
        if !self.read_only.is_empty() {
            return Some("reads pending");
        }
        for v in conf.voters.iter().filter(|v| **v != self.cfg.id) {
            match self.prs.get(v) {
                None => return Some("a voter has no progress"),
                Some(p) if !p.recent_active => return Some("a voter is not recently active"),
                Some(p) if p.matched != last => return Some("a voter is not synchronized"),
                Some(p) if p.recovering => return Some("a voter is recovering"),
                Some(_) => {}
            }
        }
        None
    }

    pub(crate) fn maybe_enable_dataplane(&mut self) {
        if self.dataplane_blocker().is_some() {
            return;
        }
        self.counters.dataplane_enable_attempts += 1;
        self.dp.backoff_elapsed = 0;
        self.dp.state = DataPlaneState::Enabling {
            term: self.term + 1,
        };
        self.run_campaign(CampaignKind::Accelerate);
    }

    /// Tick while On.
    pub(crate) fn tick_dataplane_on(&mut self, kind: TickKind) {
        if self.role == Role::Leader {
            self.dp.since_append += 1;
            if self.dp.since_append >= self.cfg.heartbeat_tick {
                // Keep followers' election timers quiet: an empty request through the data plane.
                self.dp.proposals.push(Vec::new());
                self.dp.since_append = 0;
                self.counters.dataplane_heartbeats += 1;
            }
            self.dp.window_elapsed += 1;
            self.dp.window_elapsed =
                self.hold_in_stall(kind, self.dp.window_elapsed, self.cfg.election_tick);
            if self.dp.window_elapsed >= self.cfg.election_tick {
                let stuck =
                    self.dp.window_pushed > 0 && self.log.committed() == self.dp.window_commit;
                self.dp.window_elapsed = 0;
                self.dp.window_commit = self.log.committed();
                self.dp.window_pushed = 0;
                if self.cfg.check_quorum && stuck {
                    self.counters.check_quorum_step_downs += 1;
                    if self.start_disable(DisableReason::ElectionTimeout) {
                        let t = self.term;
                        self.become_follower(t, 0);
                    }
                }
            }
        } else {
            self.election_elapsed = self.election_elapsed.saturating_add(1);
            self.election_elapsed =
                self.hold_in_stall(kind, self.election_elapsed, self.randomized_timeout);
            if self.election_elapsed >= self.randomized_timeout {
                self.election_elapsed = 0;
                if self.start_disable(DisableReason::ElectionTimeout) {
                    self.hup(CampaignKind::Election);
                }
            }
        }
    }

    /// Whether message `m`, received while On, must disable the data plane first.
    pub(crate) fn dataplane_trigger(&self, m: &Message) -> Option<DisableReason> {
        if m.term > self.term {
            let changes_term = match &m.body {
                MessageBody::PreVote { .. } => false,
                MessageBody::PreVoteResponse { reject: false } => false,
                MessageBody::Vote {
                    kind: CampaignKind::Election,
                    ..
                } => !self.in_lease(),
                _ => true,
            };
            return changes_term.then_some(DisableReason::NewTerm);
        }
        if m.term < self.term {
            // Raft ignores it (at most answers with its term): no state changes, no disable.
            return None;
        }
        match (&m.body, self.role) {
            (MessageBody::AppendResponse { reject: true, .. }, Role::Leader) => {
                Some(DisableReason::RejectReceived)
            }
            // A stalled leader's keepalive: it restarts the election timer and touches neither
            // the log nor the commit index.
            (MessageBody::Keepalive, Role::Follower) => None,
            (
                MessageBody::Append { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::Keepalive
                | MessageBody::InstallSnapshot { .. },
                r,
            ) if r != Role::Leader => Some(DisableReason::NewTerm),
            (MessageBody::TimeoutNow, r) if r != Role::Leader => {
                Some(DisableReason::LeaderTransfer)
            }
            _ => None,
        }
    }

    /// Requests a disable. Returns true if the data plane is already off afterwards (it was
    /// not on, or the `Enable` had not reached the host yet and was cancelled); false if the
    /// caller must wait for [`Raft::dataplane_disabled`].
    pub(crate) fn start_disable(&mut self, reason: DisableReason) -> bool {
        match self.dp.state {
            DataPlaneState::On { .. } => {
                self.counters.dataplane_disables += 1;
                if matches!(self.dp.cmd, Some(DataPlaneCommand::Enable(_))) {
                    // The host never saw the Enable: the registers still equal the core's state.
                    self.dp.cmd = None;
                    self.dp.state = DataPlaneState::Off;
                    self.dp.backoff_elapsed = 0;
                    self.dp.proposals.clear();
                    self.software_resumes();
                    return true;
                }
                self.dp.state = DataPlaneState::Disabling { reason };
                self.dp.cmd = Some(DataPlaneCommand::Disable(reason));
                false
            }
            DataPlaneState::Disabling { .. } => false,
            DataPlaneState::Off | DataPlaneState::Enabling { .. } => true,
        }
    }

    /// Calls that need software mode: On → start a disable; Retry while a hand-off runs.
    pub(crate) fn dataplane_gate(&mut self, reason: DisableReason) -> Result<(), ProposeError> {
        match self.dp.state {
            DataPlaneState::Off => Ok(()),
            DataPlaneState::On { .. } => {
                if self.start_disable(reason) {
                    Ok(())
                } else {
                    Err(ProposeError::Retry)
                }
            }
            DataPlaneState::Enabling { .. } | DataPlaneState::Disabling { .. } => {
                Err(ProposeError::Retry)
            }
        }
    }

    pub(crate) fn stash(&mut self, m: Message) {
        if self.dp.stash.len() >= STASH_BOUND {
            self.counters.dataplane_stash_dropped += 1;
            return;
        }
        self.dp.stash.push_back((self.now, m));
    }

    /// Number of messages stashed while disabling.
    pub fn dataplane_stashed(&self) -> usize {
        self.dp.stash.len()
    }

    /// Software takes over again (leader): make sure the term has an entry of its own so
    /// commit-by-counting can proceed, then replicate.
    fn software_resumes(&mut self) {
        if self.role == Role::Leader {
            if self.log.last_term() != self.term {
                let e = Entry {
                    term: self.term,
                    index: self.log.last_index() + 1,
                    kind: EntryKind::Normal,
                    data: Bytes::new(),
                };
                self.log.append(&[e]);
            }
            if self.maybe_commit() {
                self.bcast_append();
            }
            self.bcast_append();
        }
    }

    /// A ring record: the data plane appended `e`. It must be exactly at the tail and of the
    /// enabled term.
    pub fn dataplane_append(&mut self, e: Entry) -> Result<(), StepError> {
        let ok_state = matches!(
            self.dp.state,
            DataPlaneState::On { .. } | DataPlaneState::Disabling { .. }
        );
        let err = if !ok_state {
            Some("ring append while the data plane is off")
        } else if e.index != self.log.last_index() + 1 {
            Some("ring append not at the tail")
        } else if e.term != self.dp.enabled_term || e.term != self.term {
            Some("ring append of another term")
        } else if e.kind != EntryKind::Normal {
            Some("ring append of a conf change")
        } else {
            None
        };
        if let Some(why) = err {
            self.counters.messages_rejected += 1;
            return Err(StepError::DataPlane(why));
        }
        self.log.append(std::slice::from_ref(&e));
        if self.role == Role::Leader {
            self.dp.since_append = 0;
        } else {
            self.election_elapsed = 0;
        }
        Ok(())
    }

    /// A follower's host holds an append of the enabled term from `from`, ahead of the log
    /// (an earlier one was lost and is being retransmitted). It proves the leader alive as
    /// any append from it does in Raft, accepted or not: the election timer restarts, so a
    /// follower waiting for a retransmission from a busy leader does not campaign. Anything
    /// else (another term, another sender or no known leader, not a follower, the data plane
    /// not on) is ignored.
    /// A leader whose host stopped (it cannot retransmit) stops ordering too once its ring
    /// holds its admission share (`fp_shed_inline`): the held appends stop coming, and the
    /// follower times out as before.
    pub fn dataplane_leader_heard(&mut self, from: NodeId, term: Term) {
        let on = matches!(self.dp.state, DataPlaneState::On { term: t } if t == term);
        if on
            && self.role == Role::Follower
            && term == self.term
            && from != 0
            && from == self.leader
        {
            self.election_elapsed = 0;
        }
    }

    /// A ring record: the data plane's commit index. Never moves the commit backwards.
    pub fn dataplane_commit(&mut self, index: Index) {
        if !matches!(
            self.dp.state,
            DataPlaneState::On { .. } | DataPlaneState::Disabling { .. }
        ) {
            self.counters.messages_rejected += 1;
            return;
        }
        let c = index.min(self.log.last_index());
        self.log.commit_to(c);
    }

    /// The handler (or the host) saw a deviation: disable.
    pub fn dataplane_halted(&mut self, reason: DisableReason) {
        if let DataPlaneState::On { .. } = self.dp.state {
            self.start_disable(reason);
        }
    }

    /// The host cleared the enable flag, fed every remaining ring record and read the
    /// registers back. The core imports them and continues in software.
    pub fn dataplane_disabled(&mut self, regs: DataPlaneRegisters) {
        let DataPlaneState::Disabling { reason } = self.dp.state else {
            self.counters.messages_rejected += 1;
            return;
        };
        assert_eq!(
            regs.last_index,
            self.log.last_index(),
            "host must feed every ring record before disabled"
        );
        assert_eq!(
            regs.last_term,
            self.log.last_term(),
            "data plane and core logs diverged"
        );
        let c = regs.commit_index.min(self.log.last_index());
        self.log.commit_to(c);
        if self.role == Role::Leader {
            debug_assert!(regs.is_leader);
            let last = self.log.last_index();
            for (id, m) in &regs.match_index {
                if let Some(pr) = self.prs.get_mut(id) {
                    pr.matched = pr.matched.max((*m).min(last));
                    if pr.matched > 0 {
                        pr.become_replicate();
                    } else {
                        pr.become_probe();
                        pr.next = last + 1;
                    }
                }
            }
        }
        self.dp.state = DataPlaneState::Off;
        self.dp.backoff_elapsed = 0;
        self.dp.proposals.clear();
        let follower_timeout =
            reason == DisableReason::ElectionTimeout && self.role != Role::Leader;
        if follower_timeout {
            self.election_elapsed = self.randomized_timeout;
        }
        let term = self.term;
        while let Some((at, m)) = self.dp.stash.pop_front() {
            let from = m.from;
            let _ = self.step(m);
            // What a stashed answer proves of its sender (the lease, a vote's catch-up) dates
            // from when it came, not from now: a hand-off that began in a stall's replay ends
            // after the stall's ticks, and a lease counted from its end outlived the
            // followers' election timers (a stale read, the simulator's seed 1361 of 3 nodes,
            // fsync, data plane on, once its paused leaders' data planes ran on).
            if let Some(t) = self
                .prs
                .get_mut(&from)
                .and_then(|p| p.last_active_tick.as_mut())
            {
                *t = (*t).min(at);
            }
        }
        if reason == DisableReason::ElectionTimeout {
            if self.role == Role::Leader && self.term == term {
                self.become_follower(term, 0);
            } else if follower_timeout
                && self.role != Role::Leader
                && self.election_elapsed >= self.randomized_timeout
            {
                self.election_elapsed = 0;
                self.hup(CampaignKind::Election);
            }
        }
        self.software_resumes();
    }
}
