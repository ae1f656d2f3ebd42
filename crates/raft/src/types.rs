//! Plain data types of the Raft core: entries, messages, states, the ready batch.
//!
//! This file is the API contract the simulator and the node are written against.

pub use bytes::Bytes;

/// A replica's identity. `0` is never a valid id ("none").
pub type NodeId = u64;
/// A Raft term.
pub type Term = u64;
/// A log index. The first entry has index 1; index 0 is "before the log".
pub type Index = u64;

/// What an entry carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// Application data; empty data is a no-op (the leader's election entry, a heartbeat).
    Normal,
    /// A membership change; `data` is an encoded [`ConfChange`] (see `ConfChange::encode`).
    ConfChange,
}

/// One log entry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// Term of the leader that created the entry.
    pub term: Term,
    /// Position in the log.
    pub index: Index,
    /// What `data` is.
    pub kind: EntryKind,
    /// The payload: a shared buffer, so the entry is cloned for every follower, the ready
    /// batch and the applier without copying a large value.
    pub data: Bytes,
}

/// The state that must be persisted before messages of the same ready batch are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HardState {
    /// Latest term seen.
    pub term: Term,
    /// Candidate voted for in `term`, 0 for none.
    pub vote: NodeId,
    /// Highest index known committed.
    pub commit: Index,
}

/// The membership of the group. Changes are one server at a time (see `docs/membership.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConfState {
    /// Voting members, sorted.
    pub voters: Vec<NodeId>,
    /// Non-voting members that receive the log, sorted.
    pub learners: Vec<NodeId>,
}

/// A single-server membership change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfChange {
    /// Add a non-voting member that receives the log.
    AddLearner(NodeId),
    /// Promote a learner (or add directly) as a voter.
    AddVoter(NodeId),
    /// Remove a voter or learner (the leader may remove itself).
    Remove(NodeId),
}

impl ConfChange {
    /// Encodes the change as the `data` of an [`EntryKind::ConfChange`] entry:
    /// one tag byte (`1` AddLearner, `2` AddVoter, `3` Remove) then the id, 8 bytes little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let (tag, id) = match *self {
            ConfChange::AddLearner(id) => (1u8, id),
            ConfChange::AddVoter(id) => (2u8, id),
            ConfChange::Remove(id) => (3u8, id),
        };
        let mut out = Vec::with_capacity(9);
        out.push(tag);
        out.extend_from_slice(&id.to_le_bytes());
        out
    }

    /// Decodes [`ConfChange::encode`]'s output; `None` if malformed (wrong length, unknown tag,
    /// id 0).
    pub fn decode(data: &[u8]) -> Option<ConfChange> {
        if data.len() != 9 {
            return None;
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&data[1..]);
        let id = u64::from_le_bytes(id);
        if id == 0 {
            return None;
        }
        match data[0] {
            1 => Some(ConfChange::AddLearner(id)),
            2 => Some(ConfChange::AddVoter(id)),
            3 => Some(ConfChange::Remove(id)),
            _ => None,
        }
    }

    /// The node the change is about.
    pub fn node(&self) -> NodeId {
        match *self {
            ConfChange::AddLearner(id) | ConfChange::AddVoter(id) | ConfChange::Remove(id) => id,
        }
    }
}

impl ConfState {
    /// Whether `id` is a voter.
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.binary_search(&id).is_ok()
    }

    /// Whether `id` is a learner.
    pub fn is_learner(&self, id: NodeId) -> bool {
        self.learners.binary_search(&id).is_ok()
    }

    /// Whether `id` is a voter or a learner.
    pub fn contains(&self, id: NodeId) -> bool {
        self.is_voter(id) || self.is_learner(id)
    }

    /// Checks the invariants: sorted, no duplicates, no id 0, voters and learners disjoint.
    pub fn is_well_formed(&self) -> bool {
        let sorted = |v: &[NodeId]| v.windows(2).all(|w| w[0] < w[1]);
        sorted(&self.voters)
            && sorted(&self.learners)
            && !self.voters.contains(&0)
            && !self.learners.contains(&0)
            && self.voters.iter().all(|v| !self.is_learner(*v))
    }

    /// The configuration after `cc`. Returns `None` when `cc` does not apply: adding an existing
    /// member in the same role, removing a non-member, or removing the last voter.
    pub fn apply(&self, cc: ConfChange) -> Option<ConfState> {
        let mut next = self.clone();
        match cc {
            ConfChange::AddLearner(id) => {
                if self.contains(id) {
                    return None;
                }
                next.learners.push(id);
                next.learners.sort_unstable();
            }
            ConfChange::AddVoter(id) => {
                if self.is_voter(id) {
                    return None;
                }
                next.learners.retain(|l| *l != id);
                next.voters.push(id);
                next.voters.sort_unstable();
            }
            ConfChange::Remove(id) => {
                if !self.contains(id) || (self.is_voter(id) && self.voters.len() == 1) {
                    return None;
                }
                next.voters.retain(|v| *v != id);
                next.learners.retain(|l| *l != id);
            }
        }
        Some(next)
    }
}

/// Metadata of a snapshot: the state covers the log up to and including `index`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SnapshotMeta {
    /// Index of the last entry covered.
    pub index: Index,
    /// Term of the last entry covered.
    pub term: Term,
    /// Membership as of `index`.
    pub conf: ConfState,
}

/// A state-machine snapshot with its metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Snapshot {
    /// What the snapshot covers.
    pub meta: SnapshotMeta,
    /// The state machine's serialized state: shared, so sending it to a follower that needs it
    /// does not copy the whole state on the leader's loop.
    pub data: Bytes,
}

/// Why a campaign is run; carried on vote requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CampaignKind {
    /// An ordinary election after an election timeout (preceded by pre-vote if enabled).
    Election,
    /// Leader transfer or a leader re-electing itself after a data-plane deviation:
    /// voters grant without the check-quorum lease test.
    Forced,
    /// The paper's RequestVoteFPGA: a forced election whose granting voters, if their log ends
    /// exactly where the candidate's does, enable their data plane for the new term.
    Accelerate,
}

/// A message between replicas. `term == 0` only on messages that carry no term.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Sender.
    pub from: NodeId,
    /// Recipient.
    pub to: NodeId,
    /// Sender's term (a pre-vote carries the term it would campaign in).
    pub term: Term,
    /// The payload.
    pub body: MessageBody,
}

/// The message kinds of the control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // variant fields: `last_index`/`last_term` describe the sender's log
pub enum MessageBody {
    /// Would you vote for me in `term` (the message's term)? Changes no state.
    PreVote { last_index: Index, last_term: Term },
    /// Answer to a pre-vote.
    PreVoteResponse { reject: bool },
    /// RequestVote (§5.2).
    Vote {
        last_index: Index,
        last_term: Term,
        kind: CampaignKind,
    },
    /// `accelerated`: the voter granted and enabled its data plane for this term.
    VoteResponse { reject: bool, accelerated: bool },
    /// AppendEntries (§5.3): `entries` follow (`prev_index`, `prev_term`); `commit` is the
    /// leader's commit index capped at the last entry sent.
    Append {
        prev_index: Index,
        prev_term: Term,
        entries: Vec<Entry>,
        commit: Index,
    },
    /// Success: `index` is the follower's new match index. Reject: `index` is the rejected
    /// `prev_index`, `hint_index`/`hint_term` let the leader skip back (fast backtracking).
    /// `recovering`: the sender restarted without its log and may not vote yet.
    AppendResponse {
        reject: bool,
        index: Index,
        hint_index: Index,
        hint_term: Term,
        recovering: bool,
    },
    /// Leader heartbeat; `context` is non-empty when it confirms a ReadIndex round.
    Heartbeat { commit: Index, context: Vec<u8> },
    /// Answer to a heartbeat, echoing its context.
    HeartbeatResponse { context: Vec<u8> },
    /// A stalled leader's keepalive while its data plane replicates (`Raft::keepalive_messages`):
    /// it restarts the follower's election timer and touches neither the log nor the commit
    /// index (the data plane owns both).
    Keepalive,
    /// A liveness-only answer (to a [`MessageBody::Keepalive`], or a stalled follower's own):
    /// it keeps the leader's check-quorum from stepping down but renews no lease, answers no
    /// read and moves no flow control, because the stalled follower may be granting a vote in
    /// the batch it is busy with.
    KeepaliveResponse,
    /// InstallSnapshot (§7), one piece: `data` is the snapshot's bytes at `offset` of its
    /// `total` (see `snapshot.rs`).
    InstallSnapshot {
        meta: SnapshotMeta,
        total: u64,
        offset: u64,
        data: Bytes,
    },
    /// A follower holds the first `received` bytes of the snapshot at `index` (answers every
    /// piece but the last, which an AppendResponse answers once installed).
    SnapshotProgress { index: Index, received: u64 },
    /// Leader transfer: campaign now, forced.
    TimeoutNow,
    /// A follower forwarding a ReadIndex request to the leader.
    ReadIndex { context: Vec<u8> },
    /// The leader's answer: the read may be served once `index` is applied.
    ReadIndexResponse { context: Vec<u8>, index: Index },
    /// The receiver cannot answer this ReadIndex now (its data plane replicates, it has not
    /// committed an entry of its term yet, or it does not lead): serve the read another way
    /// (through the log) instead of waiting.
    ReadIndexRefused { context: Vec<u8> },
}

/// The role of a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Follows a leader (or waits for one).
    Follower,
    /// Runs a pre-vote round (term unchanged).
    PreCandidate,
    /// Runs an election in a new term.
    Candidate,
    /// Leads its term.
    Leader,
    /// A replica that restarted without its log (durability `memory`): it follows, acknowledges,
    /// but does not vote or campaign until it has caught up with a leader of the current term.
    Recovering,
}

/// Volatile state reported when it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SoftState {
    /// Known leader, 0 if none.
    pub leader: NodeId,
    /// Current role.
    pub role: Role,
}

/// A read that is safe to serve once the applied index reaches `index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadState {
    /// The commit index the read must wait for.
    pub index: Index,
    /// The context given to `read_index`.
    pub context: Vec<u8>,
}

/// Why the data plane is (being) disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DisableReason {
    /// The data plane saw a term other than its own.
    TermMismatch,
    /// The data plane saw an append whose previous index/term does not match.
    LogMismatch,
    /// A follower rejected an append (leader side).
    RejectReceived,
    /// A gap was not filled by retransmission within the bound.
    RetransmitExhausted,
    /// The software election timer fired (follower) or check-quorum failed (leader).
    ElectionTimeout,
    /// A membership change was proposed.
    MembershipChange,
    /// A follower needs a snapshot.
    SnapshotNeeded,
    /// Leader transfer was requested.
    LeaderTransfer,
    /// The software received a message of a new term, or a software append in the enabled term.
    NewTerm,
    /// The host asked (shutdown, operator).
    Host,
    /// A proposal larger than a data-plane packet (`Config::dataplane_max_proposal`).
    LargeProposal,
}

/// The registers the core hands to the data plane on enable and reads back on disable
/// (the paper's CSRs, Appendix C).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataPlaneRegisters {
    /// This replica.
    pub self_id: NodeId,
    /// The leader of the enabled term.
    pub leader_id: NodeId,
    /// Whether this replica leads.
    pub is_leader: bool,
    /// The enabled term (currentTerm).
    pub term: Term,
    /// lastLogIndex.
    pub last_index: Index,
    /// lastLogTerm.
    pub last_term: Term,
    /// commitIndex.
    pub commit_index: Index,
    /// First index of the enabled term; the data plane counts commits only from here.
    pub term_start_index: Index,
    /// Every voter (self included) with its match index, sorted by id.
    pub match_index: Vec<(NodeId, Index)>,
    /// Followers acknowledge only after the host persisted (durability `fsync`).
    pub defer_ack: bool,
}

/// What the core asks the host to do with the data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataPlaneCommand {
    /// Load the registers and set the enable flag before sending this ready's messages.
    Enable(DataPlaneRegisters),
    /// Clear the enable flag, wait until idle, drain the ring into the core, then call
    /// `Raft::dataplane_disabled` with the registers read back.
    Disable(DisableReason),
}

/// Everything the host must do after a step: persist, send, apply, drive the data plane.
///
/// Order: (1) apply `dataplane` Disable/Enable, (2) persist `snapshot`, `entries` (entries
/// overwrite any stored entry at the same or a higher index) and `hard_state`, (3) send
/// `messages`, (4) apply `committed_entries`, then call `Raft::advance`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// Role or leader changed.
    pub soft_state: Option<SoftState>,
    /// Term, vote or commit changed: persist.
    pub hard_state: Option<HardState>,
    /// A snapshot received from the leader: persist and restore the state machine from it.
    pub snapshot: Option<Snapshot>,
    /// Entries to persist (they replace stored entries at the same or higher indexes).
    pub entries: Vec<Entry>,
    /// Messages to send after persisting.
    pub messages: Vec<Message>,
    /// Entries to apply, in order, each exactly once.
    pub committed_entries: Vec<Entry>,
    /// Reads that may be served once their index is applied.
    pub read_states: Vec<ReadState>,
    /// Contexts of this replica's ReadIndex requests that the leader refused: serve them
    /// another way (through the log). Never served from a read state.
    pub read_refusals: Vec<Vec<u8>>,
    /// Data-plane command, applied first.
    pub dataplane: Option<DataPlaneCommand>,
    /// While the data plane is enabled on the leader: client payloads (and empty heartbeats)
    /// that the host must push through the data plane as client requests, in order.
    pub dataplane_proposals: Vec<Vec<u8>>,
}
