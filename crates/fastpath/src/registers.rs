//! The fast path's registers (`c/registers.h`, docs/interfaces.md §2): the paper's control and
//! status registers (Appendix C).

/// Voters per group; every loop in the handler is bounded by it (`FP_MAX_NODES`).
pub const MAX_NODES: usize = 8;
/// A follower sends one retransmission request per this many gap packets (`FP_RETX_EVERY`).
pub const RETX_EVERY: u32 = 8;
/// Retransmission requests without progress before a follower halts (`FP_MAX_RETX_REQUESTS`).
pub const MAX_RETX_REQUESTS: u32 = 16;
/// Register flag: acknowledge only after the host persists (fsync durability) (`FP_R_DEFER_ACK`).
pub const R_DEFER_ACK: u32 = 1;

/// `#[repr(C)]` mirror of the C `struct fp_registers`, field for field.
///
/// While `enabled` is set the data plane owns `last_index`, `last_term`, `commit_index` and
/// `match_index`; the software Raft core loads the registers when it enables acceleration and
/// reads them back after disabling it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Registers {
    /// This node's id.
    pub self_id: u64,
    /// The leader's id (this node's if `is_leader`).
    pub leader_id: u64,
    /// Replication group; packets of other groups go to the host.
    pub group_id: u64,
    /// currentTerm: the term acceleration was enabled in.
    pub term: u64,
    /// lastLogIndex.
    pub last_index: u64,
    /// lastLogTerm.
    pub last_term: u64,
    /// commitIndex.
    pub commit_index: u64,
    /// First index of the enabled term: the leader commits only entries from here on
    /// (Raft §5.4.2).
    pub term_start_index: u64,
    /// Voter ids; slot `i` is `ids[i]` for `i < n_nodes`; self is one of them.
    pub ids: [u64; MAX_NODES],
    /// Leader: highest index known replicated on each voter slot (self's is its own log).
    pub match_index: [u64; MAX_NODES],
    /// Number of voters in `ids`.
    pub n_nodes: u32,
    /// Majority size.
    pub quorum: u32,
    /// ACC_ENABLE: non-zero while the data plane handles the fast path.
    pub enabled: u32,
    /// Non-zero at the leader.
    pub is_leader: u32,
    /// [`R_DEFER_ACK`].
    pub flags: u32,
    /// Why the handler cleared `enabled` (a [`crate::HaltReason`] value; 0 = none).
    pub halt_reason: u32,
    /// Follower: gap packets seen since the last progress.
    pub gap_count: u32,
    /// Follower: retransmission requests sent since the last progress.
    pub retx_requests: u32,
}

const _: () = assert!(std::mem::size_of::<Registers>() == 224);
const _: () = assert!(std::mem::align_of::<Registers>() == 8);

impl Registers {
    /// The voter slot of node `id` in `ids[0..n_nodes)` (like the C `fp_slot_of`).
    pub fn slot_of(&self, id: u64) -> Option<usize> {
        let n = (self.n_nodes as usize).min(MAX_NODES);
        self.ids[..n].iter().position(|&x| x == id)
    }

    /// Sets the voter set (`ids`, `n_nodes`) and its majority (`quorum = n / 2 + 1`), and clears
    /// every `match_index`.
    ///
    /// # Panics
    /// If `voters` is empty or longer than [`MAX_NODES`].
    pub fn set_voters(&mut self, voters: &[u64]) {
        assert!(
            !voters.is_empty() && voters.len() <= MAX_NODES,
            "a group has 1..={MAX_NODES} voters, got {}",
            voters.len()
        );
        self.ids = [0; MAX_NODES];
        self.ids[..voters.len()].copy_from_slice(voters);
        self.match_index = [0; MAX_NODES];
        self.n_nodes = voters.len() as u32;
        self.quorum = self.n_nodes / 2 + 1;
    }
}
