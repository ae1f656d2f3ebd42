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

impl Registers {
    /// The registers the Raft core hands over at an enable (`DataPlaneCommand::Enable`), for
    /// group `group_id`, with the enable flag set: voters in the order the core lists them,
    /// quorum a majority of them.
    ///
    /// # Panics
    /// If the core lists no voter or more than [`MAX_NODES`].
    pub fn from_core(r: &waverunner_raft::DataPlaneRegisters, group_id: u64) -> Registers {
        assert!(
            !r.match_index.is_empty() && r.match_index.len() <= MAX_NODES,
            "the data plane takes 1..={MAX_NODES} voters, got {}",
            r.match_index.len()
        );
        let mut regs = Registers {
            self_id: r.self_id,
            leader_id: r.leader_id,
            group_id,
            term: r.term,
            last_index: r.last_index,
            last_term: r.last_term,
            commit_index: r.commit_index,
            term_start_index: r.term_start_index,
            n_nodes: r.match_index.len() as u32,
            quorum: (r.match_index.len() / 2 + 1) as u32,
            enabled: 1,
            is_leader: u32::from(r.is_leader),
            flags: if r.defer_ack { R_DEFER_ACK } else { 0 },
            ..Default::default()
        };
        for (slot, &(id, m)) in r.match_index.iter().enumerate() {
            regs.ids[slot] = id;
            regs.match_index[slot] = m;
        }
        regs
    }

    /// The registers read back for the Raft core after a disable
    /// (`Raft::dataplane_disabled`).
    pub fn to_core(&self) -> waverunner_raft::DataPlaneRegisters {
        let n = (self.n_nodes as usize).min(MAX_NODES);
        waverunner_raft::DataPlaneRegisters {
            self_id: self.self_id,
            leader_id: self.leader_id,
            is_leader: self.is_leader != 0,
            term: self.term,
            last_index: self.last_index,
            last_term: self.last_term,
            commit_index: self.commit_index,
            term_start_index: self.term_start_index,
            match_index: (0..n).map(|i| (self.ids[i], self.match_index[i])).collect(),
            defer_ack: self.flags & R_DEFER_ACK != 0,
        }
    }
}

#[cfg(test)]
mod core_tests {
    use super::*;

    #[test]
    fn core_registers_round_trip() {
        let r = waverunner_raft::DataPlaneRegisters {
            self_id: 2,
            leader_id: 1,
            is_leader: false,
            term: 5,
            last_index: 10,
            last_term: 4,
            commit_index: 9,
            term_start_index: 11,
            match_index: vec![(1, 0), (2, 0), (3, 0)],
            defer_ack: true,
        };
        let f = Registers::from_core(&r, 7);
        assert_eq!((f.quorum, f.n_nodes, f.enabled, f.group_id), (2, 3, 1, 7));
        assert_eq!(f.to_core(), r);
    }
}
