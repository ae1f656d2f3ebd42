//! Configuration of one Raft replica and what it is started from.

use crate::errors::ConfigError;
use crate::types::{ConfState, Entry, HardState, NodeId, Snapshot};

/// How the leader answers [`crate::Raft::read_index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadMode {
    /// Confirm leadership with a heartbeat round before answering (Raft §6.4). Safe without
    /// any timing assumption.
    ReadIndex,
    /// Answer from the commit index while the leader holds a lease: it heard from a quorum
    /// within the election timeout minus a safety margin. Requires `check_quorum` and assumes
    /// that clocks advance at about the same rate on every replica (drift smaller than the
    /// margin, see [`Config::lease_ticks`]); otherwise falls back to a ReadIndex round.
    Lease,
}

/// Static configuration of one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This replica's id (never 0).
    pub id: NodeId,
    /// Base election timeout in ticks; the randomized timeout is in
    /// `[election_tick, 2 * election_tick)`.
    pub election_tick: u32,
    /// Ticks between leader heartbeats (must be smaller than `election_tick`).
    pub heartbeat_tick: u32,
    /// At most this many entries per Append message (at least one is always sent).
    pub max_entries_per_msg: usize,
    /// At most this many payload bytes per Append message (at least one entry is always sent).
    pub max_bytes_per_msg: usize,
    /// Pipelining window: at most this many unacknowledged Append messages per follower in
    /// the Replicate state.
    pub max_inflight_msgs: usize,
    /// Pipelining window in bytes: at most this much entry data unacknowledged per follower
    /// (an empty window always takes one message, however large its one entry); also the
    /// window of a snapshot transfer.
    pub max_inflight_bytes: usize,
    /// A snapshot is sent in pieces of at most this many bytes.
    pub snapshot_chunk_bytes: usize,
    /// A leader holds at most this many entries past its commit index: further proposals are
    /// refused ([`crate::ProposeError::Busy`]) until some commit. A leader that cannot reach
    /// a majority stops growing a log that every follower must then replay (the simulator
    /// found a cut-off leader holding 1 500 uncommitted entries, which its followers took
    /// longer to replay than the time allowed to recover).
    pub max_uncommitted_entries: u64,
    /// A ready batch hands out at most this many bytes of committed entries (at least one
    /// entry); the rest comes in the next. A replica that fell behind then applies in slices
    /// its host can interleave with ticks and events, not in one batch of everything.
    pub max_committed_bytes_per_ready: usize,
    /// Run a pre-vote round before a real election (Raft dissertation §9.6).
    pub pre_vote: bool,
    /// The leader steps down when it has not heard from a quorum within an election timeout,
    /// and followers that heard from a leader within the election timeout ignore votes.
    pub check_quorum: bool,
    /// How reads are served.
    pub read_mode: ReadMode,
    /// Seed of the deterministic PRNG (mixed with `id`).
    pub seed: u64,
    /// This replica may hand replication over to a data plane.
    pub dataplane: bool,
    /// Durability `fsync`: the data plane acknowledges only after the host persisted.
    pub defer_ack: bool,
    /// Minimum ticks between two attempts to enable the data plane (and after a disable).
    pub enable_backoff_ticks: u32,
    /// The largest proposal the data plane carries (one packet's payload; the host that
    /// drives the data plane sets it). A larger one is replicated by software: the leader
    /// hands over first ([`crate::DisableReason::LargeProposal`]).
    pub dataplane_max_proposal: usize,
    /// With the data plane on, the leader holds at most this many entries ordered and not
    /// committed, with the proposals waiting to be pushed: further proposals are refused
    /// ([`crate::ProposeError::Busy`]) until some commit. The data plane sheds its clients'
    /// requests at the same bound (its window, `SHED_INFLIGHT_XDP` or `SHED_INFLIGHT_UDP`;
    /// the host that drives it sets it); the host's own proposals then do not pile up in the
    /// network instead.
    pub dataplane_max_inflight: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            id: 1,
            election_tick: 10,
            heartbeat_tick: 1,
            max_entries_per_msg: 64,
            max_bytes_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            max_inflight_bytes: 16 << 20,
            snapshot_chunk_bytes: 512 << 10,
            max_uncommitted_entries: 8_192,
            max_committed_bytes_per_ready: 256 << 10,
            pre_vote: true,
            check_quorum: true,
            read_mode: ReadMode::ReadIndex,
            seed: 0,
            dataplane: false,
            defer_ack: false,
            dataplane_max_proposal: usize::MAX,
            dataplane_max_inflight: u64::MAX,
            enable_backoff_ticks: 10,
        }
    }
}

impl Config {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.id == 0 {
            return Err(ConfigError::InvalidId);
        }
        if self.heartbeat_tick == 0 {
            return Err(ConfigError::InvalidTicks("heartbeat_tick must be > 0"));
        }
        if self.election_tick <= self.heartbeat_tick {
            return Err(ConfigError::InvalidTicks(
                "election_tick must be > heartbeat_tick",
            ));
        }
        if self.max_entries_per_msg == 0 || self.max_bytes_per_msg == 0 {
            return Err(ConfigError::InvalidLimits(
                "message size limits must be > 0",
            ));
        }
        if self.snapshot_chunk_bytes == 0 {
            return Err(ConfigError::InvalidLimits(
                "snapshot_chunk_bytes must be > 0",
            ));
        }
        if self.max_uncommitted_entries == 0 {
            return Err(ConfigError::InvalidLimits(
                "max_uncommitted_entries must be > 0",
            ));
        }
        if self.max_inflight_msgs == 0 || self.max_inflight_bytes == 0 {
            return Err(ConfigError::InvalidLimits(
                "max_inflight_msgs and max_inflight_bytes must be > 0",
            ));
        }
        Ok(())
    }

    /// Length of a leader lease in ticks: `election_tick` minus a safety margin of
    /// `max(1, election_tick / 4)` ticks that absorbs clock drift between replicas and the
    /// delay of the acknowledgement that renewed the lease.
    pub fn lease_ticks(&self) -> u32 {
        let margin = (self.election_tick / 4).max(1);
        self.election_tick.saturating_sub(margin)
    }
}

/// What a replica starts from: its persisted state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bootstrap {
    /// Persisted term, vote and commit.
    pub hard_state: HardState,
    /// Initial membership, used when there is no snapshot (conf entries in `entries` apply on
    /// top). Every replica, a joining one included, must start from the group's initial
    /// membership (a joining replica's own id need not be in it): the conf-change entries of
    /// the log are applied on top of it, so a joining replica that started empty and then
    /// received the log from index 1 would compute a wrong membership.
    pub conf: ConfState,
    /// The latest persisted snapshot.
    pub snapshot: Option<Snapshot>,
    /// Persisted entries after the snapshot, consecutive.
    pub entries: Vec<Entry>,
    /// The replica restarted without its log (durability `memory`): it starts as
    /// [`crate::Role::Recovering`].
    pub log_lost: bool,
}
