//! The host side of the hand-off between software Raft and the data plane (DESIGN §3,
//! `docs/handoff.md`, `docs/dataplane.md`): carrying out the core's enable and disable,
//! consuming the log ring into the core, the fast-path packets the data plane passes up,
//! appends held for reordering, retransmission from the leader's log, deferred acks (fsync
//! durability) and the client table of requests the leader's data plane ordered.
//!
//! Every call takes the Raft core and, where it matters, the time; the data plane is any
//! [`DataPlane`]: xdp and udp in the node, the simulated one in the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, SocketAddrV4};
use std::time::Duration;

use waverunner_dataplane::{DataPlane, RingEntry, RingRecord, RING_CAPACITY};
use waverunner_fastpath as fp;
use waverunner_raft::{
    DataPlaneCommand, DataPlaneState, DisableReason, Entry, EntryKind, Message, MessageBody, Raft,
    Role,
};

use crate::requests::Outcome;
use crate::ticks::Replay;
use crate::Time;

/// Client-table entries the leader's host keeps at most (older ones are forgotten: their
/// clients time out and retry, exactly once by their session).
pub const MAX_DP_CLIENTS: usize = 65_536;

/// A replica whose data plane is off sends at most one REJECT per this interval.
pub const REJECT_EVERY: Duration = Duration::from_millis(20);

/// Appends a follower holds for reordering at most (the data plane's window,
/// `fp::REORDER_WINDOW`), and their bytes at most.
pub const MAX_HELD: usize = fp::REORDER_WINDOW as usize;
/// See [`MAX_HELD`].
pub const MAX_HELD_BYTES: usize = 16 << 20;

/// Appends reordering alone leaves held at most (the leader's handler runs on several CPUs,
/// each a NAPI batch of 64 frames at most): holding more means an append was lost, and the
/// follower asks for it at once instead of after [`HOLD_TIMEOUT`].
pub const REORDER_SPAN: usize = 64;

/// The leader answers retransmission requests for the same follower position at most once
/// per this interval.
pub const RETX_SPACING: Duration = Duration::from_millis(5);

/// A held append whose gap has not filled after this long asks the leader to retransmit; at
/// most a fifth of the election timeout ([`DataPlaneHost::set_election_timeout`]).
pub const HOLD_TIMEOUT: Duration = Duration::from_millis(20);

/// Entries retransmitted per retransmission request at most.
pub const RETX_BATCH: u64 = 256;

/// Followers whose last retransmission the leader remembers at most.
const RETX_REMEMBERED: usize = 64;

/// Replies to native clients the leader's host queues at most before it sends them
/// ([`DataPlaneHost::reply`]): past this it sends what is queued at once.
pub const MAX_QUEUED_REPLIES: usize = 256;

/// A request the data plane ordered at this leader on behalf of a native client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpClient {
    /// Where the reply goes.
    pub source: SocketAddrV4,
    /// The client's session id (the header's `from`).
    pub client: u64,
    /// Its sequence number.
    pub seq: u64,
    /// The data plane already replied.
    pub replied: bool,
}

/// What the host did, for status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Enables carried out.
    pub enables: u64,
    /// Disables by reason ([`reason_name`]).
    pub disables: BTreeMap<String, u64>,
    /// The last disable's reason.
    pub last_reason: String,
    /// The term of the last enable.
    pub enabled_term: u64,
    /// Entries retransmitted.
    pub retransmitted: u64,
    /// Replies the host sent for data-plane entries.
    pub host_replies: u64,
    /// Heartbeats pushed.
    pub heartbeats: u64,
    /// Appends pushed back through the data plane after reordering.
    pub reordered: u64,
    /// Follower: retransmissions the host asked for (held appends waiting on a lost one).
    pub retx_asked: u64,
    /// Leader: retransmission requests from behind what the follower has since acknowledged
    /// (sent before the acks, read after them), not answered.
    pub retx_outdated: u64,
    /// Fast-path REJECTs sent (appends this replica's software could not take).
    pub rejects_sent: u64,
    /// Packets passed up that were not valid fast-path packets of this group.
    pub bad_packets: u64,
    /// Ring entries the core refused or that were behind the log (a bug if ever non-zero:
    /// the simulator checks it).
    pub ring_refused: u64,
}

/// A data plane and what its host keeps about it.
pub struct DataPlaneHost<P: DataPlane> {
    /// The data plane.
    pub plane: P,
    /// This replica's id.
    id: u64,
    /// The fast path's group id on the wire.
    group: u32,
    /// fsync durability: followers acknowledge appends only once they are on disk, so the
    /// host sends the acks ([`DataPlaneHost::deferred_ack`]); memory durability: the data
    /// plane acknowledges itself.
    defer_acks: bool,
    /// Fast-path addresses of the other members.
    pub peers: BTreeMap<u64, SocketAddrV4>,
    /// Status bookkeeping.
    pub stats: HostStats,
    /// Leader: requests from native clients by index, until applied (bounded by
    /// [`MAX_DP_CLIENTS`]).
    clients: BTreeMap<u64, DpClient>,
    /// fsync: the highest index this replica acknowledged after persisting.
    acked_persisted: u64,
    /// Scratch buffer for ring records.
    records: Vec<RingRecord>,
    /// Follower: appends ahead of the log, by previous index (bounded by [`MAX_HELD`] and
    /// [`MAX_HELD_BYTES`]).
    held: Held,
    /// Leader: the last retransmission per follower address (its position, when; bounded by
    /// `RETX_REMEMBERED`).
    retx_sent: BTreeMap<SocketAddr, (u64, Time)>,
    /// When this replica last sent a fast-path REJECT.
    last_reject: Option<Time>,
    /// Follower: when this replica last asked the leader to retransmit.
    last_retx_ask: Option<Time>,
    /// Follower: how long a held append waits for its gap to fill before it asks
    /// ([`HOLD_TIMEOUT`] at most).
    hold_timeout: Duration,
    /// Follower, at the last tick or stall's replay: when the data plane last heard the
    /// leader ([`DataPlane::leader_heard_ns`]).
    heard_at_tick: u64,
    /// Ring entries that arrived before an entry of a lower index, by index (more than
    /// [`RING_CAPACITY`] halts the data plane).
    reorder: BTreeMap<u64, RingEntry>,
    /// Commit records waiting for their entry: index → the data plane replied.
    commits: BTreeMap<u64, bool>,
    /// Leader: entries other replicas forwarded, not yet committed (bounded by the ring).
    remote_pending: BTreeSet<u64>,
    /// What this host last told the data plane with [`DataPlane::want_wakeups`].
    urgent: bool,
    /// Leader: replies to native clients not yet sent, in order (bounded by
    /// [`MAX_QUEUED_REPLIES`]; sent by [`DataPlaneHost::flush_replies`]).
    replies: Vec<(SocketAddr, Vec<u8>)>,
}

/// A follower's held appends by previous index, their bytes, and since when the oldest has
/// waited without a retransmission asked for (O(1) to look at: the replica loop looks at it
/// after every ring drain).
#[derive(Default)]
struct Held {
    map: BTreeMap<u64, Vec<u8>>,
    bytes: usize,
    /// When the oldest held append arrived, or the last retransmission was asked for after
    /// it; `None` when nothing is held. Removing appends leaves it as it is: an older time
    /// only asks a little sooner (and asking is spaced).
    since: Option<Time>,
}

impl Held {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn insert(&mut self, prev: u64, at: Time, pkt: Vec<u8>) {
        self.bytes += pkt.len();
        self.since.get_or_insert(at);
        if let Some(old) = self.map.insert(prev, pkt) {
            self.bytes -= old.len();
        }
    }

    fn remove(&mut self, prev: u64) -> Option<Vec<u8>> {
        let pkt = self.map.remove(&prev)?;
        self.taken(pkt.len());
        Some(pkt)
    }

    fn pop_first(&mut self) -> Option<u64> {
        let (i, pkt) = self.map.pop_first()?;
        self.taken(pkt.len());
        Some(i)
    }

    fn pop_last(&mut self) -> Option<u64> {
        let (i, pkt) = self.map.pop_last()?;
        self.taken(pkt.len());
        Some(i)
    }

    fn taken(&mut self, bytes: usize) {
        self.bytes -= bytes;
        if self.map.is_empty() {
            self.since = None;
        }
    }

    fn first(&self) -> Option<u64> {
        self.map.first_key_value().map(|(&i, _)| i)
    }

    fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
        self.since = None;
    }
}

/// A `DisableReason` as status shows it (snake case).
pub fn reason_name(r: DisableReason) -> String {
    let s = format!("{r:?}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The largest proposal the data plane carries: one packet's payload (the core's
/// `Config::dataplane_max_proposal`; larger ones go through software).
pub const MAX_PROPOSAL: usize = fp::MAX_PAYLOAD as usize;

/// The largest client command whose entry envelope the data plane carries.
pub const MAX_COMMAND: usize = MAX_PROPOSAL - waverunner_fastpath::payload::ENV_PREFIX;

/// The handler's halt code as the core's reason.
pub fn halt_reason(code: u32) -> DisableReason {
    match code {
        fp::HALT_TERM_MISMATCH => DisableReason::TermMismatch,
        fp::HALT_LOG_MISMATCH => DisableReason::LogMismatch,
        fp::HALT_REJECT_RECEIVED => DisableReason::RejectReceived,
        fp::HALT_RETX_EXHAUSTED => DisableReason::RetransmitExhausted,
        _ => DisableReason::Host,
    }
}

/// A fast-path packet: `h` with its length set, then `payload`.
pub fn packet(h: fp::Header, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fp::HDR_LEN + payload.len());
    fp::Header {
        len: payload.len() as u16,
        ..h
    }
    .encode(payload, &mut out);
    out
}

impl<P: DataPlane> DataPlaneHost<P> {
    /// The host of `plane` for replica `id` in fast-path group `group`; `defer_acks` with
    /// fsync durability.
    pub fn new(plane: P, id: u64, group: u32, defer_acks: bool) -> DataPlaneHost<P> {
        DataPlaneHost {
            plane,
            id,
            group,
            defer_acks,
            peers: BTreeMap::new(),
            stats: HostStats::default(),
            clients: BTreeMap::new(),
            acked_persisted: 0,
            records: Vec::new(),
            held: Held::default(),
            retx_sent: BTreeMap::new(),
            last_reject: None,
            last_retx_ask: None,
            hold_timeout: HOLD_TIMEOUT,
            heard_at_tick: 0,
            reorder: BTreeMap::new(),
            commits: BTreeMap::new(),
            remote_pending: BTreeSet::new(),
            urgent: true,
            replies: Vec::new(),
        }
    }

    /// The replicas' election timeout (the shortest): a held append asks for its gap after a
    /// fifth of it at most. The leader steps down when its data plane commits nothing for an
    /// election timeout (`Raft`'s data-plane check-quorum), so a follower that waited longer
    /// than that for a lost append, its peer too, cost the leader its term (the simulator,
    /// whose 10 ms election timeout is half of [`HOLD_TIMEOUT`]: a whole-cluster pause, seed
    /// 1833).
    pub fn set_election_timeout(&mut self, election: Duration) {
        self.hold_timeout = HOLD_TIMEOUT.min(election / 5);
    }

    /// Between ready batches (the replica loop and the simulator call it there): a follower
    /// pushes the held appends that now continue its log, all of them in one batch rather
    /// than one per arriving packet; then [`DataPlaneHost::want_wakeups`].
    pub fn between_batches(&mut self, raft: &mut Raft, waiting: bool, now: Time) {
        if raft.role() != Role::Leader {
            self.release_held(raft, now);
        }
        self.want_wakeups(raft, waiting, now);
    }

    /// Tells the data plane whether this replica needs its ring records at once: a leader
    /// (it answers clients from commit records), with fsync durability (the host
    /// acknowledges), while appends wait in the reorder buffer, or while `waiting` (requests
    /// wait on this replica's applied index). Otherwise a follower's records may come in
    /// batches a little later (`DataPlane::want_wakeups`). When it turns on, what is already
    /// on the ring is consumed now.
    fn want_wakeups(&mut self, raft: &mut Raft, waiting: bool, now: Time) {
        let urgent =
            raft.role() == Role::Leader || self.defer_acks || waiting || !self.held.is_empty();
        if urgent == self.urgent {
            return;
        }
        self.urgent = urgent;
        self.plane.want_wakeups(urgent);
        if urgent {
            self.consume_ring(raft, now);
        }
    }

    /// A leader whose data plane is on: the lowest match index of its followers there (the
    /// registers: acks never reach the core while it is on). Compaction keeps the entries
    /// after it for a while (`Compaction::taken`): a follower a little behind is retransmitted
    /// to from the log instead of being handed off. `None` otherwise.
    pub fn lowest_match(&self, raft: &Raft) -> Option<u64> {
        if raft.role() != Role::Leader
            || !matches!(raft.dataplane_state(), DataPlaneState::On { .. })
        {
            return None;
        }
        let r = self.plane.registers();
        let n = (r.n_nodes as usize).min(fp::MAX_NODES);
        (r.enabled != 0)
            .then(|| {
                (0..n)
                    .filter(|&i| r.ids[i] != self.id)
                    .map(|i| r.match_index[i])
                    .min()
            })
            .flatten()
    }

    /// A header of `kind` from this replica.
    pub fn header(&self, kind: u8) -> fp::Header {
        fp::Header {
            kind,
            from: self.id,
            ..fp::Header::new(u64::from(self.group))
        }
    }

    /// Carries out the core's `Enable` / `Disable`. An error is fatal to the replica.
    pub fn command(
        &mut self,
        raft: &mut Raft,
        cmd: DataPlaneCommand,
        now: Time,
    ) -> Result<(), String> {
        match cmd {
            DataPlaneCommand::Enable(r) => {
                let regs = fp::Registers::from_core(&r, u64::from(self.group));
                let peers: Vec<(u64, SocketAddrV4)> = r
                    .match_index
                    .iter()
                    .filter(|(id, _)| *id != self.id)
                    .filter_map(|(id, _)| self.peers.get(id).map(|a| (*id, *a)))
                    .collect();
                self.acked_persisted = r.last_index;
                self.clients.clear();
                self.remote_pending.clear();
                self.reorder.clear();
                self.commits.clear();
                self.held.clear();
                self.plane.enable(&regs, &peers).map_err(|e| {
                    format!("cannot enable the {} data plane: {e}", self.plane.kind())
                })?;
                self.stats.enables += 1;
                self.stats.enabled_term = r.term;
                tracing::info!(
                    "node {}: {} data plane enabled in term {} ({}, last index {})",
                    self.id,
                    self.plane.kind(),
                    r.term,
                    if r.is_leader { "leader" } else { "follower" },
                    r.last_index
                );
            }
            DataPlaneCommand::Disable(reason) => {
                let regs = self.plane.disable();
                let name = reason_name(reason);
                *self.stats.disables.entry(name.clone()).or_default() += 1;
                self.stats.last_reason = name;
                self.consume_ring(raft, now);
                let regs = regs.to_core();
                if regs.last_index != raft.last_index() {
                    return Err(format!(
                        "the data plane's last index {} differs from the log's {} after draining its ring",
                        regs.last_index,
                        raft.last_index()
                    ));
                }
                raft.dataplane_disabled(regs);
                tracing::info!(
                    "node {}: data plane disabled ({reason:?}); software Raft continues in term {}",
                    self.id,
                    raft.term()
                );
            }
        }
        Ok(())
    }

    /// After a stall (the process stopped, the loop starved), before the ring is fed: a
    /// follower does not count the ticks of `replay` due before its data plane last heard an
    /// append of the term ([`DataPlane::leader_heard_ns`]). The leader was alive then, and
    /// Raft's election timer restarts at every append; counted after the ring's appends, they
    /// timed out a live leader and the data plane handed off (`docs/dataplane.md` "A starved
    /// host"). Only liveness is at stake: a leader counts every tick (its lease follows real
    /// time).
    /// The election timer restarts there, as at a tick ([`DataPlaneHost::on_tick`]), and
    /// counts the ticks after. `time_of` maps the data plane's clock (ns) to the host's
    /// [`Time`]. Returns the ticks not counted.
    pub fn skip_ticks_before_leader_heard(
        &mut self,
        raft: &mut Raft,
        replay: &mut Replay,
        time_of: impl FnOnce(u64) -> Time,
    ) -> u64 {
        let heard = self.plane.leader_heard_ns();
        if heard == 0 || raft.role() != Role::Follower {
            return 0;
        }
        let skipped = replay.before(time_of(heard));
        self.leader_heard(raft);
        skipped
    }

    /// A follower whose data plane heard the leader since this was last asked restarts its
    /// election timer, whatever became of the appends (taken, held, or dropped past the hold
    /// window, `fp::ahead`): each proves the leader alive.
    fn leader_heard(&mut self, raft: &mut Raft) {
        let heard = self.plane.leader_heard_ns();
        let before = std::mem::replace(&mut self.heard_at_tick, heard);
        if let DataPlaneState::On { term } = raft.dataplane_state() {
            if heard != before {
                raft.dataplane_leader_heard(raft.leader(), term);
            }
        }
    }

    /// Feeds every record on the data plane's ring to the core; a follower then pushes the
    /// held appends the new entries made continuous. Last, notices a halt that passed nothing
    /// up (it is seen only in the registers).
    pub fn consume_ring(&mut self, raft: &mut Raft, now: Time) {
        let mut recs = std::mem::take(&mut self.records);
        self.plane.drain(&mut recs);
        let leader = raft.role() == Role::Leader;
        // XDP runs on every CPU: records of handler calls on different CPUs can reach the
        // ring in another order than the handler produced them (the ring slot is reserved
        // before the handler's lock). Entries are fed by index, commits once their entry is in.
        // In order (the common case) a record goes straight through; only records behind a
        // missing entry wait in the reorder maps.
        let mut entries = Vec::new();
        let mut commits = Vec::new();
        let mut next = raft.last_index() + 1;
        for rec in recs.drain(..) {
            match rec {
                RingRecord::Entry(e) if e.index == next && self.reorder.is_empty() => {
                    entries.push(e);
                    next += 1;
                }
                RingRecord::Entry(e) => {
                    self.reorder.insert(e.index, e);
                }
                RingRecord::Commit { index, replied } if index < next => {
                    commits.push((index, replied));
                }
                RingRecord::Commit { index, replied } => {
                    *self.commits.entry(index).or_default() |= replied;
                }
            }
        }
        while let Some(e) = self.reorder.remove(&next) {
            entries.push(e);
            next += 1;
        }
        while self
            .reorder
            .first_key_value()
            .is_some_and(|(&i, _)| i < next)
        {
            let (i, _) = self.reorder.pop_first().expect("non-empty");
            tracing::error!(
                "node {}: ring entry {i} is behind the log; dropped",
                self.id
            );
        }
        while self
            .commits
            .first_key_value()
            .is_some_and(|(&c, _)| c < next)
        {
            commits.push(self.commits.pop_first().expect("non-empty"));
        }
        let stuck = self.reorder.len() > RING_CAPACITY;
        // Followers learn the commit index from the next append. When an entry another
        // replica waits for (it forwarded the request) commits and no append follows it, the
        // leader pushes an empty one at once instead of at the next idle heartbeat.
        let mut announce = false;
        for e in entries {
            // The ring position is contiguous: each entry is appended exactly at the tail.
            assert_eq!(
                e.index,
                raft.last_index() + 1,
                "node {}: a ring entry not at the log's tail",
                self.id
            );
            if leader && e.flags & fp::F_HEARTBEAT == 0 {
                if let Some(origin) = fp::payload::origin_of(&e.payload) {
                    if origin != 0 && origin != self.id {
                        self.remote_pending.insert(e.index);
                    }
                    if let (Some(source), 0) = (e.source, origin) {
                        self.remember(
                            e.index,
                            DpClient {
                                source,
                                client: e.from,
                                seq: e.seq,
                                replied: false,
                            },
                        );
                    }
                }
            }
            let entry = Entry {
                term: e.term,
                index: e.index,
                kind: EntryKind::Normal,
                data: e.payload.into(),
            };
            if let Err(err) = raft.dataplane_append(entry) {
                self.stats.ring_refused += 1;
                tracing::error!("node {}: refused ring entry {}: {err}", self.id, e.index);
            }
        }
        for (index, replied) in commits {
            while self.remote_pending.first().is_some_and(|&i| i <= index) {
                self.remote_pending.pop_first();
                announce = index == raft.last_index();
            }
            if replied {
                if let Some(c) = self.clients.get_mut(&index) {
                    c.replied = true;
                }
            }
            raft.dataplane_commit(index);
        }
        if stuck {
            tracing::error!(
                "node {}: ring entries wait for a missing one; disabling the data plane",
                self.id
            );
            raft.dataplane_halted(DisableReason::Host);
        }
        self.records = recs;
        if announce && leader && matches!(raft.dataplane_state(), DataPlaneState::On { .. }) {
            self.push_proposal(&[]);
        }
        if !leader {
            self.held_timeout(raft, now);
        }
        if let DataPlaneState::On { term } = raft.dataplane_state() {
            // Registers of an earlier term's enable tell nothing about this one: the core is
            // On from the step that decided to enable until the ready batch carrying the
            // command is handled, and a look in between found the last halt's registers
            // (seen: a leader re-elected every 110 ms, each new enable "halted" at once).
            let r = self.plane.registers();
            if r.enabled == 0 && r.halt_reason != 0 && r.term == term {
                raft.dataplane_halted(halt_reason(r.halt_reason));
            }
        }
    }

    /// Every tick: the data plane's own upkeep, and a follower's held appends whose gap did
    /// not fill in time ask the leader to retransmit. A follower whose data plane heard the
    /// leader since the last tick restarts its election timer, whatever became of the
    /// appends: those past the hold window, which the data plane drops (`fp::ahead`), prove
    /// the leader alive as a held one does. A follower behind a gap that nothing held shows
    /// (the appends after it came past the window) waits for the handler's gap rule to ask
    /// for a retransmission; before this, it timed out its live leader meanwhile.
    pub fn on_tick(&mut self, raft: &mut Raft, now: Time) {
        self.plane.tick();
        self.held_timeout(raft, now);
        self.leader_heard(raft);
    }

    /// A fast-path packet the data plane passed up (from `src`): software Raft handles it as
    /// the Raft message it is. `removed`: this replica knows it was removed from the cluster.
    /// Client requests are the front-end's, not the host's: ignored here. A packet that is not
    /// a valid fast-path packet of this group is counted (`stats.bad_packets`).
    pub fn on_packet(
        &mut self,
        raft: &mut Raft,
        src: SocketAddr,
        pkt: &[u8],
        removed: bool,
        now: Time,
    ) {
        let decoded = fp::Header::decode(pkt)
            .ok()
            .filter(|(h, _)| h.group_id == self.group);
        let Some((h, payload)) = decoded else {
            self.stats.bad_packets += 1;
            return;
        };
        // Records the data plane produced before it passed this packet up come first.
        self.consume_ring(raft, now);
        match h.kind {
            fp::APPEND if self.hold_reordered(raft, &h, pkt, now) => {}
            fp::APPEND => {
                let m = Message {
                    from: h.from,
                    to: self.id,
                    term: h.term,
                    body: MessageBody::Append {
                        prev_index: h.index,
                        prev_term: h.log_term,
                        entries: vec![Entry {
                            term: h.term,
                            index: h.index + 1,
                            kind: EntryKind::Normal,
                            data: payload.to_vec().into(),
                        }],
                        // A follower takes min(leader commit, last new entry); a
                        // retransmitted append may carry a commit beyond its one entry.
                        commit: h.commit.min(h.index + 1),
                    },
                };
                let _ = raft.step(m);
                // The leader replicates through its data plane while this replica's is off
                // (it timed out, restarted, or missed the accelerate election): it would stay
                // off for good, and it may not be able to answer in software at all (a new
                // leader's address is unknown after a lost log). Tell the leader, which
                // disables, repairs in software and enables every replica again.
                let off = raft.dataplane_state() == DataPlaneState::Off;
                if off && (h.term == raft.term() || raft.last_index() <= h.index) {
                    self.reject_append(raft, src, removed, now);
                }
            }
            fp::ACK => {
                let m = Message {
                    from: h.from,
                    to: self.id,
                    term: h.term,
                    body: MessageBody::AppendResponse {
                        reject: false,
                        index: h.index,
                        hint_index: 0,
                        hint_term: 0,
                        recovering: false,
                    },
                };
                let _ = raft.step(m);
            }
            fp::RETX_REQ => self.retransmit(raft, src, h.from, h.index, now),
            _ => {}
        }
    }

    /// Follower with the data plane on: an append the data plane passed up because it is a
    /// little ahead of the log (the leader's appends can leave out of order, see
    /// `XdpProgram::set_reorder_window`). Held until the gap fills, then pushed through the
    /// data plane; never stepped into software Raft, which would disable the data plane.
    /// Returns whether the append was taken care of here.
    fn hold_reordered(&mut self, raft: &mut Raft, h: &fp::Header, pkt: &[u8], now: Time) -> bool {
        let DataPlaneState::On { term } = raft.dataplane_state() else {
            return false;
        };
        if raft.role() == Role::Leader || h.term != term {
            return false;
        }
        let last = self.plane.registers().last_index;
        if h.index < last {
            return true; // a duplicate of what the data plane has
        }
        raft.dataplane_leader_heard(h.from, h.term);
        while self.held.len() >= MAX_HELD || self.held.bytes + pkt.len() > MAX_HELD_BYTES {
            if self.held.pop_last().is_none() {
                break;
            }
        }
        self.held.insert(h.index, now, pkt.to_vec());
        // Released between ready batches (`between_batches`), many at a time.
        if self.held.len() > REORDER_SPAN && self.gap_before_held(last) {
            self.ask_retransmit(raft, now);
        }
        true
    }

    /// Pushes held appends that now continue the log through the data plane, a run of them
    /// in one batch (`xdp`: one syscall per 64), and tells the leader (memory durability: the
    /// pushed appends' own acks went nowhere).
    fn release_held(&mut self, raft: &Raft, now: Time) {
        if self.held.is_empty() {
            return;
        }
        let leader = raft.leader();
        let mut pushed = false;
        loop {
            let r = self.plane.registers();
            if r.enabled == 0 {
                self.held.clear();
                return;
            }
            while self.held.first().is_some_and(|i| i < r.last_index) {
                self.held.pop_first();
            }
            // Held by previous index: the run continuing the log starts at `last_index`.
            let mut run = Vec::new();
            while let Some(pkt) = self.held.remove(r.last_index + run.len() as u64) {
                run.push(pkt);
            }
            if run.is_empty() {
                if pushed && !self.held.is_empty() {
                    // A retransmitted batch filled part of the gap: ask for the rest now
                    // rather than after the hold timeout.
                    self.ask_retransmit(raft, now);
                }
                if pushed && !self.defer_acks {
                    let h = fp::Header {
                        term: r.term,
                        index: r.last_index,
                        ..self.header(fp::ACK)
                    };
                    if let Some(&to) = self.peers.get(&leader) {
                        let _ = self.plane.send_to(&packet(h, &[]), SocketAddr::V4(to));
                    }
                }
                return;
            }
            let pkts: Vec<&[u8]> = run.iter().map(Vec::as_slice).collect();
            if self.plane.push_batch(&pkts).is_err() {
                return;
            }
            self.stats.reordered += run.len() as u64;
            pushed = true;
            if r.last_index == self.plane.registers().last_index {
                return; // the pushes did not append yet (asynchronous data plane): next time
            }
        }
    }

    /// A held append whose gap did not fill in time, or more held than reordering explains
    /// ([`REORDER_SPAN`]): ask the leader to retransmit.
    fn held_timeout(&mut self, raft: &Raft, now: Time) {
        let Some(oldest) = self.held.since else {
            return;
        };
        let last = self.plane.registers().last_index;
        if !self.gap_before_held(last) {
            return; // the held appends continue the log: released between batches
        }
        if self.held.len() > REORDER_SPAN || now.saturating_sub(oldest) >= self.hold_timeout {
            self.ask_retransmit(raft, now);
        }
    }

    /// Whether an append is missing between the data plane's log (`last`, its last index)
    /// and the first held one (held by previous index).
    fn gap_before_held(&self, last: u64) -> bool {
        self.held.first().is_some_and(|i| i > last)
    }

    /// Asks the leader to retransmit after this replica's log, at most once per
    /// [`RETX_SPACING`] (the leader answers a position once per that interval anyway).
    fn ask_retransmit(&mut self, raft: &Raft, now: Time) {
        if self
            .last_retx_ask
            .is_some_and(|t| now.saturating_sub(t) < RETX_SPACING)
        {
            return;
        }
        self.last_retx_ask = Some(now);
        let r = self.plane.registers();
        let h = fp::Header {
            term: r.term,
            index: r.last_index,
            log_term: r.last_term,
            ..self.header(fp::RETX_REQ)
        };
        if let Some(&to) = self.peers.get(&raft.leader()) {
            let _ = self.plane.send_to(&packet(h, &[]), SocketAddr::V4(to));
        }
        self.stats.retx_asked += 1;
        if self.held.since.is_some() {
            self.held.since = Some(now);
        }
    }

    /// A data-plane append reached this replica while its own data plane is off. It says so
    /// on the fast path: a REJECT makes the leader's data plane halt; software repairs this
    /// replica over TCP (from which it also learns the leader's address, which a replica that
    /// lost its log may not know) and the leader enables every replica again.
    /// Rate-limited: one per [`REJECT_EVERY`].
    fn reject_append(&mut self, raft: &Raft, to: SocketAddr, removed: bool, now: Time) {
        // A replica that knows it was removed stays quiet (it still hears an xdp leader's
        // multicast appends). One that lost its log cannot know whether it is a member (a
        // replica that joined starts from a configuration without itself), so it speaks up.
        if removed {
            return;
        }
        if self
            .last_reject
            .is_some_and(|t| now.saturating_sub(t) < REJECT_EVERY)
        {
            return;
        }
        self.last_reject = Some(now);
        let h = fp::Header {
            term: raft.term(),
            index: raft.last_index(),
            log_term: raft.term_of(raft.last_index()).unwrap_or(0),
            ..self.header(fp::REJECT)
        };
        if self.plane.send_to(&packet(h, &[]), to).is_ok() {
            self.stats.rejects_sent += 1;
        }
    }

    /// The leader answers a retransmission request from its log, staying enabled; a follower
    /// behind the snapshot needs software (InstallSnapshot). A request from behind what the
    /// follower has acknowledged since (its match index in the data plane) is outdated: it
    /// was sent before those acks and read after them (a leader's host reads the requests
    /// that waited while it was stopped after the ring its data plane filled meanwhile). Not
    /// answered: a gap still open is asked for again from where the follower stands. Taken
    /// at its word, it handed a caught-up follower off to software when the log had been
    /// compacted past it (the simulator's paused leader, seed 1054).
    fn retransmit(
        &mut self,
        raft: &mut Raft,
        to: SocketAddr,
        follower: u64,
        follower_last: u64,
        now: Time,
    ) {
        let DataPlaneState::On { term } = raft.dataplane_state() else {
            return;
        };
        if raft.role() != Role::Leader {
            return;
        }
        let r = self.plane.registers();
        let matched = r.slot_of(follower).map_or(0, |i| r.match_index[i]);
        if follower_last < matched {
            self.stats.retx_outdated += 1;
            return;
        }
        if follower_last + 1 < raft.first_index() {
            raft.dataplane_halted(DisableReason::SnapshotNeeded);
            return;
        }
        // One retransmission per follower position at a time: a follower keeps asking while it
        // waits (its gap packets), and answering every request again would flood it with
        // duplicates (a retransmission storm under load).
        if let Some((last, at)) = self.retx_sent.get(&to) {
            if *last == follower_last && now.saturating_sub(*at) < RETX_SPACING {
                return;
            }
        }
        if self.retx_sent.len() >= RETX_REMEMBERED {
            self.retx_sent.clear();
        }
        self.retx_sent.insert(to, (follower_last, now));
        let hi = raft.last_index().min(follower_last + RETX_BATCH);
        let commit = raft.commit_index();
        for e in raft.entries(follower_last + 1, hi) {
            if e.term != term {
                continue;
            }
            let Some(prev_term) = raft.term_of(e.index - 1) else {
                break;
            };
            let h = fp::Header {
                term,
                index: e.index - 1,
                log_term: prev_term,
                commit,
                ..self.header(fp::APPEND)
            };
            if self.plane.send_to(&packet(h, &e.data), to).is_ok() {
                self.stats.retransmitted += 1;
            }
        }
    }

    /// fsync durability with the data plane on: acknowledge what is now on disk (`persisted`,
    /// the last index of the entries just synced).
    pub fn deferred_ack(&mut self, raft: &Raft, persisted: u64) {
        let DataPlaneState::On { term } = raft.dataplane_state() else {
            return;
        };
        if !self.defer_acks || persisted <= self.acked_persisted {
            return;
        }
        self.acked_persisted = persisted;
        let h = fp::Header {
            term,
            index: persisted,
            ..self.header(fp::ACK)
        };
        let pkt = packet(h, &[]);
        let r = if raft.role() == Role::Leader {
            self.plane.push(&pkt)
        } else if let Some(&to) = self.peers.get(&raft.leader()) {
            self.plane.send_to(&pkt, SocketAddr::V4(to))
        } else {
            Ok(())
        };
        if let Err(e) = r {
            tracing::warn!("node {}: cannot send a deferred ack: {e}", self.id);
        }
    }

    /// The leader pushes a proposal (or, empty, an idle heartbeat) through its data plane.
    pub fn push_proposal(&mut self, payload: &[u8]) {
        self.push_proposals(&[payload]);
    }

    /// The leader pushes proposals (an empty one is an idle heartbeat) through its data
    /// plane, in order, together (`DataPlane::push_batch`: one syscall for a batch with XDP).
    pub fn push_proposals(&mut self, payloads: &[&[u8]]) {
        if payloads.is_empty() {
            return;
        }
        let pkts: Vec<Vec<u8>> = payloads
            .iter()
            .map(|payload| {
                let mut h = self.header(fp::CLIENT_REQUEST);
                if payload.is_empty() {
                    h.flags = fp::F_HEARTBEAT;
                    self.stats.heartbeats += 1;
                }
                packet(h, payload)
            })
            .collect();
        let refs: Vec<&[u8]> = pkts.iter().map(|p| &p[..]).collect();
        if let Err(e) = self.plane.push_batch(&refs) {
            tracing::warn!("node {}: cannot push through the data plane: {e}", self.id);
        }
    }

    /// Remembers the native client of an entry the data plane ordered (leader).
    fn remember(&mut self, index: u64, c: DpClient) {
        if self.clients.len() >= MAX_DP_CLIENTS {
            self.clients.pop_first();
        }
        self.clients.insert(index, c);
    }

    /// The native client of the entry at `index` that the host must answer, if any: the data
    /// plane ordered it for that client (`client`, `seq`) and did not reply itself (exactly
    /// one reply per acknowledged write). Forgets the entry either way.
    pub fn take_client(&mut self, index: u64, client: u64, seq: u64) -> Option<DpClient> {
        let c = self.clients.remove(&index)?;
        (!c.replied && c.client == client && c.seq == seq).then_some(c)
    }

    /// The entry at `index`, a native client's request that this leader's data plane ordered
    /// (`client`, `seq`), was applied with `outcome`: its client is answered now, unless the
    /// data plane already did (exactly one reply per acknowledged write). The reply is queued
    /// ([`DataPlaneHost::reply`]); returns how many replies a full queue sent.
    pub fn answer_client(
        &mut self,
        index: u64,
        client: u64,
        seq: u64,
        leader: u64,
        outcome: &Outcome,
    ) -> usize {
        let Some(c) = self.take_client(index, client, seq) else {
            return 0;
        };
        let (status, body): (u8, &[u8]) = match outcome {
            Outcome::Applied(r) | Outcome::Duplicate(r) => (fp::payload::STATUS_OK, r),
            Outcome::Stale => (
                fp::payload::STATUS_ERROR,
                b"stale request: the session has moved past this sequence number",
            ),
        };
        let payload = fp::payload::reply_payload(status, leader, body);
        self.reply(c, index, &payload)
    }

    /// Queues a client reply for the entry at `index` to `c`, from the fast-path port: the
    /// caller sends the replies of a ready batch together ([`DataPlaneHost::flush_replies`],
    /// one `sendmmsg` per 64 instead of a `sendto` each). At [`MAX_QUEUED_REPLIES`] the queue
    /// is sent at once: returns how many replies that sent (0 when it only queued).
    pub fn reply(&mut self, c: DpClient, index: u64, payload: &[u8]) -> usize {
        let h = fp::Header {
            seq: c.seq,
            index,
            ..self.header(fp::CLIENT_REPLY)
        };
        self.replies
            .push((SocketAddr::V4(c.source), packet(h, payload)));
        if self.replies.len() >= MAX_QUEUED_REPLIES {
            return self.flush_replies();
        }
        0
    }

    /// Sends the queued client replies, in order; returns how many went.
    pub fn flush_replies(&mut self) -> usize {
        if self.replies.is_empty() {
            return 0;
        }
        let sent = self.plane.send_many(&self.replies);
        debug_assert!(sent <= self.replies.len());
        self.stats.host_replies += sent as u64;
        self.replies.clear();
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leader's host replies to native clients in batches: nothing leaves until the
    /// replies are flushed (or the queue is full), then every one arrives, in order, as the
    /// client reply the data plane would have sent; the count is in the stats.
    #[test]
    fn host_replies_go_out_together_when_flushed() {
        use std::net::{Ipv4Addr, UdpSocket};
        use std::sync::Arc;
        use waverunner_dataplane::{udp::UdpDataPlane, Config, Hooks};
        let plane = UdpDataPlane::open(
            &Config {
                self_id: 1,
                group_id: 9,
                bind: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
                interface: None,
                multicast: None,
                blind_reply_body: Vec::new(),
            },
            Hooks {
                wake: Some(Arc::new(|| {})),
                host_packet: Some(Arc::new(|_, _| {})),
            },
        )
        .unwrap();
        let mut host = DataPlaneHost::new(plane, 1, 9, false);
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.set_nonblocking(true).unwrap();
        let SocketAddr::V4(source) = client.local_addr().unwrap() else {
            unreachable!()
        };
        let c = |seq| DpClient {
            source,
            client: 77,
            seq,
            replied: false,
        };
        let mut buf = [0u8; 256];
        for seq in 1..=3 {
            assert_eq!(host.reply(c(seq), 100 + seq, b"ok"), 0, "only queued");
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            client.recv(&mut buf).is_err(),
            "nothing sent before the flush"
        );
        assert_eq!(host.flush_replies(), 3);
        assert_eq!(host.flush_replies(), 0, "the queue is empty after a flush");
        assert_eq!(host.stats.host_replies, 3);
        client.set_nonblocking(false).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        for seq in 1..=3 {
            let n = client.recv(&mut buf).unwrap();
            let (h, payload) = fp::Header::decode(&buf[..n]).unwrap();
            assert_eq!(
                (h.kind, h.seq, h.index, payload),
                (fp::CLIENT_REPLY, seq, 100 + seq, &b"ok"[..])
            );
        }
        // A full queue goes at once.
        let sent: usize = (0..MAX_QUEUED_REPLIES as u64)
            .map(|i| host.reply(c(10 + i), 200 + i, b"ok"))
            .sum();
        assert_eq!(sent, MAX_QUEUED_REPLIES);
        assert_eq!(host.flush_replies(), 0);
        for i in 0..MAX_QUEUED_REPLIES as u64 {
            let n = client.recv(&mut buf).unwrap();
            assert_eq!(fp::Header::decode(&buf[..n]).unwrap().0.seq, 10 + i);
        }
    }

    #[test]
    fn reasons_read_as_snake_case() {
        assert_eq!(
            reason_name(DisableReason::RetransmitExhausted),
            "retransmit_exhausted"
        );
        assert_eq!(reason_name(DisableReason::NewTerm), "new_term");
    }

    #[test]
    fn held_appends_count_their_bytes_and_the_oldest_wait() {
        let ms = Duration::from_millis;
        let mut h = Held::default();
        assert_eq!((h.len(), h.bytes, h.since), (0, 0, None));
        h.insert(7, ms(5), vec![0; 10]);
        h.insert(9, ms(6), vec![0; 30]);
        h.insert(7, ms(7), vec![0; 20]); // the same append again, another size
        assert_eq!((h.len(), h.bytes, h.since), (2, 50, Some(ms(5))));
        assert_eq!(h.first(), Some(7));
        assert_eq!(h.remove(7).map(|p| p.len()), Some(20));
        assert_eq!(h.remove(7), None);
        assert_eq!((h.bytes, h.since), (30, Some(ms(5))), "an older wait stays");
        assert_eq!(h.pop_last(), Some(9));
        assert_eq!((h.len(), h.bytes, h.since), (0, 0, None), "empty: no wait");
        h.insert(3, ms(9), vec![0; 4]);
        h.insert(4, ms(10), vec![0; 4]);
        assert_eq!(h.pop_first(), Some(3));
        assert_eq!((h.bytes, h.since), (4, Some(ms(9))));
        h.clear();
        assert_eq!((h.len(), h.bytes, h.since), (0, 0, None));
    }
}
