//! A simulated data plane: the real C handler (`waverunner-fastpath`) over a registers struct,
//! a bounded user-space log ring, and the client table the XDP program would keep in a map.

use std::collections::{BTreeMap, VecDeque};

use waverunner_fastpath as fp;
use waverunner_raft::{DataPlaneRegisters, Entry, EntryKind, Index, NodeId};

/// Ring capacity in records (the paper's MCDMA ring). A full ring drops the input packet
/// *before* the handler runs, so nothing is handled that the host cannot see.
pub const RING_CAPACITY: usize = 1024;

/// The group id every simulated replica uses.
pub const GROUP_ID: u64 = 7;

/// One record on the user-space log ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingRecord {
    /// An entry the data plane appended.
    Append(Entry),
    /// The data plane's commit index advanced.
    Commit(Index),
}

/// What the caller must do after a packet went through the data plane.
#[derive(Debug, Default)]
pub struct Effects {
    /// Packets to send: (destination, header, payload).
    pub send: Vec<(NodeId, fp::Header, Vec<u8>)>,
    /// The input goes to the host software untouched.
    pub to_host: bool,
    /// The handler halted (cleared its enable flag) for this reason.
    pub halted: Option<u32>,
    /// Client writes the data plane declared committed: (write id, index, term).
    pub acked: Vec<(u64, Index, u64)>,
    /// The packet was dropped because the ring was full.
    pub ring_full: bool,
}

/// A replica's data plane.
#[derive(Debug)]
pub struct SimDataPlane {
    /// The registers (the paper's CSRs).
    pub regs: fp::Registers,
    /// The user-space log ring, bounded by [`RING_CAPACITY`].
    pub ring: VecDeque<RingRecord>,
    /// Leader: index → client write id of entries awaiting commit (bounded by the ring).
    pending: BTreeMap<Index, u64>,
    /// Counters: packets handled, punted to the host, dropped.
    pub handled: u64,
    pub punted: u64,
    pub dropped: u64,
}

impl SimDataPlane {
    /// A disabled data plane for `self_id`.
    pub fn new(self_id: NodeId) -> SimDataPlane {
        let regs = fp::Registers {
            self_id,
            group_id: GROUP_ID,
            ..Default::default()
        };
        SimDataPlane {
            regs,
            ring: VecDeque::new(),
            pending: BTreeMap::new(),
            handled: 0,
            punted: 0,
            dropped: 0,
        }
    }

    /// Whether the enable flag is set.
    pub fn enabled(&self) -> bool {
        self.regs.enabled != 0
    }

    /// Loads registers handed over by the Raft core and sets the enable flag.
    pub fn enable(&mut self, r: &DataPlaneRegisters) {
        assert!(!self.enabled(), "enable while enabled");
        assert!(self.ring.is_empty(), "enable with an undrained ring");
        assert!(
            r.match_index.len() <= fp::MAX_NODES,
            "too many voters for the data plane"
        );
        let regs = fp::Registers::from_core(r, GROUP_ID);
        self.regs = regs;
        self.pending.clear();
    }

    /// Clears the enable flag (the handler is synchronous here, so nothing is in flight).
    pub fn disable(&mut self) {
        self.regs.enabled = 0;
        self.pending.clear();
    }

    /// The registers read back for the Raft core.
    pub fn export(&self) -> DataPlaneRegisters {
        self.regs.to_core()
    }

    /// Runs one packet through the handler, as the XDP program would.
    pub fn receive(&mut self, from: NodeId, hdr: &fp::Header, payload: &[u8]) -> Effects {
        let mut fx = Effects::default();
        if !self.enabled() {
            fx.to_host = true;
            self.punted += 1;
            return fx;
        }
        if self.ring.len() + 2 > RING_CAPACITY {
            fx.ring_full = true;
            self.dropped += 1;
            return fx;
        }
        let out = fp::handle(&mut self.regs, hdr);
        let a = out.actions;
        if a.contains(fp::Actions::RING_ENTRY) {
            let e = Entry {
                term: out.entry_term,
                index: out.entry_index,
                kind: EntryKind::Normal,
                data: payload.to_vec().into(),
            };
            self.ring.push_back(RingRecord::Append(e));
            if hdr.kind == fp::CLIENT_REQUEST && hdr.flags & fp::F_HEARTBEAT == 0 {
                self.pending.insert(out.entry_index, hdr.seq);
            }
        }
        if a.contains(fp::Actions::BROADCAST) {
            for slot in 0..self.regs.n_nodes as usize {
                let id = self.regs.ids[slot];
                if id != self.regs.self_id {
                    fx.send.push((id, out.msg, payload.to_vec()));
                }
            }
        }
        if a.contains(fp::Actions::REPLY) {
            fx.send.push((from, out.msg, Vec::new()));
        }
        if a.contains(fp::Actions::RING_COMMIT) {
            self.ring.push_back(RingRecord::Commit(out.commit_index));
            if self.regs.is_leader != 0 {
                let done: Vec<Index> = self
                    .pending
                    .range(..=out.commit_index)
                    .map(|(&i, _)| i)
                    .collect();
                for i in done {
                    let w = self.pending.remove(&i).expect("pending entry");
                    fx.acked.push((w, i, self.regs.term));
                }
            }
        }
        if a.contains(fp::Actions::HALT) {
            assert_eq!(self.regs.enabled, 0, "handler halted but stayed enabled");
            fx.halted = Some(out.halt_reason);
        }
        if a.contains(fp::Actions::TO_HOST) {
            fx.to_host = true;
            self.punted += 1;
        } else {
            self.handled += 1;
        }
        if a.contains(fp::Actions::DROP) {
            self.dropped += 1;
        }
        fx
    }
}
