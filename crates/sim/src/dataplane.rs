//! A simulated data plane: the real C handler (`waverunner-fastpath`) over a registers struct,
//! a bounded user-space log ring, and the client table the XDP program would keep in a map.
//! It implements the same [`DataPlane`] trait as the udp and xdp planes, so the host logic
//! that drives it (`waverunner_host::dataplane`) is the code the node ships. What it would put
//! on a wire or hand to its host's hooks waits in an outbox the world delivers.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use waverunner_dataplane::{
    Counters, DataPlane, LatencyHistogram, RingEntry, RingRecord, RING_CAPACITY,
};
use waverunner_fastpath as fp;
use waverunner_raft::{Index, NodeId};

use crate::rng::Rng;

/// The group id every simulated replica uses.
pub const GROUP_ID: u32 = 7;

/// The simulated fast-path address of replica `id`.
pub fn addr_of(id: NodeId) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from(id as u32), 7)
}

/// The native clients, as a sender on the simulated network (no replica has this id).
pub const CLIENT: NodeId = 1 << 40;

/// The native clients' simulated address: where a host's replies to them go.
pub const CLIENT_ADDR: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 9);

/// The replica (or [`CLIENT`]) at a simulated fast-path address.
pub fn id_of(a: SocketAddr) -> NodeId {
    match a {
        SocketAddr::V4(a) if a == CLIENT_ADDR => CLIENT,
        SocketAddr::V4(a) => NodeId::from(u32::from(*a.ip())),
        SocketAddr::V6(_) => 0,
    }
}

/// What the data plane did that the world carries out.
#[derive(Debug)]
pub enum Out {
    /// A packet onto the network.
    Send(NodeId, fp::Header, Vec<u8>),
    /// A packet for the host software (the handler passed it up, or the plane is off), as
    /// the data plane's host hook gets it: the source and the whole UDP payload.
    ToHost(NodeId, Vec<u8>),
    /// A client write the data plane declared committed: (write id, index, term).
    Acked(u64, Index, u64),
}

/// A replica's data plane.
#[derive(Debug)]
pub struct SimDataPlane {
    /// The registers (the paper's CSRs).
    regs: fp::Registers,
    /// The user-space log ring, bounded by [`RING_CAPACITY`].
    ring: VecDeque<RingRecord>,
    /// Leader: index → client write id of entries awaiting commit (bounded by the ring).
    pending: BTreeMap<Index, u64>,
    /// What waits for the world (bounded by what one event produces).
    outbox: RefCell<Vec<Out>>,
    /// Some seeds: records reach the ring out of order, as from XDP on several CPUs (the
    /// ring slot is reserved before the handler's lock), drawn from this.
    reorder: Option<Rng>,
    /// Adjacent records swapped so far.
    pub reordered: u64,
    /// Counters: packets handled, punted to the host, dropped.
    pub handled: u64,
    pub punted: u64,
    pub dropped: u64,
    /// Client requests shed (overload: `fp::shed`, the rule the XDP program applies).
    pub shed: u64,
    /// Of those, clients' requests dropped unanswered: the busy replies' ration was spent.
    pub shed_unanswered: u64,
    /// Follower: appends at most this far ahead of the log go to the host to be held
    /// (`fp::ahead`, the rule the XDP and `udp` data planes apply; 0: never).
    hold_window: u32,
    /// The world's clock (ns), set before each packet: past the window, one append per
    /// `fp::GAP_PASS_NS` reaches the handler's gap rule (`fp::ahead`).
    pub now_ns: u64,
    /// When an append past the window last reached the gap rule.
    gap_pass_ns: u64,
    /// Leader: the busy replies' ration (`fp::busy_answer`).
    busy_tat_ns: u64,
    /// Follower: when an append of its term last came (`fp::leader_heard`;
    /// [`DataPlane::leader_heard_ns`]), in the world's clock (ns).
    heard_ns: u64,
}

impl SimDataPlane {
    /// A disabled data plane for `self_id`; with `reorder`, its ring swaps adjacent records
    /// now and then; a follower holds appends up to `hold_window` ahead ([`fp::ahead`]).
    pub fn new(self_id: NodeId, reorder: Option<Rng>, hold_window: u32) -> SimDataPlane {
        let regs = fp::Registers {
            self_id,
            group_id: u64::from(GROUP_ID),
            ..Default::default()
        };
        SimDataPlane {
            regs,
            ring: VecDeque::new(),
            pending: BTreeMap::new(),
            outbox: RefCell::new(Vec::new()),
            reorder,
            reordered: 0,
            handled: 0,
            punted: 0,
            dropped: 0,
            shed: 0,
            shed_unanswered: 0,
            hold_window,
            now_ns: 0,
            gap_pass_ns: 0,
            busy_tat_ns: 0,
            heard_ns: 0,
        }
    }

    /// Whether the enable flag is set.
    pub fn enabled(&self) -> bool {
        self.regs.enabled != 0
    }

    /// Records waiting on the ring.
    pub fn ring_len(&self) -> usize {
        self.ring.len()
    }

    /// Whether records wait on the ring.
    pub fn ring_pending(&self) -> bool {
        !self.ring.is_empty()
    }

    /// What the data plane did since the last call, in order.
    pub fn take_outbox(&mut self) -> Vec<Out> {
        std::mem::take(self.outbox.get_mut())
    }

    /// Runs one packet through the handler, as the XDP program would on ingress.
    pub fn receive(&mut self, from: NodeId, hdr: &fp::Header, payload: &[u8]) {
        let to_host = |out: &mut Vec<Out>| {
            let mut pkt = Vec::with_capacity(fp::HDR_LEN + payload.len());
            hdr.encode(payload, &mut pkt);
            out.push(Out::ToHost(from, pkt));
        };
        let enabled = self.enabled();
        let out = self.outbox.get_mut();
        if !enabled {
            self.punted += 1;
            to_host(out);
            return;
        }
        let pushed = from == self.regs.self_id;
        // An append ahead of the log: the host holds it; past the window, one a while
        // reaches the gap rule (by the same rule as XDP and `udp`).
        let (window, now) = (self.hold_window, self.now_ns);
        if fp::leader_heard(&self.regs, hdr, pushed) {
            self.heard_ns = now;
        }
        match fp::ahead(&self.regs, hdr, pushed, window, now, &mut self.gap_pass_ns) {
            fp::Ahead::Hold => {
                self.punted += 1;
                to_host(out);
                return;
            }
            fp::Ahead::Drop => {
                self.dropped += 1;
                return;
            }
            fp::Ahead::Handler => {}
        }
        // Overload: a busy reply instead of an entry, by the same rule as XDP and `udp`.
        if fp::shed(
            &self.regs,
            hdr,
            pushed,
            self.ring.len() as u64,
            RING_CAPACITY as u64,
            fp::SHED_INFLIGHT_XDP,
        ) {
            self.shed += 1;
            let busy =
                fp::rationed_busy_reply(&self.regs, hdr, payload, now, &mut self.busy_tat_ns);
            if let Some((reply, body)) = busy {
                out.push(Out::Send(from, reply, body));
            } else {
                self.shed_unanswered += 1;
            }
            return;
        }
        if self.ring.len() + 2 > RING_CAPACITY {
            // A full ring drops the input *before* the handler runs, so nothing is handled
            // that the host cannot see.
            self.dropped += 1;
            return;
        }
        let res = fp::handle(&mut self.regs, hdr);
        let a = res.actions;
        if a.contains(fp::Actions::RING_ENTRY) {
            self.ring.push_back(RingRecord::Entry(RingEntry {
                index: res.entry_index,
                term: res.entry_term,
                flags: hdr.flags,
                from: hdr.from,
                seq: hdr.seq,
                // The packet's source, as XDP reads it from the IP header: a client's address
                // is where the host answers what the data plane does not.
                source: (from == CLIENT).then_some(CLIENT_ADDR),
                payload: payload.to_vec(),
            }));
            if hdr.kind == fp::CLIENT_REQUEST && hdr.flags & fp::F_BLIND_WRITE != 0 {
                self.pending.insert(res.entry_index, hdr.seq);
            }
        }
        if a.contains(fp::Actions::BROADCAST) {
            for slot in 0..self.regs.n_nodes as usize {
                let id = self.regs.ids[slot];
                if id != self.regs.self_id {
                    out.push(Out::Send(id, res.msg, payload.to_vec()));
                }
            }
        }
        if a.contains(fp::Actions::REPLY) && from != self.regs.self_id {
            out.push(Out::Send(from, res.msg, Vec::new()));
        }
        if a.contains(fp::Actions::RING_COMMIT) {
            let mut replied = false;
            if self.regs.is_leader != 0 {
                // As XDP and `udp`: one input sends one packet, so only the client of the
                // entry the handler names (`reply_index`) is answered here; the host answers
                // the others it committed when it applies them.
                let answer = a
                    .contains(fp::Actions::CLIENT_REPLY)
                    .then_some(res.reply_index);
                let done: Vec<Index> = self
                    .pending
                    .range(..=res.commit_index)
                    .map(|(&i, _)| i)
                    .collect();
                for i in done {
                    let w = self.pending.remove(&i).expect("pending entry");
                    if Some(i) == answer {
                        replied = true;
                        out.push(Out::Acked(w, i, self.regs.term));
                    }
                }
            }
            self.ring.push_back(RingRecord::Commit {
                index: res.commit_index,
                replied,
            });
        }
        if a.contains(fp::Actions::HALT) {
            assert_eq!(self.regs.enabled, 0, "handler halted but stayed enabled");
        }
        if a.contains(fp::Actions::TO_HOST) {
            self.punted += 1;
            to_host(out);
        } else {
            self.handled += 1;
        }
        if a.contains(fp::Actions::DROP) {
            self.dropped += 1;
        }
    }
}

fn bad(e: impl std::fmt::Debug) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{e:?}"))
}

impl DataPlane for SimDataPlane {
    fn kind(&self) -> &'static str {
        "sim"
    }

    /// The XDP program's, which this one stands for.
    fn max_inflight(&self) -> u64 {
        fp::SHED_INFLIGHT_XDP
    }

    fn enable(&mut self, regs: &fp::Registers, _peers: &[(u64, SocketAddrV4)]) -> io::Result<()> {
        assert!(!self.enabled(), "enable while enabled");
        assert!(self.ring.is_empty(), "enable with an undrained ring");
        assert!(regs.enabled != 0, "enable with registers that are off");
        self.regs = *regs;
        self.pending.clear();
        Ok(())
    }

    /// The handler is synchronous here, so nothing is in flight.
    fn disable(&mut self) -> fp::Registers {
        self.regs.enabled = 0;
        self.pending.clear();
        self.regs
    }

    fn drain(&mut self, out: &mut Vec<RingRecord>) {
        let from = out.len();
        out.extend(self.ring.drain(..));
        if let Some(rng) = self.reorder.as_mut() {
            let mut i = from;
            while i + 1 < out.len() {
                if rng.chance(0.2) {
                    out.swap(i, i + 1);
                    self.reordered += 1;
                    i += 1;
                }
                i += 1;
            }
        }
    }

    fn push(&mut self, pkt: &[u8]) -> io::Result<()> {
        let (h, payload) = fp::Header::decode(pkt).map_err(bad)?;
        self.receive(self.regs.self_id, &h, payload);
        Ok(())
    }

    fn send_to(&self, pkt: &[u8], to: SocketAddr) -> io::Result<()> {
        let (h, payload) = fp::Header::decode(pkt).map_err(bad)?;
        self.outbox
            .borrow_mut()
            .push(Out::Send(id_of(to), h, payload.to_vec()));
        Ok(())
    }

    fn registers(&self) -> fp::Registers {
        self.regs
    }

    fn counters(&self) -> Counters {
        Counters {
            handled: self.handled,
            punted: self.punted,
            dropped: self.dropped,
            shed: self.shed,
            shed_unanswered: self.shed_unanswered,
            ..Counters::default()
        }
    }

    fn latency(&self) -> LatencyHistogram {
        LatencyHistogram::default()
    }

    fn leader_heard_ns(&self) -> u64 {
        self.heard_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_whose_window_is_full_sheds_a_forwarded_request_with_a_busy_reply() {
        let mut dp = SimDataPlane::new(1, None, 0);
        let mut regs = fp::Registers {
            self_id: 1,
            leader_id: 1,
            group_id: u64::from(GROUP_ID),
            term: 2,
            last_index: 5 + fp::SHED_INFLIGHT_XDP,
            last_term: 2,
            commit_index: 5,
            term_start_index: 5,
            enabled: 1,
            is_leader: 1,
            ..Default::default()
        };
        regs.set_voters(&[1, 2, 3]);
        dp.enable(&regs, &[]).unwrap();
        let payload = waverunner_fastpath::payload::Envelope {
            origin: 3,
            req: 42,
            client: 0,
            seq: 9,
            now_ms: 0,
            command: b"x".to_vec(),
        }
        .encode();
        let hdr = fp::Header {
            kind: fp::CLIENT_REQUEST,
            len: payload.len() as u16,
            seq: 9,
            ..fp::Header::new(u64::from(GROUP_ID))
        };
        dp.receive(3, &hdr, &payload);
        assert_eq!(dp.shed, 1);
        assert!(!dp.ring_pending(), "nothing ordered");
        match dp.take_outbox().as_slice() {
            [Out::Send(3, reply, body)] => {
                assert_eq!(
                    (reply.kind, reply.index, reply.seq),
                    (fp::CLIENT_REPLY, 42, 9)
                );
                assert_eq!(body[0], waverunner_fastpath::payload::STATUS_RETRY);
            }
            other => panic!("{other:?}"),
        }
        // Busy replies while their ration lasts (one spent above); the rest unanswered.
        for _ in 0..fp::BUSY_BURST {
            dp.receive(3, &hdr, &payload);
        }
        assert_eq!((dp.shed, dp.shed_unanswered), (1 + fp::BUSY_BURST, 1));
        assert_eq!(dp.take_outbox().len() as u64, fp::BUSY_BURST - 1);
        // The host's own push is never shed.
        dp.receive(1, &hdr, &payload);
        assert_eq!(dp.shed, 1 + fp::BUSY_BURST);
        assert!(dp.ring_pending());
    }
}
