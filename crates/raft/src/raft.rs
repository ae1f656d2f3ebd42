//! The Raft state machine: roles, step functions per role, replication, elections,
//! membership, leader transfer and reads. The data-plane hand-off lives in `dataplane.rs`.
//!
//! Everything here is deterministic: the only inputs are [`Raft::tick`], [`Raft::step`], the
//! proposal/read/compaction calls, [`Raft::advance`] and the data-plane calls; the only output
//! is [`Ready`].

use crate::config::{Bootstrap, Config, ReadMode};
use crate::dataplane::{DataPlane, DataPlaneState};
use crate::errors::{CompactError, ConfigError, ProposeError, ReadError, StepError};
use crate::log::RaftLog;
use crate::progress::{Progress, ProgressState};
use crate::quorum;
use crate::read_only::ReadOnly;
use crate::types::*;
use crate::votes::{VoteResult, VoteTracker};
use std::collections::BTreeMap;

/// How a tick passed, for the timeouts that act against a peer ([`Raft::tick_stalled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TickKind {
    /// On time: a timeout expires at its limit.
    OnTime,
    /// In a stall, or the first on-time tick after one: a timeout stands at its last tick,
    /// and the tick counts towards the bound on holding ([`Raft::max_stall_hold`]).
    Stalled,
    /// In a stall, past its first election timeout of ticks: a timeout stands, and the tick
    /// does not count towards the bound ([`Raft::tick_stalled_nth`]).
    StalledLong,
}

/// Event counters, for metrics and tests. All monotonically increasing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Real elections started (this replica became candidate).
    pub elections: u64,
    /// Pre-vote rounds started.
    pub pre_elections: u64,
    /// Times this replica became leader.
    pub leader_elected: u64,
    /// Messages (and data-plane records) rejected as malformed or inconsistent.
    pub messages_rejected: u64,
    /// Proposals, conf changes and transfers refused.
    pub proposals_dropped: u64,
    /// `Enable` commands emitted.
    pub dataplane_enables: u64,
    /// `Disable` commands emitted (or enables cancelled before the host saw them).
    pub dataplane_disables: u64,
    /// RequestVoteFPGA rounds started by this leader.
    pub dataplane_enable_attempts: u64,
    /// Messages dropped because the disable stash was full.
    pub dataplane_stash_dropped: u64,
    /// Empty heartbeats pushed through the data plane.
    pub dataplane_heartbeats: u64,
    /// Proposals refused busy while the data plane held `dataplane_max_inflight` entries
    /// ordered and not committed.
    pub dataplane_busy: u64,
    /// Snapshot transfers started.
    pub snapshots_sent: u64,
    /// Snapshot pieces sent (resent ones included).
    pub snapshot_chunks_sent: u64,
    /// Snapshot pieces a follower dropped: duplicates, after a gap, of a transfer it missed
    /// the start of.
    pub snapshot_chunks_dropped: u64,
    /// Snapshot transfers a follower dropped unfinished (a new leader, term or snapshot).
    pub snapshot_transfers_abandoned: u64,
    /// Snapshots received and installed.
    pub snapshots_installed: u64,
    /// Append rejections received by this leader.
    pub append_rejects_received: u64,
    /// Times this leader stepped down because check-quorum failed.
    pub check_quorum_step_downs: u64,
    /// Leader transfers aborted after an election timeout.
    pub transfers_aborted: u64,
    /// Times this leader re-elected itself in a new term so that a caught-up recovering
    /// replica could finish recovery (it needs an entry of a term newer than its restart).
    pub recovery_reelections: u64,
    /// Forwarded reads this leader could not serve (the follower retries).
    pub reads_dropped: u64,
    /// Stalled ticks at which a timeout stood at its last tick instead of expiring
    /// ([`Raft::tick_stalled`]).
    pub timeouts_held_in_stall: u64,
}

/// How a proposal was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proposal {
    /// Appended to the leader's log at this index (software replication).
    Appended(Index),
    /// Handed to the data plane through `Ready::dataplane_proposals`; its index is assigned by
    /// the data plane and arrives through [`Raft::dataplane_append`].
    ViaDataPlane,
}

/// Bound of the queue of messages stashed while the data plane is being disabled.
pub const STASH_BOUND: usize = 256;

/// One Raft replica.
pub struct Raft {
    pub(crate) cfg: Config,
    pub(crate) term: Term,
    pub(crate) vote: NodeId,
    pub(crate) leader: NodeId,
    pub(crate) role: Role,
    pub(crate) log: RaftLog,
    /// Configuration history: `(index of the conf entry, configuration after it)`; the first
    /// element is the base (snapshot or bootstrap). The current configuration is the last.
    pub(crate) confs: Vec<(Index, ConfState)>,
    /// Leader only: progress of every other member.
    pub(crate) prs: BTreeMap<NodeId, Progress>,
    pub(crate) votes: VoteTracker,
    pub(crate) campaign_kind: CampaignKind,
    pub(crate) election_elapsed: u32,
    pub(crate) heartbeat_elapsed: u32,
    pub(crate) randomized_timeout: u32,
    /// Ticks since start (lease bookkeeping).
    pub(crate) now: u64,
    /// Ticks in a row a timeout has been held at its last tick (at most
    /// [`Raft::max_stall_hold`]), of those that count towards the bound.
    stall_held: u32,
    /// The last tick was a stalled one: the next on-time tick holds as a stalled one does.
    after_stall: bool,
    rng: u64,
    pub(crate) msgs: Vec<Message>,
    pub(crate) read_states: Vec<ReadState>,
    pub(crate) read_refusals: Vec<Vec<u8>>,
    pub(crate) read_only: ReadOnly,
    pub(crate) pending_conf_index: Index,
    pub(crate) transferee: NodeId,
    pub(crate) transfer_elapsed: u32,
    /// This leader told a follower to campaign (TimeoutNow). A forced campaign ignores the
    /// followers' leases, so this leader's lease no longer holds: no lease reads for the rest
    /// of its term.
    pub(crate) lease_revoked: bool,
    pub(crate) counters: Counters,
    prev_soft: SoftState,
    prev_hard: HardState,
    pub(crate) dp: DataPlane,
    /// Term persisted when this replica restarted without its log (0 if it did not): it has
    /// caught up only with an entry of a newer term (see `maybe_finish_recovery`).
    restart_term: Term,
    /// Follower: the snapshot being received in pieces.
    pub(crate) incoming: Option<crate::snapshot::Incoming>,
    /// Follower: where a snapshot being received goes ([`Raft::set_snapshot_sink`]).
    pub(crate) sink: crate::snapshot::SinkFactory,
}

impl Raft {
    /// Creates a replica from its configuration and persisted state.
    pub fn new(config: Config, boot: Bootstrap) -> Result<Raft, ConfigError> {
        config.validate()?;
        let (base_index, base_conf, offset_term) = match &boot.snapshot {
            Some(s) => (s.meta.index, s.meta.conf.clone(), s.meta.term),
            None => (0, boot.conf.clone(), 0),
        };
        if !base_conf.is_well_formed() {
            return Err(ConfigError::InvalidConf(
                "configuration not sorted, or overlapping",
            ));
        }
        let entries: Vec<Entry> = boot
            .entries
            .into_iter()
            .filter(|e| e.index > base_index)
            .collect();
        let mut prev_term = offset_term;
        for (i, e) in entries.iter().enumerate() {
            if e.index != base_index + 1 + i as Index {
                return Err(ConfigError::InvalidLog(
                    "entries are not consecutive after the snapshot",
                ));
            }
            if e.term < prev_term || e.term == 0 {
                return Err(ConfigError::InvalidLog("entry terms decrease"));
            }
            if e.kind == EntryKind::ConfChange && ConfChange::decode(&e.data).is_none() {
                return Err(ConfigError::InvalidLog("undecodable conf change entry"));
            }
            prev_term = e.term;
        }
        let hs = boot.hard_state;
        let mut log = RaftLog::new(boot.snapshot, entries.clone());
        let mut commit = hs.commit.max(base_index);
        if commit > log.last_index() {
            if !boot.log_lost {
                return Err(ConfigError::InvalidHardState(
                    "commit beyond the last entry",
                ));
            }
            commit = log.last_index();
        }
        log.commit_to(commit);
        let role = if boot.log_lost {
            Role::Recovering
        } else {
            Role::Follower
        };
        let rng =
            config.seed ^ config.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
        let mut r = Raft {
            term: hs.term,
            vote: hs.vote,
            leader: 0,
            role,
            log,
            confs: vec![(base_index, base_conf)],
            prs: BTreeMap::new(),
            votes: VoteTracker::default(),
            campaign_kind: CampaignKind::Election,
            election_elapsed: 0,
            heartbeat_elapsed: 0,
            randomized_timeout: config.election_tick,
            now: 0,
            stall_held: 0,
            after_stall: false,
            rng,
            msgs: Vec::new(),
            read_states: Vec::new(),
            read_refusals: Vec::new(),
            read_only: ReadOnly::default(),
            pending_conf_index: 0,
            transferee: 0,
            transfer_elapsed: 0,
            lease_revoked: false,
            counters: Counters::default(),
            prev_soft: SoftState { leader: 0, role },
            prev_hard: hs,
            dp: DataPlane::new(config.enable_backoff_ticks),
            restart_term: if boot.log_lost { hs.term } else { 0 },
            incoming: None,
            sink: crate::snapshot::memory_sink(),
            cfg: config,
        };
        r.apply_conf_entries(&entries);
        r.randomize_timeout();
        Ok(r)
    }

    /// Where snapshots received from a leader go, piece by piece (by default, into memory).
    /// The host's sink writes them to a file so that none is ever whole in memory.
    pub fn set_snapshot_sink(&mut self, sink: crate::snapshot::SinkFactory) {
        self.sink = sink;
    }

    // ----------------------------------------------------------------- inspection

    /// This replica's id.
    pub fn id(&self) -> NodeId {
        self.cfg.id
    }
    /// Current term.
    pub fn term(&self) -> Term {
        self.term
    }
    /// Current role.
    pub fn role(&self) -> Role {
        self.role
    }
    /// Known leader of the current term, 0 if none.
    pub fn leader(&self) -> NodeId {
        self.leader
    }
    /// Commit index.
    pub fn commit_index(&self) -> Index {
        self.log.committed()
    }
    /// Index of the last entry applied by the host (acknowledged through `advance`).
    pub fn applied_index(&self) -> Index {
        self.log.applied()
    }
    /// Index of the last entry.
    pub fn last_index(&self) -> Index {
        self.log.last_index()
    }
    /// Index of the first entry in memory (snapshot index + 1).
    pub fn first_index(&self) -> Index {
        self.log.first_index()
    }
    /// Term of the entry at `index` (the snapshot's last entry included), if known.
    pub fn term_of(&self, index: Index) -> Option<Term> {
        self.log.term(index)
    }
    /// Entries `lo ..= hi_inclusive` that are in memory.
    pub fn entries(&self, lo: Index, hi_inclusive: Index) -> Vec<Entry> {
        if hi_inclusive < lo {
            return Vec::new();
        }
        self.log.slice(lo, hi_inclusive, usize::MAX, usize::MAX)
    }
    /// The state that must be persisted.
    pub fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.log.committed(),
        }
    }
    /// The current configuration (it takes effect when its entry is appended).
    pub fn conf_state(&self) -> &ConfState {
        &self
            .confs
            .last()
            .expect("configuration history is never empty")
            .1
    }
    /// Index of the latest snapshot (the log's compaction point; 0 if none).
    pub fn snapshot_index(&self) -> Index {
        self.log.snapshot_index()
    }

    /// The latest snapshot, if any.
    pub fn snapshot(&self) -> Option<&Snapshot> {
        self.log.snapshot()
    }
    /// Event counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Leader only: `(match, next)` of member `id`.
    pub fn progress(&self, id: NodeId) -> Option<(Index, Index)> {
        self.prs.get(&id).map(|p| (p.matched, p.next))
    }
    /// Leader only: the replication state of member `id`.
    pub fn progress_state(&self, id: NodeId) -> Option<ProgressState> {
        self.prs.get(&id).map(|p| p.state)
    }
    /// Leader only: the leader transfer in progress, 0 if none.
    pub fn transferee(&self) -> NodeId {
        self.transferee
    }

    // ----------------------------------------------------------------- small helpers

    fn next_rand(&mut self) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn randomize_timeout(&mut self) {
        let e = self.cfg.election_tick;
        self.randomized_timeout = e + (self.next_rand() % u64::from(e)) as u32;
    }

    pub(crate) fn voters(&self) -> Vec<NodeId> {
        self.conf_state().voters.clone()
    }

    fn members(&self) -> Vec<NodeId> {
        let c = self.conf_state();
        c.voters.iter().chain(c.learners.iter()).copied().collect()
    }

    /// May campaign: a voter that is not recovering, or one whose own removal is appended
    /// but not committed. The latter counts votes in its latest configuration, without
    /// itself: a majority of that one and a majority of the one before (itself included)
    /// overlap, as for any single-server change, so no two leaders share a term. Without it
    /// a voter holding its own uncommitted removal and the longest log never campaigned and
    /// refused the others' votes, and once the leader that appended the removal lost its log
    /// (memory durability) nobody could be elected (simulator seed 4780, 3 nodes, memory). As
    /// leader it commits the removal and hands over (`after_leader_commit`).
    pub(crate) fn promotable(&self) -> bool {
        if self.role == Role::Recovering {
            return false;
        }
        if self.conf_state().is_voter(self.cfg.id) {
            return true;
        }
        let n = self.confs.len();
        n >= 2
            && self.confs[n - 1].0 > self.log.committed()
            && self.confs[n - 2].1.is_voter(self.cfg.id)
    }

    /// How many ticks from now the first one that does more than count comes (a heartbeat,
    /// check-quorum, a campaign, a transfer's timeout; at least 1): a host with nothing else
    /// to do may sleep until then and replay the ticks when it wakes (an idle replica then
    /// wakes for its heartbeats, not a hundred times a second). 1 whenever a data plane may
    /// be involved: it keeps its own timers.
    pub fn idle_ticks(&self) -> u32 {
        if self.cfg.dataplane || self.dp.state != DataPlaneState::Off {
            return 1;
        }
        let left = |limit: u32, elapsed: u32| limit.saturating_sub(elapsed).max(1);
        match self.role {
            Role::Leader => {
                let mut n = left(self.cfg.heartbeat_tick, self.heartbeat_elapsed)
                    .min(left(self.cfg.election_tick, self.election_elapsed));
                if self.transferee != 0 {
                    n = n.min(left(self.cfg.election_tick, self.transfer_elapsed));
                }
                n
            }
            _ if self.promotable() => left(self.randomized_timeout, self.election_elapsed),
            // A learner or a recovering replica never campaigns; its clock still counts (the
            // lease test of votes), which replayed ticks keep.
            _ => self.cfg.election_tick,
        }
    }

    /// Heard from a leader within the (minimum) election timeout.
    pub(crate) fn in_lease(&self) -> bool {
        self.cfg.check_quorum && self.leader != 0 && self.election_elapsed < self.cfg.election_tick
    }

    pub(crate) fn send(&mut self, to: NodeId, body: MessageBody) {
        let term = self.term;
        self.send_with_term(to, term, body);
    }

    fn send_with_term(&mut self, to: NodeId, term: Term, body: MessageBody) {
        debug_assert_ne!(to, self.cfg.id);
        self.msgs.push(Message {
            from: self.cfg.id,
            to,
            term,
            body,
        });
    }

    pub(crate) fn match_of(&self, id: NodeId) -> Index {
        if id == self.cfg.id {
            self.log.stable()
        } else {
            self.prs.get(&id).map(|p| p.matched).unwrap_or(0)
        }
    }

    // ----------------------------------------------------------------- role changes

    fn reset(&mut self, term: Term) {
        if term != self.term {
            assert!(term > self.term, "term must never decrease");
            self.term = term;
            self.vote = 0;
            // A transfer is tied to its leader's term.
            self.abandon_incoming();
        }
        self.leader = 0;
        self.election_elapsed = 0;
        self.heartbeat_elapsed = 0;
        self.randomize_timeout();
        self.votes.reset();
        self.transferee = 0;
        self.transfer_elapsed = 0;
        self.read_only.clear();
        self.prs.clear();
        self.pending_conf_index = 0;
    }

    pub(crate) fn become_follower(&mut self, term: Term, leader: NodeId) {
        self.reset(term);
        self.leader = leader;
        if self.role != Role::Recovering {
            self.role = Role::Follower;
        }
        self.dp.campaign_over();
    }

    fn become_pre_candidate(&mut self) {
        debug_assert_ne!(self.role, Role::Leader);
        self.role = Role::PreCandidate;
        self.leader = 0;
        self.votes.reset();
        self.campaign_kind = CampaignKind::Election;
        self.counters.pre_elections += 1;
    }

    fn become_candidate(&mut self, kind: CampaignKind) {
        let term = self.term + 1;
        self.reset(term);
        self.vote = self.cfg.id;
        self.role = Role::Candidate;
        self.campaign_kind = kind;
        self.counters.elections += 1;
    }

    fn become_leader(&mut self, accelerated: bool) {
        assert_eq!(
            self.role,
            Role::Candidate,
            "only a candidate becomes leader"
        );
        assert_eq!(
            self.vote, self.cfg.id,
            "a leader voted for itself in its term"
        );
        self.role = Role::Leader;
        self.leader = self.cfg.id;
        self.lease_revoked = false;
        self.counters.leader_elected += 1;
        self.election_elapsed = 0;
        self.heartbeat_elapsed = 0;
        let last = self.log.last_index();
        let learners = self.conf_state().learners.clone();
        self.prs.clear();
        for id in self.members() {
            if id != self.cfg.id {
                let pr = Progress::new(
                    last + 1,
                    self.cfg.max_inflight_msgs,
                    self.cfg.max_inflight_bytes,
                    learners.contains(&id),
                );
                self.prs.insert(id, pr);
            }
        }
        if accelerated {
            assert_eq!(
                self.log.committed(),
                last,
                "accelerated leader: everything is committed"
            );
            let grantors: Vec<NodeId> = self.votes.accelerated().iter().copied().collect();
            for id in grantors {
                if let Some(pr) = self.prs.get_mut(&id) {
                    pr.matched = last;
                    pr.recent_active = true;
                }
            }
            self.dp.enable_leader(self_regs_leader(self));
            self.counters.dataplane_enables += 1;
        } else {
            self.dp.campaign_over();
            self.append_leader_entry(EntryKind::Normal, Vec::new());
            self.bcast_append();
        }
    }

    // ----------------------------------------------------------------- elections

    /// Starts an election now (pre-vote first if enabled). No effect on a leader, a learner,
    /// a removed or a recovering replica.
    pub fn campaign(&mut self) {
        self.hup(CampaignKind::Election);
    }

    pub(crate) fn hup(&mut self, kind: CampaignKind) {
        if self.role == Role::Leader || !self.promotable() {
            return;
        }
        match self.dp.state {
            DataPlaneState::On { .. } => {
                // A campaign changes the term: disable first; the follow-up campaigns.
                let reason = if kind == CampaignKind::Forced {
                    DisableReason::LeaderTransfer
                } else {
                    DisableReason::ElectionTimeout
                };
                if self.start_disable(reason) {
                    self.hup(kind);
                }
                return;
            }
            DataPlaneState::Disabling { .. } => return,
            _ => {}
        }
        if kind == CampaignKind::Election && self.cfg.pre_vote {
            self.become_pre_candidate();
            self.votes.record(self.cfg.id, true, false);
            if self.votes.result(&self.voters()) == VoteResult::Won {
                self.run_campaign(CampaignKind::Election);
                return;
            }
            let (li, lt) = (self.log.last_index(), self.log.last_term());
            let term = self.term + 1;
            for v in self.voters() {
                if v != self.cfg.id {
                    self.send_with_term(
                        v,
                        term,
                        MessageBody::PreVote {
                            last_index: li,
                            last_term: lt,
                        },
                    );
                }
            }
        } else {
            self.run_campaign(kind);
        }
    }

    pub(crate) fn run_campaign(&mut self, kind: CampaignKind) {
        self.become_candidate(kind);
        self.votes
            .record(self.cfg.id, true, kind == CampaignKind::Accelerate);
        if self.votes.result(&self.voters()) == VoteResult::Won {
            self.win();
            return;
        }
        let (li, lt) = (self.log.last_index(), self.log.last_term());
        for v in self.voters() {
            if v != self.cfg.id {
                self.send(
                    v,
                    MessageBody::Vote {
                        last_index: li,
                        last_term: lt,
                        kind,
                    },
                );
            }
        }
    }

    fn win(&mut self) {
        let accelerate = self.campaign_kind == CampaignKind::Accelerate
            && matches!(self.dp.state, DataPlaneState::Enabling { .. })
            && self.votes.accelerated_quorum(&self.voters());
        self.become_leader(accelerate);
    }

    fn handle_vote_request(&mut self, m: &Message) {
        let (li, lt, kind, pre) = match m.body {
            MessageBody::PreVote {
                last_index,
                last_term,
            } => (last_index, last_term, CampaignKind::Election, true),
            MessageBody::Vote {
                last_index,
                last_term,
                kind,
            } => (last_index, last_term, kind, false),
            _ => unreachable!(),
        };
        let reject = |r: &mut Raft| {
            if pre {
                let t = r.term;
                r.send_with_term(m.from, t, MessageBody::PreVoteResponse { reject: true });
            } else {
                r.send(
                    m.from,
                    MessageBody::VoteResponse {
                        reject: true,
                        accelerated: false,
                    },
                );
            }
        };
        if self.role == Role::Recovering {
            // Lost its log: its vote could elect a leader missing committed entries.
            reject(self);
            return;
        }
        if pre && m.term > self.term && self.in_lease() {
            reject(self);
            return;
        }
        let can_vote = self.vote == m.from
            || (self.vote == 0 && self.leader == 0)
            || (pre && m.term > self.term);
        if !(can_vote && self.log.is_up_to_date(li, lt)) {
            reject(self);
            return;
        }
        if pre {
            self.send_with_term(
                m.from,
                m.term,
                MessageBody::PreVoteResponse { reject: false },
            );
            return;
        }
        debug_assert_eq!(m.term, self.term);
        self.election_elapsed = 0;
        self.vote = m.from;
        let accelerated = kind == CampaignKind::Accelerate
            && self.cfg.dataplane
            && self.dp.state == DataPlaneState::Off
            && li == self.log.last_index()
            && lt == self.log.last_term();
        if accelerated {
            self.leader = m.from;
            let regs = self.follower_regs(m.from);
            self.dp.enable_follower(regs);
            self.counters.dataplane_enables += 1;
        }
        self.send(
            m.from,
            MessageBody::VoteResponse {
                reject: false,
                accelerated,
            },
        );
    }

    fn poll(&mut self, from: NodeId, granted: bool, accelerated: bool) {
        self.votes.record(from, granted, accelerated);
        match self.votes.result(&self.voters()) {
            VoteResult::Won => {
                if self.role == Role::PreCandidate {
                    self.run_campaign(CampaignKind::Election);
                } else {
                    self.win();
                }
            }
            VoteResult::Lost => {
                let t = self.term;
                self.become_follower(t, 0);
            }
            VoteResult::Pending => {}
        }
    }

    // ----------------------------------------------------------------- tick

    /// Advances logical time by one tick.
    ///
    /// The first on-time tick after a stall holds a timeout as a stalled tick does: it comes
    /// at any moment after the stall's replay (the phase of the ticks), maybe before the peers
    /// that stalled with this replica have run again and been heard. The next one, a full tick
    /// later, does not.
    pub fn tick(&mut self) {
        let kind = if std::mem::take(&mut self.after_stall) {
            TickKind::Stalled
        } else {
            TickKind::OnTime
        };
        self.step_tick(kind);
    }

    /// Advances logical time by one tick that passed while this replica could not run (its
    /// process was stopped or starved, one event held its loop): the host replays such ticks
    /// in step with the messages that arrived meanwhile.
    ///
    /// The clocks that guard safety count it as any tick: the lease, which expires in real
    /// time. But a stall is no evidence against a peer: what a live leader (or a follower's
    /// answer) sent may not have reached this replica yet, because the whole machine stalled
    /// with it. So a timeout that acts against a peer (a follower's election timeout, a
    /// leader's check-quorum, the data plane's) does not expire in a stall: it stands at its
    /// last tick, and expires at the second on-time tick (see [`Raft::tick`]) if nothing came
    /// by then. Bounded: held [`Raft::max_stall_hold`] ticks in a row, it expires anyway, so a
    /// loop that is late at every tick still times out a dead leader. Only liveness is at
    /// stake: a follower that holds is more loyal to its leader, which keeps a lease
    /// conservative.
    pub fn tick_stalled(&mut self) {
        self.tick_stalled_nth(0);
    }

    /// [`Raft::tick_stalled`] for the tick at place `nth` (from 0) of one stall's replay.
    ///
    /// Only a stall's first election timeout of ticks counts towards the bound on holding
    /// ([`Raft::max_stall_hold`]). The bound is for a loop late at every tick, whose every
    /// stall is short; one long stall is one event, however many ticks it counts. Counted
    /// whole, a replay whose gaps between frames (clients' requests, which restart no timer)
    /// summed past the bound expired a follower's timeout at resume, before the leader that
    /// stalled with it could be heard (the simulator's whole-cluster pause, seed 160).
    pub fn tick_stalled_nth(&mut self, nth: u64) {
        self.after_stall = true;
        self.step_tick(if nth < u64::from(self.cfg.election_tick) {
            TickKind::Stalled
        } else {
            TickKind::StalledLong
        });
    }

    /// The most ticks in a row a timeout is held at its last tick, of those that count
    /// towards it (a stall counts at most an election timeout of them, and the first on-time
    /// tick after it one more): two election timeouts and one.
    pub fn max_stall_hold(&self) -> u32 {
        2 * self.cfg.election_tick + 1
    }

    /// A timeout's `elapsed` ticks against its `limit`, after a tick of `kind`: held at its
    /// last tick if it has just expired on a stalled one (see [`Raft::tick_stalled`]), as it
    /// is otherwise. A tick that holds nothing ends a run of holds: a timeout restarted by a
    /// message (a heartbeat stepped in the replay) gets a run of its own.
    pub(crate) fn hold_in_stall(&mut self, kind: TickKind, elapsed: u32, limit: u32) -> u32 {
        if kind == TickKind::OnTime || elapsed < limit || self.stall_held >= self.max_stall_hold() {
            self.stall_held = 0;
            return elapsed;
        }
        if kind == TickKind::Stalled {
            self.stall_held += 1;
        }
        debug_assert!(self.stall_held <= self.max_stall_hold());
        self.counters.timeouts_held_in_stall += 1;
        limit - 1
    }

    fn step_tick(&mut self, kind: TickKind) {
        self.now += 1;
        self.log.reclaim();
        match self.dp.state {
            DataPlaneState::Disabling { .. } => return, // time stands still until disabled
            DataPlaneState::On { .. } => {
                self.tick_dataplane_on(kind);
                return;
            }
            _ => {}
        }
        if self.role == Role::Leader {
            self.tick_leader(kind);
        } else {
            self.tick_election(kind);
        }
    }

    fn tick_election(&mut self, kind: TickKind) {
        self.election_elapsed = self.election_elapsed.saturating_add(1);
        if !self.promotable() {
            return;
        }
        self.election_elapsed =
            self.hold_in_stall(kind, self.election_elapsed, self.randomized_timeout);
        if self.election_elapsed >= self.randomized_timeout {
            self.election_elapsed = 0;
            self.hup(CampaignKind::Election);
        }
    }

    fn tick_leader(&mut self, kind: TickKind) {
        self.heartbeat_elapsed += 1;
        self.election_elapsed += 1;
        self.dp.backoff_elapsed = self.dp.backoff_elapsed.saturating_add(1);
        // After a stall the check-quorum window ends at the second on-time tick: the
        // followers' answers may be on their way.
        self.election_elapsed =
            self.hold_in_stall(kind, self.election_elapsed, self.cfg.election_tick);
        if self.election_elapsed >= self.cfg.election_tick {
            self.election_elapsed = 0;
            if self.cfg.check_quorum && !self.quorum_active() {
                self.counters.check_quorum_step_downs += 1;
                let t = self.term;
                self.become_follower(t, 0);
                return;
            }
            if self.maybe_reelect_for_recovery() {
                return;
            }
            for pr in self.prs.values_mut() {
                pr.recent_active = false;
            }
        }
        if self.transferee != 0 {
            self.transfer_elapsed += 1;
            if self.transfer_elapsed >= self.cfg.election_tick {
                self.abort_transfer();
                self.counters.transfers_aborted += 1;
            }
        }
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick {
            self.heartbeat_elapsed = 0;
            self.bcast_heartbeat();
        }
        // Not in a stall's replay, nor at the on-time tick after it: what shows the followers
        // synchronized and active is from before the stall, and a campaign started at a
        // replayed tick has its election timer run down by the ticks replayed after it (a
        // leader lost its term so at resume: the simulator's whole-cluster pause, seed 305).
        if kind == TickKind::OnTime {
            self.maybe_enable_dataplane();
        }
    }

    /// A voter that restarted without its log in this very term finishes recovery only with
    /// an entry of a newer term. When such a voter has caught up (for two election timeouts in
    /// a row, so a lagging commit index is not mistaken for it), the leader re-elects itself
    /// in a new term, forced, as it does to enable the data plane. Only when the other voters
    /// can elect it: a quorum of non-recovering voters, itself included, is recently active.
    fn maybe_reelect_for_recovery(&mut self) -> bool {
        let committed = self.log.committed();
        if self.log.term(committed) != Some(self.term) {
            return false;
        }
        let mut stuck = false;
        for (&id, pr) in self.prs.iter_mut() {
            if id == self.cfg.id || pr.is_learner {
                continue;
            }
            if pr.recovering && pr.matched >= committed {
                pr.recovery_stuck = pr.recovery_stuck.saturating_add(1);
                stuck |= pr.recovery_stuck >= 2;
            } else {
                pr.recovery_stuck = 0;
            }
        }
        if !stuck {
            return false;
        }
        let me = self.cfg.id;
        let able = quorum::has_quorum(&self.voters(), |v| {
            v == me
                || self
                    .prs
                    .get(&v)
                    .is_some_and(|p| p.recent_active && !p.recovering)
        });
        if !able {
            return false;
        }
        self.counters.recovery_reelections += 1;
        self.run_campaign(CampaignKind::Forced);
        true
    }

    pub(crate) fn quorum_active(&self) -> bool {
        let id = self.cfg.id;
        quorum::has_quorum(&self.voters(), |v| {
            v == id || self.prs.get(&v).is_some_and(|p| p.recent_active)
        })
    }

    /// Tells `to` to campaign now (leader transfer), which ends this leader's lease.
    fn send_timeout_now(&mut self, to: NodeId) {
        debug_assert_eq!(self.role, Role::Leader);
        self.lease_revoked = true;
        self.send(to, MessageBody::TimeoutNow);
    }

    fn lease_valid(&self) -> bool {
        let id = self.cfg.id;
        let lease = u64::from(self.cfg.lease_ticks());
        let now = self.now;
        self.cfg.check_quorum
            && !self.lease_revoked
            && quorum::has_quorum(&self.voters(), |v| {
                v == id
                    || self
                        .prs
                        .get(&v)
                        .and_then(|p| p.last_active_tick)
                        .is_some_and(|t| now - t <= lease)
            })
    }

    // ----------------------------------------------------------------- step

    /// Processes a message from a peer. Malformed or inconsistent input is rejected with an
    /// error (and counted); it never panics and is never half-applied.
    pub fn step(&mut self, m: Message) -> Result<(), StepError> {
        if let Err(e) = self.validate(&m) {
            self.counters.messages_rejected += 1;
            return Err(e);
        }
        match self.dp.state {
            DataPlaneState::Disabling { .. } => {
                self.stash(m);
                return Ok(());
            }
            DataPlaneState::On { .. } => {
                if let Some(reason) = self.dataplane_trigger(&m) {
                    if !self.start_disable(reason) {
                        self.stash(m);
                        return Ok(());
                    }
                }
            }
            _ => {}
        }
        let r = self.step_inner(m);
        if r.is_err() {
            self.counters.messages_rejected += 1;
        }
        r
    }

    /// A sender is known if it is a member, the current leader (a leader that removed
    /// itself keeps leading until the removal commits), or a member of the previous
    /// configuration while the latest change is uncommitted. A replica with an empty
    /// configuration (joining, waiting for a snapshot) accepts anyone.
    fn is_known_sender(&self, from: NodeId) -> bool {
        let conf = self.conf_state();
        if conf.voters.is_empty() && conf.learners.is_empty() {
            return true;
        }
        if conf.contains(from) || from == self.leader {
            return true;
        }
        let n = self.confs.len();
        n >= 2 && self.confs[n - 1].0 > self.log.committed() && self.confs[n - 2].1.contains(from)
    }

    /// Static checks that do not depend on the role.
    fn validate(&self, m: &Message) -> Result<(), StepError> {
        if m.to != self.cfg.id {
            return Err(StepError::WrongRecipient { to: m.to });
        }
        if m.from == 0 || m.from == self.cfg.id {
            return Err(StepError::UnknownSender { from: m.from });
        }
        // A replica's configuration may be stale (it restarted without its log, or missed a
        // change), so leader traffic and vote requests from outside it are Raft-legal and must
        // be handled. Only TimeoutNow, which bypasses the election timer, needs a known sender;
        // responses from strangers find no progress entry and are ignored.
        if matches!(m.body, MessageBody::TimeoutNow) && !self.is_known_sender(m.from) {
            return Err(StepError::UnknownSender { from: m.from });
        }
        if m.term == 0 {
            return Err(StepError::MissingTerm);
        }
        match &m.body {
            MessageBody::PreVote { last_term, .. } | MessageBody::Vote { last_term, .. }
                if *last_term > m.term =>
            {
                return Err(StepError::Malformed("vote request log term above its term"));
            }
            MessageBody::Append {
                prev_index,
                prev_term,
                entries,
                commit,
            } => {
                if *prev_term > m.term || ((*prev_index == 0) != (*prev_term == 0)) {
                    return Err(StepError::Malformed("bad previous index/term"));
                }
                let mut t = *prev_term;
                for (i, e) in entries.iter().enumerate() {
                    if Some(e.index) != prev_index.checked_add(1 + i as Index) {
                        return Err(StepError::Malformed(
                            "entries do not follow prev_index consecutively",
                        ));
                    }
                    if e.term > m.term || e.term < t {
                        return Err(StepError::Malformed(
                            "entry term above message term or decreasing",
                        ));
                    }
                    if e.kind == EntryKind::ConfChange && ConfChange::decode(&e.data).is_none() {
                        return Err(StepError::Malformed("undecodable conf change entry"));
                    }
                    t = e.term;
                }
                if *commit > prev_index + entries.len() as Index {
                    return Err(StepError::Malformed("commit beyond the entries sent"));
                }
            }
            MessageBody::AppendResponse {
                reject,
                index,
                hint_index,
                hint_term,
                ..
            } if *reject && (*hint_index > *index || *hint_term > m.term) => {
                return Err(StepError::Malformed("reject hint above the rejected index"));
            }
            MessageBody::InstallSnapshot {
                meta,
                total,
                offset,
                data,
            } => {
                let end = offset.checked_add(data.len() as u64);
                if *total > crate::snapshot::MAX_SNAPSHOT_BYTES
                    || end.is_none_or(|e| e > *total)
                    || (data.is_empty() && *total != 0)
                {
                    return Err(StepError::Malformed("snapshot piece offset/length"));
                }
                if meta.index == 0 || meta.term == 0 || meta.term > m.term {
                    return Err(StepError::Malformed("snapshot index/term"));
                }
                if !meta.conf.is_well_formed() || meta.conf.voters.is_empty() {
                    return Err(StepError::Malformed("snapshot configuration"));
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn step_inner(&mut self, m: Message) -> Result<(), StepError> {
        if m.term > self.term {
            match &m.body {
                MessageBody::PreVote { .. } => {}
                MessageBody::PreVoteResponse { reject: false } => {}
                MessageBody::Vote { kind, .. } => {
                    if *kind == CampaignKind::Election && self.in_lease() {
                        // Heard from a leader recently: do not let a disruptive candidate in.
                        self.send(
                            m.from,
                            MessageBody::VoteResponse {
                                reject: true,
                                accelerated: false,
                            },
                        );
                        return Ok(());
                    }
                    self.become_follower(m.term, 0);
                }
                MessageBody::Append { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::Keepalive
                | MessageBody::InstallSnapshot { .. } => {
                    self.become_follower(m.term, m.from);
                }
                _ => self.become_follower(m.term, 0),
            }
        } else if m.term < self.term {
            match &m.body {
                MessageBody::Append { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::Keepalive
                    if self.cfg.check_quorum || self.cfg.pre_vote =>
                {
                    // Tell a stale leader our term so it steps down.
                    let recovering = self.role == Role::Recovering;
                    self.send(
                        m.from,
                        MessageBody::AppendResponse {
                            reject: false,
                            index: 0,
                            hint_index: 0,
                            hint_term: 0,
                            recovering,
                        },
                    );
                }
                MessageBody::PreVote { .. } => {
                    self.send(m.from, MessageBody::PreVoteResponse { reject: true });
                }
                _ => {}
            }
            return Ok(());
        }
        if matches!(
            m.body,
            MessageBody::PreVote { .. } | MessageBody::Vote { .. }
        ) {
            self.handle_vote_request(&m);
            return Ok(());
        }
        match self.role {
            Role::Leader => self.step_leader(m),
            Role::Candidate | Role::PreCandidate => self.step_candidate(m),
            Role::Follower | Role::Recovering => self.step_follower(m),
        }
    }

    fn step_leader(&mut self, m: Message) -> Result<(), StepError> {
        let from = m.from;
        match m.body {
            MessageBody::AppendResponse {
                reject,
                index,
                hint_index,
                hint_term,
                recovering,
            } => {
                self.handle_append_response(from, reject, index, hint_index, hint_term, recovering)
            }
            MessageBody::HeartbeatResponse { context } => {
                self.handle_heartbeat_response(from, context);
                Ok(())
            }
            MessageBody::KeepaliveResponse => {
                // Liveness only (see `keepalive_messages`): no lease, no read, no flow control.
                if let Some(pr) = self.prs.get_mut(&from) {
                    pr.recent_active = true;
                }
                Ok(())
            }
            MessageBody::SnapshotProgress { index, received } => {
                self.handle_snapshot_progress(from, index, received);
                Ok(())
            }
            MessageBody::ReadIndex { context } => {
                if self.leader_read(from, context.clone()).is_err() {
                    // Refused, not dropped: the follower serves the read through the log at
                    // once instead of waiting for an answer that will not come.
                    self.counters.reads_dropped += 1;
                    self.send(from, MessageBody::ReadIndexRefused { context });
                }
                Ok(())
            }
            MessageBody::Append { .. }
            | MessageBody::Heartbeat { .. }
            | MessageBody::Keepalive
            | MessageBody::InstallSnapshot { .. } => Err(StepError::Inconsistent(
                "another leader in this leader's term",
            )),
            _ => Ok(()),
        }
    }

    fn step_candidate(&mut self, m: Message) -> Result<(), StepError> {
        match m.body {
            MessageBody::Append { .. }
            | MessageBody::Heartbeat { .. }
            | MessageBody::Keepalive
            | MessageBody::InstallSnapshot { .. } => {
                // Someone won this term.
                let t = self.term;
                self.become_follower(t, m.from);
                self.step_follower(m)
            }
            MessageBody::PreVoteResponse { reject } if self.role == Role::PreCandidate => {
                self.poll(m.from, !reject, false);
                Ok(())
            }
            MessageBody::VoteResponse {
                reject,
                accelerated,
            } if self.role == Role::Candidate => {
                self.poll(m.from, !reject, accelerated);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn accept_leader(&mut self, from: NodeId) -> Result<(), StepError> {
        if self.leader != 0 && self.leader != from {
            return Err(StepError::Inconsistent("two leaders in one term"));
        }
        self.leader = from;
        self.election_elapsed = 0;
        Ok(())
    }

    fn step_follower(&mut self, m: Message) -> Result<(), StepError> {
        let from = m.from;
        match m.body {
            MessageBody::Append {
                prev_index,
                prev_term,
                entries,
                commit,
            } => {
                self.accept_leader(from)?;
                self.handle_append(from, prev_index, prev_term, entries, commit)?;
            }
            MessageBody::Heartbeat { commit, context } => {
                self.accept_leader(from)?;
                self.handle_heartbeat(from, commit, context)?;
            }
            MessageBody::Keepalive => {
                self.accept_leader(from)?;
                self.send(from, MessageBody::KeepaliveResponse);
            }
            MessageBody::InstallSnapshot {
                meta,
                total,
                offset,
                data,
            } => {
                self.accept_leader(from)?;
                self.handle_snapshot_chunk(from, meta, total, offset, data);
            }
            MessageBody::TimeoutNow => {
                // Leader transfer: campaign now, forced (hup ignores non-promotable replicas).
                self.hup(CampaignKind::Forced);
            }
            MessageBody::ReadIndexResponse { context, index } => {
                self.read_states.push(ReadState { index, context });
            }
            MessageBody::ReadIndexRefused { context } => {
                self.read_refusals.push(context);
            }
            MessageBody::ReadIndex { context } => {
                // Sent to a replica that does not lead (any more): the sender tries elsewhere.
                self.send(from, MessageBody::ReadIndexRefused { context });
            }
            _ => {}
        }
        self.maybe_finish_recovery();
        Ok(())
    }

    // ----------------------------------------------------------------- follower: replication

    pub(crate) fn append_response(
        &mut self,
        to: NodeId,
        reject: bool,
        index: Index,
        hint_index: Index,
        hint_term: Term,
    ) {
        let recovering = self.role == Role::Recovering;
        self.send(
            to,
            MessageBody::AppendResponse {
                reject,
                index,
                hint_index,
                hint_term,
                recovering,
            },
        );
    }

    fn handle_append(
        &mut self,
        from: NodeId,
        prev_index: Index,
        prev_term: Term,
        entries: Vec<Entry>,
        commit: Index,
    ) -> Result<(), StepError> {
        let committed = self.log.committed();
        if prev_index < committed {
            // Already have everything up to our commit: only the suffix can be new.
            let c = self.log.committed();
            self.append_response(from, false, c, 0, 0);
            return Ok(());
        }
        if !self.log.match_term(prev_index, prev_term) {
            let hint = prev_index.min(self.log.last_index());
            let (hint_index, hint_term) = self.log.find_conflict_by_term(hint, prev_term);
            self.append_response(from, true, prev_index, hint_index, hint_term);
            return Ok(());
        }
        let conflict = self.log.find_conflict(&entries);
        if conflict != 0 {
            if conflict <= self.log.committed() {
                return Err(StepError::Inconsistent(
                    "append conflicts with a committed entry",
                ));
            }
            let skip = (conflict - prev_index - 1) as usize;
            let new = &entries[skip..];
            if conflict <= self.log.last_index() {
                self.log.truncate(conflict);
                self.rollback_conf(conflict);
            }
            self.log.append(new);
            self.apply_conf_entries(new);
        }
        let last_new = prev_index + entries.len() as Index;
        self.log.commit_to(commit.min(last_new));
        self.append_response(from, false, last_new, 0, 0);
        Ok(())
    }

    fn handle_heartbeat(
        &mut self,
        from: NodeId,
        commit: Index,
        context: Vec<u8>,
    ) -> Result<(), StepError> {
        if commit > self.log.last_index() {
            if self.role != Role::Recovering {
                return Err(StepError::Inconsistent("heartbeat commit beyond the log"));
            }
            // Restarted without its log: tell the leader where it really is.
            let last = self.log.last_index();
            let lt = self.log.last_term();
            self.append_response(from, true, commit, last, lt);
        } else {
            self.log.commit_to(commit);
        }
        self.send(from, MessageBody::HeartbeatResponse { context });
        Ok(())
    }

    /// A recovering replica becomes a follower once its commit index points to an entry of
    /// the current leader's term, and that term is newer than the term it restarted in. Every
    /// entry committed with an acknowledgement it lost was committed in a term no newer than
    /// its restart term, so it precedes the current leader's first entry in the leader's log
    /// (Leader Completeness), and the replica's log equals the leader's up to its commit index.
    /// (A term merely equal to the restart term is not enough: its leader may have committed
    /// entries after the replica's commit index with the replica's lost acknowledgements.)
    fn maybe_finish_recovery(&mut self) {
        if self.role == Role::Recovering
            && self.leader != 0
            && self.term > self.restart_term
            && self.log.term(self.log.committed()) == Some(self.term)
        {
            self.role = Role::Follower;
            // Tell the leader now: it counts this replica as recovering until an append
            // response says otherwise, and an idle leader sends only heartbeats.
            let (leader, commit) = (self.leader, self.log.committed());
            self.append_response(leader, false, commit, 0, 0);
        }
    }

    // ----------------------------------------------------------------- leader: replication

    fn append_leader_entry(&mut self, kind: EntryKind, data: Vec<u8>) -> Index {
        debug_assert_eq!(self.role, Role::Leader);
        let e = Entry {
            term: self.term,
            index: self.log.last_index() + 1,
            kind,
            data: data.into(),
        };
        let index = e.index;
        self.log.append(std::slice::from_ref(&e));
        self.apply_conf_entries(std::slice::from_ref(&e));
        index
    }

    /// Sends to `to` if it is not paused. `send_empty`: also send an Append without entries
    /// (to carry the commit index or to probe). Returns whether a message was sent.
    fn maybe_send_append(&mut self, to: NodeId, send_empty: bool) -> bool {
        if !self.dp.software_replication() {
            return false;
        }
        let Some(pr) = self.prs.get(&to) else {
            return false;
        };
        if pr.is_paused() {
            return false;
        }
        let next = pr.next;
        let last = self.log.last_index();
        let prev_index = next - 1;
        let prev_term = self.log.term(prev_index);
        let compacted = prev_term.is_none() || (next <= last && next < self.log.first_index());
        if compacted {
            return self.start_snapshot(to);
        }
        let entries = self.log.slice(
            next,
            last,
            self.cfg.max_entries_per_msg,
            self.cfg.max_bytes_per_msg,
        );
        if entries.is_empty() && !send_empty {
            return false;
        }
        let n = entries.len();
        let bytes = entries.iter().map(|e| e.data.len()).sum();
        let sent_last = prev_index + n as Index;
        let commit = self.log.committed().min(sent_last);
        let pr = self.prs.get_mut(&to).expect("present");
        pr.sent(sent_last, n, bytes);
        let prev_term = prev_term.expect("checked");
        self.send(
            to,
            MessageBody::Append {
                prev_index,
                prev_term,
                entries,
                commit,
            },
        );
        true
    }

    /// Sends what each follower lacks (pipelined), and an Append to those that are up to date
    /// so they learn the commit index.
    pub(crate) fn bcast_append(&mut self) {
        let ids: Vec<NodeId> = self.prs.keys().copied().collect();
        for id in ids {
            self.send_all(id, true);
        }
    }

    fn send_all(&mut self, to: NodeId, first_empty: bool) {
        let mut empty = first_empty;
        while self.maybe_send_append(to, empty) {
            empty = false;
            if self
                .prs
                .get(&to)
                .is_none_or(|p| p.state != ProgressState::Replicate)
            {
                break;
            }
        }
    }

    /// What this replica's host may send for it while its loop cannot tick for a while (it
    /// applies a large value, the machine is busy), built without changing anything:
    ///
    /// - a leader replicating in software: the heartbeats a tick would send now, less the
    ///   ReadIndex context. Followers get them late or more than once, as a slow network
    ///   delivers ordinary heartbeats (the simulator's duplication and delay); they confirm no
    ///   read.
    /// - a leader whose data plane is on: a [`MessageBody::Keepalive`] to each follower,
    ///   which restarts its election timer, leaves its data plane on (`dataplane_trigger`) and
    ///   is answered with a [`MessageBody::KeepaliveResponse`]. A leader's data plane stops
    ///   ordering, and so sends no appends, once its stalled host falls a quarter ring behind
    ///   (`fp_shed_inline`): without it, followers timed out a live leader 100 ms into a stall
    ///   and the data plane handed off (50 closed-loop native writers on two CPUs,
    ///   `docs/dataplane.md`).
    /// - a follower that knows its leader: a [`MessageBody::KeepaliveResponse`], which keeps
    ///   the leader's check-quorum from stepping down but renews no lease and answers no read:
    ///   the stalled loop may already be granting a vote.
    ///
    /// So followers keep hearing their leader, and the leader its followers, during a stall
    /// that is not a failure.
    pub fn keepalive_messages(&self) -> Vec<Message> {
        let msg = |to: NodeId, body: MessageBody| Message {
            from: self.cfg.id,
            to,
            term: self.term,
            body,
        };
        match self.role {
            Role::Leader if self.dp.software_replication() => {
                let commit = self.log.committed();
                self.prs
                    .iter()
                    .map(|(id, p)| {
                        msg(
                            *id,
                            MessageBody::Heartbeat {
                                commit: p.matched.min(commit),
                                context: Vec::new(),
                            },
                        )
                    })
                    .collect()
            }
            Role::Leader if matches!(self.dp.state, DataPlaneState::On { .. }) => self
                .prs
                .keys()
                .filter(|&&id| id != self.cfg.id)
                .map(|&id| msg(id, MessageBody::Keepalive))
                .collect(),
            Role::Follower if self.leader != 0 && self.leader != self.cfg.id => {
                vec![msg(self.leader, MessageBody::KeepaliveResponse)]
            }
            _ => Vec::new(),
        }
    }

    fn bcast_heartbeat(&mut self) {
        if !self.dp.software_replication() {
            return;
        }
        let context = self.read_only.last_context();
        let commit = self.log.committed();
        let targets: Vec<(NodeId, Index)> = self
            .prs
            .iter()
            .map(|(id, p)| (*id, p.matched.min(commit)))
            .collect();
        for (id, c) in targets {
            self.send(
                id,
                MessageBody::Heartbeat {
                    commit: c,
                    context: context.clone(),
                },
            );
        }
    }

    fn handle_append_response(
        &mut self,
        from: NodeId,
        reject: bool,
        index: Index,
        hint_index: Index,
        hint_term: Term,
        recovering: bool,
    ) -> Result<(), StepError> {
        let now = self.now;
        let last = self.log.last_index();
        if !reject && index > last {
            return Err(StepError::Inconsistent("ack beyond the leader's log"));
        }
        let Some(pr) = self.prs.get_mut(&from) else {
            return Ok(());
        };
        pr.recent_active = true;
        pr.last_active_tick = Some(now);
        if recovering && (!pr.recovering || (reject && index <= pr.matched)) {
            // It restarted without its log (maybe again, while already recovering): what it
            // matched before is gone. A lower match is always safe; it only costs a probe.
            pr.matched = 0;
            pr.become_probe();
        }
        pr.recovering = recovering;
        if reject {
            self.counters.append_rejects_received += 1;
            let probe = if hint_term > 0 {
                self.log.find_conflict_by_term(hint_index, hint_term).0
            } else {
                hint_index
            };
            let pr = self.prs.get_mut(&from).expect("present");
            if pr.maybe_decr_to(index, probe) {
                if pr.state == ProgressState::Replicate {
                    pr.become_probe();
                }
                self.send_all(from, true);
            }
            return Ok(());
        }
        let was_paused = pr.is_paused();
        if pr.maybe_update(index) {
            match pr.state {
                ProgressState::Probe => pr.become_replicate(),
                ProgressState::Snapshot if pr.matched >= pr.pending_snapshot => pr.become_probe(),
                ProgressState::Snapshot => {}
                ProgressState::Replicate => pr.inflights.free_le(index),
            }
            if self.maybe_commit() {
                self.bcast_append();
            } else {
                self.send_all(from, was_paused);
            }
            if from == self.transferee && self.match_of(from) == self.log.last_index() {
                self.send_timeout_now(from);
            }
        }
        Ok(())
    }

    fn handle_heartbeat_response(&mut self, from: NodeId, context: Vec<u8>) {
        let now = self.now;
        let last = self.log.last_index();
        let election_tick = self.cfg.election_tick;
        let Some(pr) = self.prs.get_mut(&from) else {
            return;
        };
        pr.recent_active = true;
        pr.last_active_tick = Some(now);
        pr.probe_sent = false;
        if pr.state == ProgressState::Replicate && pr.inflights.full() {
            pr.inflights.free_first();
        }
        if pr.state == ProgressState::Snapshot {
            pr.snapshot_wait += 1;
            if pr.snapshot_wait >= election_tick {
                // No progress for an election timeout: probe again (a new transfer of the
                // same snapshot resumes where the follower's prefix ends).
                pr.become_probe();
            } else {
                self.snapshot_stalled(from);
            }
        }
        let Some(pr) = self.prs.get(&from) else {
            return;
        };
        if pr.matched < last || pr.recovering {
            // Possibly lost appends, or a recovering replica whose "caught up" answer may have
            // been lost: an (even empty) append makes the follower reveal its log and state.
            self.send_all(from, true);
        }
        if !context.is_empty() {
            let voters = self.voters();
            for req in self.read_only.ack(from, &context, &voters) {
                self.answer_read(req.from, req.index, req.context);
            }
        }
    }

    /// Commits the largest index a quorum matched, if it is of the current term (Raft §5.4.2).
    pub(crate) fn maybe_commit(&mut self) -> bool {
        if self.role != Role::Leader || !self.dp.software_replication() {
            return false;
        }
        let voters = self.voters();
        let mci = quorum::committed_index(&voters, |id| self.match_of(id));
        if mci > self.log.committed() && self.log.term(mci) == Some(self.term) {
            self.log.commit_to(mci);
            self.after_leader_commit();
            true
        } else {
            false
        }
    }

    /// A leader that removed itself steps down once the removal is committed.
    pub(crate) fn after_leader_commit(&mut self) {
        let (conf_index, conf) = self.confs.last().expect("non-empty").clone();
        if conf_index <= self.log.committed() {
            // Removed members heard of their removal through the log; stop replicating.
            let removed: Vec<NodeId> = self
                .prs
                .keys()
                .copied()
                .filter(|id| !conf.contains(*id))
                .collect();
            for id in removed {
                // One last append carries the commit index of the removal.
                self.send_all(id, true);
                self.prs.remove(&id);
            }
        }
        if self.role == Role::Leader
            && !conf.is_voter(self.cfg.id)
            && conf_index <= self.log.committed()
        {
            // Hand over to the most up-to-date voter, then step down.
            self.bcast_append();
            let last = self.log.last_index();
            let best = conf
                .voters
                .iter()
                .map(|v| (self.match_of(*v), std::cmp::Reverse(*v)))
                .max()
                .map(|(m, std::cmp::Reverse(v))| (v, m));
            if let Some((v, m)) = best {
                if m == last {
                    self.send_timeout_now(v);
                }
            }
            let t = self.term;
            self.become_follower(t, 0);
        }
    }

    // ----------------------------------------------------------------- membership

    fn apply_conf_entries(&mut self, entries: &[Entry]) {
        let mut changed = false;
        for e in entries.iter().filter(|e| e.kind == EntryKind::ConfChange) {
            let cc = ConfChange::decode(&e.data).expect("validated conf change");
            let cur = self.conf_state().clone();
            let next = cur.apply(cc).unwrap_or(cur);
            self.confs.push((e.index, next));
            changed = true;
        }
        if changed {
            self.on_conf_changed();
        }
    }

    /// Entries from `from` on were truncated: forget the configurations they carried.
    fn rollback_conf(&mut self, from: Index) {
        let before = self.confs.len();
        self.confs.retain(|(i, _)| *i < from);
        assert!(
            !self.confs.is_empty(),
            "the base configuration is never truncated"
        );
        if self.confs.len() != before {
            self.on_conf_changed();
        }
    }

    fn conf_at(&self, index: Index) -> ConfState {
        self.confs
            .iter()
            .rev()
            .find(|(i, _)| *i <= index)
            .map(|(_, c)| c.clone())
            .expect("base covers the log")
    }

    fn on_conf_changed(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let conf = self.conf_state().clone();
        let last = self.log.last_index();
        let (cap, cap_bytes) = (self.cfg.max_inflight_msgs, self.cfg.max_inflight_bytes);
        // A removed member keeps receiving the log until its removal commits, so that it
        // learns (by appending the entry) that it was removed and stops campaigning.
        let n = self.confs.len();
        let previous = (n >= 2 && self.confs[n - 1].0 > self.log.committed())
            .then(|| self.confs[n - 2].1.clone());
        self.prs.retain(|id, _| {
            conf.contains(*id) || previous.as_ref().is_some_and(|p| p.contains(*id))
        });
        for id in conf.voters.iter().chain(conf.learners.iter()) {
            if *id == self.cfg.id {
                continue;
            }
            let pr = self
                .prs
                .entry(*id)
                .or_insert_with(|| Progress::new(last + 1, cap, cap_bytes, false));
            pr.is_learner = conf.is_learner(*id);
        }
        if self.transferee != 0 && !conf.is_voter(self.transferee) {
            self.abort_transfer();
        }
        if self.maybe_commit() {
            self.bcast_append();
        }
    }

    /// Proposes a single-server membership change. It takes effect when appended; the leader
    /// accepts one only after it committed an entry of its term and while no other change is
    /// uncommitted (see `docs/membership.md`).
    pub fn propose_conf_change(&mut self, cc: ConfChange) -> Result<Index, ProposeError> {
        let r = self.propose_conf_change_inner(cc);
        if r.is_err() {
            self.counters.proposals_dropped += 1;
        }
        r
    }

    fn propose_conf_change_inner(&mut self, cc: ConfChange) -> Result<Index, ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        self.dataplane_gate(DisableReason::MembershipChange)?;
        if self.transferee != 0 {
            return Err(ProposeError::TransferInProgress);
        }
        if self.log.term(self.log.committed()) != Some(self.term) {
            return Err(ProposeError::NotCommittedInTerm);
        }
        let latest_conf_index = self.confs.last().expect("non-empty").0;
        if self.pending_conf_index > self.log.committed()
            || latest_conf_index > self.log.committed()
        {
            return Err(ProposeError::ConfChangePending);
        }
        let Some(next) = self.conf_state().apply(cc) else {
            return Err(ProposeError::InvalidConfChange);
        };
        // A change that keeps the voters (a learner added or removed) cannot take away a
        // quorum the group still has: it is never refused for lagging voters.
        let voters_change = next.voters != self.conf_state().voters;
        let able = next
            .voters
            .iter()
            .filter(|&&v| v == self.cfg.id || self.can_vote_now(v))
            .count();
        if voters_change && able < next.voters.len() / 2 + 1 {
            return Err(ProposeError::WouldLoseQuorum);
        }
        let index = self.append_leader_entry(EntryKind::ConfChange, cc.encode());
        self.pending_conf_index = index;
        self.bcast_append();
        Ok(index)
    }

    /// Whether the configuration in force is committed (no membership change in flight).
    pub fn conf_committed(&self) -> bool {
        self.confs.last().expect("non-empty").0 <= self.log.committed()
    }

    /// Leader's view: `id` was heard from within an election timeout, is not recovering a
    /// lost log, and is caught up to within one batch of the leader's log.
    fn can_vote_now(&self, id: NodeId) -> bool {
        let now = self.now;
        let window = u64::from(self.cfg.election_tick);
        let last = self.log.last_index();
        let batch = self.cfg.max_entries_per_msg as Index;
        self.prs.get(&id).is_some_and(|pr| {
            !pr.recovering
                && pr
                    .last_active_tick
                    .is_some_and(|t| now.saturating_sub(t) <= window)
                && pr.matched + batch >= last
        })
    }

    // ----------------------------------------------------------------- proposals

    /// Proposes `data`. Leader only.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<Proposal, ProposeError> {
        let r = self.propose_inner(data);
        if r.is_err() {
            self.counters.proposals_dropped += 1;
        }
        r
    }

    fn propose_inner(&mut self, data: Vec<u8>) -> Result<Proposal, ProposeError> {
        if matches!(self.dp.state, DataPlaneState::Enabling { .. }) {
            // The leader is re-electing itself to enable the data plane.
            return Err(ProposeError::Retry);
        }
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        if matches!(self.dp.state, DataPlaneState::On { .. })
            && data.len() > self.cfg.dataplane_max_proposal
        {
            // It does not fit a packet: software replicates it, after a hand-off (as for a
            // membership change); the data plane comes back by itself.
            self.dataplane_gate(DisableReason::LargeProposal)?;
        }
        match self.dp.state {
            DataPlaneState::On { .. } => {
                let ordered = self.log.last_index().saturating_sub(self.log.committed());
                if ordered + self.dp.proposals.len() as u64 >= self.cfg.dataplane_max_inflight {
                    self.counters.dataplane_busy += 1;
                    return Err(ProposeError::Busy);
                }
                self.dp.proposals.push(data);
                return Ok(Proposal::ViaDataPlane);
            }
            DataPlaneState::Disabling { .. } | DataPlaneState::Enabling { .. } => {
                return Err(ProposeError::Retry)
            }
            DataPlaneState::Off => {}
        }
        if self.transferee != 0 {
            return Err(ProposeError::TransferInProgress);
        }
        if !self.conf_state().is_voter(self.cfg.id) {
            return Err(ProposeError::NotLeader { leader: 0 });
        }
        if self.log.last_index() - self.log.committed() >= self.cfg.max_uncommitted_entries {
            return Err(ProposeError::Busy);
        }
        let index = self.append_leader_entry(EntryKind::Normal, data);
        self.bcast_append();
        Ok(Proposal::Appended(index))
    }

    // ----------------------------------------------------------------- leader transfer

    /// Transfers leadership to voter `to`: proposals stop, `to` is brought up to date and
    /// told to campaign (TimeoutNow). Aborted after an election timeout.
    pub fn transfer_leader(&mut self, to: NodeId) -> Result<(), ProposeError> {
        let r = self.transfer_leader_inner(to);
        if r.is_err() {
            self.counters.proposals_dropped += 1;
        }
        r
    }

    fn transfer_leader_inner(&mut self, to: NodeId) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader {
                leader: self.leader,
            });
        }
        if to == self.cfg.id {
            return Ok(());
        }
        if !self.conf_state().is_voter(to) || self.prs.get(&to).is_none_or(|p| p.recovering) {
            return Err(ProposeError::InvalidTransferTarget);
        }
        self.dataplane_gate(DisableReason::LeaderTransfer)?;
        if self.transferee == to {
            return Ok(());
        }
        self.transferee = to;
        self.transfer_elapsed = 0;
        if self.match_of(to) == self.log.last_index() {
            self.send_timeout_now(to);
        } else {
            self.send_all(to, true);
        }
        Ok(())
    }

    fn abort_transfer(&mut self) {
        self.transferee = 0;
        self.transfer_elapsed = 0;
    }

    // ----------------------------------------------------------------- reads

    /// Starts a linearizable read identified by `context` (non-empty). The answer arrives in
    /// `Ready::read_states`: the read may be served once the applied index reaches its index.
    /// Followers forward the request to the leader. While the data plane is enabled reads go
    /// through the data plane (`ReadError::DataPlaneEnabled`).
    pub fn read_index(&mut self, context: Vec<u8>) -> Result<(), ReadError> {
        if context.is_empty() {
            return Err(ReadError::EmptyContext);
        }
        match self.dp.state {
            DataPlaneState::On { .. } => return Err(ReadError::DataPlaneEnabled),
            DataPlaneState::Disabling { .. } | DataPlaneState::Enabling { .. } => {
                return Err(ReadError::Retry)
            }
            DataPlaneState::Off => {}
        }
        if self.role == Role::Leader {
            let id = self.cfg.id;
            return self.leader_read(id, context);
        }
        if self.leader == 0 {
            return Err(ReadError::NoLeader);
        }
        let l = self.leader;
        self.send(l, MessageBody::ReadIndex { context });
        Ok(())
    }

    fn leader_read(&mut self, from: NodeId, context: Vec<u8>) -> Result<(), ReadError> {
        if !self.dp.software_replication() {
            return Err(ReadError::DataPlaneEnabled);
        }
        if self.log.term(self.log.committed()) != Some(self.term) {
            return Err(ReadError::NotCommittedInTerm);
        }
        let commit = self.log.committed();
        let id = self.cfg.id;
        let voters = self.voters();
        if voters == [id] || (self.cfg.read_mode == ReadMode::Lease && self.lease_valid()) {
            self.answer_read(from, commit, context);
            return Ok(());
        }
        self.read_only.add(id, from, commit, context);
        self.bcast_heartbeat();
        Ok(())
    }

    fn answer_read(&mut self, to: NodeId, index: Index, context: Vec<u8>) {
        if to == self.cfg.id {
            self.read_states.push(ReadState { index, context });
        } else {
            self.send(to, MessageBody::ReadIndexResponse { context, index });
        }
    }

    // ----------------------------------------------------------------- compaction

    /// What a snapshot of the state at applied `index` covers (its term and the configuration
    /// in force there), for a host that writes the snapshot before it calls
    /// [`Raft::compact`]; `None` if `index` is not applied or no longer in the log.
    pub fn snapshot_meta(&self, index: Index) -> Option<SnapshotMeta> {
        if index > self.log.applied() || index <= self.log.snapshot_index() {
            return None;
        }
        Some(SnapshotMeta {
            index,
            term: self.log.term(index)?,
            conf: self.conf_at(index),
        })
    }

    /// The host snapshotted its state machine at applied `index`: keep `data` as the snapshot
    /// and drop the entries it covers.
    pub fn compact(&mut self, index: Index, data: impl Into<Bytes>) -> Result<(), CompactError> {
        if index <= self.log.snapshot_index() {
            return Err(CompactError::AlreadyCompacted);
        }
        if index > self.log.applied() {
            return Err(CompactError::NotApplied);
        }
        if let Some(to) = self.snapshot_in_transfer() {
            return Err(CompactError::InTransfer { to });
        }
        let term = self.log.term(index).expect("applied entries are in memory");
        let conf = self.conf_at(index);
        self.log.compact(Snapshot {
            meta: SnapshotMeta { index, term, conf },
            data: data.into(),
        });
        // Keep the configuration in force at `index` as the new base.
        let base = self
            .confs
            .iter()
            .rposition(|(i, _)| *i <= index)
            .expect("base covers the log");
        self.confs.drain(..base);
        Ok(())
    }

    // ----------------------------------------------------------------- ready / advance

    fn soft_state(&self) -> SoftState {
        SoftState {
            leader: self.leader,
            role: self.role,
        }
    }

    /// Whether [`Raft::ready`] has anything to do.
    pub fn has_ready(&self) -> bool {
        self.soft_state() != self.prev_soft
            || self.hard_state() != self.prev_hard
            || self.log.has_unstable()
            || self.log.has_pending_snapshot()
            || !self.msgs.is_empty()
            || self.log.has_committed()
            || !self.read_states.is_empty()
            || !self.read_refusals.is_empty()
            || self.dp.cmd.is_some()
            || !self.dp.proposals.is_empty()
    }

    /// Collects everything the host must do (see [`Ready`] for the order). Entries and
    /// committed entries are handed out exactly once.
    pub fn ready(&mut self) -> Ready {
        let soft = self.soft_state();
        let hard = self.hard_state();
        let soft_state = (soft != self.prev_soft).then_some(soft);
        let hard_state = (hard != self.prev_hard).then_some(hard);
        self.prev_soft = soft;
        self.prev_hard = hard;
        // Check-quorum while On counts pushes once handed out, not when queued: ticks that a
        // starved loop replays queue heartbeats nobody has sent yet, and a window that closed
        // on those found "pushed, nothing committed" and stepped a healthy leader down.
        self.dp.window_pushed += self.dp.proposals.len() as u64;
        Ready {
            soft_state,
            hard_state,
            snapshot: self.log.take_pending_snapshot(),
            entries: self.log.take_unstable(),
            messages: std::mem::take(&mut self.msgs),
            committed_entries: self
                .log
                .take_committed(self.cfg.max_committed_bytes_per_ready),
            read_states: std::mem::take(&mut self.read_states),
            read_refusals: std::mem::take(&mut self.read_refusals),
            dataplane: self.dp.cmd.take(),
            dataplane_proposals: std::mem::take(&mut self.dp.proposals),
        }
    }

    /// The host persisted, sent and applied everything of the previous ready. A software
    /// leader counts itself toward commit only for persisted entries.
    pub fn advance(&mut self) {
        self.log.advance();
        if self.role == Role::Leader && self.maybe_commit() {
            self.bcast_append();
        }
    }
}

fn self_regs_leader(r: &Raft) -> DataPlaneRegisters {
    r.leader_regs()
}
